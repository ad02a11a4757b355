"""Fit the model's constants from one machine's micro runs, each with a bootstrap interval and its run ids.

What is fitted (Chapter 9), and from which cases: calibration reads only the typed params records
of microbench/params.py (no other key of a case's params), and only cases the microbenchmark did
not mark invalid (above the spec peak):

- decode bandwidth efficiency vs batch, one curve per measured context (§9.2.3; DecodeParams with
  kind "step"): MBU of each case, useful_bytes / (median_s · peak_bytes_per_s); graph-captured
  steps when measured (eager ones include launch overhead), then at each context the fused steps
  (ops "fused (torch.compile inductor)", as engines fuse) when measured, else the eager-ops ones
  with a warning; made monotone non-decreasing in the
  batch by pool-adjacent-violators with equal weight per batch, and interpolated linearly in the
  batch, as the chapter interpolates 33 % at batch 1 and 65 % at batch 64 to ≈49 % at 32. The
  model uses a curve only at contexts the measured ones cover (apply.py);
- prefill compute efficiency vs tokens per GPU (§9.2.3; GemmParams with `tokens`, square GEMMs
  left out): the projections of one token count taken together, Σ useful_flops / (Σ median_s ·
  peak_flops_per_s); interpolated linearly, not forced monotone (padding to tiles makes it rise
  and fall);
- per link, direction, memory kind and copy method, T(S) = α + S/β (§9.2.2; TransferParams that
  are link points: one chunk, one direction, nothing overlapped): weighted least squares over the
  sizes with weights 1/T², so each size counts by its relative error and neither the smallest (α)
  nor the largest (β) dominates; α < 0 is refitted with α = 0. S is the payload counted once, as
  nvbandwidth counts a copy; a size faster than the spec peak, or a β above it, is flagged and
  not fitted;
- C_C and B_D (§9.3.2; CpuExpertParams, HostBandwidthParams): the FLOP/s of the CPU expert case
  with the most tokens (compute-bound) and the bytes/s of the STREAM-style case (triad when
  present, else the largest);
- storage read and write bandwidth (StorageParams): bytes/s of the largest file;
- measured r_P and r_D (§9.2.3; StagePrefillParams, StageDecodeParams): r_P = new_tokens /
  median_s, r_D = batch / median_s (one call serves the batch).

Intervals: the raw samples of each case are resampled with replacement (`n_bootstrap` times,
generator seeded with `seed`), every statistic is recomputed from the resampled medians, and the
2.5 % and 97.5 % percentiles are the interval.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any, Iterable, NamedTuple

import numpy as np

from harness.calibration.record import (
    CalibrationRecord,
    CollectiveFit,
    CurvePoint,
    EfficiencyCurve,
    Estimate,
    LinkFit,
    StageMeasurement,
)
from harness.calibration.family import case_family
from harness.calibration.runs import MachineRuns
from harness.errors import HarnessError
from microbench.params import (
    OPS_COMPOSED,
    OPS_EAGER,
    OPS_FUSED,
    CollectiveParams,
    CpuExpertParams,
    DecodeParams,
    GemmParams,
    HostBandwidthParams,
    StageDecodeParams,
    StagePrefillParams,
    StorageParams,
    TransferParams,
)

DEFAULT_BOOTSTRAP = 200
MIN_CURVE_POINTS = 2
MIN_LINK_SIZES = 3
COLLECTIVE_DTYPES = ("bf16", "fp16", "fp32", "bfloat16", "half", "float")  # our names and nccl-tests' (-d)
BYTE_CONVENTION = "β in payload bytes/s, each byte counted once (as nvbandwidth counts a copy)"
_Q = (2.5, 97.5)


def _records(rows, cls) -> Any:
    """The rows whose typed params record (column `record`, microbench.params) is a `cls`."""
    mask = np.array([isinstance(r, cls) for r in rows["record"]], dtype=bool) if len(rows) else np.zeros(0, dtype=bool)
    return rows[mask]


# ---- primitives (pure) ----


def pav_increasing(y: Iterable[float], w: Iterable[float] | None = None) -> np.ndarray:
    """Isotonic (non-decreasing) least-squares fit of `y` with weights `w`: pool adjacent violators."""
    y = np.asarray(list(y), dtype=float)
    w = np.ones_like(y) if w is None else np.asarray(list(w), dtype=float)
    blocks: list[list[float]] = []  # [mean, weight, count]
    for yi, wi in zip(y, w):
        blocks.append([yi, wi, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    return np.concatenate([np.full(int(c), m) for m, _, c in blocks]) if blocks else y


def wls_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted least squares y = a + b·x; `y` may be (n,) or (n, k) for k fits at once. Returns (a, b)."""
    if y.ndim == 1:
        y = y[:, None]
    x = x[:, None]
    w = w[:, None]
    sw, sx, sxx = w.sum(), (w * x).sum(), (w * x * x).sum()
    sy, sxy = (w * y).sum(axis=0), (w * x * y).sum(axis=0)
    den = sw * sxx - sx * sx
    b = (sw * sxy - sx * sy) / den
    a = (sy - b * sx) / sw
    # a negative intercept is not a startup latency: refit through the origin
    neg = a < 0
    if neg.any():
        b0 = (w * x * y).sum(axis=0) / (w * x * x).sum()
        a = np.where(neg, 0.0, a)
        b = np.where(neg, b0, b)
    return a, b


