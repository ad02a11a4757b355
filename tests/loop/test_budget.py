"""The loop's time budget (harness.loop.budget): the cut order, the floors, what the user set, and the loop applying it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from harness.errors import HarnessError
from harness.loop.budget import Layout, keep_rates, later_window_s, min_saturating_burst, plan_budget, repeat_rates
from harness.loop.options import LoopOptions, plan_for
from harness.loop.run import run_loop


def test_min_saturating_burst_keeps_every_slot_busy_to_the_80th_percentile():
    for slots in range(1, 17):
        n = min_saturating_burst(slots)
        assert n >= 10 and n - math.floor(0.8 * n) >= slots
        assert n == 10 or (n - 1) - math.floor(0.8 * (n - 1)) < slots, "not the fewest"
        assert n <= 5 * max(slots, 2)  # never more than the loop's default burst
    assert min_saturating_burst(4) == 16 and min_saturating_burst(1) == 10


def _plan(budget_s: float, *, fixed=frozenset(), elapsed_s=200.0):
    """A loop shaped like Gemma's on the slow AMD host (2026-12-04 15:00): window 1 took 170 s, 8 points of 50 s
    draining ~10 s each, two bursts of 20 requests at ~0.18 req/s."""
    default = Layout(later_windows=2, burst_requests=20, point_duration_s=50.0)
    return plan_budget(budget_s=budget_s, elapsed_s=elapsed_s, default=default, slots=4,
                       later_window_s=lambda k: 170.0 * 2 / 3, point_s=lambda d, rates, reps: [reps * (d + 10.0 + 4.0)] * 8,
                       bursts_s=lambda n, reps: reps * 2 * (n / 0.18 + 4.0), post_s=40.0, floor_duration_s=35.0, fixed=fixed)


def test_within_the_budget_nothing_is_cut():
    p = _plan(3600.0)
    assert p.cuts == () and p.planned == p.default and p.predicted_s == p.predicted_default_s and p.over_s == 0
    # 200 + 2 x 113.3 + 8 x 64 + 2 x 115.1 + 40
    assert p.predicted_s == pytest.approx(200 + 2 * 170 * 2 / 3 + 8 * 64 + 2 * (20 / 0.18 + 4) + 40)
    assert "nothing cut" in p.note()


def test_cuts_come_in_order_windows_then_bursts_then_points():
    full = _plan(3600.0).predicted_s
    one_window = full - 170 * 2 / 3
    p = _plan(one_window + 1)  # dropping one later window is enough
    assert p.planned == Layout(1, 20, 50.0) and len(p.cuts) == 1 and "stage windows to 2" in p.cuts[0]
    bursts_16 = one_window - 2 * (4 / 0.18)
    p = _plan(bursts_16 + 1)
    assert p.planned == Layout(1, 16, 50.0) and len(p.cuts) == 2 and "16 requests" in p.cuts[1]
    p = _plan(bursts_16 - 40)  # 40 s more: the points give 5 s each
    assert p.planned.later_windows == 1 and p.planned.burst_requests == 16
    assert p.planned.point_duration_s == 45.0 and p.predicted_s <= p.budget_s < p.predicted_s + 8  # the longest that fits
    assert "served points to 45 s" in p.cuts[2] and p.over_s == 0


def test_past_the_floors_the_plan_says_by_how_much_it_is_over():
    p = _plan(600.0)
    assert p.planned == Layout(1, 16, 35.0)
    assert p.over_s == pytest.approx(p.predicted_s - 600.0) and p.over_s > 0
    assert "Still" in p.note() and f"{p.over_s / 60:.1f} min over" in p.note()


def test_the_repeats_are_cut_last_and_the_points_lengthened_again():
    """Two runs a point (the repeatability verdict's) are cut to one only when nothing else is left: windows, bursts and
    the points' duration at their floors first; with one run a point the points are then as long as fits again."""
    default = Layout(later_windows=2, burst_requests=20, point_duration_s=50.0, repeats=2)

    def plan(budget_s, fixed=frozenset()):
        return plan_budget(budget_s=budget_s, elapsed_s=200.0, default=default, slots=4, later_window_s=lambda k: 113.3,
                           point_s=lambda d, rates, reps: [reps * (d + 14.0)] * 8, bursts_s=lambda n, reps: reps * 2 * (n / 0.18 + 4.0),
                           post_s=40.0, floor_duration_s=35.0, fixed=fixed)

    floors_2 = plan(3600.0)
    assert floors_2.planned == default and floors_2.cuts == ()
    p = plan(1500.0)  # two runs at the floors: 200 + 113.3 + 2 x 8 x 49 + 2 x 2 x 92.9 + 40 = 1508 s, over
    assert p.planned.repeats == 1 and p.planned.later_windows == 1 and p.planned.burst_requests == 16
    assert p.planned.point_duration_s == 50.0 and p.over_s == 0  # one run a point: back to the default length
    assert "repeats to 1 (2 by default: no repeatability verdict)" in p.cuts[-1]
    assert plan(1500.0, fixed=frozenset({"repeats"})).planned.repeats == 2  # --repeats 2 given: kept


def test_what_the_user_set_is_not_cut():
    p = _plan(600.0, fixed=frozenset({"windows", "points"}))
    assert p.planned == Layout(2, 16, 50.0) and len(p.cuts) == 1
    p = _plan(600.0, fixed=frozenset({"windows", "bursts", "points"}))
    assert p.cuts == () and p.planned == p.default and p.over_s > 0 and "nothing it may cut" in p.note()


def test_budget_option_defaults_and_validation():
    assert LoopOptions().budget_s == 900 and LoopOptions(quick=True).budget_s == 180
    assert LoopOptions(time_budget_s=0).budget_s is None and LoopOptions(time_budget_s=1200).budget_s == 1200
    for bad in (30, -1, math.inf, True, "15"):
        with pytest.raises(HarnessError, match="--time-budget-min"):
            LoopOptions(time_budget_s=bad)


def test_the_loop_plans_its_budget_after_the_first_window(tmp_path, monkeypatch):
    """Against the stand-in llama-server: points predicted to take long are cut to fit, re-planned, and the plan is
    in the settings, the notes and the report's headline."""
    pytest.importorskip("gguf")
    from harness.loop_records.stages import CpuConstants
    from harness.report.loop import render_text
    from test_run import config, fake_binary, quick_opts, write_random_gguf

    c = CpuConstants(1, 2e9, {"qkv": {"m": 1, "n": 1, "k": 1, "flops": 1.0, "median_s": 1.0, "flops_per_s": 1.0,
                                      "cv": 0.0}}, 1e9, 1e6, None, None, None, "test", "known constants")
    monkeypatch.setattr("harness.loop.run.calibrate_cpu", lambda gm, **kw: c)
    monkeypatch.setattr("harness.loop.fit_budget.last_finish_s", lambda twin, art: 30.0)  # a slow engine: 30 s a point
    model = write_random_gguf(tmp_path / "rand.gguf")
    # four points of (8 s + up to 8 s of drain with --quick + 4 s) cannot fit in a minute
    opts = quick_opts(config(tmp_path, model, fake_binary(tmp_path)), tmp_path, point_duration_s=None, time_budget_s=60,
                      rate_fractions=(0.3, 0.6, 0.9, 1.2))
    r = run_loop(opts, progress=None)
    assert r.status == "complete"
    b = r.settings.time_budget
    assert b["default"]["point_duration_s"] == 8.0 and b["planned"]["point_duration_s"] == 6.0  # the floor: ceil(0.7 x 8)
    assert b["over_s"] > 0 and r.settings.point_duration_s == 6.0
    assert any(n.startswith("time budget 1.0 min") and "served points to 6 s" in n for n in r.notes)
    from harness.store import Run
    from workloads.artifact import load_artifact

    for p in r.points:  # the points were set anew for 6 s, and what was sent is that workload (8 s without the cut)
        assert p.measurement is not None
        assert load_artifact(f"{p.runs[0].run_dir}/workload-artifact.parquet").span_s == pytest.approx(6.0)
    preds = Run(r.run_dir).table("loop_prediction")
    assert (preds["revision"] == 2).sum() == 2 * len(r.points)  # the stage corrections' re-plan, then the budget's
    assert "(budget 1.0 min, planned" in render_text(r)


def test_the_note_reads_for_a_quick_loop():
    """One window and no bursts (--quick) read as such, not as '1 stage windows, capacity bursts of 0 requests'."""
    p = plan_budget(budget_s=180.0, elapsed_s=110.0, default=Layout(0, 0, 8.0), slots=4, later_window_s=lambda k: 0.0,
                    point_s=lambda d, rates, reps: [2 * d + 4.0] * 8, bursts_s=lambda n, reps: 0.0, post_s=10.0, floor_duration_s=5.6)
    assert p.planned == Layout(0, 0, 6.0) and p.over_s > 0
    assert "(1 stage window, no capacity bursts, 8-s points)" in p.note() and "served points to 6 s" in p.note()


def test_keep_rates_keeps_the_highest_and_the_rest_evenly():
    r = (0.2, 0.5, 0.8, 1.2)
    assert keep_rates(r, 4) == r and keep_rates(r, 9) == r
    assert keep_rates(r, 2) == (0.5, 1.2) and keep_rates(r, 1) == (1.2,)
    assert keep_rates(r, 3) == (0.2, 0.8, 1.2)
    assert keep_rates((1.2, 0.2, 0.5), 2) == (0.5, 1.2)  # sorted first
    assert keep_rates((0.1, 0.2, 0.3, 0.4, 0.5, 1.2), 3) == (0.2, 0.4, 1.2)


def _quick_plan(budget_s: float, *, min_rates=2, fixed=frozenset()):
    """--quick on Gemma at the AMD host (2026-12-04 18:07): the plan made 112 s in, 8 points of which the overloaded
    ones drain a full point length, the others about 3 s."""
    rates = (0.2, 0.5, 0.8, 1.2)

    def point_s(d, keep, reps):
        return [reps * ((2 * d if f >= 1 else d + 3.0) + 4.0) for f in rates for _ in range(2) if f in keep]

    return plan_budget(budget_s=budget_s, elapsed_s=112.0, default=Layout(0, 0, 8.0, rates), slots=4,
                       later_window_s=lambda k: 0.0, point_s=point_s, bursts_s=lambda n, reps: 0.0, post_s=10.0,
                       floor_duration_s=5.6, fixed=fixed, min_rates=min_rates)


def test_quick_cuts_the_rates_after_the_duration_and_lengthens_the_points_again():
    # 8 points at the 6-s floor: 112 + 2 x (3 x 13 + 16) + 10 = 232 s; 2 a mix at d s: 112 + 2 x (d + 7 + 2 d + 4) + 10
    p = _quick_plan(190.0)
    assert p.planned.rate_fractions == (0.5, 1.2)
    assert p.planned.point_duration_s == 7.0 and p.predicted_s == pytest.approx(186.0) and p.over_s == 0  # 8 s: 192
    assert len(p.cuts) == 2 and "served points to 7 s" in p.cuts[0]
    assert "served rates to 2 per mix (0.5, 1.2 of the predicted capacity; 4 by default, floor 2)" in p.cuts[1]
    assert "4 rates per mix" in p.note()
    p = _quick_plan(210.0)  # three a mix fit at 6 s: 112 + 2 x (13 + 13 + 16) + 10 = 206; at 7 s 214
    assert p.planned.rate_fractions == (0.2, 0.8, 1.2) and p.planned.point_duration_s == 6.0
    p = _quick_plan(200.0)  # two a mix at their default 8 s (192): only the rates are cut
    assert p.planned == Layout(0, 0, 8.0, (0.5, 1.2)) and len(p.cuts) == 1 and "rates to 2" in p.cuts[0]
    p = _quick_plan(400.0)
    assert p.cuts == () and p.planned == p.default


def test_rates_are_not_cut_below_the_floor_nor_when_given():
    p = _quick_plan(120.0)  # nothing fits: the floor of 2 rates at the floor duration, and it says how far over
    assert p.planned == Layout(0, 0, 6.0, (0.5, 1.2)) and p.over_s > 0 and "Still" in p.note()
    p = _quick_plan(120.0, min_rates=1)  # --quick's own floor: the overloaded point alone
    assert p.planned == Layout(0, 0, 6.0, (1.2,)) and p.over_s > 0 and "rates to 1 per mix (1.2 of" in p.note()
    assert _quick_plan(170.0, min_rates=1).planned == Layout(0, 0, 8.0, (1.2,))  # 112 + 2 x 20 + 10 = 162 s; two a mix: 180
    p = _quick_plan(180.0, min_rates=None)  # the full loop keeps every rate
    assert p.planned.rate_fractions == (0.2, 0.5, 0.8, 1.2) and p.planned.point_duration_s == 6.0
    p = _quick_plan(180.0, fixed=frozenset({"rates"}))
    assert p.planned.rate_fractions == (0.2, 0.5, 0.8, 1.2) and len(p.cuts) == 1
    p = _quick_plan(180.0, fixed=frozenset({"points"}))  # the duration the user set stays, the rates are cut (192 s)
    assert p.planned == Layout(0, 0, 8.0, (0.5, 1.2)) and len(p.cuts) == 1


def test_a_later_window_is_predicted_part_by_part():
    """Prefill and short decodes × the reps ratio, long decodes × theirs, side measurements as they were, copy cases
    dropped, the unnamed rest kept; without parts the whole window × the reps ratio."""
    parts = {"prefill_s": 30.0, "decode_s": 60.0, "long_decode_s": 40.0, "side_s": 35.0, "copy_cases_s": 25.0}
    # reps 3 -> 2: (30 + 60) x 2/3 + 40 x 1/2 + 35 + 10 (the rest of 200 s)
    assert later_window_s(parts, 200.0, 3, 2) == pytest.approx(60 + 20 + 35 + 10)
    assert later_window_s(parts, 190.0, 3, 3) == pytest.approx(90 + 40 + 35)  # same reps: all but the copy cases
    assert later_window_s(parts, 190.0, 1, 1) == pytest.approx(165.0)  # --reps 1: one long decode each
    assert later_window_s({}, 150.0, 3, 2) == pytest.approx(100.0)


def _state(opts, slots=4):
    """A loop state with the plan's rate points planned (artifacts stubbed: the twin's finish is monkeypatched)."""
    from harness.loop.state import LoopState, PlannedPoint
    from harness.served import ServedPoint, ServedPrediction

    state = LoopState(plan_for(opts, slots))
    for m in state.plan.mixes:
        for f in state.plan.rate_fractions:
            pt = ServedPoint(m[0], m[1], rate_per_s=f, workload=f"{m[0]}/{m[1]}", index=len(state.points))
            state.points.append(PlannedPoint(pt, f, type("A", (), {"count": 1})(), ServedPrediction(pt, "t"), 0.0))
    return state


def test_the_loop_estimates_later_windows_from_the_first_windows_parts(monkeypatch):
    import harness.loop.fit_budget as fb
    from harness.loop.output import LoopOutput
    from harness.loop_records.windows import StageWindow

    monkeypatch.setattr(fb, "last_finish_s", lambda twin, art: 10.0)
    opts = LoopOptions(time_budget_s=3600, capacity_requests=0)  # 3 windows at reps 3, 2, 2
    state = _state(opts)
    parts = {"prefill_s": 30.0, "decode_s": 60.0, "long_decode_s": 40.0, "side_s": 35.0, "copy_cases_s": 25.0}
    state.windows = [StageWindow(0, 5.0, None, 60, 200.0, phases_s=parts)]
    before = state.plan
    fb.fit_rest(state, opts, None, 4, 210.0, LoopOutput("loop-cpu", None, engine={}, command_line=(), extra={}), lambda m: None)
    assert state.plan == before  # nothing cut
    assert state.budget.phases_s["stage_windows_s"] == pytest.approx(2 * 125.0)


def test_the_cli_passes_what_was_given_and_leaves_the_rest_unset(monkeypatch, capsys):
    """`harness loop cpu` and `harness loop gpu` are subcommands with their own flags: an unset flag reaches the loop as
    None (the plan picks the default), a flag of the other loop is refused by the parser."""
    import harness.cli.loop as cli_loop  # the verb's module binds run_loop
    from harness.cli import main

    seen = []
    monkeypatch.setattr(cli_loop, "run_loop", lambda opts: seen.append(opts) or (_ for _ in ()).throw(HarnessError("stop here")))
    for flags, quick, want in (([], False, True), (["--quick"], True, False), (["--quick", "--copy-cases"], True, True),
                               (["--no-copy-cases"], False, False)):
        assert main(["loop", "cpu", "--no-store", *flags]) != 0
        assert seen[-1].quick is quick and plan_for(seen[-1], 4).copy_cases is want
    o = seen[-1]
    assert (o.reps, o.repeats, o.mixes, o.rate_fractions, o.stage_windows, o.capacity_requests, o.point_duration_s) == (None,) * 7
    assert main(["loop", "cpu", "--no-store", "--quick", "--reps", "3", "--repeats", "1", "--rates", "0.5,1.2"]) != 0
    assert (seen[-1].reps, seen[-1].repeats, seen[-1].rate_fractions) == (3, 1, (0.5, 1.2))
    with pytest.raises(SystemExit) as exc:
        main(["loop", "gpu", "--config", "vllm-qwen3-8b", "--gpu", "h100-sxm", "--no-copy-cases"])
    assert exc.value.code == 2 and "unrecognized arguments: --no-copy-cases" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["loop", "cpu", "--target", "http://x"])
    assert "unrecognized arguments: --target" in capsys.readouterr().err


