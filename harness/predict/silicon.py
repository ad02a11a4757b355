"""`harness validate silicon`: our predictions and aiconfigurator's against real GPU serving measurements.

aiconfigurator's wheel ships `aiconfigurator_core/systems/silicon_sample.csv`: measured TTFT and TPOT of
model × system × engine / version × precision × ISL/OSL × concurrency × parallel layout, aggregated or
disaggregated. Only the rows of the asked system are read into the comparison (`--system`); the other systems'
rows are an independent check nobody develops against.

Each row is a closed-loop benchmark at the concurrency in its `silicon_data_source` (`silicon_concurrency=N`):
we predict the benchmark as it ran (harness.predict.simulate) with the benchmark's own request lengths and request
count, which the row's provenance names (`benchmark_profile`):

| provenance | benchmark | lengths | requests |
|---|---|---|---|
| `source_file=<date>.csv` (ids `YYYY_MM_DD_<model>_...`) | InferenceMAX's `benchmark_serving.py` | uniform in [0.8·L, L] (`--random-range-ratio 0.8`, the script's lower-bound ratio) | 10 × N, no warm-up |
| `db-dump/...; config_id=...` | aiconfigurator's generated aiperf run (`sflow`) | fixed (stddev 0) | N warm-up, then 4 × N measured (the run measures 20 × N; a closed loop of fixed lengths repeats itself) |
| `source_file=.../aic-auto-gap-analysis/...`, other | aiperf as aiconfigurator's benchmark template runs it | fixed | 2 × N warm-up, then 4 × N |

A row is refused — with the reason — when what it ran is not modelled: an architecture the model does not have
(hybrid linear attention, sparse attention), a layout across nodes (TP beyond 8 cards), data-parallel attention,
pipeline parallelism, a disaggregated row without its worker counts, or a refusal of `harness predict` itself.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from harness.errors import HarnessError
from harness.model.parallel import Parallel
from harness.predict.aic import AIC_VERSION, AicEstimate, aic_estimate
from harness.predict.calibration import StepConstants, step_constants
from harness.predict.deployment import Deployment, Workers, Workload
from harness.predict.predict import predict
from harness.served import Percentiles, ServedComparison, ServedMeasurement, ServedPoint, ServedPrediction, compare_served
from harness.specs.models import get_model

SILICON_SCHEMA_VERSION = 1
# Format history: 1 — first version (rows with ours and aiconfigurator's TTFT/TPOT, groups with median and p90 |error|).

SYSTEM_GPUS = {"h200_sxm": "h200-sxm", "h100_sxm": "h100-sxm", "a100_sxm": "a100-80gb-sxm", "b200_sxm": "b200"}

# the rows' model paths -> our catalog (or a config.json the installed aiconfigurator bundles); None: refused
MODELS: dict[str, str | None] = {
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "deepseek-ai/DeepSeek-R1": "deepseek-r1",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "MiniMaxAI/MiniMax-M2.5": "aic:MiniMaxAI--MiniMax-M2.5_config.json",
    "moonshotai/Kimi-K2.5": "aic:moonshotai--Kimi-K2.5_config.json",
}
REFUSED_MODELS = {
    "Qwen/Qwen3.5-397B-A17B": "Qwen3.5's hybrid layers (Gated DeltaNet linear attention beside full attention) are not modelled",
    "zhipuai/GLM-5": "GLM-5's DeepSeek sparse attention (a lightning indexer choosing 2048 keys per query) is not modelled",
}
# the rows' quantization -> our precision; gpt-oss's "nvfp4" rows ran its MXFP4 checkpoint (Hopper has no FP4 GEMM)
PRECISIONS = {"fp8": "fp8", "fp8_block": "fp8-block", "int4_wo": "int4-wo", "bfloat16": "bf16", "float16": "bf16"}
MAX_TP = 8  # cards of one node; a larger tensor-parallel group crosses nodes


@dataclass(frozen=True)
class BenchmarkProfile:
    name: str
    range_ratio: float
    range_mode: str
    requests_per_client: int
    warmup_per_client: int
    source: str
    trtllm_budget: str = ""  # how the benchmark sized TensorRT-LLM's max_num_tokens ("" : the engine's default)

    def trtllm_max_num_tokens(self, isl: int, osl: int, concurrency: int, batch: int | None) -> int | None:
        """max_num_tokens the benchmark's launch script gave trtllm-serve (every whole prompt fits one iteration)."""
        if self.trtllm_budget == "inferencemax":  # MAX_NUM_TOKENS=$(( (CONC + MAX_MODEL_LEN + 64 + 63) / 64 * 64 ))
            return (concurrency + isl + osl + 64 + 63) // 64 * 64
        if self.trtllm_budget == "dynamo":  # max_num_tokens=$(( ((mtp+1)*max_batch+isl+128+63)/64*64 ))
            return ((batch or concurrency) + isl + 128 + 63) // 64 * 64
        return None