def bootstrap_medians(times: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of `n_boot` resamples (with replacement) of `times`."""
    n = len(times)
    if n <= 1:
        return np.full(n_boot, float(times[0]) if n else math.nan)
    idx = rng.integers(0, n, size=(n_boot, n))
    return np.median(times[idx], axis=1)


class _AlphaBeta(NamedTuple):
    """A T(S) = α + S/β fit: sizes, median times, the cases, α and 1/β, and their bootstrap distributions."""

    x: np.ndarray
    median_s: np.ndarray
    cases: list
    alpha_s: float
    s_per_byte: float
    alpha_boot: np.ndarray
    s_per_byte_boot: np.ndarray


@dataclass(frozen=True)
class _Case:
    """One case pooled over the runs that measured it."""

    case_id: str
    run_ids: tuple[str, ...]
    row: Any  # the first row (work, peak, params)
    times_s: np.ndarray

    @property
    def median_s(self) -> float:
        return float(np.median(self.times_s))


class _Fitter:
    def __init__(self, mr: MachineRuns, seed: int, n_bootstrap: int):
        if not 10 <= n_bootstrap <= 100_000:  # the upper bound keeps the resample matrix in memory
            raise HarnessError(f"--bootstrap must be at least 10 and at most 100000 resamples, got {n_bootstrap!r}.")
        self.mr = mr
        self.seed = seed
        self.n_boot = n_bootstrap
        self.rng = np.random.default_rng(seed)
        self.warnings: list[str] = list(mr.warnings)
        self._samples: dict[tuple[str, str], np.ndarray] = {}
        s = mr.samples
        if len(s):
            for (rid, cid), g in s.groupby(["run_id", "case_id"], sort=False):
                self._samples[(rid, cid)] = g["time_s"].to_numpy(dtype=float)

    # -- cases --

    def cases(self, rows) -> list[_Case]:
        out = []
        for cid, g in rows.groupby("case_id", sort=False):
            times = []
            for rid, med in zip(g["run_id"], g["median_s"]):
                t = self._samples.get((rid, cid))
                times.append(t if t is not None and len(t) else np.array([float(med)]))
            out.append(_Case(str(cid), tuple(sorted(set(g["run_id"]))), g.iloc[0], np.concatenate(times)))
        return out

    def boot(self, c: _Case) -> np.ndarray:
        return bootstrap_medians(c.times_s, self.n_boot, self.rng)

    def estimate(self, value: float, dist: np.ndarray, unit: str, cases: list[_Case], method: str) -> Estimate:
        lo, hi = np.nanpercentile(dist, _Q) if np.isfinite(dist).any() else (value, value)
        lo, hi = min(float(lo), value), max(float(hi), value)
        return Estimate(float(value), lo, hi, unit, int(sum(len(c.times_s) for c in cases)),
                        tuple(sorted({r for c in cases for r in c.run_ids})), method)

    def ratio(self, cases: list[_Case], numerator: float, unit: str, method: str, scale: float = 1.0) -> Estimate:
        """numerator / Σ median_s · scale, with its bootstrap interval."""
        t = sum(c.median_s for c in cases)
        dist = sum(self.boot(c) for c in cases)
        return self.estimate(numerator / t * scale, numerator / dist * scale, unit, cases, method)

    # -- efficiency curves --

    def _usable(self, rows):
        """Rows a fit may use: valid ones (not above the spec peak), whatever loaded them."""
        if "valid" in rows.columns and len(rows):
            bad = rows[~rows["valid"].astype(bool)]
            if len(bad):
                self.warnings.append(f"{len(bad)} case(s) marked invalid left out of the fit: "
                                     + ", ".join(sorted(set(bad["case_id"]))[:5]))
            rows = rows[rows["valid"].astype(bool)]
        return rows

    def curves(self, suite: str, quantity: str, x_name: str) -> list[EfficiencyCurve]:
        df = self.mr.cases
        decode = quantity == "decode_bandwidth_efficiency"
        rows = self._usable(_records(df[df["suite"] == suite], DecodeParams if decode else GemmParams))
        if rows.empty:
            return []
        recs = list(rows["record"])
        if decode:
            keep = [r.kind == "step" for r in recs]
            xs = [r.batch for r in recs]
            ctxs = [r.context_tokens for r in recs]
            modes = [r.mode or "" for r in recs]
            ops = [r.ops or OPS_EAGER for r in recs]  # records written before the fused step existed: eager ops
        else:
            keep = [r.tokens is not None and not r.square for r in recs]
            xs = [r.tokens for r in recs]
            ctxs = [0] * len(recs)
            modes = [""] * len(recs)
            ops = [""] * len(recs)
        rows = rows.assign(_x=xs, _ctx=ctxs, _mode=modes, _ops=ops)[np.array(keep, dtype=bool)]
        peak_col = "peak_bytes_per_s" if decode else "peak_flops_per_s"
        work_col = "useful_bytes" if decode else "useful_flops"
        out: list[EfficiencyCurve] = []
        for (dev, dtype), g in rows.groupby(["device_key", "dtype"], sort=True):
            peak = g[peak_col].astype(float)
            if not np.isfinite(peak).any() or (peak <= 0).all():
                stream = self.host_bandwidth() if decode and dev == "cpu" else None
                if stream is None:
                    self.warnings.append(
                        f"{quantity} on {dev} ({dtype}): no spec peak recorded, so no efficiency; declare it (on the CPU: "
                        "HARNESS_HOST_MEMORY_BANDWIDTH_BYTES_PER_S) and rerun the suite")
                    continue
                # no declared host bandwidth: measure MBU against the STREAM bandwidth B_D of the same runs
                g = g.assign(**{peak_col: stream.value, "peak_source": f"measured B_D {stream.value / 1e9:.3g} GB/s "
                                "(STREAM, moe suite; no spec peak declared)"})
                self.warnings.append(
                    f"{quantity} on {dev} ({dtype}): no spec bandwidth declared; MBU is against the measured STREAM "
                    f"bandwidth B_D = {stream.value / 1e9:.3g} GB/s")
            if decode:
                g = self._pick_mode(g, f"{quantity} on {dev} ({dtype})")
                g = self._pick_ops(g, f"{quantity} on {dev} ({dtype})")
            by_ctx: dict[int, list] = {}
            for (backend, ctx), gb in g.groupby(["backend", "_ctx"], sort=True):
                pts = self._curve_points(gb, work_col, peak_col)
                by_ctx.setdefault(int(ctx), []).append(
                    (len(pts), float(np.mean([p[1].value for p in pts])) if pts else 0.0, str(backend), pts))
            made = 0
            for ctx, candidates in sorted(by_ctx.items()):
                candidates.sort(key=lambda c: (c[0], c[1]), reverse=True)
                n, _, backend, pts = candidates[0]
                if n < MIN_CURVE_POINTS:
                    continue
                vals = np.array([p[1].value for p in pts])
                # every batch is one design point: equal weights, so the fast cases (which collect more samples in a
                # time budget) do not pull the pooled value towards themselves
                fitted = pav_increasing(vals) if decode else vals
                if decode and not np.allclose(fitted, vals):
                    dev_pp = float(np.max(np.abs(fitted - vals))) * 100
                    self.warnings.append(
                        f"{quantity} on {dev} ({dtype}, context {ctx}): measured points were not monotone in the batch; "
                        f"pooled by pool-adjacent-violators (equal weight per batch; up to {dev_pp:.1f} percentage "
                        "points off the measurement)"
                        + ("; the rising curve of §9.2.3 does not hold here — check whether the large batches are "
                           "compute-bound or the machine was busy" if dev_pp > 5 else "")
                    )
                peak_source = str(g["peak_source"].iloc[0]) if "peak_source" in g.columns else ""
                if decode:
                    peak_source += f"; context {ctx} tokens"
                out.append(EfficiencyCurve(
                    dev, quantity, x_name, str(dtype), backend, decode, peak_source,  # type: ignore[arg-type]
                    tuple(CurvePoint(x, est, float(fv), cids) for (x, est, cids), fv in zip(pts, fitted)),
                    context_tokens=ctx if decode else None,
                    family=case_family(str(backend), str(dtype), "cpu" if dev == "cpu" else "cuda"),
                ))
                made += 1
            if not made:
                xs_have = sorted({p[0] for cs in by_ctx.values() for c in cs for p in c[3]})
                what = "batch sizes" if decode else "token counts"
                run = ("`harness micro run --suite decode --out results/` without --quick (it sweeps batch 1…64)" if decode
                       else "`harness micro run --suite gemm --out results/` without --quick (it sweeps the token counts)")
                raise HarnessError(
                    f"{quantity} on {dev} ({dtype}): measured at {x_name} {xs_have} only (at one context); the curve needs "
                    f"at least {MIN_CURVE_POINTS} {what}. Run {run}."
                )
        return out

    def _pick_mode(self, g, what: str):
        """Graph-captured decode steps when measured (eager ones are launch-bound: a lower bound of MBU)."""
        modes = set(g["_mode"])
        if "graph" in modes:
            if modes - {"graph"}:
                self.warnings.append(f"{what}: fitted from the CUDA-graph decode steps; the eager ones (launch overhead "
                                     "included) are left out")
            return g[g["_mode"] == "graph"]
        if "eager" in modes:
            self.warnings.append(f"{what}: only eager decode steps were measured; their MBU includes the launch "
                                 "overhead and is a lower bound — rerun the decode suite with graph capture")
        return g

    def _pick_ops(self, g, what: str):
        """Per context: the fused decode steps (torch.compile) when measured, as engines fuse the elementwise ops;
        else the eager-ops ones, with a note (one kernel per elementwise op: a lower bound of an engine's MBU)."""
        keep = np.ones(len(g), dtype=bool)
        for ctx in sorted(set(g["_ctx"])):
            at = (g["_ctx"] == ctx).to_numpy()
            ops = set(g["_ops"][at])
            if ops == {OPS_COMPOSED}:  # steps summed from an imported kernel grid: no elementwise ops to judge
                continue
            if OPS_FUSED in ops:
                keep &= ~at | (g["_ops"] == OPS_FUSED).to_numpy()
                if ops - {OPS_FUSED}:
                    self.warnings.append(f"{what}, context {ctx}: fitted from the fused decode steps (torch.compile, as "
                                         "engines fuse); the eager-ops steps stay in the run as a baseline, not fitted")
            else:
                self.warnings.append(f"{what}, context {ctx}: only eager-ops decode steps were measured (one kernel per "
                                     "elementwise op, unlike an engine's fused step), so the curve is a lower bound; "
                                     "rerun the decode suite where torch.compile works (HARNESS_DECODE_FUSED_CPU=1 on a CPU)")
        return g[keep]

    def _curve_points(self, g, work_col: str, peak_col: str) -> list[tuple[float, Estimate, tuple[str, ...]]]:
        pts = []
        for x, gx in g.groupby("_x", sort=True):
            cases = self.cases(gx)
            work = sum(float(c.row[work_col]) for c in cases)
            peak = float(gx[peak_col].iloc[0])
            if not (work > 0 and peak > 0):
                continue
            est = self.ratio(cases, work, "fraction of spec peak",
                             f"Σ {work_col} / (Σ median_s · {peak_col}) over {len(cases)} case(s)", 1.0 / peak)
            if est.value > 1.0:  # above the spec peak: a measurement or spec error, flagged and never fitted
                self.warnings.append(
                    f"{', '.join(c.case_id for c in cases)}: {work_col} / (median_s · {peak_col}) = {est.value:.0%} of the "
                    "spec peak; a measurement error (work not waited for, inputs served from cache) or a wrong spec peak; "
                    "left out of the curve")
                continue
            pts.append((float(x), est, tuple(c.case_id for c in cases)))
        return pts

    # -- links --

    def links(self) -> list[LinkFit]:
        df = self.mr.cases
        rows = self._usable(_records(df[df["suite"] == "transfer"], TransferParams))
        if rows.empty:
            return []
        recs = list(rows["record"])
        keep = [r.is_link_point for r in recs]
        keys = [(r.link, r.direction, r.memory, r.method) for r in recs]
        rows = rows.assign(_key=keys, _size=[float(r.size_bytes) for r in recs],
                           _counted=[r.bytes_counted for r in recs])[np.array(keep, dtype=bool)]
        out = []
        for key, g in rows.groupby("_key", sort=True):
            name = ":".join(str(k) for k in key if k)
            g = self._below_link_peak(g, name)
            by_size = [(s, self.cases(gs)) for s, gs in g.groupby("_size", sort=True)]
            if len(by_size) < MIN_LINK_SIZES:
                raise HarnessError(
                    f"link {name}: {len(by_size)} transfer size(s) measured ({', '.join(f'{s:.0f} B' for s, _ in by_size)}); "
                    f"fitting α and β needs at least {MIN_LINK_SIZES}. Run `harness micro run --suite transfer --out results/` "
                    "without --quick (it sweeps 4 KiB…1 GiB)."
                )
            counted = set(g["_counted"])
            fit = self._fit_link(*key, by_size, counted.pop() if len(counted) == 1 else "mixed")
            if fit is not None:
                out.append(fit)
        return out

    def _below_link_peak(self, g, name: str):
        """Sizes whose own rate is above the link's spec peak are measurement errors: flagged, left out."""
        rate = g["useful_bytes"].astype(float) / g["median_s"].astype(float)
        peak = g["peak_bytes_per_s"].astype(float) if "peak_bytes_per_s" in g.columns else rate * np.nan
        over = (peak > 0) & (rate > peak)
        if over.any():
            self.warnings.append(
                f"link {name}: {int(over.sum())} size(s) ({', '.join(f'{s:.0f} B' for s in sorted(set(g['_size'][over])))}) "
                "moved bytes faster than the spec peak; a measurement error (cache-served copy, unwaited work) or a wrong "
                "peak; left out of the α–β fit")
        return g[~over]

    def _alpha_beta(self, by_size) -> "_AlphaBeta":
        """T(S) = α + S/β over (size, cases) pairs: weighted least squares with weights 1/T² (each size counts by its
        relative error), and the fit over `n_bootstrap` resamples of every size's raw samples."""
        x = np.array([s for s, _ in by_size], dtype=float)
        cases = [c for _, cs in by_size for c in cs]
        samples = [np.concatenate([c.times_s for c in cs]) for _, cs in by_size]
        med = np.array([float(np.median(t)) for t in samples])
        w = 1.0 / med**2
        a, b = wls_line(x, med, w)
        ab, bb = wls_line(x, np.stack([bootstrap_medians(t, self.n_boot, self.rng) for t in samples]), w)
        return _AlphaBeta(x, med, cases, float(a[0]), float(b[0]), ab, np.where(bb > 0, bb, np.nan))

    def _fit_link(self, link: str, direction: str, memory: Any, method: Any, by_size, counted: str) -> LinkFit | None:
        x, med, cases, a0, b0, ab, bb = self._alpha_beta(by_size)
        name = ":".join(str(k) for k in (link, direction, memory, method) if k)
        if b0 <= 0:
            raise HarnessError(
                f"link {name}: transfer time does not grow with size (slope {b0:.3g} s/B); the sizes are too "
                "small or the timings are noise. Rerun the transfer suite with sizes up to 1 GiB."
            )
        bw = 1.0 / b0
        # β counts the payload once; the case's peak is in the bytes it counted (read+write: 2× the payload)
        factor = 2.0 if counted == "read+write" else 1.0
        peaks = [float(c.row.get("peak_bytes_per_s", math.nan)) for c in cases]
        peaks = [p for p in peaks if math.isfinite(p) and p > 0]
        if peaks and bw * factor > min(peaks):
            self.warnings.append(
                f"link {name}: fitted β = {bw / 1e9:.4g} GB/s of payload ({counted}: {bw * factor / 1e9:.4g} GB/s counted) is "
                f"above the spec peak {min(peaks) / 1e9:.4g} GB/s; a measurement or spec error — the link is not fitted "
                "(rerun the transfer suite; check the peak in harness/specs)")
            return None
        alpha = self.estimate(a0, ab, "s", cases, "WLS intercept of T(S) = α + S/β, weights 1/T²")
        beta = self.estimate(bw, 1.0 / bb, "bytes/s", cases, "WLS 1/slope of T(S) = α + S/β, weights 1/T²; S = payload "
                             "bytes counted once")
        fitted = a0 + b0 * x
        worst = float(np.max(np.abs((med - fitted) / fitted)))
        if worst > 0.25:
            self.warnings.append(
                f"link {name}: T = α + S/β fits poorly (residuals up "
                f"to {worst:.0%}); caches or page effects make the time per byte depend on the size — read β off the "
                "sizes the model moves (a KV state is ≥ 1 MiB)")
        convention = BYTE_CONVENTION + ("; the case counted read+write (HBM traffic is 2× the payload)"
                                        if counted == "read+write" else "")
        return LinkFit(link, direction, None if memory is None else str(memory), alpha, beta, tuple(x.tolist()),
                       tuple(med.tolist()), tuple(fitted.tolist()), "1/T² (relative error)",
                       method=None if method is None else str(method), byte_convention=convention)

    # -- collectives --

    def collectives(self) -> list[CollectiveFit]:
        """T(S) = α + S/β per collective, GPU count, implementation and dtype (CollectiveParams cases)."""
        df = self.mr.cases
        rows = self._usable(_records(df[df["suite"] == "comm"], CollectiveParams))
        if rows.empty:
            return []
        recs = list(rows["record"])
        rows = rows.assign(_key=[(r.op, r.num_gpus, r.implementation) for r in recs], _size=[float(r.size_bytes) for r in recs])
        other = sorted(set(rows["dtype"]) - set(COLLECTIVE_DTYPES))
        if other:
            self.warnings.append(f"collectives of element type {', '.join(other)} not fitted (the floating-point ones are: "
                                 "an engine reduces activations in them)")
            rows = rows[rows["dtype"].isin(COLLECTIVE_DTYPES)]
        out = []
        for (key, dtype, backend), g in rows.groupby(["_key", "dtype", "backend"], sort=True):
            op, n, impl = key
            name = f"{op} on {n} GPUs ({impl}, {dtype})"
            by_size = [(s, self.cases(gs)) for s, gs in g.groupby("_size", sort=True) if s > 0]
            if len(by_size) < MIN_LINK_SIZES:
                self.warnings.append(f"collective {name}: {len(by_size)} message size(s) measured; α and β need at least "
                                     f"{MIN_LINK_SIZES}, so it is not fitted")
                continue
            x, med, cases, a0, b0, ab, bb = self._alpha_beta(by_size)
            if b0 <= 0:
                self.warnings.append(f"collective {name}: the time does not grow with the message size; not fitted")
                continue
            alpha = self.estimate(a0, ab, "s", cases, "WLS intercept of T(S) = α + S/β over message sizes, weights 1/T²")
            beta = self.estimate(1.0 / b0, 1.0 / bb, "bytes/s", cases,
                                 "WLS 1/slope of T(S) = α + S/β, weights 1/T²; S = payload bytes per GPU (algorithm "
                                 "bandwidth, nccl-tests' algbw)")
            fam = case_family(str(backend), str(dtype), "cuda")
            out.append(CollectiveFit(op, int(n), impl, str(dtype), alpha, beta, tuple(x.tolist()), tuple(med.tolist()),
                                     tuple((a0 + b0 * x).tolist()), fam))
        return out

    # -- single constants --

    def _typed(self, suite: str, cls, device: str | None = None):
        df = self.mr.cases
        rows = df[df["suite"] == suite]
        if device:
            rows = rows[rows["device_key"] == device]
        return self._usable(_records(rows, cls))

    def cpu_expert(self) -> Estimate | None:
        rows = self._typed("moe", CpuExpertParams, "cpu")
        rows = rows[rows["useful_flops"].astype(float) > 0]
        if rows.empty:
            return None
        tok = np.array([r.tokens for r in rows["record"]])
        top = rows[tok == tok.max()]
        cases = self.cases(top)
        return self.ratio(cases, sum(float(c.row["useful_flops"]) for c in cases), "FLOP/s",
                          f"C_C: useful_flops / median_s of the CPU expert case with the most tokens ({tok.max():g})")

    def host_bandwidth(self) -> Estimate | None:
        rows = self._typed("moe", HostBandwidthParams, "cpu")
        rows = rows[rows["useful_bytes"].astype(float) > 0]
        if rows.empty:
            return None
        ops = np.array([r.op for r in rows["record"]])
        if "triad" in ops:
            rows = rows[ops == "triad"]
        rows = rows[rows["useful_bytes"].astype(float) == rows["useful_bytes"].astype(float).max()]
        cases = self.cases(rows)
        return self.ratio(cases, sum(float(c.row["useful_bytes"]) for c in cases), "bytes/s",
                          "B_D: useful_bytes / median_s of the STREAM-style case (triad when measured)")

    def storage(self) -> dict[str, Estimate]:
        out = {}
        rows_all = self._typed("storage", StorageParams)
        for op in ("read", "write"):
            rows = rows_all[np.array([r.op == op for r in rows_all["record"]], dtype=bool)] if len(rows_all) else rows_all
            rows = rows[rows["useful_bytes"].astype(float) > 0]
            if rows.empty:
                continue
            rows = rows[rows["useful_bytes"].astype(float) == rows["useful_bytes"].astype(float).max()]
            cases = self.cases(rows)
            out[op] = self.ratio(cases, sum(float(c.row["useful_bytes"]) for c in cases), "bytes/s",
                                 f"storage {op}: useful_bytes / median_s of the largest size")
        return out

    def stages(self) -> list[StageMeasurement]:
        df = self.mr.cases
        rows = self._usable(df[df["suite"] == "stage"])
        out = []
        for cases in (self.cases(g) for _, g in rows.groupby("case_id", sort=True)):
            r = cases[0].row
            p = r["record"]
            if isinstance(p, StagePrefillParams):
                if p.new_tokens <= 0:
                    continue
                phase = "prefill"
                est = self.ratio(cases, p.new_tokens, "new tokens/s", "r_P = new_tokens / median_s")
                tokens, batch, ctx = p.new_tokens, None, p.cached_tokens or None
            elif isinstance(p, StageDecodeParams):
                if p.batch <= 0:
                    continue
                phase = "decode"
                est = self.ratio(cases, p.batch, "decode calls/s", "r_D = batch / median_s")
                tokens, batch, ctx = None, p.batch, p.context_tokens or None
            else:
                continue
            pf, pb = float(r.get("peak_flops_per_s", math.nan)), float(r.get("peak_bytes_per_s", math.nan))
            out.append(StageMeasurement(
                str(r["device_key"]), phase, p.model, tokens, batch, ctx, est,  # type: ignore[arg-type]
                pf if math.isfinite(pf) else None, pb if math.isfinite(pb) else None, str(r["case_id"]),
                float(r.get("useful_flops", 0.0) or 0.0), float(r.get("useful_bytes", 0.0) or 0.0), str(r.get("dtype", "")),
            ))
        return sorted(out, key=lambda s: (s.device, s.phase, s.tokens or 0, s.batch or 0, s.context_tokens or 0))


def fit_calibration(mr: MachineRuns, seed: int = 0, n_bootstrap: int = DEFAULT_BOOTSTRAP,
                    proxy: dict[str, str] | None = None, model: str | None = None) -> CalibrationRecord:
    """Fit every constant the runs allow; a suite with data but too few points is an error naming what to run."""
    from harness import __version__

    from harness.calibration import kernel_grid

    derived, grid_warnings, reference = kernel_grid.derive(mr.cases, model)
    if len(derived):
        import pandas as pd

        mr = replace(mr, cases=pd.concat([mr.cases, derived], ignore_index=True))
    elif model is not None and not reference:
        raise HarnessError(f"--model {model}: these runs hold no kernel grid (imported kernel data) to read at a model's "
                           "shapes; leave --model out.")
    f = _Fitter(mr, seed, n_bootstrap)
    f.warnings.extend(grid_warnings)
    curves = (f.curves("decode", "decode_bandwidth_efficiency", "batch")
              + f.curves("gemm", "prefill_compute_efficiency", "tokens_per_gpu"))
    rec = CalibrationRecord(
        machine=mr.machine, key_facts=mr.key_facts, runs=mr.runs, seed=seed, n_bootstrap=n_bootstrap,
        curves=tuple(curves), links=tuple(f.links()), cpu_expert_flops_per_s=f.cpu_expert(),
        host_memory_bandwidth_bytes_per_s=f.host_bandwidth(), storage=f.storage(), stages=tuple(f.stages()),
        proxy=dict(proxy or {}), warnings=(), created_unix_s=time.time(), harness_version=__version__,
        collectives=tuple(f.collectives()), reference_model=reference if len(derived) else "",
    )
    have = [c.quantity for c in rec.curves] + (["links"] if rec.links else []) + (["collectives"] if rec.collectives else [])
    if not have and rec.cpu_expert_flops_per_s is None and not rec.storage and not rec.stages:
        raise HarnessError(
            f"the runs of {mr.machine} hold no case any constant is fitted from (suites decode, gemm, transfer, moe, "
            "storage, stage); run `harness micro run --suite all --out results/`."
            + (" Left out: " + "; ".join(dict.fromkeys(f.warnings)) if f.warnings else "")
        )
    return replace(rec, warnings=tuple(dict.fromkeys(f.warnings)))
