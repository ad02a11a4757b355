"""Fit the model's constants from one machine's micro runs, each with a bootstrap interval and its run ids.

What is fitted (Chapter 9), and from which suite's cases (the `params` each case records):

- decode bandwidth efficiency vs batch (§9.2.3; decode: `batch`, `context`): MBU of each case,
  useful_bytes / (median_s · peak_bytes_per_s); made monotone non-decreasing in the batch by
  pool-adjacent-violators (weighted by samples) and interpolated linearly in the batch, as the
  chapter interpolates 33 % at batch 1 and 65 % at batch 64 to ≈49 % at 32;
- prefill compute efficiency vs tokens per GPU (§9.2.3; gemm: `tokens`): the projections of one
  token count taken together, Σ useful_flops / (Σ median_s · peak_flops_per_s); interpolated
  linearly, not forced monotone (padding to tiles makes it rise and fall);
- per link, direction and memory kind, T(S) = α + S/β (§9.2.2; transfer: `size_bytes`,
  `direction`, `link`, `memory`): weighted least squares over the sizes with weights 1/T², so
  each size counts by its relative error and neither the smallest (α) nor the largest (β)
  dominates; α < 0 is refitted with α = 0. Chunked, bidirectional and overlapped cases are not
  part of the fit;
- C_C and B_D (§9.3.2; moe: `kind` = "cpu_expert" with `tokens`, and "host_bandwidth"): the
  FLOP/s of the CPU expert case with the most tokens (compute-bound) and the bytes/s of the
  STREAM-style case (triad when present, else the largest);
- storage read and write bandwidth (storage: `op`, `size_bytes`): bytes/s of the largest size;
- measured r_P and r_D (§9.2.3; stage: `phase` = "prefill" with `tokens`, "decode" with `batch`
  and `context`): r_P = tokens / median_s, r_D = batch / median_s (one call serves the batch).

Intervals: the raw samples of each case are resampled with replacement (`n_bootstrap` times,
generator seeded with `seed`), every statistic is recomputed from the resampled medians, and the
2.5 % and 97.5 % percentiles are the interval.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from harness.calibration.record import (
    CalibrationRecord,
    CurvePoint,
    EfficiencyCurve,
    Estimate,
    LinkFit,
    StageMeasurement,
)
from harness.calibration.runs import MachineRuns
from harness.errors import HarnessError

DEFAULT_BOOTSTRAP = 200
MIN_CURVE_POINTS = 2
MIN_LINK_SIZES = 3
_Q = (2.5, 97.5)


def _param(params: dict, *names: str, default: Any = None) -> Any:
    for n in names:
        if n in params and params[n] is not None:
            return params[n]
    return default


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
        if n_bootstrap < 10:
            raise HarnessError(f"--bootstrap must be at least 10 resamples, got {n_bootstrap!r}.")
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

    def curves(self, suite: str, quantity: str, x_name: str) -> list[EfficiencyCurve]:
        df = self.mr.cases
        rows = df[df["suite"] == suite]
        if rows.empty:
            return []
        decode = quantity == "decode_bandwidth_efficiency"
        xs, ok = [], []
        for p in rows["params"]:
            x = _param(p, "batch") if decode else _param(p, "tokens", "tokens_per_gpu")
            kind = str(_param(p, "kind", default="step"))
            ok.append(x is not None and not (decode and "attention" in kind) and not p.get("square"))
            xs.append(x)
        rows = rows.assign(_x=xs)[np.array(ok, dtype=bool)]
        if decode:
            rows = rows.assign(_ctx=[_param(p, "context", "context_tokens", default=0) for p in rows["params"]])
        else:
            rows = rows.assign(_ctx=0)
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
            candidates = []
            for (backend, ctx), gb in g.groupby(["backend", "_ctx"], sort=True):
                pts = self._curve_points(gb, work_col, peak_col)
                candidates.append((len(pts), float(np.mean([p[1].value for p in pts])) if pts else 0.0, backend, ctx, pts))
            candidates.sort(key=lambda c: (c[0], c[1]), reverse=True)
            n, _, backend, ctx, pts = candidates[0]
            if n < MIN_CURVE_POINTS:
                xs_have = sorted({p[0] for c in candidates for p in c[4]})
                what = "batch sizes" if decode else "token counts"
                run = ("`harness micro run --suite decode --out results/` without --quick (it sweeps batch 1…64)" if decode
                       else "`harness micro run --suite gemm --out results/` without --quick (it sweeps the token counts)")
                raise HarnessError(
                    f"{quantity} on {dev} ({dtype}): measured at {x_name} {xs_have} only; the curve needs at least "
                    f"{MIN_CURVE_POINTS} {what}. Run {run}."
                )
            vals = np.array([p[1].value for p in pts])
            fitted = pav_increasing(vals, [p[1].n_samples for p in pts]) if decode else vals
            if decode and not np.allclose(fitted, vals):
                dev_pp = float(np.max(np.abs(fitted - vals))) * 100
                self.warnings.append(
                    f"{quantity} on {dev} ({dtype}): measured points were not monotone in the batch; pooled by "
                    f"pool-adjacent-violators (up to {dev_pp:.1f} percentage points off the measurement)"
                    + ("; the rising curve of §9.2.3 does not hold here — check whether the large batches are "
                       "compute-bound or the machine was busy" if dev_pp > 5 else "")
                )
            peak_source = str(g["peak_source"].iloc[0]) if "peak_source" in g.columns else ""
            if decode and ctx:
                peak_source += f"; context {ctx} tokens"
            out.append(EfficiencyCurve(
                dev, quantity, x_name, str(dtype), str(backend), decode, peak_source,  # type: ignore[arg-type]
                tuple(CurvePoint(x, est, float(fv), cids) for (x, est, cids), fv in zip(pts, fitted)),
            ))
        return out

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
        rows = df[df["suite"] == "transfer"]
        if rows.empty:
            return []
        keep, keys, sizes = [], [], []
        for p in rows["params"]:
            size = _param(p, "size_bytes", "size", "bytes") if _param(p, "link") else None  # a case without a link is no link point
            excluded = (int(_param(p, "chunks", default=1) or 1) > 1 or bool(p.get("bidirectional"))
                        or bool(p.get("overlap")) or bool(_param(p, "overlap_with")))
            keep.append(size is not None and not excluded)
            keys.append((str(_param(p, "link", default="link")), str(_param(p, "direction", default="")),
                         _param(p, "memory", "host_memory")))
            sizes.append(float(size) if size is not None else math.nan)
        rows = rows.assign(_key=keys, _size=sizes)[np.array(keep, dtype=bool)]
        out = []
        for key, g in rows.groupby("_key", sort=True):
            link, direction, memory = key
            by_size = [(s, self.cases(gs)) for s, gs in g.groupby("_size", sort=True)]
            if len(by_size) < MIN_LINK_SIZES:
                name = ":".join(str(k) for k in key if k)
                raise HarnessError(
                    f"link {name}: {len(by_size)} transfer size(s) measured ({', '.join(f'{s:.0f} B' for s, _ in by_size)}); "
                    f"fitting α and β needs at least {MIN_LINK_SIZES}. Run `harness micro run --suite transfer --out results/` "
                    "without --quick (it sweeps 4 KiB…1 GiB)."
                )
            out.append(self._fit_link(link, direction, memory, by_size))
        return out

    def _fit_link(self, link: str, direction: str, memory: Any, by_size) -> LinkFit:
        x = np.array([s for s, _ in by_size], dtype=float)
        cases = [c for _, cs in by_size for c in cs]
        med = np.array([float(np.median(np.concatenate([c.times_s for c in cs]))) for _, cs in by_size])
        w = 1.0 / med**2
        a, b = wls_line(x, med, w)
        boots = np.stack([bootstrap_medians(np.concatenate([c.times_s for c in cs]), self.n_boot, self.rng)
                          for _, cs in by_size])
        ab, bb = wls_line(x, boots, w)
        a0, b0 = float(a[0]), float(b[0])
        if b0 <= 0:
            raise HarnessError(
                f"link {link}:{direction}: transfer time does not grow with size (slope {b0:.3g} s/B); the sizes are too "
                "small or the timings are noise. Rerun the transfer suite with sizes up to 1 GiB."
            )
        bw = 1.0 / b0
        bb = np.where(bb > 0, bb, np.nan)
        alpha = self.estimate(a0, ab, "s", cases, "WLS intercept of T(S) = α + S/β, weights 1/T²")
        beta = self.estimate(bw, 1.0 / bb, "bytes/s", cases, "WLS 1/slope of T(S) = α + S/β, weights 1/T²")
        fitted = a0 + b0 * x
        worst = float(np.max(np.abs((med - fitted) / fitted)))
        if worst > 0.25:
            self.warnings.append(
                f"link {':'.join(str(k) for k in (link, direction, memory) if k)}: T = α + S/β fits poorly (residuals up "
                f"to {worst:.0%}); caches or page effects make the time per byte depend on the size — read β off the "
                "sizes the model moves (a KV state is ≥ 1 MiB)")
        return LinkFit(link, direction, None if memory is None else str(memory), alpha, beta, tuple(x.tolist()),
                       tuple(med.tolist()), tuple(fitted.tolist()), "1/T² (relative error)")

    # -- single constants --

    def _pick(self, suite: str, device: str | None, pred) -> Any:
        df = self.mr.cases
        rows = df[df["suite"] == suite]
        if device:
            rows = rows[rows["device_key"] == device]
        mask = [bool(pred(p, c)) for p, c in zip(rows["params"], rows["case"])]
        return rows[np.array(mask, dtype=bool)]

    def cpu_expert(self) -> Estimate | None:
        rows = self._pick("moe", "cpu", lambda p, c: "cpu_expert" in str(_param(p, "kind", default="")).replace("-", "_")
                          or str(c).startswith("cpu-expert"))
        rows = rows[rows["useful_flops"].astype(float) > 0]
        if rows.empty:
            return None
        tok = [float(_param(p, "tokens", "m", default=0)) for p in rows["params"]]
        top = rows[np.array(tok) == max(tok)]
        cases = self.cases(top)
        return self.ratio(cases, sum(float(c.row["useful_flops"]) for c in cases), "FLOP/s",
                          f"C_C: useful_flops / median_s of the CPU expert case with the most tokens ({max(tok):g})")

    def host_bandwidth(self) -> Estimate | None:
        rows = self._pick("moe", "cpu", lambda p, c: str(_param(p, "kind", default="")).replace("-", "_") in
                          ("host_bandwidth", "stream") or str(c).startswith("stream"))
        rows = rows[rows["useful_bytes"].astype(float) > 0]
        if rows.empty:
            return None
        ops = [str(_param(p, "op", default="")) for p in rows["params"]]
        if "triad" in ops:
            rows = rows[np.array(ops) == "triad"]
        rows = rows[rows["useful_bytes"].astype(float) == rows["useful_bytes"].astype(float).max()]
        cases = self.cases(rows)
        return self.ratio(cases, sum(float(c.row["useful_bytes"]) for c in cases), "bytes/s",
                          "B_D: useful_bytes / median_s of the STREAM-style case (triad when measured)")

    def storage(self) -> dict[str, Estimate]:
        out = {}
        for op in ("read", "write"):
            rows = self._pick("storage", None, lambda p, c, op=op: str(_param(p, "op", "direction", default="")) == op)
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
        rows = df[df["suite"] == "stage"]
        out = []
        for cases in (self.cases(g) for _, g in rows.groupby("case_id", sort=True)):
            r = cases[0].row
            p = r["params"]
            phase = str(_param(p, "phase", "stage", default=""))
            if phase == "prefill":
                tokens = int(_param(p, "new_tokens", "tokens", default=0))
                if tokens <= 0:
                    continue
                est = self.ratio(cases, tokens, "new tokens/s", "r_P = tokens / median_s")
                batch, ctx = None, int(_param(p, "cached_tokens", default=0)) or None
            elif phase == "decode":
                batch = int(_param(p, "batch", default=0))
                if batch <= 0:
                    continue
                est = self.ratio(cases, batch, "decode calls/s", "r_D = batch / median_s")
                tokens, ctx = None, int(_param(p, "context", "context_tokens", default=0)) or None
            else:
                continue
            pf, pb = float(r.get("peak_flops_per_s", math.nan)), float(r.get("peak_bytes_per_s", math.nan))
            out.append(StageMeasurement(
                str(r["device_key"]), phase, str(_param(p, "model", "config", default="")), tokens, batch, ctx, est,  # type: ignore[arg-type]
                pf if math.isfinite(pf) else None, pb if math.isfinite(pb) else None, str(r["case_id"]),
                float(r.get("useful_flops", 0.0) or 0.0), float(r.get("useful_bytes", 0.0) or 0.0), str(r.get("dtype", "")),
            ))
        return sorted(out, key=lambda s: (s.device, s.phase, s.tokens or 0, s.batch or 0, s.context_tokens or 0))


def fit_calibration(mr: MachineRuns, seed: int = 0, n_bootstrap: int = DEFAULT_BOOTSTRAP,
                    proxy: dict[str, str] | None = None) -> CalibrationRecord:
    """Fit every constant the runs allow; a suite with data but too few points is an error naming what to run."""
    from harness import __version__

    f = _Fitter(mr, seed, n_bootstrap)
    curves = (f.curves("decode", "decode_bandwidth_efficiency", "batch")
              + f.curves("gemm", "prefill_compute_efficiency", "tokens_per_gpu"))
    rec = CalibrationRecord(
        machine=mr.machine, key_facts=mr.key_facts, runs=mr.runs, seed=seed, n_bootstrap=n_bootstrap,
        curves=tuple(curves), links=tuple(f.links()), cpu_expert_flops_per_s=f.cpu_expert(),
        host_memory_bandwidth_bytes_per_s=f.host_bandwidth(), storage=f.storage(), stages=tuple(f.stages()),
        proxy=dict(proxy or {}), warnings=(), created_unix_s=time.time(), harness_version=__version__,
    )
    have = [c.quantity for c in rec.curves] + (["links"] if rec.links else [])
    if not have and rec.cpu_expert_flops_per_s is None and not rec.storage and not rec.stages:
        raise HarnessError(
            f"the runs of {mr.machine} hold no case any constant is fitted from (suites decode, gemm, transfer, moe, "
            "storage, stage); run `harness micro run --suite all --out results/`."
        )
    from dataclasses import replace

    return replace(rec, warnings=tuple(dict.fromkeys(f.warnings)))