def test_a_window_is_predicted_from_its_groups():
    """Each group's finish plus the per-request overhead, the groups one after another, part by part."""
    from harness.loop.budget import StageGroup, window_s_from_groups

    parts = {"prefill_s": [StageGroup(((512, 33),))] * 3, "side_s": [StageGroup(((32, 8),) * 3 + ((128, 1),), ends_with=3)]}
    got = window_s_from_groups(parts, lambda g: 4.0 if g.ends_with is None else 1.5, per_request_s=0.1)
    assert got == {"prefill_s": pytest.approx(3 * (4.0 + 0.1)), "side_s": pytest.approx(1.5 + 4 * 0.1)}


def _count_window_requests(monkeypatch, plan, slots, window, cache_ram):
    """Run the real measure_stage_window with every measure_* replaced by a counter of the requests it would send."""
    from types import SimpleNamespace

    import harness.loop.stages as stages
    from harness.loop.state import EngineTarget
    from harness.loop_records.stages import StageMeasurement
    from harness.target.stage_requests import PREFILL_DECODE_TOKENS, SAVE_PROBE_TOKENS

    sent: dict[str, list[tuple[int, int]]] = {}

    def add(part, reqs):
        sent.setdefault(part, []).extend(reqs)

    def prefill(url, name, p, vocab, reps, pid=None, threads=1):
        add("prefill_s", [(p, 1 + PREFILL_DECODE_TOKENS)] * reps)
        return [], []

    def decode(url, name, b, p, out, vocab, reps, pid=None, threads=1, phase="decode", rep0=0, after_rep=None):
        for rep in range(rep0, rep0 + reps):
            add("long_decode_s" if phase == "longdecode" else "decode_s", [(p, out)] * b)
            if after_rep is not None:
                after_rep(rep)
        return StageMeasurement(f"decode_tokens_per_s@{b}", 1.0, 1.0, (1.0,), ""), []

    def prompts(url, name, lengths, vocab, reps):
        add("side_s", [(n, 1) for n in lengths for _ in range(reps)])
        return []

    def mixed(url, name, cases, vocab, reps, d):
        add("side_s", [r for p, b, n in cases for _ in range(reps) for r in [(p, 1)] + [(d, n)] * b + [(p, 1)]])
        return []

    def saves(url, name, cases, vocab, reps, slots):
        small = (SAVE_PROBE_TOKENS, 1)
        add("copy_cases_s", [small] * (2 * slots) + [r for _ in range(reps) for c in cases for r in [tuple(c)] + [small] * slots])
        return []

    for name, f in (("measure_prefill", prefill), ("measure_decode", decode), ("measure_prompts", prompts),
                    ("measure_mixed_prompts", mixed), ("measure_prompt_saves", saves)):
        monkeypatch.setattr(stages, name, f)
    sched = SimpleNamespace(slots=slots, n_ctx_slot=2048, prompt_cache_ram=cache_ram)
    stages.measure_stage_window(EngineTarget("http://x", "m", 1000, None, 2), plan, sched, window=window)
    return sent


