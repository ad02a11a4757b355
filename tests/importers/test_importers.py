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


def test_perftest_text_output_all_sizes():
    imp = parse("perftest", DATA / "perftest_ib_write_bw.txt")
    assert len(imp.cases) == 23 and imp.facts["devices"] == ["mlx5_0"]
    big = next(c for c in imp.cases if c.case == "ib_write_bw-8388608")
    # BW average is MiB/s (the header says so): the derived rate reproduces it in bytes/s
    assert big.derived.bytes_per_s == pytest.approx(big.params["bw_average_bytes_per_s"])
    assert big.params["bw_average_bytes_per_s"] == pytest.approx(22816.36 * 2**20, rel=1e-4)
    assert big.params["link"] == "rdma" and big.params["direction"] == "write" and big.params["tx_depth"] == "128"


def test_perftest_json_one_file_per_size_and_units():
    imp = parse("perftest", DATA / "perftest_json")
    assert sorted(c.params["size_bytes"] for c in imp.cases) == [4096, 65536, 1048576, 8388608]
    assert all(c.params["direction"] == "read" for c in imp.cases)
    assert any("assumed" in n for n in imp.cases[0].notes)  # the JSON does not state the unit
    gb = parse("perftest", DATA / "perftest_json", units="Gb/s")
    ratio = gb.cases[0].params["bw_average_bytes_per_s"] / imp.cases[0].params["bw_average_bytes_per_s"]
    assert ratio == pytest.approx(1e9 / 8 / 2**20)
    with pytest.raises(HarnessError, match="units 'GB/s' unknown"):
        parse("perftest", DATA / "perftest_json", units="GB/s")


def test_perftest_rejects_other_files(tmp_path):
    (tmp_path / "lat.txt").write_text(" #bytes #iterations    t_min[usec]    t_max[usec]\n 2       1000   1.0  2.0\n")
    with pytest.raises(HarnessError, match="no result header|no bandwidth rows"):
        parse("perftest", tmp_path / "lat.txt")


def test_nixlbench_stdout():
    imp = parse("nixlbench", DATA / "nixlbench_ucx_write.txt")
    assert len(imp.cases) == 8
    c = imp.cases[0]
    assert c.params["link"] == "nixl-ucx" and c.params["memory"] == "vram->vram" and c.params["method"] == "nixlbench-batch1"
    assert c.derived.bytes_per_s == pytest.approx(c.params["bw_bytes_per_s"])
    assert c.params["avg_lat_s"] == pytest.approx(6.6e-6)


def test_rdma_alpha_beta_fitted_from_imported_tools(tmp_path):
    from harness.calibration.fit import fit_calibration
    from harness.calibration.runs import load_machine_runs

    import_to_run("perftest", DATA / "perftest_ib_write_bw.txt", tmp_path)
    import_to_run("nixlbench", DATA / "nixlbench_ucx_write.txt", tmp_path)
    (machine,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    rec = fit_calibration(load_machine_runs(machine), n_bootstrap=20)
    rdma = rec.link("rdma:write:perftest-bw")
    # the committed sample was written from T(S) = 1.1 µs + S / 24 GB/s; rows are rounded to 0.01 MiB/s
    assert rdma.bandwidth_bytes_per_s.value == pytest.approx(24.0e9, rel=0.01)
    assert rdma.alpha_s.value == pytest.approx(1.1e-6, rel=0.05)
    nixl = rec.link("nixl-ucx:write:vram->vram:nixlbench-batch1")
    assert nixl.bandwidth_bytes_per_s.value == pytest.approx(45.0e9, rel=0.01)
    assert nixl.alpha_s.value == pytest.approx(6.5e-6, rel=0.05)
