"""The digital twin's prediction of one load run against a real target, stored with the run as prediction.json.

Made before the load runs (it cannot peek at a measurement), for the very workload artifact the load
generator sends: the same seeded arrivals, prompt and output lengths, and the load generator's
measurement window [warmup_s, span_s − cooldown_s) of intended sends (workloads.summary's definitions,
reproduced by harness.target.des.summarise_run). Every figure here is SIMULATED: it is what the twin
(harness.target.twin) says the target will serve, not a measurement.

`compare_prediction` sets the prediction beside the run's measured summary through the one comparison
(harness.served.compare_served): error = (predicted − measured) / measured, a signed fraction, for throughput,
output tokens/s, TTFT p50/p90, TPOT p50 and E2E p50.

Format history (harness.versioning; a newer file is refused): 1 — first version; 2 — the workload's mean prompt and
output tokens (`input_tokens_mean`, `output_tokens_mean`: the served point's identity; None in a version-1 file).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from harness.errors import HarnessError
from harness.served import Percentiles, ServedComparison, ServedMeasurement, ServedPoint, ServedPrediction, compare_served
from harness.target.des import ServedFigures, saturation_capacity
from harness.target.twin import predict_point, requests_from_rows, twin_dict
from harness.versioning import load_versioned, stamp_version
from workloads.summary import LoadSummary

PREDICTION_FILE = "prediction.json"
PREDICTION_SCHEMA_VERSION = 2


def _prediction_1_to_2(d: dict[str, Any]) -> dict[str, Any]:
    """Version 1 did not record the workload's lengths: the point's identity says "not recorded"."""
    return {**d, "input_tokens_mean": d.get("input_tokens_mean"), "output_tokens_mean": d.get("output_tokens_mean")}


PREDICTION_UPGRADES: dict[int, Any] = {1: _prediction_1_to_2}
SIMULATED_LABEL = "twin prediction (simulated)"


@dataclass(frozen=True)
class PredictionSource:
    """Which twin made the prediction, and from what."""

    kind: str  # "twin.json" (a loop run's twin spec) or "step-time" (an engine step-time calibration + an engine config)
    path: str  # the --calibration file
    engine: str  # the scheduler modelled: llama.cpp, vllm, sglang
    model: str
    step_times: str  # where the step times come from (the twin's source)
    engine_config: str | None = None  # the engine config whose scheduler settings the twin runs (step-time; checked: twin.json)
    machine: str | None = None  # the host the constants were measured on (None: not recorded)
    proxy: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TargetPrediction:
    """What the twin predicts for one load run (all figures simulated)."""

    figures: ServedFigures  # over the load generator's window, same definitions as its summary
    capacity_requests_per_s: float  # saturation throughput for the run's (input, output) lengths
    capacity_output_tokens_per_s: float
    rate_per_s: float  # the schedule's mean arrival rate
    span_s: float
    window_start_s: float
    window_end_s: float
    requests: int  # requests simulated (the whole artifact)
    source: PredictionSource
    twin: dict[str, Any]  # the twin spec (harness.target.twin.twin_dict), so the prediction can be rerun
    notes: tuple[str, ...] = ()
    compute_s: float = 0.0  # wall seconds the simulation took on this machine
    workload_content_hash: str = ""  # the artifact simulated (workloads.artifact content hash): the one the run sent
    simulated: bool = True
    input_tokens_mean: float | None = None  # the artifact's mean prompt and output tokens (None: a version-1 file)
    output_tokens_mean: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["notes"] = list(self.notes)
        return stamp_version(d, PREDICTION_SCHEMA_VERSION)

    @classmethod
    def from_dict(cls, data: Any, source: str = PREDICTION_FILE) -> "TargetPrediction":
        d = load_versioned(data, PREDICTION_SCHEMA_VERSION, PREDICTION_UPGRADES, source, what="twin prediction",
                           fix="rerun bench-pd with --calibration to make a new one")
        try:
            return cls(ServedFigures(**d["figures"]), float(d["capacity_requests_per_s"]), float(d["capacity_output_tokens_per_s"]),
                       float(d["rate_per_s"]), float(d["span_s"]), float(d["window_start_s"]), float(d["window_end_s"]),
                       int(d["requests"]), PredictionSource(**d["source"]), dict(d["twin"]), tuple(d.get("notes", ())),
                       float(d.get("compute_s", 0.0)), str(d.get("workload_content_hash", "")), bool(d.get("simulated", True)),
                       _opt_float(d.get("input_tokens_mean")), _opt_float(d.get("output_tokens_mean")))
        except KeyError as exc:
            raise HarnessError(f"{source}: field {exc.args[0]!r} is missing; the run is damaged, rerun it.") from None
        except (TypeError, ValueError) as exc:
            raise HarnessError(f"{source}: a field has a bad value ({exc}); the run is damaged, rerun it.") from None

    def served_point(self) -> ServedPoint:
        """The point this run offered: the artifact's mean lengths at its mean arrival rate."""
        return ServedPoint(self.input_tokens_mean, self.output_tokens_mean, rate_per_s=self.rate_per_s,
                           workload=self.workload_content_hash or "bench-pd workload")

    def served(self) -> ServedPrediction:
        """The prediction as the shared served-point record (simulated)."""
        f = self.figures
        n = int(f.requests_measured)
        src = self.source
        return ServedPrediction(self.served_point(), f"{SIMULATED_LABEL}: {src.engine} twin from {src.kind} {src.path}",
                                ttft_s=Percentiles(n, p50=f.ttft_p50_s, p90=f.ttft_p90_s), tpot_s=Percentiles(n, p50=f.tpot_p50_s),
                                e2e_s=Percentiles(n, p50=f.e2e_p50_s), request_throughput_per_s=f.request_throughput_per_s,
                                output_tokens_per_s=f.output_tokens_per_s, capacity_requests_per_s=self.capacity_requests_per_s,
                                simulated=self.simulated, notes=self.notes)


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def predict_artifact(spec: Any, rows: Sequence[dict[str, Any]], *, span_s: float, rate_per_s: float, warmup_s: float = 0.0,
                     cooldown_s: float = 0.0, source: PredictionSource, notes: Sequence[str] = (),
                     workload_content_hash: str = "") -> TargetPrediction:
    """Simulate the artifact's rows on the twin `spec` (a TwinSpec) and its saturation capacity for the same lengths."""
    if not rows:
        raise HarnessError("the workload is empty; the twin has nothing to predict.")
    if not (math.isfinite(span_s) and span_s > 0):
        raise HarnessError(f"the workload's schedule spans {span_s!r} s; the twin needs a schedule of positive length.")
    t0 = time.perf_counter()
    reqs = requests_from_rows(rows)
    fig = predict_point(spec.make_scheduler, reqs, rate_per_s=rate_per_s, span_s=span_s, warmup_s=warmup_s, cooldown_s=cooldown_s)
    n = max(40, 12 * int(spec.slots))
    pairs = [(r.input_tokens, r.output_tokens) for r in reqs[:n]]  # the run's own lengths, in arrival order
    cap_rps, cap_tok = saturation_capacity(spec.make_scheduler, pairs, n_requests=n)
    all_notes = [*notes, *spec.notes]
    if fig.rejected:
        all_notes.append(f"the twin rejected {fig.rejected} of {len(reqs)} requests (a prompt longer than a slot's context)")
    return TargetPrediction(fig, cap_rps, cap_tok, rate_per_s, span_s, warmup_s, max(warmup_s, span_s - cooldown_s), len(reqs),
                            source, twin_dict(spec), tuple(dict.fromkeys(all_notes)), time.perf_counter() - t0, workload_content_hash,
                            input_tokens_mean=sum(r.input_tokens for r in reqs) / len(reqs),
                            output_tokens_mean=sum(r.output_tokens for r in reqs) / len(reqs))


