"""harness.bench.device_loop's pieces that need no engine: presets, the status file, twin (b)'s constants, the
served step's time estimates, and a step's error recorded for checks.json."""

from __future__ import annotations

import json
import math
import pytest

from harness.bench import device_loop as dl
from harness.errors import HarnessError


@pytest.mark.parametrize("name", sorted(dl.PRESETS))
def test_presets_round_trip_through_plan_json(name, tmp_path):
    dl.step_prepare(tmp_path, name, str(tmp_path))
    assert dl.load_preset(tmp_path) == dl.PRESETS[name]


def test_the_cuda_preset_is_the_issue_s_measurement():
    p = dl.PRESETS["cuda"]
    assert (p.shape, p.qtype, p.repeats) == ("llama-3.1-8b", "Q4_0", 2)
    assert len(p.mixes) == 2 and 3 <= len(p.rate_fractions) <= 4
    assert min(p.rate_fractions) == pytest.approx(0.2) and max(p.rate_fractions) == pytest.approx(1.2)
    assert set(p.suites.split(",")) == {"gemm", "decode", "transfer"}


def _op(tokens, k, n, t_s, family="ggml-q4_0-cuda", role="weights"):
    wb = k * n / 32 * 18  # Q4_0 bytes
    return {"family": family, "role": role, "tokens": tokens, "k": k, "n": n, "weight_type": "q4_0", "median_s": t_s,
            "useful_flops": 2.0 * k * n * tokens, "useful_bytes": wb + 4.0 * k * tokens + 4.0 * n * tokens}


def test_twin_b_takes_c_at_the_most_tokens_and_b_from_the_shapes_the_l2_cannot_hold():
    l2 = 50 * 2**20
    rows = [_op(1, 4096, 4096, 2e-6),  # 9 MiB: timed from the L2, 4.7 TB/s
            _op(1, 4096, 128256, 1e-4),  # the LM head, 282 MiB: from HBM
            _op(512, 4096, 4096, 1e-4), _op(512, 4096, 128256, 3e-3),
            _op(512, 4096, 4096, 1.0, family="ggml-f16-cuda"), _op(1, 128, 4096, 1.0, role="attention")]
    k = dl._kernel_constants(rows, "ggml-q4_0-cuda", l2)
    assert k["flops_tokens"] == 512 and k["flops_shapes"] == 2
    assert k["flops_per_s"] == pytest.approx(2 * 512 * 4096 * (4096 + 128256) / (1e-4 + 3e-3))
    assert k["bytes_tokens"] == 1 and k["bytes_shapes"] == 1 and "1 of 2 weight shapes" in k["bytes_from"]
    assert k["bytes_per_s"] == pytest.approx(rows[1]["useful_bytes"] / 1e-4)
    cpu = dl._kernel_constants(rows, "ggml-q4_0-cuda", None)  # no cache size (the CPU dry run): every shape
    assert cpu["bytes_shapes"] == 2 and cpu["bytes_from"] == "every weight shape"
    with pytest.raises(HarnessError, match="no test-backend-ops MUL_MAT results of family ggml-q8_0-cuda"):
        dl._kernel_constants(rows, "ggml-q8_0-cuda", l2)


def test_time_estimates_of_points_and_bursts():
    p = dl.PRESETS["cuda"]
    burst = {"kind": "burst", "requests": 40, "predicted": {"a": {"capacity_rps": 10.0}, "b_proxy": {"capacity_rps": 0.1}}}
    assert dl._estimate_s(burst, p, "a") == pytest.approx(4 + 1.5 * 4)  # the planning twin's capacity, not the slowest
    assert dl._estimate_s({"kind": "rate"}, p, "a") == pytest.approx(4 + 1.6 * p.point_s)


def test_a_burst_artifact_sends_every_request_at_once_and_a_point_follows_its_rate():
    burst = dl._artifact((64, 16), math.inf, 12, 0, 0)
    assert burst.count == 12 and {r["intended_s"] for r in burst.rows} == {0.0}
    pt = dl._artifact((64, 16), 5.0, 10.0, 0, 1)
    assert 20 <= pt.count <= 80 and all(r["prompt_tokens_target"] == 64 and r["max_tokens"] == 16 for r in pt.rows)


