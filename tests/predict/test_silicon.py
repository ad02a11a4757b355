"""harness validate silicon on a committed fixture of h200_sxm rows (tests/data/README.md): every row predicted or
refused with its reason, errors by the one convention, only the asked system read. Datasheet constants, no
aiconfigurator needed."""

import json
from pathlib import Path

import pytest

from harness.cli import main as cli_main
from harness.errors import HarnessError
from harness.predict.silicon import benchmark_profile, read_rows, validate_silicon
from harness.served import relative_error

CSV = Path(__file__).resolve().parents[1] / "data" / "silicon_h200_sample.csv"


@pytest.fixture(scope="module")
def result():
    return validate_silicon("h200_sxm", csv=str(CSV), calibration="none", with_aic=False)


def test_every_row_is_predicted_or_refused_with_a_reason(result):
    assert len(result.rows) == 7  # the b200_sxm row is never read
    refused = {r.id: r.refused for r in result.rows if r.refused}
    assert any("Gated DeltaNet" in v for v in refused.values())
    assert any("span more than one 8-GPU node" in v for v in refused.values())
    assert any("does not say how many prefill and decode workers ran" in v for v in refused.values())
    predicted = [r for r in result.rows if r.ttft_s is not None]
    assert len(predicted) == 4 and all(r.tpot_s > 0 for r in predicted)
    for r in predicted:
        assert r.ttft_error == relative_error(r.ttft_s, r.measured_ttft_s)


def test_rows_run_as_their_benchmark_ran(result):
    by_id = {r.id: r for r in result.rows}
    imax = by_id["2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x1024_c32_tp8_ep1_647"]
    assert imax.profile == "inferencemax" and imax.concurrency == 32 and imax.layout == "1 × TP8"
    rows = {r["id"]: r for r in read_rows(CSV, "h200_sxm")}
    assert benchmark_profile(rows["dsr1_h200_trtllm_fp8_agg_1024x1024_c64_cfg181"]).name == "aic-sflow"


def test_groups_count_rows_and_errors(result):
    g = {(x.engine, x.model, x.mode): x for x in result.groups}
    llama = g[("vllm", "meta-llama/Llama-3.1-70B", "agg")]
    assert llama.rows == 1 and llama.predicted == 1 and llama.ttft.rows == 1
    assert llama.ttft.median_abs == pytest.approx(abs(next(r for r in result.rows if r.model.endswith("70B")
                                                          and r.engine == "vllm").ttft_error))
    dense = next(x for x in result.overall if x.model == "dense")
    assert dense.rows == 3 and dense.aic_predicted == 0


def test_unknown_system_and_missing_file_are_refused():
    with pytest.raises(HarnessError, match="no rows of that system"):
        validate_silicon("h100_sxm", csv=str(CSV), calibration="none", with_aic=False)
    with pytest.raises(HarnessError, match="--system 'tpu_v5'"):
        validate_silicon("tpu_v5", csv=str(CSV), calibration="none", with_aic=False)
    with pytest.raises(HarnessError, match="--csv"):
        validate_silicon("h200_sxm", csv="no/such.csv", calibration="none", with_aic=False)


def test_cli_json(capsys):
    assert cli_main(["validate", "silicon", "--system", "h200_sxm", "--csv", str(CSV), "--calibration", "none",
                     "--no-aic", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema_version"] == 1 and len(d["rows"]) == 7 and d["calibration_kind"] == "uncalibrated"


def test_the_row_facts_kv_dtype_budget_and_precision():
    from harness.predict.silicon import row_deployment

    rows = {r["id"]: r for r in read_rows(CSV, "h200_sxm")}
    trt = rows["2026_04_06_llama_3_1_70b_h200_sxm_trtllm_fp8_agg_8192x1024_c16_tp4_ep1_603"]
    d, w, prof = row_deployment(trt, None)
    assert d.kv_dtype == "fp8"  # the ModelOpt FP8 checkpoint's KV quantization, applied by TensorRT-LLM
    assert d.max_num_tokens == (16 + 8192 + 1024 + 64 + 63) // 64 * 64  # InferenceMAX's trtllm-serve budget
    assert w.length_range(8192) == (6553, 8192) and w.measured_requests == 160 and w.warmup == 0
    vllm = rows["2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x1024_c32_tp8_ep1_647"]
    assert row_deployment(vllm, None)[0].kv_dtype == "bf16"


def test_cli_markdown(capsys):
    assert cli_main(["validate", "silicon", "--system", "h200_sxm", "--csv", str(CSV), "--calibration", "none",
                     "--no-aic", "--markdown", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| engine | model | mode | rows |") and "On the rows both predicted" in out
