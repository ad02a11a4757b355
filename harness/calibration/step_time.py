"""Calibrated step time: fit the engine's prefill and decode step times from its own measurements.

The functional form (harness.model.step_time; a stated deviation from Chapter 9, docs/model.md
"Calibrated step time"):

    decode step, batch B, mean context L:   t_D = α_D + ((W_D(B, L)·s_byte)^p + (F_D(B, L)·s_flop)^p)^(1/p) + A_D(B, L)·s_attn
    prefill of P tokens (chunks of ubatch):  t_P = Σ_chunks (α_P + F_chunk·s_flop_P)

W and F are the chapter's byte and FLOP counts of the step (weights once per forward pass, KV
read, linear layers, attention, logits); A the decode step's attention FLOPs (B·L·per-pair FLOPs·layers,
inside F too: s_attn is what the attention costs beyond its share of F; since format_version 2). The prefill's weight term is constant per chunk and
folds into α_P (its bytes/s cannot be told apart from the fixed cost with one model).

(p = 1 with `form="additive"`). Fit: weighted least squares with weights 1/t² (each point counts by
its relative error, the quantity the targets are stated in), constants >= 0: the additive form
exactly, by trying every subset of the terms; the overlap form over a grid of p and of the ratio
s_flop/s_byte, each solved in closed form (fit_overlap); intervals: a pairs bootstrap over the fit points (resampled with replacement, seeded),
refitting each time; a prediction's interval is the 2.5/97.5 % percentiles of the predictions of
the bootstrap replicates (parameter uncertainty; a new point's own noise adds to it, see the fit
residuals).

Held-out discipline: every point is labelled `fit` or `held-out` before fitting. By default the
llama-batched-bench grid is the fit set except every third point (sorted by batch, then prompt),
which is held out with all llama-bench points (another tool, same kernels). The residuals are
reported per role; only held-out residuals count as the model's error. Served-load measurements
(the twin loop) never enter a fit.

The API for the digital twin is `step_time_model(calibration_file, EngineSettings(...))`,
returning prefill_s(prompt_tokens, cached_tokens) and decode_step_s(batch, context_tokens) as
Interval(value, low, high) in seconds.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence

import numpy as np

from harness.calibration.family import check_family, ggml_family
from harness.errors import HarnessError
from harness.model.step_time import (
    FORM,
    P_MAX,
    StepConstants,
    combine,
    StepWork,
    calibrated_step_s,
    decode_step_work_counts,
    prefill_chunks_work,
)
from harness.specs.models import ModelSpec

FORMAT = "harness-step-time"
FORMAT_VERSION = 2  # 2: the decode form's attention term (s_per_attn_flop; a version-1 file reads as 0)
DEFAULT_BOOTSTRAP = 200
Phase = Literal["prefill", "decode"]
Role = Literal["fit", "held-out"]
TERMS: dict[str, tuple[str, ...]] = {"decode": ("alpha", "bytes", "flops", "attention"), "prefill": ("alpha", "flops")}
TERM_NAMES = ("alpha", "bytes", "flops", "attention")  # the design row's columns
CONSTANT_NAMES = ("alpha_s", "s_per_byte", "s_per_flop", "overlap_p", "s_per_attn_flop")  # a constants vector's entries
COLUMN_SLOTS = np.array([0, 1, 2, 4])  # each design column's entry in the constants vector (overlap_p has no column)
P_GRID = (1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, P_MAX)  # overlap exponents tried in the decode fit
FORMS = ("overlap", "additive")
HELD_OUT_SOURCES = ("llama-bench",)
_Q = (2.5, 97.5)


# ---------------------------------------------------------------- the model the constants are for


@dataclass(frozen=True)
class WorkModel:
    """What the work counts need: the model's shape and the bytes per parameter one forward pass streams."""

    spec: ModelSpec
    streamed_weight_bytes_per_param: float
    kv_bytes_per_elem: float = 2.0
    ubatch: int = 512
    identity: str = ""  # e.g. GGUF name + file type + size, to tell models apart

    def decode_work(self, batch: int, context_tokens: float) -> StepWork:
        return decode_step_work_counts(self.spec, batch, context_tokens, weight_bytes_per_param=self.streamed_weight_bytes_per_param,
                                       kv_bytes_per_elem=self.kv_bytes_per_elem)

    def prefill_work(self, prompt_tokens: int, cached_tokens: int = 0) -> tuple[StepWork, ...]:
        return prefill_chunks_work(self.spec, prompt_tokens, cached_tokens, ubatch=self.ubatch,
                                   weight_bytes_per_param=self.streamed_weight_bytes_per_param,
                                   kv_bytes_per_elem=self.kv_bytes_per_elem)

    def to_dict(self) -> dict[str, Any]:
        return {"spec": asdict(self.spec), "streamed_weight_bytes_per_param": self.streamed_weight_bytes_per_param,
                "kv_bytes_per_elem": self.kv_bytes_per_elem, "ubatch": self.ubatch, "identity": self.identity}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WorkModel":
        return cls(ModelSpec(**d["spec"]), float(d["streamed_weight_bytes_per_param"]), float(d["kv_bytes_per_elem"]),
                   int(d["ubatch"]), str(d.get("identity", "")))

    @classmethod
    def from_gguf(cls, path: str | Path, *, kv_bytes_per_elem: float = 2.0, ubatch: int = 512) -> "WorkModel":
        from harness.specs.gguf_model import read_gguf  # noqa: PLC0415

        gm = read_gguf(path)
        return cls(gm.spec, gm.streamed_weight_bytes_per_param, kv_bytes_per_elem, ubatch, gguf_identity(gm))


def gguf_identity(gm: Any) -> str:
    return f"{gm.spec.name} ({gm.architecture}, {gm.file_type}, {gm.file_bytes} bytes)"