PROFILES = {
    "inferencemax": BenchmarkProfile(
        "inferencemax", 0.8, "below", 10, 0,
        "InferenceMAX benchmark scripts: run_benchmark_serving --random-range-ratio 0.8 --num-prompts CONC*10 "
        "--max-concurrency CONC (lengths uniform in [0.8·L, L]); trtllm-serve --max_num_tokens (CONC + MAX_MODEL_LEN + "
        "64) rounded up to 64, MAX_MODEL_LEN taken as ISL + OSL", "inferencemax"),
    "aic-sflow": BenchmarkProfile(
        "aic-sflow", 0.0, "symmetric", 4, 1,
        "aiconfigurator generator/sflow.py: aiperf --synthetic-input-tokens-stddev 0 --output-tokens-stddev 0 "
        "--warmup-request-count CONC --request-count 20*CONC (4*CONC simulated); Dynamo's TensorRT-LLM recipes "
        "max_num_tokens = (max_batch + ISL + 128) rounded up to 64", "dynamo"),
    "aiperf": BenchmarkProfile(
        "aiperf", 0.0, "symmetric", 4, 2,
        "aiconfigurator benchmark template bench_run.sh.j2: aiperf --concurrency N --warmup-request-count 2N, fixed "
        "lengths (4*N measured)"),
}


def benchmark_profile(row: dict[str, Any]) -> BenchmarkProfile:
    src = str(row.get("silicon_data_source") or "")
    rid = str(row.get("id") or "")
    if re.match(r"source_file=\d{4}-\d{2}-\d{2}\.csv", src) or re.match(r"\d{4}_\d{2}_\d{2}_", rid):
        return PROFILES["inferencemax"]
    if src.startswith("db-dump/"):
        return PROFILES["aic-sflow"]
    return PROFILES["aiperf"]


def row_concurrency(row: dict[str, Any]) -> int | None:
    m = re.search(r"silicon_concurrency=(\d+)", str(row.get("silicon_data_source") or ""))
    return int(m.group(1)) if m else None


def _num(v: Any) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)


class Refused(Exception):
    """A row the harness does not predict, with the reason."""


def _model_ref(row: dict[str, Any], aic_root: Path | None) -> str:
    path = row["model_path"]
    if path in REFUSED_MODELS:
        raise Refused(REFUSED_MODELS[path])
    ref = MODELS.get(path)
    if ref is None:
        raise Refused(f"model {path} has no catalog entry or bundled config here")
    if ref.startswith("aic:"):
        if aic_root is None:
            raise Refused(f"model {path}: its config ships with aiconfigurator, which is not installed")
        cfg = aic_root / "model_configs" / ref[4:]
        if not cfg.is_file():
            raise Refused(f"model {path}: {cfg} not found in the installed aiconfigurator")
        return str(cfg)
    return ref


def _precision(row: dict[str, Any], model: str) -> str:
    q = str(row.get("gemm_quant_mode") or row.get("precision") or "")
    if q in ("nvfp4", "fp4") and "gpt-oss" in model:
        return "mxfp4"
    if q in ("nvfp4", "fp4"):
        raise Refused("NVFP4 GEMMs need FP4 tensor cores (Blackwell); no Hopper deployment runs them")
    if q not in PRECISIONS:
        raise Refused(f"quantization {q!r} is not modelled")
    return PRECISIONS[q]


