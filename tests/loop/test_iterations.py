"""Engine iterations from chunk stamps: groups, gaps, batches, first tokens; the twin's steps through the same path."""

from __future__ import annotations

import pytest

from harness.loop.iterations import Iteration, cluster_width_s, compare_steps, reconstruct


def test_groups_of_one_iteration_give_its_batch_and_gap():
    # two requests decoding together every 30 ms (client stamps 0.2 ms apart), a third joins at 0.09 with its first token
    a = [0.0, 0.030, 0.060, 0.090, 0.120]
    b = [0.0002, 0.0302, 0.0602, 0.0902, 0.1202]
    c = [0.0901, 0.1201]
    its = reconstruct([a, b, c])
    assert [x.batch for x in its] == [2, 2, 3, 3]
    assert [x.first_tokens for x in its] == [0, 0, 1, 0]
    assert all(x.gap_s == pytest.approx(0.030, abs=1e-9) for x in its)


def test_idle_time_between_requests_is_not_a_step():
    # one request ends at 0.06; the next starts at 5.0: its first group continues nothing, so no 4.94-s "step"
    its = reconstruct([[0.0, 0.03, 0.06], [5.0, 5.03, 5.06]])
    assert [round(x.gap_s, 6) for x in its] == [0.03, 0.03, 0.03, 0.03]


def test_cluster_width_shrinks_for_fast_steps():
    assert cluster_width_s([[0.0, 0.03, 0.06]]) == pytest.approx(0.002)
    assert cluster_width_s([[0.0, 0.004, 0.008]]) == pytest.approx(0.001)
    # 4-ms steps with 0.3-ms client spread still group correctly
    its = reconstruct([[0.0, 0.004, 0.008], [0.0003, 0.0043, 0.0083]])
    assert [x.batch for x in its] == [2, 2]


def test_compare_steps_medians_means_and_shares():
    eng = [Iteration(1, 0.020, 0)] * 3 + [Iteration(4, 0.050, 0)] * 3 + [Iteration(4, 0.450, 1)]
    twin = [Iteration(1, 0.030, 0)] * 3 + [Iteration(4, 0.060, 0)] * 4
    rows = {r.batch: r for r in compare_steps("m", eng, twin)}
    assert rows[1].median_error == pytest.approx(0.5) and rows[1].engine_n == 3
    assert rows[4].engine_median_s == pytest.approx(0.050) and rows[4].engine_mean_s == pytest.approx(0.15)
    assert rows[4].mean_error == pytest.approx(-0.6)
    assert rows[1].engine_share + rows[4].engine_share == pytest.approx(1.0)


def test_the_twin_reconstructs_its_own_steps():
    """Simulated token instants through the same reconstruction recover the step times the twin was given."""
    from harness.target.des import ArrivingRequest, simulate
    from harness.target.llama_server import LlamaServerSettings, LlamaServerScheduler

    class Steps:
        def prefill_time_s(self, p, cached=0):
            return 1e-3 * p

        def decode_step_time_s(self, b, ctx):
            return 0.010 + 0.005 * b

    settings = LlamaServerSettings(slots=2, ctx_size=4096, kv_unified=True)
    run = simulate(lambda: LlamaServerScheduler(settings, Steps()), [ArrivingRequest(0.0, 16, 20), ArrivingRequest(0.0, 16, 20)],
                   record_tokens=True)
    its = reconstruct(run.token_times_s)
    pairs = [x.gap_s for x in its if x.batch == 2 and not x.first_tokens]
    assert len(pairs) >= 15  # 19 decode steps of both requests, less the ones next to the prompt
    assert pairs == pytest.approx([0.020] * len(pairs))