def engine_family_of_gguf(gm: Any, backend: str = "cpu") -> str:
    """The kernel family an engine serving this GGUF runs: ggml-<file type>-<backend>."""
    ft = gm.file_type or max(gm.tensor_types.items(), key=lambda kv: kv[1].bytes)[0]
    return ggml_family(ft, backend)


# ---------------------------------------------------------------- measured points


@dataclass(frozen=True)
class StepPoint:
    """One measured engine time: a prefill of `prompt_tokens` (batch 1) or one decode step of `batch` sequences."""

    phase: Phase
    batch: int
    prompt_tokens: int  # prefill: tokens processed; decode: the prompt each sequence had before generating
    context_tokens: float  # decode: mean keys attended per sequence per step; prefill: cached tokens before the prompt
    measured_s: float  # median: per prefill (prefill) or per step (decode)
    samples_s: tuple[float, ...]
    source: str  # the tool: "llama-batched-bench", "llama-bench", ...
    case_id: str = ""
    run_id: str = ""
    role: Role = "fit"

    def __post_init__(self) -> None:
        if not (isinstance(self.measured_s, (int, float)) and math.isfinite(self.measured_s) and self.measured_s > 0):
            raise HarnessError(f"step-time point {self.case_id or self.phase}: measured_s must be a positive number, got {self.measured_s!r}.")
        if self.batch < 1:
            raise HarnessError(f"step-time point {self.case_id or self.phase}: batch must be >= 1, got {self.batch!r}.")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples_s"] = list(self.samples_s)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StepPoint":
        return cls(d["phase"], int(d["batch"]), int(d["prompt_tokens"]), float(d["context_tokens"]), float(d["measured_s"]),
                   tuple(float(x) for x in d.get("samples_s", ())), str(d["source"]), str(d.get("case_id", "")),
                   str(d.get("run_id", "")), d.get("role", "fit"))


def decode_row(wm: WorkModel, batch: int, context_tokens: float) -> np.ndarray:
    """[1, bytes, flops, attention flops] of one decode step."""
    w = wm.decode_work(batch, context_tokens)
    return np.array([1.0, w.bytes, w.flops, w.attn_flops])


def prefill_row(wm: WorkModel, prompt_tokens: int, cached_tokens: int = 0) -> np.ndarray:
    """[chunks, bytes, flops, 0] of one prompt (the prefill form has no attention term)."""
    chunks = wm.prefill_work(prompt_tokens, cached_tokens)
    return np.array([float(len(chunks)), sum(c.bytes for c in chunks), sum(c.flops for c in chunks), 0.0])


def design_row(wm: WorkModel, p: StepPoint) -> np.ndarray:
    """[steps, bytes, flops, attention flops] summed over the forward passes the point's time covers."""
    if p.phase == "decode":
        return decode_row(wm, p.batch, p.context_tokens)
    return prefill_row(wm, p.prompt_tokens, int(p.context_tokens)) * p.batch


