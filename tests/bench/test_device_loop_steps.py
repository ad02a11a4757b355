"""harness.bench.device_loop's pieces that need no engine: presets, the status file, twin (b)'s constants, the
served step's time estimates, and a step's error recorded for checks.json."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

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


def test_twin_b_takes_c_at_the_most_tokens_and_b_at_the_fewest():
    cal = SimpleNamespace(family="ggml-q4_0-cuda", kernels=(
        {"family": "ggml-q4_0-cuda", "tokens": 1, "flops_per_s": 1e12, "bytes_per_s": 2.5e12, "shapes": 7},
        {"family": "ggml-q4_0-cuda", "tokens": 512, "flops_per_s": 3e14, "bytes_per_s": 9e11, "shapes": 7},
        {"family": "ggml-q4_0-cuda", "tokens": 64, "flops_per_s": 1e14, "bytes_per_s": 1e12, "shapes": 7},
        {"family": "ggml-f16-cuda", "tokens": 512, "flops_per_s": 9e14, "bytes_per_s": 1e12, "shapes": 2}))
    k = dl._kernel_constants(cal)
    assert (k["flops_per_s"], k["flops_tokens"], k["bytes_per_s"], k["bytes_tokens"]) == (3e14, 512, 2.5e12, 1)
    with pytest.raises(HarnessError, match="no test-backend-ops MUL_MAT results of family ggml-q8_0-cuda"):
        dl._kernel_constants(SimpleNamespace(family="ggml-q8_0-cuda", kernels=cal.kernels))


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