def _state(run_dirs):
    """A loop state with one point of mix "m" per run directory, each measured once, its twin's steps stubbed."""
    from types import SimpleNamespace

    from harness.loop.options import LoopPlan
    from harness.loop.state import LoopState, MeasuredPoint, PlannedPoint, RunResult
    from harness.loop_records.report import LoadRun
    from harness.served import ServedMeasurement, ServedPoint, ServedPrediction
    from harness.target.stage_requests import StageShape

    state = LoopState(LoopPlan(StageShape(8, 8, 8), (1,), 1, True, True, True, ((8, 40),), (0.5,), 2.0, 0, 1, 1, False),
                      twin=SimpleNamespace(make_scheduler=None))
    for k, d in enumerate(run_dirs):
        pt = ServedPoint(8, 40, rate_per_s=1.0 + k, workload="m", index=k)
        meas = ServedMeasurement(pt, str(d))
        state.points.append(PlannedPoint(pt, 0.5, SimpleNamespace(rows=[]), ServedPrediction(pt, "t"), 0.0))
        state.measured[k] = MeasuredPoint((RunResult(meas, LoadRun(str(d), 0, 1, 1, {"ok": 1}, 1.0, None)),), meas)
    return state


def test_served_steps_says_when_tokens_streamed_no_text(tmp_path, monkeypatch):
    """A request that streamed fewer content events than its usage tokens (empty-text tokens) makes the engine's batch
    look smaller: served_steps says how many did."""
    from types import SimpleNamespace

    import harness.loop.iterations as it
    from harness.loop.iterations import served_steps
    from harness.records import new_manifest
    from harness.store import RunWriter

    w = RunWriter(new_manifest("load"), tmp_path)
    ms = 1_000_000
    w.append("requests", [{"error_class": "ok", "chunk_ns": [0, 30 * ms, 60 * ms], "output_tokens_chunks": 3,
                           "output_tokens_usage": 3},
                          {"error_class": "ok", "chunk_ns": [0, 60 * ms], "output_tokens_chunks": 2, "output_tokens_usage": 3}])
    monkeypatch.setattr(it, "simulate", lambda *a, **k: SimpleNamespace(token_times_s=[[0.0, 0.03, 0.06]] * 2))
    monkeypatch.setattr(it, "requests_from_rows", lambda rows: rows)
    state = _state([w.path])
    rows = served_steps(state)
    assert rows and any("1 of 2 requests streamed fewer content events" in n for n in state.notes)
    assert not any("host stability" in n for n in state.notes)  # one measurement: no spread to give
    w2 = RunWriter(new_manifest("load"), tmp_path / "b")
    w2.append("requests", [{"error_class": "ok", "chunk_ns": [0, 30 * ms], "output_tokens_chunks": 2, "output_tokens_usage": 2}])
    state = _state([w2.path])
    served_steps(state)
    assert not any("fewer content events" in n for n in state.notes)


def test_step_stability_reads_the_engine_over_the_twin_at_the_fullest_batch():
    from harness.loop.iterations import step_stability

    twin = [Iteration(4, 0.050, 0)] * 40 + [Iteration(3, 0.060, 0)] * 40 + [Iteration(1, 0.020, 0)] * 40
    # the engine 10 % and 30 % slower at batch 4 in two measurements; its batch-3 steps carry prompt chunks (long)
    e1 = [Iteration(4, 0.055, 0)] * 40 + [Iteration(3, 0.300, 0)] * 40 + [Iteration(1, 0.020, 0)] * 40
    e2 = [Iteration(4, 0.065, 0)] * 40 + [Iteration(3, 0.070, 0)] * 40 + [Iteration(1, 0.021, 0)] * 40
    st = step_stability("m", [(e1, twin), (e2, twin)])
    assert st.batch == 4 and st.ratios == pytest.approx((1.1, 1.3))
    assert st.spread_pct == pytest.approx(0.2 / 1.2 * 100) and "batch-4" in st.text() and "1.10–1.30" in st.text()
    # the fast quartile: a quarter of long (mixed) iterations does not move it
    e3 = [Iteration(4, 0.055, 0)] * 30 + [Iteration(4, 0.500, 0)] * 10
    assert step_stability("m", [(e3, twin), (e3, twin)]).ratios == pytest.approx((1.1, 1.1))
    # the fullest batch in one measurement only: batch 1, which both have
    light = [Iteration(1, 0.022, 0)] * 40
    st1 = step_stability("m", [(e1, twin), (light, twin)])
    assert st1.batch == 1 and st1.ratios == pytest.approx((1.0, 1.1))
    # first-token iterations and too few iterations do not count; one measurement gives nothing
    assert step_stability("m", [(e1, twin)]) is None
    assert step_stability("m", [([Iteration(4, 0.05, 1)] * 40, twin)] * 2) is None
    assert step_stability("m", [([Iteration(4, 0.05, 0)] * 5, twin)] * 2) is None