def predict_rows(rows: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Times of design rows [steps, bytes, flops[, attention flops]] under constants c = (α, s_byte, s_flop[, p[, s_attn]])."""
    rows = np.atleast_2d(rows)
    p = float(c[3]) if len(c) > 3 else 1.0
    t = rows[:, 0] * c[0] + combine(rows[:, 1] * c[1], rows[:, 2] * c[2], p)
    if len(c) > 4 and rows.shape[1] > 3:
        t = t + rows[:, 3] * c[4]
    return t


def fit_overlap(X: np.ndarray, t: np.ndarray, p_grid: Sequence[float] = P_GRID) -> np.ndarray:
    """argmin over (α, s_byte, s_flop, s_attn >= 0, p in p_grid) of Σ ((pred − t)/t)² for the overlap form.

    For fixed p and ratio r = s_flop/s_byte the model is linear, t = α·steps + s_byte·g + s_attn·A with
    g = (W^p + (r·F)^p)^(1/p): every (p, r) on a grid (r log-spaced, then refined around the best)
    is solved in closed form at once (every subset of the other columns beside g, the best non-negative
    one); the terms alone (g absent) are candidates too. X's columns: steps, bytes, flops[, attention flops].
    """
    w = 1.0 / t
    n, W, F = X[:, 0], X[:, 1], X[:, 2]
    A = X[:, 3] if X.shape[1] > 3 else np.zeros(len(t))
    best = (np.inf, np.zeros(5))
    others = [(0, n * w)] + ([(2, A * w)] if np.any(A > 0) else [])  # (slot in (a, b, c), weighted column)
    subsets = [s for r in range(len(others) + 1) for s in itertools.combinations(others, r)]

    def solve(g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        # weighted LS of t ≈ a·n + b·g + c·A for each column of g (k candidates), a, b, c >= 0, b > 0
        Ag, k = g * w[:, None], g.shape[1]
        out = np.zeros((3, k))
        sse = np.full(k, np.inf)
        for sub in subsets:
            cols = [np.broadcast_to(col[:, None], Ag.shape) for _, col in sub] + [Ag]
            M = np.stack(cols, axis=-1).transpose(1, 0, 2)  # (k, N, m)
            G = M.transpose(0, 2, 1) @ M
            rhs = M.sum(axis=1)  # y = 1
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                try:
                    coef = np.linalg.solve(G + np.eye(G.shape[-1]) * 1e-14 * np.trace(G, axis1=1, axis2=2)[:, None, None],
                                           rhs[..., None])[..., 0]
                except np.linalg.LinAlgError:
                    continue
                res = ((M @ coef[..., None])[..., 0] - 1.0)
                e = (res ** 2).sum(axis=1)
            ok = np.all(np.isfinite(coef), axis=1) & np.all(coef >= 0, axis=1) & (coef[:, -1] > 0) & (e < sse)
            sse = np.where(ok, e, sse)
            for j, (slot, _) in enumerate(sub):
                out[slot] = np.where(ok, coef[:, j], out[slot])
            out[1] = np.where(ok, coef[:, -1], out[1])
            for slot in {0, 2} - {s for s, _ in sub}:
                out[slot] = np.where(ok, 0.0, out[slot])
        return out[0], out[1], out[2], sse

    scale = F.max() / max(W.max(), 1e-300)
    for p in p_grid:
        for rs in (np.logspace(-6, 6, 97),):
            r = rs / scale
            g = combine(W[:, None] * np.ones_like(r)[None, :], F[:, None] * r[None, :], p)
            _, _, _, sse = solve(g)
            if not np.any(np.isfinite(sse)):
                continue
            i = int(np.argmin(sse))
            fine = r[i] * np.logspace(-0.15, 0.15, 31)
            g2 = combine(W[:, None] * np.ones_like(fine)[None, :], F[:, None] * fine[None, :], p)
            a2, b2, c2, sse2 = solve(g2)
            j = int(np.argmin(sse2))
            if sse2[j] < best[0]:
                best = (float(sse2[j]), np.array([a2[j], b2[j], b2[j] * fine[j], p, c2[j]]))
    # one term only (the other resolves to zero): the linear NNLS covers those
    lin = np.zeros(5)
    cols = [0, 1, 2] + ([3] if np.any(A > 0) else [])
    lin[COLUMN_SLOTS[cols]] = nnls_relative(X[:, cols], t)
    lin[3] = 1.0
    sse_lin = float(np.sum(((predict_rows(X, lin) - t) / t) ** 2))
    return lin if sse_lin <= best[0] else best[1]


def label_held_out(points: Sequence[StepPoint], rule: str = "every-3rd",
                   held_out_sources: Iterable[str] = HELD_OUT_SOURCES) -> list[StepPoint]:
    """Label each point fit / held-out before any fitting.

    rule "every-3rd": per phase, the points of the fit sources sorted by (batch, prompt, context);
    every third (index 2, 5, …) is held out. "none": all fit-source points are fitted. Points from
    `held_out_sources` are always held out.
    """
    if rule not in ("every-3rd", "none"):
        raise HarnessError(f"--holdout: got {rule!r}; use every-3rd or none.")
    ho = set(held_out_sources)
    out: list[StepPoint] = []
    for phase in ("prefill", "decode"):
        ps = [p for p in points if p.phase == phase]
        fit_src = sorted((p for p in ps if p.source not in ho), key=lambda p: (p.batch, p.prompt_tokens, p.context_tokens))
        for i, p in enumerate(fit_src):
            out.append(replace(p, role="held-out" if rule == "every-3rd" and i % 3 == 2 else "fit"))
        out += [replace(p, role="held-out") for p in ps if p.source in ho]
    return out


# ---------------------------------------------------------------- fitting (pure)


def nnls(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin_{c >= 0} ||A c − y||², exactly, by least squares on every subset of the (few) columns, each scaled to a
    largest entry of 1 first."""
    scale = np.abs(A).max(axis=0)
    scale[scale == 0] = 1.0
    A = A / scale
    k = A.shape[1]
    best, best_sse = np.zeros(k), float(np.sum(y ** 2))
    for r in range(1, k + 1):
        for cols in itertools.combinations(range(k), r):
            sub = A[:, cols]
            c, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if np.any(c < 0):
                continue
            sse = float(np.sum((sub @ c - y) ** 2))
            if sse < best_sse - 1e-15:
                full = np.zeros(k)
                full[list(cols)] = c
                best, best_sse = full, sse
    return best / scale


def nnls_relative(X: np.ndarray, t: np.ndarray) -> np.ndarray:
    """argmin_{c >= 0} Σ ((X c − t) / t)², exactly (`nnls` on the rows divided by t)."""
    return nnls(X / t[:, None], np.ones(len(t)))


@dataclass(frozen=True)
class FittedPoint:
    point: StepPoint
    predicted_s: float
    residual: float  # (predicted − measured) / measured
    chapter_max_s: float | None  # max(F·s_flop, W·s_byte) with the same constants, no α: the chapter's form

    def to_dict(self) -> dict[str, Any]:
        return {**self.point.to_dict(), "predicted_s": self.predicted_s, "residual": self.residual,
                "chapter_max_s": self.chapter_max_s}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "FittedPoint":
        return cls(StepPoint.from_dict(d), float(d["predicted_s"]), float(d["residual"]),
                   None if d.get("chapter_max_s") is None else float(d["chapter_max_s"]))


@dataclass(frozen=True)
class PhaseFit:
    """The fitted constants of one phase, their bootstrap replicates and every point's residual."""

    phase: Phase
    terms: tuple[str, ...]
    constants: StepConstants
    replicates: tuple[tuple[float, ...], ...]  # bootstrap (α, s_byte, s_flop, p, s_attn)
    points: tuple[FittedPoint, ...]
    form: str = "additive"

    def vector(self) -> np.ndarray:
        c = self.constants
        return np.array([c.alpha_s, c.s_per_byte, c.s_per_flop, c.overlap_p, c.s_per_attn_flop])

    def replicate_matrix(self) -> np.ndarray:
        if not self.replicates:
            return self.vector()[None, :]
        pad = (1.0, 0.0)  # p and s_attn of replicates stored before they were fitted
        return np.array([list(r) + list(pad[len(r) - 3:]) for r in self.replicates])

    def interval(self, name: str) -> tuple[float, float, float]:
        i = CONSTANT_NAMES.index(name)
        lo, hi = np.percentile(self.replicate_matrix()[:, i], _Q)
        return float(self.vector()[i]), float(lo), float(hi)

    def residuals(self, role: Role) -> list[float]:
        return [fp.residual for fp in self.points if fp.point.role == role]

    def summary(self, role: Role) -> dict[str, Any]:
        r = self.residuals(role)
        if not r:
            return {"n": 0}
        a = np.abs(np.array(r))
        return {"n": len(r), "rms": float(np.sqrt(np.mean(np.square(r)))), "max_abs": float(a.max()),
                "mean": float(np.mean(r))}

    def to_dict(self) -> dict[str, Any]:
        c = self.constants
        out: dict[str, Any] = {"phase": self.phase, "terms": list(self.terms), "form": self.form, "formula": FORM}
        for name in CONSTANT_NAMES:
            v, lo, hi = self.interval(name)
            out[name] = {"value": v, "low": lo, "high": hi}
        out["effective_bandwidth_bytes_per_s"] = c.bandwidth_bytes_per_s
        out["effective_compute_flops_per_s"] = c.compute_flops_per_s
        out["residuals"] = {"fit": self.summary("fit"), "held-out": self.summary("held-out")}
        out["replicates"] = [list(r) for r in self.replicates]
        out["points"] = [fp.to_dict() for fp in self.points]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PhaseFit":
        c = StepConstants(float(d["alpha_s"]["value"]), float(d["s_per_byte"]["value"]), float(d["s_per_flop"]["value"]),
                          float(d.get("overlap_p", {"value": 1.0})["value"]), float(d.get("s_per_attn_flop", {"value": 0.0})["value"]))
        return cls(d["phase"], tuple(d["terms"]), c, tuple(tuple(float(x) for x in r) for r in d.get("replicates", [])),
                   tuple(FittedPoint.from_dict(p) for p in d["points"]), str(d.get("form", "additive")))


def _mask(terms: tuple[str, ...]) -> np.ndarray:
    return np.array([t in terms for t in TERM_NAMES])


def fit_phase(wm: WorkModel, points: Sequence[StepPoint], phase: Phase, *, seed: int = 0,
              n_bootstrap: int = DEFAULT_BOOTSTRAP, terms: tuple[str, ...] | None = None, form: str = "overlap") -> PhaseFit:
    """Fit one phase's constants on its `fit` points; every point (fit and held-out) gets its residual.

    form "overlap" fits the exponent p as well (decode; prefill has no memory term, so p does not apply);
    "additive" fixes p = 1.
    """
    if form not in FORMS:
        raise HarnessError(f"--form: got {form!r}; use one of {', '.join(FORMS)}.")
    terms = terms or TERMS[phase]
    mask = _mask(terms)
    overlap = form == "overlap" and mask[1] and mask[2]
    ps = [p for p in points if p.phase == phase]
    fit = [p for p in ps if p.role == "fit"]
    need = int(mask.sum()) + 1 + int(overlap)
    if len(fit) < need:
        raise HarnessError(
            f"{phase} step time: {len(fit)} fit point(s), the {'overlap' if overlap else 'additive'} form with terms "
            f"{', '.join(terms)} needs at least {need}; measure more with `harness micro-llama-cpp` (more prompt "
            "lengths for prefill, batches × contexts for decode)."
        )
    X = np.array([design_row(wm, p) for p in fit])
    t = np.array([p.measured_s for p in fit])
    if overlap and not mask[3]:
        X = X[:, :3]

    def solve(Xs: np.ndarray, ts: np.ndarray) -> np.ndarray:
        if overlap:
            return fit_overlap(Xs, ts)
        c = np.zeros(5)
        c[COLUMN_SLOTS[mask]] = nnls_relative(Xs[:, mask], ts)
        c[3] = 1.0
        return c

    coef = solve(X, t)
    rng = np.random.default_rng(seed)
    reps: list[tuple[float, ...]] = []
    for _ in range(n_bootstrap):
        idx = rng.integers(0, len(fit), size=len(fit))
        reps.append(tuple(float(x) for x in solve(X[idx], t[idx])))
    const = StepConstants(*(float(x) for x in coef))
    fitted = []
    for p in ps:
        row = design_row(wm, p)
        pred = float(predict_rows(row, coef)[0])
        chap = max(row[1] * coef[1], row[2] * coef[2]) if (coef[1] > 0 or coef[2] > 0) else None
        fitted.append(FittedPoint(p, pred, (pred - p.measured_s) / p.measured_s, chap))
    return PhaseFit(phase, tuple(terms), const, tuple(reps), tuple(fitted), "overlap" if overlap else "additive")


# ---------------------------------------------------------------- the calibration record and file


@dataclass(frozen=True)
class StepTimeCalibration:
    """Fitted prefill and decode step-time constants of one engine + model + host, with their evidence."""

    machine: str
    family: str  # kernel family of the measurements, e.g. "ggml-q4_K_M-cpu"
    threads: int
    model: WorkModel
    prefill: PhaseFit
    decode: PhaseFit
    run_ids: tuple[str, ...]
    tools: dict[str, Any]  # tool -> version / command lines (from the runs' manifests)
    holdout_rule: str
    seed: int
    n_bootstrap: int
    kernels: tuple[dict[str, Any], ...] = ()  # test-backend-ops constants per kernel family (for reference)
    warnings: tuple[str, ...] = ()
    created_unix_s: float = 0.0
    engine_flags: dict[str, Any] | None = None  # llama.cpp flags that pick kernels: {"flash_attn", "repack"}; None: not recorded

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "readme": ("Calibrated step time (docs/model.md, 'Calibrated step time'): per phase t = alpha_s + "
                       "((bytes*s_per_byte)^p + (flops*s_per_flop)^p)^(1/p) + attention_flops*s_per_attn_flop (decode) over the "
                       "chapter's work counts, fitted on the points labelled 'fit' "
                       "(95% pairs-bootstrap intervals); 'held-out' points were not used in the fit."),
            "machine": self.machine, "family": self.family, "threads": self.threads, "model": self.model.to_dict(),
            "run_ids": list(self.run_ids), "tools": self.tools, "holdout_rule": self.holdout_rule, "seed": self.seed,
            "n_bootstrap": self.n_bootstrap, "created_unix_s": self.created_unix_s,
            "prefill": self.prefill.to_dict(), "decode": self.decode.to_dict(),
            "kernels": list(self.kernels), "warnings": list(self.warnings), "engine_flags": self.engine_flags,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "step-time calibration") -> "StepTimeCalibration":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise HarnessError(f"{source} is not a step-time calibration (no \"format\": \"{FORMAT}\"); make one with "
                               "`harness step-time fit results/<machine>/`.")
        v = d.get("format_version")
        if not isinstance(v, int) or isinstance(v, bool) or v > FORMAT_VERSION or v < 1:
            raise HarnessError(f"{source}: format_version {v!r} is not one this harness reads (1..{FORMAT_VERSION}); "
                               "refit it with `harness step-time fit`.")
        try:
            return cls(d["machine"], d["family"], int(d["threads"]), WorkModel.from_dict(d["model"]),
                       PhaseFit.from_dict(d["prefill"]), PhaseFit.from_dict(d["decode"]), tuple(d["run_ids"]),
                       dict(d.get("tools", {})), str(d["holdout_rule"]), int(d["seed"]), int(d["n_bootstrap"]),
                       tuple(d.get("kernels", [])), tuple(d.get("warnings", [])), float(d.get("created_unix_s", 0.0)),
                       _engine_flags(d.get("engine_flags"), source))
        except KeyError as exc:
            raise HarnessError(f"{source}: field {exc.args[0]!r} is missing; refit it with `harness step-time fit`.") from None
        except (TypeError, ValueError) as exc:
            raise HarnessError(f"{source}: a field has a bad value ({exc}); refit it with `harness step-time fit`.") from None


