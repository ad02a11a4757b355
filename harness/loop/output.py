"""Where a loop writes as it goes: the run directory (results/<machine>/<run_id>/, kind loop-cpu or loop-gpu) through
harness.store, or nowhere with --no-store (the load runs then go to a temporary folder). The records turn into table
rows here, at the store edge."""

from __future__ import annotations

import tempfile
from typing import Any, Iterable, Sequence

from harness.loop.state import PlannedPoint, RunResult
from harness.loop_records.report import LOOP_REPORT_FILE, LoopReport
from harness.loop_records.stages import CpuConstants
from harness.records import new_manifest
from harness.served import METRICS, comparison_rows
from harness.store import RunWriter
from harness.target.stage_requests import RequestCheck
from harness.target.twin import TwinSpec, twin_dict


class LoopOutput:
    """The loop's run directory; every method is a no-op without one (`results_dir` None)."""

    def __init__(self, kind: str, results_dir: str | None, *, engine: dict[str, Any], command_line: Sequence[str],
                 extra: dict[str, Any]):
        self.writer = (RunWriter(new_manifest(kind, engine=engine, command_line=list(command_line) or None, extra=extra), results_dir)
                       if results_dir is not None else None)
        self.load_root = str(self.writer.path / "load") if self.writer else tempfile.mkdtemp(prefix="harness-loop-load-")

    @property
    def path(self) -> str | None:
        return str(self.writer.path) if self.writer else None

    def _append(self, table: str, rows: list[dict[str, Any]]) -> None:
        if self.writer and rows:
            self.writer.append(table, rows)

    def frame(self, table: str, df: Any) -> None:
        """A DataFrame as one more part of `table` (its dtypes set by the caller: every part one schema)."""
        if self.writer and len(df):
            self.writer.append(table, df)

    def calibration(self, c: CpuConstants) -> None:
        self._append("loop_calibration", [{"shape": k, **v} for k, v in c.matmul_by_shape.items()])

    def requests(self, checks: Iterable[RequestCheck]) -> None:
        self._append("loop_requests", [c.to_dict() for c in checks])

    def twin(self, twin: TwinSpec, name: str = "twin.json") -> None:
        if self.writer:
            self.writer.write_json(name, twin_dict(twin))

    def json(self, name: str, doc: dict[str, Any]) -> None:
        if self.writer:
            self.writer.write_json(name, doc)

    def predictions(self, points: Iterable[PlannedPoint], revision: int, **extra: Any) -> None:
        """A loop_prediction row per point: its identity and predicted figures; `revision` 1 as calibrated, 2 after the
        stage corrections (or the time budget's new layout), 3 for the workload as sent, 4 from the stage windows."""
        self._append("loop_prediction", [{**_point_cols(p.point), "fraction": p.fraction, "requests": p.artifact.count,
                                          "simulate_s": p.simulate_s, "windows": list(p.windows), "revision": revision,
                                          "source": p.prediction.source,
                                          **{m: p.prediction.figure(m) for m in METRICS}, **extra} for p in points])

    def served_run(self, p: PlannedPoint, r: RunResult) -> None:
        """A loop_served row: one load run of a point (a repeat), its figures and the engine's side."""
        self._append("loop_served", [{**_point_cols(p.point), "fraction": p.fraction, **r.run.to_dict(),
                                      "contended": r.run.contended, **{m: r.served.figure(m) for m in METRICS}}])

    def finish(self, rep: LoopReport, failed: BaseException | None = None) -> None:
        """The comparison tables and loop_report.json, then the manifest's status (complete, or failed with the cause)."""
        if not self.writer:
            return
        self._append("loop_comparison", [c.to_dict() for c in rep.stage_comparisons])
        self._append("loop_served_comparison", comparison_rows(rep.comparisons))
        self._append("loop_served_steps", [r.to_dict() for r in rep.served_steps])
        self.writer.write_json(LOOP_REPORT_FILE, rep.to_dict())
        self.writer.__exit__(type(failed) if failed else None, failed, None)


def _point_cols(pt: Any) -> dict[str, Any]:
    return {"point": pt.index, "mix": pt.workload, "input_tokens": pt.input_tokens, "output_tokens": pt.output_tokens,
            "rate_per_s": pt.rate_per_s}


__all__ = ["LoopOutput"]