def test_served_steps_notes_the_host_stability_of_a_mix(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import harness.loop.iterations as it
    from harness.loop.iterations import served_steps
    from harness.records import new_manifest
    from harness.store import RunWriter

    ms = 1_000_000
    dirs = []
    for k, step in enumerate((30, 33)):  # two points of one mix, the engine 0 % and 10 % slower than the twin's 30 ms
        w = RunWriter(new_manifest("load"), tmp_path / str(k))
        w.append("requests", [{"error_class": "ok", "chunk_ns": [i * step * ms for i in range(40)], "output_tokens_chunks": 40,
                               "output_tokens_usage": 40}])
        dirs.append(w.path)
    monkeypatch.setattr(it, "simulate", lambda *a, **k: SimpleNamespace(token_times_s=[[i * 0.030 for i in range(40)]]))
    monkeypatch.setattr(it, "requests_from_rows", lambda rows: rows)
    state = _state(dirs)
    served_steps(state)
    (note,) = [n for n in state.notes if n.startswith("host stability, m:")]
    assert "batch-1" in note and "1.00–1.10 over 2 measurements" in note and "target is ±10 %" in note
    assert not [n for n in state.notes if n.startswith("served prompts")]  # no prompt finished beside a decode


def _served_pair(prompt_s: float) -> list[list[float]]:
    """Request A decodes every 50 ms, waits `prompt_s` for B's prompt (B's first token in the iteration that ends the
    wait), then both decode two more steps."""
    a = [0.05 * i for i in range(11)]  # 0 … 0.5
    t = a[-1] + prompt_s
    a += [t, t + 0.05, t + 0.10]
    b = [t + 0.0002, t + 0.0502, t + 0.1002]
    return [a, b]


def test_interrupted_gaps_count_a_decode_waiting_for_another_prompt():
    from harness.loop.iterations import interrupted_gaps

    assert interrupted_gaps(_served_pair(1.5)) == 1  # A's gap that ended with B's first token; B's own start never counts
    # two prompts finished in one iteration interrupt A once; in two iterations, A twice and the first of them once
    a = [0.05 * i for i in range(11)] + [2.0, 3.5, 3.55]
    assert interrupted_gaps([a, [2.0001, 3.5001], [2.0002, 3.5002]]) == 1
    assert interrupted_gaps([a, [2.0001, 3.5001], [3.5002, 3.5502]]) == 3
    assert interrupted_gaps([[0.0, 0.05, 0.1]]) == 0 and interrupted_gaps([]) == 0


def test_prompt_summary_compares_the_prompt_iterations_and_interruptions():
    from harness.loop.iterations import prompt_summary

    ps = prompt_summary("512/64", [(_served_pair(1.5), _served_pair(1.2)), (_served_pair(1.6), _served_pair(1.2))])
    assert (ps.engine_n, ps.twin_n) == (2, 2)
    assert ps.engine_median_s == pytest.approx(1.55) and ps.twin_median_s == pytest.approx(1.2)
    assert ps.median_error == pytest.approx((1.2 - 1.55) / 1.55)
    assert (ps.engine_interrupted, ps.twin_interrupted, ps.engine_requests, ps.twin_requests) == (2, 2, 4, 4)
    text = ps.text()
    assert "512/64" in text and "1550 ms over 2" in text and "twin 1200 ms over 2, -23%" in text and "0.50 times" in text
    assert ps.to_dict()["median_error"] == pytest.approx(ps.median_error)
    # the iterations a caller already reconstructed give the same summary
    pairs = [(_served_pair(1.5), _served_pair(1.2)), (_served_pair(1.6), _served_pair(1.2))]
    assert prompt_summary("512/64", pairs, [(reconstruct(e), reconstruct(t)) for e, t in pairs]) == ps
    # nothing finished a prompt beside a decode: no summary
    assert prompt_summary("m", [([[0.0, 0.05]], [[0.0, 0.05]])]) is None
