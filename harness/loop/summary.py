"""The loop's last step, shared by the CPU and GPU loops: compare every measured point, judge (both verdicts),
reconstruct the served steps, and assemble the LoopReport — also for a loop that failed midway (what it measured)."""

from __future__ import annotations

from typing import Any, Callable

from harness.loop.compare import compare_points, compare_stages, verdicts
from harness.loop.iterations import served_steps
from harness.loop.state import LoopState
from harness.loop_records.report import LoopReport, LoopSettings
from harness.target.twin import twin_dict


def loop_report(state: LoopState, *, kind: str, model: dict[str, Any], engine: dict[str, Any], settings: LoopSettings,
                run_dir: str | None, status: str = "complete", error: str | None = None,
                say: Callable[[str], None] = lambda m: None) -> LoopReport:
    stage_rows = compare_stages(state.stage_predictions, state.stage_measurements) if state.stage_measurements else []
    comparisons = compare_points(state.points, state.measured)
    verdict, repeatability = verdicts(comparisons, state.measured)
    steps = served_steps(state, say)  # before the notes are taken: it adds its own
    return LoopReport(kind, model, engine, settings, status, error, run_dir, tuple(state.notes), state.constants,
                      tuple(state.stage_predictions), tuple(state.stage_measurements), tuple(stage_rows), tuple(state.checks),
                      twin_dict(state.twin) if state.twin else None, dict(state.capacity), tuple(state.loop_points()),
                      tuple(comparisons), verdict if comparisons else None, repeatability, state.first_window_verdict,
                      tuple(steps), tuple(w.summarised(state.checks) for w in state.windows))


__all__ = ["loop_report"]