def kernel_flags(flash_attn: Any, repack: Any) -> dict[str, Any]:
    """The llama.cpp flags that choose the kernels a step runs, normalised: flash_attn "on"/"off"/"auto" (None, the
    default, is "auto"), repack True/False (llama.cpp's default is True)."""
    return {"flash_attn": "auto" if flash_attn is None else str(flash_attn), "repack": True if repack is None else bool(repack)}


def _engine_flags(v: Any, source: str) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict) or set(v) != {"flash_attn", "repack"} or v["flash_attn"] not in ("on", "off", "auto") \
            or not isinstance(v["repack"], bool):
        raise HarnessError(f"{source}: engine_flags must be {{\"flash_attn\": \"on\"|\"off\"|\"auto\", \"repack\": true|false}}, "
                           f"got {v!r}; refit it with `harness step-time fit`.")
    return dict(v)


def save_step_time(cal: StepTimeCalibration, path: str | Path) -> Path:
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(cal.to_dict(), indent=2, allow_nan=False) + "\n")
        os.replace(tmp, p)
    except OSError as exc:
        raise HarnessError(f"step-time calibration {str(path)!r} cannot be written ({exc}); give a writable path (--out).") from None
    return p


def load_step_time(path: str | Path) -> StepTimeCalibration:
    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"step-time calibration {str(p)!r} does not exist; make one with "
                           "`harness micro-llama-cpp --out results/` then `harness step-time fit results/<machine>/ --out FILE`.")
    try:
        d = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise HarnessError(f"{p} is not valid JSON ({exc}); refit it with `harness step-time fit`.") from None
    return StepTimeCalibration.from_dict(d, str(p))


