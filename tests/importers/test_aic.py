"""aiconfigurator's kernel database -> runs of kernel family aic-<engine>-<version> -> `harness calibrate` -> the GPU database.

The fixture (tests/data/aic/, written by its make_fixture.py in the 0.12.0 schema) follows known constants, so the
fit must recover them: GEMMs at 80 % of the compute peak or 70 % of the HBM peak, generation attention at 60 % of
the HBM peak, a custom all-reduce T(S) = α + S/β.
"""

import importlib.util
import json
import shutil
import sys

import pandas as pd
import pytest

from harness.calibration import gpu_db
from harness.calibration.calibrate import calibrate
from harness.cli import main
from harness.errors import HarnessError
from harness.importers import aic
from harness.store import Run
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "data" / "aic" / "systems" / "data"
sys.path.insert(0, str(FIXTURE.parents[1]))
import make_fixture as fx  # noqa: E402  (the constants the fixture was written from)

L = 36  # qwen3-8b layers


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    (summary,) = aic.import_aic(FIXTURE, ["h200_sxm"], ["vllm"], out, command_line=["harness", "micro", "import-aic"])
    return summary


@pytest.fixture(scope="module")
def entry(imported, tmp_path_factory):
    db = tmp_path_factory.mktemp("db")
    calibrate(imported["path"], into_db=True, db_dir=db, command="harness calibrate RUN --into-db", n_bootstrap=20)
    return gpu_db.pick("h200-sxm", "aic-vllm", db_dir=db)


def test_import_files_one_run_per_engine_with_every_table(imported):
    assert imported["machine"] == "h200_sxm-aic-vllm-0.24.0" and imported["family"] == "aic-vllm-0.24.0"
    assert imported["gpu_name"] == "NVIDIA H200"
    assert imported["rows"] == {"gemm_perf": 97, "generation_attention_perf": 28, "context_attention_perf": 2,
                                "moe_perf": 2, "custom_allreduce_perf": 8, "nccl_perf": 4}
    assert imported["above_peak"]["gemm_perf"] == 1 and sum(imported["above_peak"].values()) == 1
    run = Run(imported["path"])
    assert run.manifest.kind == "import" and run.manifest.extra["kernel_family"] == "aic-vllm-0.24.0"
    facts = run.manifest.extra["tool_facts"]
    assert facts["engine"] == "vllm" and facts["engine_version"] == "0.24.0"
    assert facts["tables"]["nccl_perf"] == "h200_sxm/comm/nccl/2.26.2/nccl_perf.parquet"  # the system YAML's version
    assert any("folder says NCCL 2.26.2, its rows 2.29.2" in n for n in facts["provenance_notes"])
    assert facts["collection_meta"]["gemm_perf"]["provenance"] == "collected"


def test_cases_carry_their_work_and_the_above_peak_one_is_invalid(imported):
    cases = Run(imported["path"]).table("micro_cases")
    bad = cases[~cases["valid"]]
    assert list(bad["case"]) == ["gemm-m1-n64-k64-torch.nn.functional.linear"]
    assert "above_peak: bytes/s" in bad["flags_json"].iloc[0]
    g = cases[cases["case"] == "gemm-m2048-n6144-k4096-torch.nn.functional.linear"].iloc[0]
    assert g["useful_flops"] == 2 * 2048 * 6144 * 4096 and g["mfu"] == pytest.approx(fx.GEMM_MFU)
    assert g["peak_flops_per_s"] == 989.4e12 and json.loads(g["params_json"])["params_record"] == "kernel.gemm/1"
    a = cases[cases["case"].str.startswith("generation_attention-b8-q1-c1024-h32-kv8-d128-bf16")].iloc[0]
    assert a["useful_bytes"] == 8 * 1024 * 2 * 8 * 128 * 2 + 8 * 32 * 128 * 4 and a["mbu"] == pytest.approx(fx.ATTN_MBU)
    # message_size is an element count: bf16 all-reduce of 4096 elements moves 8192 bytes
    c = cases[cases["case"] == "all_reduce-n8-s8192-vllm_graph"].iloc[0]
    assert json.loads(c["params_json"])["size_bytes"] == 8192 and c["useful_bytes"] == 8192


