"""Importers parse the committed sample files of each tool into the micro_* tables."""

import json
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
def test_nccl_tests_real_writer_format_version_2():
    """The byte layout of nccl-tests src/util.cu, JSON_FILE_VERSION 2: booleans as strings, "\\/" escapes, one
    devices entry for a non-MPI run (tests/data/README.md says how the file was made)."""
    imp = parse("nccl-tests", DATA / "nccl_tests_v2.json")
    assert len(imp.cases) == 14 and not imp.skips
    assert imp.facts["json_version"] == 2 and imp.facts["gpu_name"] == "NVIDIA H200" and imp.facts["ranks"] == 2
    assert imp.facts["per_iter_timing"] is False and imp.facts["blocking_collectives"] is False
    assert imp.facts["args"][0] == "./build/all_reduce_perf"
    big = next(c for c in imp.cases if c.case == "all_reduce-134217728-out_of_place")
    assert big.measurement.stats.median_s == pytest.approx(452.3e-6) and big.device == "2 ranks"


def _nccl(tmp_path, row=None, **top):
    row = row if row is not None else {"size": 1024, "count": 256, "type": "float", "redop": "sum", "root": "    -1",
                                       "out_of_place": {"time": 10.0, "alg_bw": 0.1, "bus_bw": 0.1, "nwrong": 0.0},
                                       "in_place": None, "actual_iterations": 20, "experiment_name": ""}
    d = {"version": 2, "args": ["./all_reduce_perf"], "config": {"ngpus": 1, "per_iter_timing": "false"}, "results": [row], **top}
    p = tmp_path / "n.json"
    p.write_text(json.dumps(d))
    return p


@pytest.mark.parametrize("change, needle", [
    ({"size": "big"}, "results[0]: size must be an integer >= 0, got 'big'"),
    ({"size": -1}, "size must be an integer >= 0, got -1"),
    ({"out_of_place": {"time": {"x": 1}}}, "results[0].out_of_place: time must be a finite number, got {'x': 1}"),
    ({"out_of_place": {"time": "fast"}}, "time must be a finite number, got 'fast'"),
    ({"out_of_place": [1]}, "out_of_place must be an object"),
    ({"actual_iterations": "20"}, "actual_iterations must be an integer >= 1, got '20'"),
    ({"out_of_place": {"time": 10.0, "nwrong": "many"}}, "nwrong must be a finite number, got 'many'"),
    ({"out_of_place_per_iter": {"times_us": ["a"]}}, "times_us[0] must be a positive finite number"),
])
def test_nccl_tests_wrong_types_name_the_field(tmp_path, change, needle):
    row = {"size": 1024, "out_of_place": {"time": 10.0, "alg_bw": 0.1, "bus_bw": 0.1, "nwrong": 0.0}, **change}
    with pytest.raises(HarnessError) as e:
        parse("nccl-tests", _nccl(tmp_path, row))
    assert needle in str(e.value)


def test_nccl_tests_nan_and_zero_times_are_skips_and_bad_tops_are_errors(tmp_path):
    imp = parse("nccl-tests", _nccl(tmp_path, {"size": 8, "out_of_place": {"time": "nan"}, "in_place": {"time": 0.0}}))
    assert [s.reason for s in imp.skips] == ["nccl-tests reported no time (nan)", "nccl-tests reported time 0 µs for 8 bytes: no rate to derive"]
    with pytest.raises(HarnessError, match="per_iter_timing must be true or false"):
        parse("nccl-tests", _nccl(tmp_path, config={"per_iter_timing": "maybe"}))
    with pytest.raises(HarnessError, match="JSON version 9 is not one this harness reads"):
        parse("nccl-tests", _nccl(tmp_path, version=9))
    with pytest.raises(HarnessError, match="results must be a list"):
        parse("nccl-tests", _nccl(tmp_path, results={"a": 1}))
    p = tmp_path / "list.json"
    p.write_text("[1, 2]")
    with pytest.raises(HarnessError, match="must be an object"):
        parse("nccl-tests", p)