def fit_step_time(points: Sequence[StepPoint], wm: WorkModel, *, machine: str, family: str, threads: int,
                  holdout: str = "every-3rd", seed: int = 0, n_bootstrap: int = DEFAULT_BOOTSTRAP,
                  run_ids: Sequence[str] = (), tools: dict[str, Any] | None = None,
                  kernels: Sequence[dict[str, Any]] = (), warnings: Sequence[str] = (), labelled: bool = False,
                  form: str = "overlap", engine_flags: dict[str, Any] | None = None) -> StepTimeCalibration:
    """Label held-out points (unless `labelled`), fit both phases, return the record."""
    if n_bootstrap < 10:
        raise HarnessError(f"--bootstrap must be at least 10 resamples, got {n_bootstrap!r}.")
    pts = list(points) if labelled else label_held_out(points, holdout)
    return StepTimeCalibration(
        machine=machine, family=family, threads=threads, model=wm,
        prefill=fit_phase(wm, pts, "prefill", seed=seed, n_bootstrap=n_bootstrap),
        decode=fit_phase(wm, pts, "decode", seed=seed + 1, n_bootstrap=n_bootstrap, form=form),
        run_ids=tuple(run_ids), tools=dict(tools or {}), holdout_rule="given" if labelled else holdout, seed=seed,
        n_bootstrap=n_bootstrap, kernels=tuple(kernels), warnings=tuple(warnings), created_unix_s=time.time(),
        engine_flags=None if engine_flags is None else dict(engine_flags),
    )


# ---------------------------------------------------------------- the API the digital twin calls


@dataclass(frozen=True, slots=True)
class Interval:
    """A predicted time in seconds with its 95 % bootstrap interval."""

    value: float
    low: float
    high: float