def _parallel(row: dict[str, Any], moe: bool, prefix: str = "") -> Parallel:
    g = lambda f, d=1: _num(row.get(prefix + f)) or d  # noqa: E731
    tp, pp, dp = g("tp_size"), g("pp_size"), g("attention_dp_size")
    mtp, mep = g("moe_tp_size"), g("moe_ep_size")
    if tp * dp > MAX_TP:
        raise Refused(f"{prefix}tp_size × attention_dp_size = {tp * dp} cards span more than one {MAX_TP}-GPU node: "
                      "inter-node tensor parallelism is not modelled")
    if pp > 1:
        raise Refused(f"{prefix}pp_size = {pp}: pipeline-parallel serving is not modelled")
    if dp > 1:
        raise Refused(f"{prefix}attention_dp_size = {dp}: data-parallel attention is not modelled")
    if not moe:
        return Parallel(tp=tp, pp=pp, attention_dp=dp)  # a dense model: the rows' MoE sizes mean nothing
    if mtp * mep != tp * dp:
        raise Refused(f"{prefix}moe_tp_size × moe_ep_size = {mtp * mep} ≠ tp_size × attention_dp_size = {tp * dp}: the "
                      "row's layout is inconsistent")
    return Parallel(tp=tp, pp=pp, attention_dp=dp, moe_tp=mtp, ep=mep)


def _kv_dtype(row: dict[str, Any], precision: str) -> str:
    """The KV cache dtype the row's engine ran: TensorRT-LLM applies the FP8 KV quantization that NVIDIA's ModelOpt FP8
    checkpoints declare (nvidia/Llama-3.1-*-FP8: hf_quant_config kv_cache_quant_algo FP8, bundled with aiconfigurator);
    vLLM and SGLang keep the model dtype unless told otherwise (kv_cache_dtype auto); DeepSeek's block-FP8 checkpoints
    declare no KV quantization."""
    if row.get("backend") == "trtllm" and precision == "fp8" and "llama" in str(row.get("model_path", "")).lower():
        return "fp8"
    return "bf16"


def row_deployment(row: dict[str, Any], aic_root: Path | None) -> tuple[Deployment, Workload, BenchmarkProfile]:
    """The deployment and benchmark workload a silicon row ran; Refused when it is not modelled."""
    model = _model_ref(row, aic_root)
    prec = _precision(row, model)
    moe = get_model(model).is_moe
    gpu = SYSTEM_GPUS.get(str(row["system"]))
    if gpu is None:
        raise Refused(f"system {row['system']!r} has no GPU spec here")
    conc = row_concurrency(row)
    if conc is None:
        raise Refused("the row does not state its concurrency (silicon_concurrency=)")
    if row["mode"] == "agg":
        par = _parallel(row, moe)
        if par.ep > 1 and par.expert_tp * par.ep != par.tp:
            raise Refused("expert parallelism across attention data-parallel ranks is not modelled")
        d = Deployment(str(row["backend"]), gpu, model, prec, _kv_dtype(row, prec), "agg", Workers(1, par, _num(row.get("batch_size"))))
    else:
        missing = [f for f in ("prefill_num_workers", "decode_num_workers") if _num(row.get(f)) is None]
        if missing:
            raise Refused("the row does not say how many prefill and decode workers ran (" + ", ".join(missing) + ")")
        pw = Workers(_num(row["prefill_num_workers"]) or 1, _parallel(row, moe, "prefill_"), _num(row.get("prefill_batch_size")))
        dw = Workers(_num(row["decode_num_workers"]) or 1, _parallel(row, moe, "decode_"), _num(row.get("decode_batch_size")))
        d = Deployment(str(row["backend"]), gpu, model, prec, _kv_dtype(row, prec), "disagg", prefill=pw, decode=dw)
    prof = benchmark_profile(row)
    if d.engine == "trtllm":
        batch = d.workers.max_batch if d.mode == "agg" else (d.decode.max_batch if d.decode else None)
        budget = prof.trtllm_max_num_tokens(int(row["isl"]), int(row["osl"]), conc, batch)
        if budget is not None:
            d = dataclasses.replace(d, max_num_tokens=budget)
    w = Workload(int(row["isl"]), int(row["osl"]), concurrency=conc, requests=prof.requests_per_client * conc,
                 warmup_requests=prof.warmup_per_client * conc, range_ratio=prof.range_ratio, range_mode=prof.range_mode)  # type: ignore[arg-type]
    return d, w, prof