def test_repeated_nccl_rows_are_samples_of_one_case(imported):
    run = Run(imported["path"])
    cases = run.table("micro_cases")
    n = cases[cases["case"].str.endswith("-nccl")]
    assert len(n) == 4 and set(n["n_samples"]) == {2}
    samples = run.table("micro_samples")
    assert len(samples[samples["case_id"].isin(n["case_id"])]) == 8


def test_fit_recovers_the_fixture_constants(entry):
    rec = entry.record
    pre = rec.curve("h200-sxm", "prefill_compute_efficiency", "bf16")
    assert pre.family == "aic-vllm-0.24.0" and [p.x for p in pre.points] == [16, 17, 32, 64, 128, 512, 1024, 2048]
    assert pre.at(2048) == pytest.approx(fx.GEMM_MFU, rel=1e-4)  # every projection compute-bound there
    fp8 = rec.curve("h200-sxm", "prefill_compute_efficiency", "fp8")
    assert fp8.dtype == "fp8" and fp8.at(2048) == pytest.approx(fx.GEMM_MFU, rel=1e-4)
    dec = {c.context_tokens: c for c in rec.curves_at_contexts("h200-sxm", "decode_bandwidth_efficiency", "bf16")}
    assert sorted(dec) == [1024, 4096]
    b, c = 8, 1024
    weights = sum(n * k * 2 for n, k in fx.SHAPES) + 12288 * 4096 * 2  # gate and up both read
    t = sum(fx.gemm_ms(b, n, k, "bfloat16") for n, k in fx.SHAPES) + fx.gemm_ms(b, 12288, 4096, "bfloat16")
    t += fx.attn_ms(b, c, 2)
    want = L * (weights + b * c * 2 * 8 * 128 * 2) / (L * t * 1e-3 * fx.PEAK_BYTES)
    point = next(p for p in dec[1024].points if p.x == b)
    assert point.measured.value == pytest.approx(want, rel=1e-4)
    assert rec.reference_model == "qwen3-8b"


def test_collectives_fit_alpha_beta(entry):
    ar = entry.constants.collective("all_reduce", 8, "vllm_graph")
    assert ar.alpha_s.value == pytest.approx(fx.ALPHA_S[8], rel=1e-3)
    assert ar.bandwidth_bytes_per_s.value == pytest.approx(fx.BETA[8], rel=1e-3)
    assert ar.time_s(2 * (1 << 20)) == pytest.approx(fx.ALPHA_S[8] + 2 * (1 << 20) / fx.BETA[8], rel=1e-3)
    nccl = entry.constants.collective("all_reduce", 8, "nccl")
    assert nccl.alpha_s.value == pytest.approx(20e-6 * 1.01, rel=0.02)
    assert entry.constants.collective("all_reduce", 8).implementation == "vllm_graph"  # the fastest at 1 MiB


def test_entry_provenance_and_describe(entry):
    p = entry.provenance
    assert p.source_kind == "imported kernel data" and p.source == f"aiconfigurator data at {FIXTURE}"
    assert (p.engine, p.engine_version, p.family, p.gpu) == ("vllm", "0.24.0", "aic-vllm-0.24.0", "h200-sxm")
    assert p.device_name == "NVIDIA H200" and p.measured_date is None and p.reference_model == "qwen3-8b"
    assert p.command.startswith("harness micro import-aic ; harness calibrate RUN --into-db")
    assert entry.describe().endswith(f"aic-vllm-0.24.0.json, imported kernel data (aiconfigurator data at {FIXTURE}), "
                                     f"{p.filed_date}, 0 days old")
    # what the model reads: the entry applies to a CUDA plan at its dtype (an engine's kernels)
    eff = entry.constants.efficiency("h200-sxm", 8, 2048, "bf16", decode_context_tokens=1024)
    assert eff.compute == pytest.approx(fx.GEMM_MFU, rel=1e-3) and "aic-vllm-0.24.0.json" in eff.source