@dataclass(frozen=True)
class EngineSettings:
    """What the prediction must match: the engine's kernel family, its threads, and the model it serves.

    `model_gguf` None means the calibrated model; another GGUF is predicted from its own work counts
    with the calibrated constants, which is a shape proxy (allowed only with proxy=True).
    """

    family: str
    threads: int
    model_gguf: str | None = None
    ubatch: int | None = None  # llama.cpp -ub; None: the calibration's
    flash_attn: str | None = None  # llama.cpp -fa of the engine ("on", "off", "auto"); None with repack None: not checked
    repack: bool | None = None  # llama.cpp weight repacking of the engine (--no-repack: False)

    @classmethod
    def from_engine_config(cls, cfg: Any) -> "EngineSettings":
        """Settings of a llama.cpp engine config (harness.engines.config.EngineConfig)."""
        from harness.engines.llama_cpp import resolve_model  # noqa: PLC0415
        from harness.specs.gguf_model import read_gguf  # noqa: PLC0415

        if cfg.engine != "llama.cpp":
            raise HarnessError(f"engine config {cfg.name!r} is for {cfg.engine!r}; the calibrated step time is fitted for llama.cpp.")
        o = cfg.options
        path = resolve_model(cfg)
        backend = "cpu" if not o.n_gpu_layers else "cuda"
        threads = o.threads or (os.cpu_count() or 1)
        flags = kernel_flags(o.flash_attn, o.repack)
        return cls(engine_family_of_gguf(read_gguf(path), backend), int(threads), str(path), int(o.ubatch_size),
                   flags["flash_attn"], flags["repack"])


class StepTimeModel:
    """Prefill and decode step times of the calibrated engine, in seconds, with 95 % intervals."""

    def __init__(self, cal: StepTimeCalibration, wm: WorkModel, notes: tuple[str, ...] = ()):
        self.calibration = cal
        self.work_model = wm
        self.notes = notes

    def _interval(self, fit: PhaseFit, rows: np.ndarray) -> Interval:
        value = float(predict_rows(rows, fit.vector())[0])
        if not fit.replicates:
            return Interval(value, value, value)
        preds = np.array([predict_rows(rows, r)[0] for r in fit.replicate_matrix()])
        lo, hi = np.percentile(preds, _Q)
        return Interval(value, float(min(lo, value)), float(max(hi, value)))

    def prefill_s(self, prompt_tokens: int, cached_tokens: int = 0) -> Interval:
        """Time to prefill `prompt_tokens` new tokens of one sequence after `cached_tokens` cached ones."""
        if isinstance(prompt_tokens, bool) or not isinstance(prompt_tokens, int) or prompt_tokens < 1:
            raise HarnessError(f"prompt_tokens must be an integer >= 1, got {prompt_tokens!r}.")
        if isinstance(cached_tokens, bool) or not isinstance(cached_tokens, int) or cached_tokens < 0:
            raise HarnessError(f"cached_tokens must be an integer >= 0, got {cached_tokens!r}.")
        return self._interval(self.calibration.prefill, prefill_row(self.work_model, prompt_tokens, cached_tokens))

    def decode_step_s(self, batch: int, context_tokens: float) -> Interval:
        """Time of one decode step generating a token for each of `batch` sequences at mean context `context_tokens`."""
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise HarnessError(f"batch must be an integer >= 1, got {batch!r}.")
        if not isinstance(context_tokens, (int, float)) or not math.isfinite(context_tokens) or context_tokens < 0:
            raise HarnessError(f"context_tokens must be a number >= 0, got {context_tokens!r}.")
        return self._interval(self.calibration.decode, decode_row(self.work_model, batch, float(context_tokens)))

    def mixed_step_s(self, decode_batch: int, context_tokens: float, prefill_tokens: int, cached_tokens: int = 0) -> Interval:
        """One continuous-batching step: `decode_batch` decode tokens plus a prefill chunk of `prefill_tokens`.

        Assumed (not fitted: no tool measures mixed steps): the step streams the weights once, so it costs the
        decode step plus the chunk's FLOPs at the prefill's s_flop; with decode_batch 0 it is the prefill.
        """
        if decode_batch == 0:
            return self.prefill_s(prefill_tokens, cached_tokens)
        d = self.decode_step_s(decode_batch, context_tokens)
        if prefill_tokens == 0:
            return d
        chunks = self.work_model.prefill_work(prefill_tokens, cached_tokens)
        flops = sum(c.flops for c in chunks)
        pf = self.calibration.prefill
        extra = flops * pf.constants.s_per_flop + (len(chunks) - 1) * pf.constants.alpha_s
        reps = np.array([r[2] for r in pf.replicates]) * flops if pf.replicates else np.array([extra])
        lo, hi = np.percentile(reps, _Q)
        return Interval(d.value + extra, d.low + float(min(lo, extra)), d.high + float(max(hi, extra)))

    def points(self, role: Role) -> list[dict[str, Any]]:
        """The calibration's measured points with the given role ("fit" or "held-out"), with residuals."""
        return [fp.to_dict() for ph in (self.calibration.prefill, self.calibration.decode) for fp in ph.points
                if fp.point.role == role]

    @property
    def fitted_points(self) -> list[dict[str, Any]]:
        return self.points("fit")

    @property
    def held_out_points(self) -> list[dict[str, Any]]:
        return self.points("held-out")

    def describe(self) -> dict[str, Any]:
        c = self.calibration
        return {"family": c.family, "threads": c.threads, "model": self.work_model.identity, "form": FORM,
                "run_ids": list(c.run_ids), "notes": list(self.notes), "warnings": list(c.warnings),
                "forms": {"prefill": c.prefill.form, "decode": c.decode.form},
                "residuals": {ph.phase: {"fit": ph.summary("fit"), "held-out": ph.summary("held-out")} for ph in (c.prefill, c.decode)}}