METRICS = ("ttft_mean_s", "tpot_mean_s")  # a row gives one TTFT and one TPOT: its benchmark's mean (harness.served names)


def row_point(row: dict[str, Any]) -> ServedPoint:
    """The served point a silicon row measured: its ISL/OSL at its closed-loop concurrency."""
    return ServedPoint(float(row["isl"]), float(row["osl"]), concurrency=row_concurrency(row) or 1, workload=str(row["id"]))


def row_measurement(row: dict[str, Any]) -> ServedMeasurement:
    """The row's measurement as the shared record: one figure each (count 1: the row's mean over its requests)."""
    return ServedMeasurement(row_point(row), f"silicon_sample.csv row {row['id']} ({row.get('silicon_data_source')})",
                             ttft_s=Percentiles(1, float(row["silicon_ttft_ms"]) * 1e-3),
                             tpot_s=Percentiles(1, float(row["silicon_tpot_ms"]) * 1e-3))


@dataclass(frozen=True)
class RowResult:
    """One row: what it ran, our prediction (or why none) and aiconfigurator's, compared by harness.served.compare_served."""

    id: str
    engine: str
    model: str
    mode: str
    concurrency: int | None
    isl: int
    osl: int
    layout: str
    measured: ServedMeasurement
    ours: ServedComparison | None = None
    refused: str | None = None
    aic: ServedComparison | None = None
    aic_refused: str | None = None
    profile: str = ""
    kv_capped: bool | None = None
    compute_s: float = 0.0

    def _fig(self, c: ServedComparison | None, name: str, what: str) -> float | None:
        if c is None:
            return None
        row = next(r for r in c.rows if r.metric == name)
        return getattr(row, what)

    @property
    def measured_ttft_s(self) -> float:
        return float(self.measured.figure("ttft_mean_s") or math.nan)

    @property
    def measured_tpot_s(self) -> float:
        return float(self.measured.figure("tpot_mean_s") or math.nan)

    @property
    def ttft_s(self) -> float | None:
        return self._fig(self.ours, "ttft_mean_s", "predicted")

    @property
    def tpot_s(self) -> float | None:
        return self._fig(self.ours, "tpot_mean_s", "predicted")

    @property
    def aic_ttft_s(self) -> float | None:
        return self._fig(self.aic, "ttft_mean_s", "predicted")

    @property
    def aic_tpot_s(self) -> float | None:
        return self._fig(self.aic, "tpot_mean_s", "predicted")

    @property
    def ttft_error(self) -> float | None:
        return self._fig(self.ours, "ttft_mean_s", "error")

    @property
    def tpot_error(self) -> float | None:
        return self._fig(self.ours, "tpot_mean_s", "error")

    @property
    def aic_ttft_error(self) -> float | None:
        return self._fig(self.aic, "ttft_mean_s", "error")

    @property
    def aic_tpot_error(self) -> float | None:
        return self._fig(self.aic, "tpot_mean_s", "error")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "engine": self.engine, "model": self.model, "mode": self.mode, "concurrency": self.concurrency,
                "isl": self.isl, "osl": self.osl, "layout": self.layout, "profile": self.profile,
                "measured_ttft_s": self.measured_ttft_s, "measured_tpot_s": self.measured_tpot_s,
                "ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "ttft_error": self.ttft_error, "tpot_error": self.tpot_error,
                "refused": self.refused, "aic_ttft_s": self.aic_ttft_s, "aic_tpot_s": self.aic_tpot_s,
                "aic_ttft_error": self.aic_ttft_error, "aic_tpot_error": self.aic_tpot_error, "aic_refused": self.aic_refused,
                "kv_capped": self.kv_capped, "compute_s": self.compute_s}