def test_cli_import_aic_into_db(tmp_path, capsys):
    code = main(["micro", "import-aic", str(FIXTURE), "--engine", "vllm", "--out", str(tmp_path / "r"),
                 "--into-db", str(tmp_path / "db")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "imported 141 case(s) of h200_sxm (NVIDIA H200), family aic-vllm-0.24.0" in out
    assert "above the spec peak, flagged: {'gemm_perf': 1}" in out
    assert f"into the GPU calibration database: {tmp_path / 'db' / 'h200-sxm' / 'aic-vllm-0.24.0.json'}" in out
    assert main(["micro", "import-aic", str(FIXTURE), "--list"]) == 0
    assert "h200_sxm" in capsys.readouterr().out


def _copy(tmp_path):
    root = tmp_path / "data"
    shutil.copytree(FIXTURE, root)
    (tmp_path / "h200_sxm.yaml").write_text((FIXTURE.parent / "h200_sxm.yaml").read_text())
    return root


def test_a_table_without_a_column_names_it(tmp_path):
    root = _copy(tmp_path)
    p = root / "h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
    pd.read_parquet(p).drop(columns=["k"]).to_parquet(p)
    with pytest.raises(HarnessError, match=r"gemm_perf.parquet lacks column\(s\) \['k'\].*another schema"):
        aic.import_aic(root, ["h200_sxm"], ["vllm"], tmp_path / "r")


def test_a_damaged_table_is_a_clear_error(tmp_path):
    root = _copy(tmp_path)
    (root / "h200_sxm/moe/vllm/0.24.0/moe_perf.parquet").write_bytes(b"not parquet")
    with pytest.raises(HarnessError, match="moe_perf.parquet cannot be read as parquet"):
        aic.import_aic(root, ["h200_sxm"], ["vllm"], tmp_path / "r")


def test_a_gpu_without_a_spec_is_refused_with_the_fix(tmp_path):
    root = _copy(tmp_path)
    for p in (root / "h200_sxm").rglob("*.parquet"):
        df = pd.read_parquet(p)
        if "device" in df.columns:
            df.assign(device="NVIDIA L40S").to_parquet(p)
    with pytest.raises(HarnessError, match=r"measured on 'NVIDIA L40S', which has no GPU spec.*harness/specs/gpus.py"):
        aic.import_aic(root, ["h200_sxm"], ["vllm"], tmp_path / "r")
    assert aic.import_aic.__doc__  # the default (no --system) skips such systems instead:
    with pytest.raises(HarnessError, match="no table of engine"):
        aic.import_aic(root, None, ["vllm"], tmp_path / "r")


def test_unknown_system_engine_version_or_path(tmp_path):
    with pytest.raises(HarnessError, match=r"no kernel data for system\(s\) h300_sxm .*it has h200_sxm"):
        aic.import_aic(FIXTURE, ["h300_sxm"], None, tmp_path)
    with pytest.raises(HarnessError, match="--engine 'tensorrt'.*trtllm, vllm, sglang"):
        aic.import_aic(FIXTURE, ["h200_sxm"], ["tensorrt"], tmp_path)
    with pytest.raises(HarnessError, match="vllm 0.1.0 has no GEMM or attention table on h200_sxm; it has 0.24.0"):
        aic.import_aic(FIXTURE, ["h200_sxm"], ["vllm@0.1.0"], tmp_path)
    with pytest.raises(HarnessError, match="holds no aiconfigurator kernel data"):
        aic.import_aic(tmp_path, None, None, tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                    reason="aiconfigurator is not installed (pip install -e '.[aic]'): the real data's schema is not checked")
def test_the_installed_package_still_has_the_schema_read_here():
    """Schema drift: every table the importer reads, of the systems the database holds, has the columns it needs."""
    import pyarrow.parquet as pq

    root = aic.data_root()
    for system in ("h200_sxm", "h100_sxm", "a100_sxm"):
        for engine in aic.ENGINES:
            sel = aic.select(root, system, engine)
            assert sel is not None, (system, engine)
            assert {"gemm_perf", "generation_attention_perf", "nccl_perf"} <= set(sel.tables), (system, engine)
            for table, path in sel.tables.items():
                have = set(pq.read_schema(path).names)
                assert set(aic._REQUIRED[table]) <= have, (path, set(aic._REQUIRED[table]) - have)
        from harness.specs.device_names import spec_name_for_device

        assert spec_name_for_device(aic.system_device(root, system)) is not None, system


def test_above_peak_kernels_are_left_out_of_what_they_compose(tmp_path):
    """A GEMM above the peak drops its token count from the prefill curve; an attention table with more than 1 % of
    its cases above the HBM peak is not used for the decode curve at all (the A100 trtllm 1.0.0 table reads KV at up
    to 169 % of the HBM peak)."""
    root = _copy(tmp_path)
    p = root / "h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
    g = pd.read_parquet(p)
    hit = (g["m"] == 1024) & (g["n"] == 4096) & (g["k"] == 4096) & (g["gemm_dtype"] == "bfloat16")
    g.loc[hit, "latency"] = 1e-4  # 2·1024·4096·4096 FLOPs in 0.1 µs: far above the peak
    g.to_parquet(p)
    p = root / "h200_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet"
    a = pd.read_parquet(p)
    # KV reads of 256 MiB and more cannot come from an L2: one of the fixture's four (b >= 16 at 4096 keys, 64 at 1024) made
    # faster than the HBM peak condemns the table; small ones (L2-resident) would only drop their own points
    hit = (a["kv_cache_dtype"] == "bfloat16") & (a["batch_size"] == 64) & (a["step"] == 4095)
    a.loc[hit, "latency"] = a.loc[hit, "latency"] / 3
    a.to_parquet(p)
    (s,) = aic.import_aic(root, ["h200_sxm"], ["vllm"], tmp_path / "r")
    rec, _ = calibrate(s["path"], into_db=True, db_dir=tmp_path / "db", command="t", n_bootstrap=20)
    pre = rec.curve("h200-sxm", "prefill_compute_efficiency", "bf16")
    assert 1024 not in [p.x for p in pre.points] and 512 in [p.x for p in pre.points]
    assert any("token count(s) [1024] left out of the prefill curve" in w for w in rec.warnings)
    assert not [c for c in rec.curves if c.quantity == "decode_bandwidth_efficiency" and c.dtype == "bf16"]
    assert any("(bf16 weights, bf16 KV): 25% of the generation attention cases" in w and "at least 256 MiB" in w
               and "no decode curve" in w for w in rec.warnings)
    assert rec.curves_at_contexts("h200-sxm", "decode_bandwidth_efficiency", "fp8")[0].dtype == "fp8"


def test_a_small_attention_case_above_the_peak_drops_its_own_step_only(tmp_path):
    root = _copy(tmp_path)
    p = root / "h200_sxm/attention/vllm/0.24.0/generation_attention_perf.parquet"
    a = pd.read_parquet(p)
    hit = (a["kv_cache_dtype"] == "bfloat16") & (a["batch_size"] == 2) & (a["step"] == 1023)  # 8 MiB of KV: L2-sized
    a.loc[hit, "latency"] = a.loc[hit, "latency"] / 3
    a.to_parquet(p)
    (s,) = aic.import_aic(root, ["h200_sxm"], ["vllm"], tmp_path / "r")
    rec, _ = calibrate(s["path"], into_db=True, db_dir=tmp_path / "db", command="t", n_bootstrap=20)
    dec = {c.context_tokens: c for c in rec.curves if c.quantity == "decode_bandwidth_efficiency" and c.dtype == "bf16"}
    assert [p.x for p in dec[1024].points] == [1, 4, 8, 16, 32, 64] and len(dec[4096].points) == 7
    assert any("1 (batch, context) step(s) left out: a component kernel is above the spec peak" in w for w in rec.warnings)


def test_nccl_tests_imports_are_fitted_as_collectives(tmp_path):
    """nccl-tests -J output files the same typed collective cases, so our own GPU runs get all-reduce by size too."""
    from harness.importers import import_to_run

    s = import_to_run("nccl-tests", ROOT / "tests" / "data" / "importers" / "nccl_tests_v2.json", tmp_path / "r")
    rec, _ = calibrate(s["path"], tmp_path / "c.json", n_bootstrap=20)
    (fit,) = [c for c in rec.collectives if c.op == "all_reduce"]
    assert fit.num_gpus == 2 and fit.implementation == "nccl" and fit.bandwidth_bytes_per_s.value > 0
    assert fit.time_s(fit.sizes_bytes[-1]) == pytest.approx(fit.median_s[-1])