def step_time_model(calibration: str | Path | StepTimeCalibration, engine: EngineSettings, *, proxy: bool = False) -> StepTimeModel:
    """The calibrated step-time model for `engine`.

    Refuses (HarnessError naming both sides) a calibration of another kernel family, another thread
    count or another model unless proxy=True; with proxy=True the returned model's `notes` say
    which proxy is in use, for the report.
    """
    cal = calibration if isinstance(calibration, StepTimeCalibration) else load_step_time(calibration)
    notes: list[str] = []
    fam = check_family(cal.family, engine.family, proxy=proxy, what="the step-time calibration")
    if fam:
        notes.append(fam)
    if engine.threads != cal.threads:
        if not proxy:
            raise HarnessError(
                f"the step-time calibration was measured with {cal.threads} threads but the engine runs {engine.threads}; "
                "llama.cpp's step time does not scale linearly with threads. Recalibrate with "
                f"`harness micro-llama-cpp --threads {engine.threads}` or pass --proxy."
            )
        notes.append(f"PROXY: constants measured with {cal.threads} threads applied to an engine with {engine.threads} threads")
    if cal.engine_flags is not None and (engine.flash_attn is not None or engine.repack is not None):
        want = kernel_flags(engine.flash_attn, engine.repack)
        diff = [f"{k} {cal.engine_flags[k]!r} in the calibration, {want[k]!r} in the engine" for k in ("flash_attn", "repack")
                if cal.engine_flags[k] != want[k]]
        if diff:
            if not proxy:
                raise HarnessError(
                    "the step-time calibration was measured with other llama.cpp kernel flags than the engine runs ("
                    + "; ".join(diff) + "): they pick other kernels. Recalibrate with the engine's flags (`harness "
                    "micro-llama-cpp --config NAME`, or --repack/--no-repack and the config's flash_attn) or pass --proxy.")
            notes.append("PROXY: constants measured with other llama.cpp kernel flags (" + "; ".join(diff) + ")")
    wm = cal.model
    if engine.model_gguf is not None:
        other = WorkModel.from_gguf(engine.model_gguf, kv_bytes_per_elem=wm.kv_bytes_per_elem, ubatch=engine.ubatch or wm.ubatch)
        if other.identity != wm.identity:
            if not proxy:
                raise HarnessError(
                    f"the step-time calibration is for {wm.identity} but the engine serves {other.identity}; calibrate "
                    f"with that model (`harness micro-llama-cpp --model {engine.model_gguf}`) or pass --proxy to predict it "
                    "from its own FLOP/byte counts with these constants."
                )
            notes.append(f"PROXY: constants fitted on {wm.identity} applied to {other.identity} through its FLOP/byte counts")
        wm = other
    elif engine.ubatch is not None and engine.ubatch != wm.ubatch:
        wm = replace(wm, ubatch=engine.ubatch)
    return StepTimeModel(cal, wm, tuple(notes))


def summary_lines(cal: StepTimeCalibration) -> list[str]:
    """A human-readable account of the fit: constants with intervals and residuals per role."""
    flags = ("flags not recorded" if cal.engine_flags is None else
             f"flash_attn {cal.engine_flags['flash_attn']}, repack {'on' if cal.engine_flags['repack'] else 'off'}")
    lines = [f"Step-time calibration of {cal.model.identity} on {cal.machine}: family {cal.family}, {cal.threads} threads, "
             f"{flags}, runs {', '.join(cal.run_ids) or '—'}; held-out rule {cal.holdout_rule}"]
    for ph in (cal.prefill, cal.decode):
        a, s_b, s_f, s_a = (ph.interval(n) for n in ("alpha_s", "s_per_byte", "s_per_flop", "s_per_attn_flop"))
        parts = [f"α = {a[0] * 1e3:.3g} ms [{a[1] * 1e3:.3g}, {a[2] * 1e3:.3g}]"]
        if "bytes" in ph.terms:
            parts.append("bandwidth = " + ("—" if s_b[0] == 0 else f"{1 / s_b[0] / 1e9:.3g} GB/s")
                         + (f" [{1 / s_b[2] / 1e9:.3g}, {1 / s_b[1] / 1e9:.3g}]" if s_b[1] > 0 else ""))
        parts.append("compute = " + ("—" if s_f[0] == 0 else f"{1 / s_f[0] / 1e9:.3g} GFLOP/s")
                     + (f" [{1 / s_f[2] / 1e9:.3g}, {1 / s_f[1] / 1e9:.3g}]" if s_f[1] > 0 else ""))
        if ph.form == "overlap":
            pv = ph.interval("overlap_p")
            parts.append(f"overlap p = {pv[0]:.3g} [{pv[1]:.3g}, {pv[2]:.3g}] (1 = sum, {P_MAX:g} ≈ max)")
        if "attention" in ph.terms:
            parts.append("attention beyond its FLOPs' share = " + ("—" if s_a[0] == 0 else f"{1 / s_a[0] / 1e9:.3g} GFLOP/s")
                         + (f" [{1 / s_a[2] / 1e9:.3g}, {1 / s_a[1] / 1e9:.3g}]" if s_a[1] > 0 else ""))
        lines.append(f"  {ph.phase} ({ph.form}): " + ", ".join(parts))
        for role in ("fit", "held-out"):
            s = ph.summary(role)
            if s["n"]:
                lines.append(f"    {role}: {s['n']} points, residual rms {s['rms']:.1%}, max |{s['max_abs']:.1%}|")
    if cal.kernels:
        lines.append("  kernel constants (test-backend-ops MUL_MAT at the model's shapes; reference, not in the fit):")
        for k in cal.kernels:
            lines.append(f"    {k['family']}, {k['tokens']} token(s), {k['threads']} thread(s): {k['flops_per_s'] / 1e9:.3g} GFLOP/s, "
                         f"{k['bytes_per_s'] / 1e9:.3g} GB/s over {k['shapes']} shape(s)")
    lines += [f"  warning: {w}" for w in cal.warnings]
    return lines


# ---------------------------------------------------------------- points from stored llama.cpp micro runs

STEP_SUITES = ("llama_batched_bench", "llama_bench")
OPS_SUITE = "llama_cpp_ops"