def test_repeats_get_other_words_and_the_same_lengths():
    rows = dl._artifact((32, 8), 4.0, 5.0, 0, 1).rows
    again = dl.fresh_rows(rows, 1001)
    assert [r["intended_s"] for r in again] == [r["intended_s"] for r in rows]
    assert all(a["prompt"] != b["prompt"] for a, b in zip(again, rows))


def test_a_failed_step_is_recorded_and_collected(tmp_path, capsys):
    assert dl.main(["twins", "--work", str(tmp_path)]) == 1
    assert "plan.json is missing" in capsys.readouterr().err
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "twins.rc").write_text("1\n")
    (tmp_path / "checks" / "served.rc").write_text("124\n")
    doc = dl.collect(tmp_path, tmp_path / "checks.json")
    assert doc["steps"]["twins"]["status"] == "error" and "plan.json" in doc["steps"]["twins"]["error"]
    assert doc["steps"]["served"]["status"] == "timed out"
    assert json.loads((tmp_path / "checks.json").read_text()) == json.loads(json.dumps(doc, default=str))


def test_prepare_refuses_an_unknown_device(tmp_path):
    with pytest.raises(HarnessError, match="--device 'tpu'.*cpu, cuda|--device 'tpu'.*cuda, cpu"):
        dl.step_prepare(tmp_path, "tpu", str(tmp_path))


def test_twin_b_proxy_takes_the_torch_suites_projection_gemm_and_the_fused_batch_1_step(tmp_path):
    from harness.records import TABLE_COLUMNS, new_manifest
    from harness.store import RunWriter

    def row(suite, case, dtype, params, flops_per_s=0.0, bytes_per_s=0.0, valid=True):
        blank = {c: float("nan") for c in TABLE_COLUMNS["micro_cases"]}
        return {**blank, "case_id": case, "suite": suite, "case": case, "dtype": dtype, "params_json": json.dumps(params),
                "valid": valid, "flops_per_s": flops_per_s, "bytes_per_s": bytes_per_s, "backend": "torch", "device": "cuda"}

    rows = [row("gemm", "sq-8192", "bf16", {"m": 8192, "square": True}, flops_per_s=9e14),  # the reference: never used
            row("gemm", "qkv-t2048", "bf16", {"m": 2048}, flops_per_s=6e14),
            row("gemm", "o-t2048", "bf16", {"m": 2048}, flops_per_s=7e14),
            row("gemm", "o-t512", "bf16", {"m": 512}, flops_per_s=5e14),
            row("gemm", "o-t2048-fp8", "fp8", {"m": 2048}, flops_per_s=1.2e15),
            row("decode", "q-step-b1-c2048", "bf16", {"kind": "step", "batch": 1}, bytes_per_s=2.2e12),
            row("decode", "q-step-fused-b1-c2048", "bf16", {"kind": "step", "batch": 1}, bytes_per_s=3.1e12),
            row("decode", "q-step-fused-b8-c2048", "bf16", {"kind": "step", "batch": 8}, bytes_per_s=3.3e12),
            row("decode", "q-attention-b1-c2048", "bf16", {"kind": "attention", "batch": 1}, bytes_per_s=9e12)]
    with RunWriter(new_manifest("micro", extra={"suites": ["gemm", "decode"]}), tmp_path / "results") as w:
        w.append("micro_cases", rows)
    c = dl._suite_constants(tmp_path)
    assert c["flops_per_s"] == pytest.approx(6.5e14) and c["gemm_cases"] == ["qkv-t2048", "o-t2048"]
    assert c["bytes_per_s"] == pytest.approx(3.1e12) and c["decode_cases"] == ["q-step-fused-b1-c2048"]
    assert dl._suite_constants(tmp_path / "nothing") is None