@pytest.mark.parametrize("lean", [False, True])
def test_the_window_groups_are_the_requests_the_window_sends(monkeypatch, lean):
    """stage_window_groups mirrors measure_stage_window part by part; at Gemma's defaults the counts are 115 requests
    in window 1, 61 in a later one; lean windows 67 and 44."""
    from collections import Counter

    from harness.loop.stages import stage_window_groups

    plan = replace(plan_for(LoopOptions(batches=(1, 2, 3, 4)), 4), lean_windows=lean)
    for window in (0, 1):
        sent = _count_window_requests(monkeypatch, plan, 4, window, True)
        groups = stage_window_groups(plan, 4, window, True)
        assert {k: Counter(v) for k, v in sent.items()} == \
            {k: Counter(r for g in gs for r in g.requests) for k, gs in groups.items() if gs}
        assert sum(len(g.requests) for gs in groups.values() for g in gs) == {(False, 0): 115, (False, 1): 61,
                                                                             (True, 0): 67, (True, 1): 44}[(lean, window)]
    assert all(g.ends_with == len(g.requests) - 1 for g in groups["side_s"] if len(g.requests) > 1)  # a mixed case ends with its prompt
    assert [plan.window_reps(w) for w in (0, 1, 2)] == ([2, 2, 2] if lean else [3, 2, 2]) and plan.side_reps == (1 if lean else 2)
    assert "copy_cases_s" not in stage_window_groups(plan, 4, 0, False)