# the figures a bench-pd run sets beside the twin's, in the order its report shows them
PREDICTION_METRICS = ("request_throughput_per_s", "output_tokens_per_s", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "e2e_p50_s")


def measurement_from_summary(point: ServedPoint, summary: LoadSummary, source: str = "bench-pd run") -> ServedMeasurement:
    """The run's measured summary (workloads.summary.LoadSummary) as the shared measurement record of `point`; a summary
    whose window is empty (`window_note`) measured no rate there."""
    empty = bool(summary.window_note)
    return ServedMeasurement(point, source, ttft_s=summary.ttft_s, tpot_s=summary.tpot_s, e2e_s=summary.e2e_s,
                             request_throughput_per_s=None if empty else float(summary.request_throughput_per_s),
                             output_tokens_per_s=None if empty else float(summary.output_tokens_per_s),
                             requests_ok=int(summary.requests_ok), requests_total=int(summary.requests_total))


def compare_prediction(pred: TargetPrediction, summary: LoadSummary, source: str = "bench-pd run") -> ServedComparison:
    """The prediction against the run's measured summary (harness.served.compare_served; shown, not judged)."""
    point = pred.served_point()
    return compare_served(pred.served(), measurement_from_summary(point, summary, source), metrics=PREDICTION_METRICS)


@dataclass(frozen=True)
class NoPrediction:
    """Why a real target's run has no prediction, and how to make one."""

    reason: str = "no prediction for this target"
    how: tuple[str, ...] = field(default=(
        "`harness loop cpu` (llama.cpp; `harness loop gpu` for vLLM / SGLang) writes results/<machine>/<run_id>/twin.json: "
        "rerun with --calibration results/<machine>/<run_id>/twin.json",
        "or `make step-time` (writes calibration/<machine>.step-time.json), then rerun with "
        "--calibration calibration/<machine>.step-time.json --engine-config NAME (the llama.cpp engine config the target runs)",
    ))

    def text(self) -> str:
        return f"{self.reason}: " + "; ".join(self.how)