def _llama_runs(path: str | Path) -> list[Any]:
    from harness.store import iter_runs  # noqa: PLC0415

    p = Path(path)
    if not p.exists():
        raise HarnessError(f"{p} does not exist; run `harness micro-llama-cpp --out results/` and give results/<machine>/.")
    runs = [r for r in iter_runs(p, kind="micro") if isinstance(r.manifest.extra, dict) and "llama_cpp" in r.manifest.extra
            and r.manifest.status != "running"]
    if not runs:
        raise HarnessError(f"no llama.cpp micro runs below {p}; make one with `harness micro-llama-cpp --model PATH.gguf "
                           "--threads N --out results/`.")
    return runs


def points_from_runs(path: str | Path) -> tuple[list[StepPoint], WorkModel, dict[str, Any]]:
    """The engine's step-time points from every llama.cpp micro run below `path`, which must agree on
    machine, model, kernel family, threads and ubatch (the differing fact is named otherwise)."""
    runs = _llama_runs(path)
    ref = None
    points: list[StepPoint] = []
    kernels_rows: list[dict[str, Any]] = []
    tools_facts: dict[str, Any] = {"version": None, "commands": {}}
    warnings: list[str] = []
    for r in runs:
        info = r.manifest.extra["llama_cpp"]
        facts = {"machine": r.manifest.machine, "model": info["model"]["identity"], "family": info["model"]["family"],
                 "threads": info["settings"]["threads"], "n_ubatch": info["settings"]["n_ubatch"],
                 "flash_attn": info["settings"].get("flash_attn"), "repack": info["settings"].get("repack")}
        if ref is None:
            ref, ref_id = facts, r.manifest.run_id
            wm = WorkModel.from_dict(info["model"]["work_model"])
            tools_facts["version"] = info.get("version")
        else:
            for k, v in facts.items():
                if v != ref[k]:
                    raise HarnessError(
                        f"llama.cpp runs differ in {k}: {ref_id} has {ref[k]!r}, {r.manifest.run_id} has {v!r}; a step-time "
                        "fit mixes runs of one engine configuration only. Give a directory holding only matching runs."
                    )
        for tool, cmds in info.get("commands", {}).items():
            tools_facts["commands"].setdefault(tool, []).extend(cmds)
        if r.manifest.status == "failed":
            warnings.append(f"run {r.manifest.run_id} failed midway; its completed tools are used")
        warnings += [n for n in r.manifest.notes if n.startswith("CONTENDED")]
        if "micro_cases" not in r.tables():
            continue
        cases = r.table("micro_cases")
        samples = r.table("micro_samples") if "micro_samples" in r.tables() else None
        for _, row in cases.iterrows():
            params = json.loads(row["params_json"]) if isinstance(row["params_json"], str) else {}
            if row["suite"] == OPS_SUITE:
                kernels_rows.append({**params, "median_s": float(row["median_s"]), "useful_flops": float(row["useful_flops"]),
                                     "useful_bytes": float(row["useful_bytes"]), "run_id": r.manifest.run_id})
                continue
            if row["suite"] not in STEP_SUITES:
                continue
            if params.get("phase") == "prefill" and int(params.get("batch", 1)) != 1:
                continue  # prefill of several sequences in one batch: not a single-prompt time
            ts = ()
            if samples is not None and len(samples):
                ts = tuple(float(x) for x in samples.loc[samples["case_id"] == row["case_id"], "time_s"])
            points.append(StepPoint(
                params["phase"], int(params.get("batch", 1)), int(params.get("prompt_tokens", 0)),
                float(params.get("context_tokens", 0.0)), float(row["median_s"]), ts, str(params.get("tool", row["backend"])),
                str(row["case_id"]), r.manifest.run_id))
    facts = {**(ref or {}), "run_ids": [r.manifest.run_id for r in runs], "tools": tools_facts, "warnings": warnings,
             "kernels": kernel_constants(kernels_rows)}
    return points, wm, facts


def kernel_constants(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """test-backend-ops MUL_MAT results summarised per kernel family and token count (weights only):
    FLOP/s = Σ FLOPs / Σ time over the model's shapes of that type; bytes/s likewise."""
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("role") != "weights":
            continue
        groups.setdefault((r["family"], int(r["tokens"]), int(r.get("threads", 0))), []).append(r)
    out = []
    for (fam, tok, thr), rs in sorted(groups.items()):
        t = sum(x["median_s"] for x in rs)
        out.append({"family": fam, "tokens": tok, "threads": thr, "shapes": len(rs),
                    "flops_per_s": sum(x["useful_flops"] for x in rs) / t, "bytes_per_s": sum(x["useful_bytes"] for x in rs) / t,
                    "source": "test-backend-ops perf MUL_MAT at the model's shapes", "run_ids": sorted({x["run_id"] for x in rs})})
    return out


def fit_from_runs(path: str | Path, *, holdout: str = "every-3rd", seed: int = 0,
                  n_bootstrap: int = DEFAULT_BOOTSTRAP, form: str = "overlap") -> StepTimeCalibration:
    """`harness step-time fit`: points from the stored llama.cpp runs, held-out labels, both phases fitted."""
    points, wm, f = points_from_runs(path)
    if not points:
        raise HarnessError(f"the llama.cpp runs below {path} hold no llama-batched-bench / llama-bench cases; run "
                           "`harness micro-llama-cpp --tools batched,bench`.")
    return fit_step_time(points, wm, machine=f["machine"], family=f["family"], threads=int(f["threads"]), holdout=holdout,
                         seed=seed, n_bootstrap=n_bootstrap, run_ids=f["run_ids"], tools=f["tools"],
                         kernels=f["kernels"], warnings=f["warnings"], form=form,
                         engine_flags=kernel_flags(f["flash_attn"], f["repack"]))