@pytest.mark.parametrize("doc, needle", [
    ({"nvbandwidth": {"testcases": {"a": 1}}}, "testcases must be a list"),
    ({"nvbandwidth": {"testcases": [{"name": "t", "status": "Passed", "bandwidth_matrix": [["fast"]]}]}},
     "bandwidth_matrix[0][0] must be a finite number, got 'fast'"),
    ({"nvbandwidth": {"testcases": [{"name": "t", "status": "Passed", "bandwidth_matrix": [[{"x": 1}]]}]}},
     "bandwidth_matrix[0][0] must be a finite number"),
    ({"nvbandwidth": {"testcases": [{"name": "t", "status": "Passed", "bandwidth_matrix": 5}]}}, "bandwidth_matrix must be a list"),
    ({"nvbandwidth": {"testcases": [{"name": "t", "status": "Passed", "bandwidth_matrix": [5]}]}}, "bandwidth_matrix[0] must be a list"),
    ({"nvbandwidth": {"testcases": [{"name": "t", "status": "Passed", "bandwidth_matrix": [["inf"]]}]}}, "must be a finite number"),
    ({"nvbandwidth": {"bufferSize": "x", "testcases": []}}, "bufferSize must be an integer >= 0"),
    ({"nvbandwidth": {"testcases": [{"name": ["t"]}]}}, "name must be a non-empty string"),
    ({"nvbandwidth": [1]}, "nvbandwidth must be an object"),
])
def test_nvbandwidth_wrong_types_name_the_field(tmp_path, doc, needle):
    p = tmp_path / "nv.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(HarnessError) as e:
        parse("nvbandwidth", p)
    assert needle in str(e.value)


def test_nvbandwidth_zero_or_negative_cells_are_skips(tmp_path):
    p = tmp_path / "nv.json"
    p.write_text(json.dumps({"nvbandwidth": {"testcases": [{"name": "t", "status": "Passed", "bandwidth_matrix": [["0", "-3", "10"]]}]}}))
    imp = parse("nvbandwidth", p)
    assert [c.case for c in imp.cases] == ["t-0-2"] and [s.case for s in imp.skips] == ["t-0-0", "t-0-1"]


@pytest.mark.parametrize("stats, needle", [
    ({"median": "fast"}, "median must be a positive finite number, got 'fast'"),
    ({"median": -1.0}, "median must be a positive finite number, got -1.0"),
    ({"median": 1e-3, "rounds": "8"}, "rounds must be an integer >= 1, got '8'"),
    ({"median": 1e-3, "iterations": 0}, "iterations must be an integer >= 1, got 0"),
    ({"median": 1e-3, "data": "x"}, "data must be a list"),
    ({"median": 1e-3, "data": [1e-3, None]}, "data[1] must be a positive finite number, got None"),
    ({"median": 1e-3, "stddev": -1.0}, "stddev must be >= 0"),
    ({"median": 1e-3, "mean": [1]}, "mean must be a finite number, got [1]"),
])
def test_pytest_benchmark_wrong_types_name_the_field(tmp_path, stats, needle):
    p = tmp_path / "pb.json"
    p.write_text(json.dumps({"benchmarks": [{"name": "b", "stats": stats}]}))
    with pytest.raises(HarnessError) as e:
        parse("pytest-benchmark", p)
    assert needle in str(e.value)


@pytest.mark.parametrize("fmt", ["nccl-tests", "nvbandwidth", "pytest-benchmark"])
def test_binary_and_non_utf8_inputs_are_clear_errors(tmp_path, fmt):
    p = tmp_path / "x.json"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    with pytest.raises(HarnessError, match="is not UTF-8 text"):
        parse(fmt, p)


def test_cli_import_takes_machine_and_prints_skips(tmp_path, capsys):
    from harness.cli import main

    code = main(["micro", "import", "nvbandwidth", str(DATA / "nvbandwidth.json"), "--out", str(tmp_path), "--machine", "h200-node01"])
    out = capsys.readouterr().out
    assert code == 0
    assert "skipped 1 test case(s):" in out and "device_to_device_memcpy_read_ce: nvbandwidth status 'Waived'" in out
    runs = list((tmp_path / "h200-node01").iterdir())
    assert len(runs) == 1 and Run(runs[0]).manifest.machine == "h200-node01"
    code = main(["micro", "import", "nvbandwidth", str(DATA / "nvbandwidth.json"), "--out", str(tmp_path), "--machine", "../x"])
    assert code == 1 and "--machine '../x'" in capsys.readouterr().err