@dataclass(frozen=True)
class ErrorStats:
    """|relative error| over a group's rows: how many, the median and the 90th percentile (fractions)."""

    rows: int
    median_abs: float | None
    p90_abs: float | None
    median_signed: float | None

    @classmethod
    def of(cls, errors: Iterable[float | None]) -> "ErrorStats":
        e = np.array([x for x in errors if x is not None and math.isfinite(x)], dtype=float)
        if not e.size:
            return cls(0, None, None, None)
        a = np.abs(e)
        return cls(int(e.size), float(np.median(a)), float(np.percentile(a, 90)), float(np.median(e)))


@dataclass(frozen=True)
class GroupSummary:
    engine: str
    model: str
    mode: str
    rows: int
    predicted: int
    aic_predicted: int
    ttft: ErrorStats
    tpot: ErrorStats
    aic_ttft: ErrorStats
    aic_tpot: ErrorStats
    both_ttft: ErrorStats  # ours on the rows both predicted
    both_tpot: ErrorStats
    both_aic_ttft: ErrorStats
    both_aic_tpot: ErrorStats


@dataclass(frozen=True)
class SiliconValidation:
    system: str
    csv: str
    calibration: str
    calibration_kind: str
    rows: tuple[RowResult, ...]
    groups: tuple[GroupSummary, ...]
    overall: tuple[GroupSummary, ...]  # dense agg / MoE agg / disagg / all
    wall_s: float
    aic: bool
    notes: tuple[str, ...] = field(default=())
    cpu_s: float = 0.0  # this process's CPU time (the wall time also holds the other jobs of a shared host)
    schema_version: int = SILICON_SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "system": self.system, "csv": self.csv,
                "calibration": self.calibration, "calibration_kind": self.calibration_kind, "wall_s": self.wall_s,
                "cpu_s": self.cpu_s,
                "aic": self.aic, "notes": list(self.notes),
                "groups": [asdict(g) for g in self.groups], "overall": [asdict(g) for g in self.overall],
                "rows": [r.to_dict() for r in self.rows]}


def silicon_csv_path(given: str | None) -> Path:
    if given is not None:
        p = Path(given)
        if not p.is_file():
            raise HarnessError(f"--csv {given!r} does not exist; give aiconfigurator's silicon_sample.csv or a file of its columns.")
        return p
    root = _aic_root()
    if root is None:
        raise HarnessError("the silicon rows ship with aiconfigurator: pip install 'aiconfigurator==0.12.0', or give --csv PATH.")
    return root / "systems" / "silicon_sample.csv"


def _aic_root() -> Path | None:
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


REQUIRED_COLUMNS = ("id", "silicon_data_source", "backend", "model_path", "system", "mode", "isl", "osl",
                    "silicon_ttft_ms", "silicon_tpot_ms")


def read_rows(path: Path, system: str) -> list[dict[str, Any]]:
    """The rows of `system` only (the others are never returned)."""
    import pandas as pd  # noqa: PLC0415

    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise HarnessError(f"silicon rows {path} cannot be read ({exc}).") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise HarnessError(f"silicon rows {path}: missing column(s) {', '.join(missing)}; give aiconfigurator's silicon_sample.csv.")
    known = sorted(df["system"].dropna().unique().tolist())
    if system not in known:
        raise HarnessError(f"--system {system!r}: no rows of that system in {path}; systems there: {', '.join(known)}.")
    sub = df[df["system"] == system]
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in sub.to_dict("records")]


def validate_silicon(system: str, *, csv: str | None = None, calibration: str = "auto", with_aic: bool = True,
                     kernel_data: str | None = None, limit: int | None = None) -> SiliconValidation:
    """Predict every row of `system` (ours and aiconfigurator's) and summarise the errors per engine × model × mode."""
    t0, c0 = time.perf_counter(), time.process_time()
    gpu = SYSTEM_GPUS.get(system)
    if gpu is None:
        raise HarnessError(f"--system {system!r} has no GPU spec here; known: {', '.join(SYSTEM_GPUS)}.")
    path = silicon_csv_path(csv)
    rows = read_rows(path, system)
    if limit is not None:
        rows = rows[:limit]
    aic_root = _aic_root()
    consts: dict[str, StepConstants] = {}
    results = []
    for row in rows:
        results.append(_one(row, aic_root, consts, calibration, kernel_data, gpu, with_aic))
    kinds = sorted({c.kind for c in consts.values()})
    label = "; ".join(f"{e}: {c.describe()}" for e, c in consts.items())
    groups = _groups(results)
    return SiliconValidation(system, str(path), label, ", ".join(kinds), tuple(results), groups, _overall(results),
                             time.perf_counter() - t0, with_aic, cpu_s=time.process_time() - c0)


