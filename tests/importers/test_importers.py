"""Importers parse the committed sample files of each tool into the micro_* tables."""

from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.importers import import_to_run, parse
from harness.records import validate_table
from harness.store import Run

DATA = Path(__file__).parents[1] / "data" / "importers"


def test_nvbandwidth():
    imp = parse("nvbandwidth", DATA / "nvbandwidth.json")
    names = [c.case for c in imp.cases]
    assert names == ["host_to_device_memcpy_ce-0-0", "device_to_host_memcpy_ce-0-0",
                     "device_to_device_memcpy_write_ce-0-1", "device_to_device_memcpy_write_ce-1-0"]
    h2d = imp.cases[0]
    # 55.6204 GB/s over the default 512 MiB buffer: the derived time reproduces the reported bandwidth
    assert h2d.derived.bytes_per_s == pytest.approx(55.6204e9)
    assert h2d.measurement.stats.median_s == pytest.approx(512 * 2**20 / 55.6204e9)
    assert [s.case for s in imp.skips] == ["device_to_device_memcpy_read_ce"] and "Waived" in imp.skips[0].reason
    assert imp.facts["driver"] == "580.159.03"


def test_nccl_tests():
    imp = parse("nccl-tests", DATA / "nccl_tests.json")
    assert len(imp.cases) == 6 and imp.facts["gpu_name"] == "NVIDIA H200"
    big = next(c for c in imp.cases if c.case == "all_reduce-134217728-out_of_place")
    assert big.measurement.stats.median_s == pytest.approx(452.3e-6)
    assert big.params["bus_bw_bytes_per_s"] == pytest.approx(296.745e9)
    assert big.derived.bytes_per_s == pytest.approx(134217728 / 452.3e-6)


def test_pytest_benchmark_real_output():
    imp = parse("pytest-benchmark", DATA / "pytest_benchmark.json")
    assert [c.case for c in imp.cases] == ["test_copy_4mib", "test_matmul_256"]
    copy = imp.cases[0]
    assert copy.work.useful_bytes == 2 * 4 * 2**20 and copy.measurement.stats.median_s > 0
    assert imp.cases[1].suite == "gemm" and imp.cases[1].work.useful_flops == 2 * 256**3


def test_import_to_run_writes_valid_tables(tmp_path):
    s = import_to_run("nccl-tests", DATA / "nccl_tests.json", tmp_path)
    run = Run(s["path"])
    assert run.manifest.kind == "import" and run.manifest.extra["tool"] == "nccl-tests"
    validate_table("micro_cases", run.table("micro_cases"))


def test_bad_inputs_name_the_problem(tmp_path):
    with pytest.raises(HarnessError, match="does not exist"):
        parse("nvbandwidth", tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(HarnessError, match="not valid JSON"):
        parse("nccl-tests", bad)
    bad.write_text('{"something": 1}')
    with pytest.raises(HarnessError, match="no field 'benchmarks'"):
        parse("pytest-benchmark", bad)
    with pytest.raises(HarnessError, match="unknown"):
        parse("iperf", bad)