def _window_plan(monkeypatch, budget_min, group_s=5.0, point_s=30.0):
    import harness.loop.fit_budget as fb

    monkeypatch.setattr(fb, "_group_finish_s", lambda twin, g: group_s)
    monkeypatch.setattr(fb, "last_finish_s", lambda twin, art: point_s)
    monkeypatch.setattr(fb, "capacity_workload", lambda m, n, seed: None)
    opts = LoopOptions(batches=(1, 2, 3, 4), time_budget_s=60 * budget_min)
    state = _state(opts)
    fb.plan_windows(state, opts, None, 4, True, 10.0, lambda m: None)
    return state


def test_the_windows_are_made_lean_only_when_the_loop_cannot_fit_at_the_rests_floors(monkeypatch):
    """5 s a group: window 1 at 3 reps is 3 + 4 x 3 + 2 x 2 + 2 + 16 + 38 = 75 groups of 115 requests, 75 x 5 s +
    115 x 0.05 s; the rest (30 s a point, 8 points, 2 bursts, one run each) fits 15 min once cut to its floors, not 12:
    a budget of 15 keeps the windows, one of 12 makes every window lean and says so with both predictions."""
    state = _window_plan(monkeypatch, 15)
    wp = state.window_plan
    assert not state.plan.lean_windows and not wp.lean
    assert wp.window1_full_s == pytest.approx(75 * 5.0 + 115 * 0.05)
    assert wp.loop_full_s <= 15 * 60 and "keep their reps" in state.notes[-1]
    state = _window_plan(monkeypatch, 12)
    wp = state.window_plan
    assert state.plan.lean_windows and [state.plan.window_reps(w) for w in range(3)] == [2, 2, 2]
    assert wp.lean and wp.window1_lean_s < wp.window1_full_s and wp.loop_lean_s < wp.loop_full_s
    assert wp.loop_full_s > 12 * 60  # over even at the rest's floors
    note = state.notes[-1]
    assert note.startswith("time budget, before the first stage window") and "lean" in note and "at 2 reps" in note
    import harness.loop.fit_budget as fb

    for kw in ({"quick": True}, {"reps": 2}, {"time_budget_s": 0}, {"served": False}):  # nothing to cut, or not asked
        o = LoopOptions(batches=(1, 2), **kw)
        st = _state(o)
        fb.plan_windows(st, o, None, 4, True, 10.0, lambda m: None)
        assert st.plan == plan_for(o, 4) and st.window_plan is None