def _one(row: dict[str, Any], aic_root: Path | None, consts: dict[str, StepConstants], calibration: str,
         kernel_data: str | None, gpu: str, with_aic: bool) -> RowResult:
    meas = row_measurement(row)
    base = dict(id=str(row["id"]), engine=str(row["backend"]), model=str(row["model_path"]), mode=str(row["mode"]),
                concurrency=row_concurrency(row), isl=int(row["isl"]), osl=int(row["osl"]), measured=meas)
    est = aic_estimate(row) if with_aic else AicEstimate(None, None, "not run (--no-aic)")
    aic = None
    if est.ttft_s is not None:
        pred = ServedPrediction(meas.point, f"aiconfigurator {AIC_VERSION} cli_estimate (its default database version)",
                                ttft_s=Percentiles(1, est.ttft_s), tpot_s=Percentiles(1, est.tpot_s))
        aic = compare_served(pred, meas, metrics=METRICS)
    aic_part = dict(aic=aic, aic_refused=est.refused)
    try:
        d, w, prof = row_deployment(row, aic_root)
    except (Refused, HarnessError) as exc:
        return RowResult(layout="", refused=str(exc), **base, **aic_part)
    if d.engine not in consts:
        consts[d.engine] = step_constants(calibration, gpu, d.engine, kernel_data=kernel_data)
    try:
        p = predict(d, w, constants=consts[d.engine])
    except HarnessError as exc:
        return RowResult(layout="", refused=str(exc), profile=prof.name, **base, **aic_part)
    ours = compare_served(p.served(meas.point), meas, metrics=METRICS)
    return RowResult(layout=p.layout, ours=ours, profile=prof.name, kv_capped=p.kv.capped if p.kv else None,
                     compute_s=p.compute_s, **base, **aic_part)


def _summary(key: tuple[str, str, str], rs: list[RowResult]) -> GroupSummary:
    both = [r for r in rs if r.ttft_s is not None and r.aic_ttft_s is not None]
    return GroupSummary(
        *key, rows=len(rs), predicted=sum(r.ttft_s is not None for r in rs), aic_predicted=sum(r.aic_ttft_s is not None for r in rs),
        ttft=ErrorStats.of(r.ttft_error for r in rs), tpot=ErrorStats.of(r.tpot_error for r in rs),
        aic_ttft=ErrorStats.of(r.aic_ttft_error for r in rs), aic_tpot=ErrorStats.of(r.aic_tpot_error for r in rs),
        both_ttft=ErrorStats.of(r.ttft_error for r in both), both_tpot=ErrorStats.of(r.tpot_error for r in both),
        both_aic_ttft=ErrorStats.of(r.aic_ttft_error for r in both), both_aic_tpot=ErrorStats.of(r.aic_tpot_error for r in both))


def _groups(results: list[RowResult]) -> tuple[GroupSummary, ...]:
    keys = sorted({(r.engine, r.model, r.mode) for r in results})
    return tuple(_summary(k, [r for r in results if (r.engine, r.model, r.mode) == k]) for k in keys)


DENSE_MODELS = {"meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-8B-Instruct", "nvidia/Llama-3.1-8B-Instruct-FP8"}


def _overall(results: list[RowResult]) -> tuple[GroupSummary, ...]:
    dense = [r for r in results if r.mode == "agg" and r.model in DENSE_MODELS]
    moe = [r for r in results if r.mode == "agg" and r.model not in DENSE_MODELS]
    dis = [r for r in results if r.mode == "disagg"]
    return (_summary(("all", "dense", "agg"), dense), _summary(("all", "MoE", "agg"), moe),
            _summary(("all", "all", "disagg"), dis), _summary(("all", "all", "all"), results))