def test_the_loop_measures_lean_windows_when_the_budget_asks(tmp_path, monkeypatch):
    """Against the stand-in llama-server, a full (not --quick) loop whose points are predicted to take 30 s each in a
    1-minute budget: the windows are made lean before window 1, which then sends the lean window's requests."""
    pytest.importorskip("gguf")
    from harness.loop.stages import stage_window_groups
    from harness.loop_records.stages import CpuConstants
    from test_run import config, fake_binary, quick_opts, write_random_gguf

    c = CpuConstants(1, 2e9, {"qkv": {"m": 1, "n": 1, "k": 1, "flops": 1.0, "median_s": 1.0, "flops_per_s": 1.0,
                                      "cv": 0.0}}, 1e9, 1e6, None, None, None, "test", "known constants")
    monkeypatch.setattr("harness.loop.run.calibrate_cpu", lambda gm, **kw: c)
    monkeypatch.setattr("harness.loop.fit_budget.last_finish_s", lambda twin, art: 30.0)
    model = write_random_gguf(tmp_path / "rand.gguf")
    opts = quick_opts(config(tmp_path, model, fake_binary(tmp_path)), tmp_path, quick=False, reps=3, stage_windows=2,
                      capacity_requests=0, time_budget_s=60)
    r = run_loop(opts, progress=None)
    assert r.status == "complete" and r.settings.window_plan["lean"] and r.settings.stage_reps == (2, 2)
    lean = replace(plan_for(opts, 2), lean_windows=True)
    expect = sum(len(g.requests) for gs in stage_window_groups(lean, 2, 0, True).values() for g in gs)
    assert r.stage_windows[0].requests == expect
    assert any(n.startswith("time budget, before the first stage window") for n in r.notes)


def test_the_quick_drain_outlasts_the_twins_own_drain(monkeypatch):
    """--quick cuts a point's drain at a point duration after its span, or at 1.5 x the twin's predicted drain when
    longer: on a slow host the fixed limit cancelled every request (nothing judged)."""
    import harness.loop.fit_budget as fb

    art = type("A", (), {"span_s": 8.0})()
    monkeypatch.setattr(fb, "last_finish_s", lambda twin, a: 30.0)  # the twin drains 22 s past the span
    assert fb.quick_drain_limit_s(None, art, 8.0) == pytest.approx(1.5 * 22.0)
    monkeypatch.setattr(fb, "last_finish_s", lambda twin, a: 10.0)  # 2 s: the fixed limit holds
    assert fb.quick_drain_limit_s(None, art, 8.0) == pytest.approx(8.0)


def test_the_quick_plan_counts_each_point_to_its_predicted_finish(monkeypatch):
    """The budget predicts a --quick point to the twin's last finish (its drain is never cut shorter than that), each
    run of it: 30 s a point, 8 points, 2 runs each, is 16 x (30 + overhead) s of points."""
    import harness.loop.fit_budget as fb
    from harness.loop.budget import POINT_OVERHEAD_S

    monkeypatch.setattr(fb, "last_finish_s", lambda twin, art: 30.0)
    opts = LoopOptions(batches=(1, 2), quick=True, time_budget_s=3600)
    state = _state(opts)
    plan = fb._plan_rest(state.plan, opts, 4, 10.0, {}, 0.0, fb._Rest(state, state.plan, None), has_window=False)
    assert plan.predicted_s >= 10.0 + 16 * (30.0 + POINT_OVERHEAD_S) - 1e-6


def test_before_the_repeats_go_some_points_keep_them():
    """Two runs of every point do not fit but two of one rate per mix do: those points keep their repeats (the
    repeatability verdict reads them), the other points and the bursts run once; with no room even for that, one run."""
    default = Layout(later_windows=1, burst_requests=16, point_duration_s=35.0, rate_fractions=(0.2, 0.5, 0.8, 1.2), repeats=2)

    def point_s(d, rates, reps):  # two mixes; the overloaded point drains longer
        return [reps * (d + (60.0 if f >= 1 else 15.0)) for f in rates for _ in range(2)]

    def plan(budget_s):
        return plan_budget(budget_s=budget_s, elapsed_s=100.0, default=default, slots=4, later_window_s=lambda k: 100.0,
                           point_s=point_s, bursts_s=lambda n, reps: reps * 60.0, post_s=40.0, floor_duration_s=35.0)

    assert repeat_rates((0.2, 0.5, 0.8, 1.2), 1) == (0.5,) and repeat_rates((0.2, 0.5, 0.8, 1.2), 2) == (0.2, 0.8)
    assert repeat_rates((0.2, 0.5, 0.8, 1.2), 4) == (0.2, 0.5, 0.8, 1.2)
    once = 100 + 100 + 2 * (3 * 50 + 95) + 60 + 40  # every point and burst once: 790 s
    p = plan(once + 2 * 50 + 1)  # room for one rate per mix again (2 × 50 s), not two
    assert p.planned.repeated_fractions == (0.5,) and p.planned.repeats == 2 and p.over_s == 0
    assert p.planned.repeats_of(0.5) == 2 and p.planned.repeats_of(1.2) == 1 and p.planned.repeats_of(None) == 1
    assert p.predicted_s == pytest.approx(once + 100) and "the repeats to the points at 0.5" in p.cuts[-1]
    p = plan(once + 2 * 50 + 2 * 50 + 1)  # room for two rates per mix
    assert p.planned.repeated_fractions == (0.2, 0.8)
    p = plan(once + 10)  # no room for any repeat: one run each, no repeatability verdict
    assert p.planned.repeats == 1 and p.planned.repeated_fractions is None and "no repeatability verdict" in p.cuts[-1]
