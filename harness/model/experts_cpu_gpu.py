"""Where one MoE expert runs: on the CPU next to its weights, or on the GPU after shipping them.

Chapter 9, §9.3.2 (example 9.3, Fig. 9-14, the worked solution after the exercises). For an
expert with P_e parameters, W_e = P_e·b_w weight bytes, input width h and m tokens:

    T_C(m) = 2α + 2·m·h·b_a/B_L + max(2·m·P_e/C_C, W_e/B_D)      (activations out and back)
    T_G(m) =  α +      W_e/B_L  + max(2·m·P_e/C_G, W_e/B_H)      (weights shipped once)

Experts of one batch run one after another, so a batch's time is the sum over its experts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Literal, Sequence

import numpy as np

from harness.errors import HarnessError
from harness.model.forward import param_counts
from harness.specs._validate import non_negative, positive, positive_int
from harness.specs.models import ModelSpec

Bound = Literal["compute", "memory"]
Side = Literal["cpu", "gpu"]


@dataclass(frozen=True, slots=True)
class ExpertShape:
    """One routed expert: P_e parameters (three h×I matrices), input width h, bytes per element."""

    params: int  # P_e
    hidden_size: int  # h
    weight_bytes_per_param: float  # b_w (2 for BF16, 1 for 8-bit)
    activation_bytes_per_elem: float = 2.0  # b_a of the hidden vector shipped to the CPU

    def __post_init__(self) -> None:
        positive_int("expert shape", "params", self.params)
        positive_int("expert shape", "hidden_size", self.hidden_size)
        positive("expert shape", "weight_bytes_per_param", self.weight_bytes_per_param)
        positive("expert shape", "activation_bytes_per_elem", self.activation_bytes_per_elem)

    @property
    def weight_bytes(self) -> float:
        """W_e = P_e·b_w (Qwen3-235B-A22B BF16: 3·4096·1536·2 B = 36 MiB)."""
        return self.params * self.weight_bytes_per_param

    @property
    def flops_per_token(self) -> float:
        """F_e(1) = 2·P_e: one multiply-add per parameter per row."""
        return 2.0 * self.params

    def json_fields(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "weight_bytes": self.weight_bytes,
                "flops_per_token": self.flops_per_token}

    def to_dict(self) -> dict:
        return self.json_fields()


def expert_shape(model: ModelSpec, weight_bytes_per_param: float = 2.0, activation_bytes_per_elem: float = 2.0) -> ExpertShape:
    """The routed-expert shape of a MoE model spec (P_e from harness.model.forward.param_counts)."""
    if not model.is_moe:
        raise HarnessError(f"model {model.name!r} has no routed experts; pick a MoE model such as qwen3-235b-a22b.")
    return ExpertShape(param_counts(model).expert, model.hidden_size, weight_bytes_per_param, activation_bytes_per_elem)


@dataclass(frozen=True, slots=True)
class ExpertHardware:
    """Effective rates of the two paths (§9.3.2 notation: C_C, B_D, C_G, B_H, B_L, α)."""

    cpu_flops_per_s: float  # C_C
    dram_bandwidth_bytes_per_s: float  # B_D
    gpu_flops_per_s: float  # C_G
    hbm_bandwidth_bytes_per_s: float  # B_H
    link_bandwidth_bytes_per_s: float  # B_L
    link_startup_s: float  # α, per transfer

    def __post_init__(self) -> None:
        for f in ("cpu_flops_per_s", "dram_bandwidth_bytes_per_s", "gpu_flops_per_s",
                  "hbm_bandwidth_bytes_per_s", "link_bandwidth_bytes_per_s"):
            positive("expert hardware", f, getattr(self, f))
        non_negative("expert hardware", "link_startup_s", self.link_startup_s)

    def to_dict(self) -> dict:
        return asdict(self)


def _tokens(tokens: float, field: str = "tokens") -> None:
    if isinstance(tokens, bool) or not isinstance(tokens, (int, float, np.integer, np.floating)) or not math.isfinite(tokens) or tokens < 0:
        raise HarnessError(f"{field} must be a finite number of tokens >= 0, got {tokens!r}.")


@dataclass(frozen=True, slots=True)
class ExpertPathTime:
    """One expert on one side: the link, compute and weight-read terms of T_C or T_G."""

    side: Side
    tokens: float
    link_s: float  # launches plus payload over B_L
    compute_s: float  # 2·m·P_e / C
    weight_read_s: float  # W_e / B (DRAM or HBM)
    total_s: float
    bound: Bound  # which term of the max sets the operator time

    def to_dict(self) -> dict:
        return asdict(self)


def cpu_expert_time(tokens: float, shape: ExpertShape, hw: ExpertHardware) -> ExpertPathTime:
    """T_C(m) = 2α + 2·m·h·b_a/B_L + max(2·m·P_e/C_C, W_e/B_D) (§9.3.2)."""
    _tokens(tokens)
    link = 2 * hw.link_startup_s + 2 * tokens * shape.hidden_size * shape.activation_bytes_per_elem / hw.link_bandwidth_bytes_per_s
    comp = tokens * shape.flops_per_token / hw.cpu_flops_per_s
    read = shape.weight_bytes / hw.dram_bandwidth_bytes_per_s
    return ExpertPathTime("cpu", tokens, link, comp, read, link + max(comp, read), "compute" if comp >= read else "memory")


def gpu_expert_time(tokens: float, shape: ExpertShape, hw: ExpertHardware) -> ExpertPathTime:
    """T_G(m) = α + W_e/B_L + max(2·m·P_e/C_G, W_e/B_H) (§9.3.2)."""
    _tokens(tokens)
    link = hw.link_startup_s + shape.weight_bytes / hw.link_bandwidth_bytes_per_s
    comp = tokens * shape.flops_per_token / hw.gpu_flops_per_s
    read = shape.weight_bytes / hw.hbm_bandwidth_bytes_per_s
    return ExpertPathTime("gpu", tokens, link, comp, read, link + max(comp, read), "compute" if comp >= read else "memory")


def path_times_s(tokens: np.ndarray, shape: ExpertShape, hw: ExpertHardware) -> tuple[np.ndarray, np.ndarray]:
    """T_C and T_G over an array of token counts (the curves of Fig. 9-14), vectorised."""
    m = np.asarray(tokens, dtype=np.float64)
    if m.size and (not np.all(np.isfinite(m)) or m.min() < 0):
        raise HarnessError("tokens: every token count must be finite and >= 0.")
    b_a, h, F1, W = shape.activation_bytes_per_elem, shape.hidden_size, shape.flops_per_token, shape.weight_bytes
    t_c = 2 * hw.link_startup_s + 2 * m * h * b_a / hw.link_bandwidth_bytes_per_s + np.maximum(
        m * F1 / hw.cpu_flops_per_s, W / hw.dram_bandwidth_bytes_per_s)
    t_g = hw.link_startup_s + W / hw.link_bandwidth_bytes_per_s + np.maximum(
        m * F1 / hw.gpu_flops_per_s, W / hw.hbm_bandwidth_bytes_per_s)
    return t_c, t_g


@dataclass(frozen=True, slots=True)
class BatchExpertTimes:
    """A batch's experts run in sequence on one side; each weight set is read once per batch."""

    tokens_per_expert: tuple[float, ...]
    experts_run: int  # experts with at least one token
    weight_bytes: float  # Σ W_e over experts run
    flops: float  # Σ 2·m_e·P_e
    cpu_s: float  # Σ T_C(m_e)
    cpu_weight_read_s: float  # Σ W_e/B_D (Fig. 9-15, left bar)
    cpu_compute_s: float  # Σ 2·m_e·P_e/C_C (Fig. 9-15, right bar)
    gpu_s: float  # Σ T_G(m_e)
    gpu_weight_transfer_s: float  # Σ W_e/B_L alone (example 9.3: ≈12.1 ms)
    best_s: float  # each expert on its faster side, still in sequence
    placement: tuple[Side, ...]  # the faster side per expert ("cpu" for an idle expert)
    faster: Side  # the faster all-on-one-side path

    def to_dict(self) -> dict:
        return asdict(self)


def batch_expert_times(tokens_per_expert: Sequence[float], shape: ExpertShape, hw: ExpertHardware) -> BatchExpertTimes:
    """Σ_e T_C(m_e) and Σ_e T_G(m_e) over the experts a batch touches (example 9.3); idle experts cost nothing."""
    toks = tuple(float(t) for t in tokens_per_expert)
    for i, t in enumerate(toks):
        _tokens(t, f"tokens_per_expert[{i}]")
    run = [t for t in toks if t > 0]
    t_c, t_g = path_times_s(np.array(run), shape, hw)
    placement = []
    it = iter(zip(t_c, t_g))
    for t in toks:
        if t > 0:
            c, g = next(it)
            placement.append("gpu" if g < c else "cpu")
        else:
            placement.append("cpu")
    cpu_s, gpu_s = float(t_c.sum()), float(t_g.sum())
    return BatchExpertTimes(
        tokens_per_expert=toks,
        experts_run=len(run),
        weight_bytes=len(run) * shape.weight_bytes,
        flops=sum(run) * shape.flops_per_token,
        cpu_s=cpu_s,
        cpu_weight_read_s=len(run) * shape.weight_bytes / hw.dram_bandwidth_bytes_per_s,
        cpu_compute_s=sum(run) * shape.flops_per_token / hw.cpu_flops_per_s,
        gpu_s=gpu_s,
        gpu_weight_transfer_s=len(run) * shape.weight_bytes / hw.link_bandwidth_bytes_per_s,
        best_s=float(np.minimum(t_c, t_g).sum()),
        placement=tuple(placement),  # type: ignore[arg-type]
        faster="gpu" if gpu_s < cpu_s else "cpu",
    )


@dataclass(frozen=True, slots=True)
class Crossover:
    """Where the GPU path (weights shipped) first beats the CPU path (Fig. 9-14: 71/72, 688/689)."""

    tokens_exact: float  # real m* with T_C(m*) = T_G(m*)
    last_cpu_tokens: int  # first_gpu_tokens - 1: the last integer m before the GPU path takes the lead
    first_gpu_tokens: int  # smallest integer m >= 1 at which T_G(m) < T_C(m)

    def to_dict(self) -> dict:
        return asdict(self)


def crossover_tokens(shape: ExpertShape, hw: ExpertHardware) -> Crossover | None:
    """Smallest m with T_G(m) < T_C(m), solved exactly on the piecewise-linear difference.

    D(m) = T_C(m) - T_G(m) is linear between the two read/compute balance points of the CPU and
    the GPU, so the first positive point is found segment by segment; None when the GPU never wins.
    """
    bps = sorted({balance_tokens(shape, hw.cpu_flops_per_s, hw.dram_bandwidth_bytes_per_s),
                  balance_tokens(shape, hw.gpu_flops_per_s, hw.hbm_bandwidth_bytes_per_s)})
    edges = [0.0, *bps, math.inf]

    def diff(m: float) -> float:
        c, g = path_times_s(np.array([m]), shape, hw)
        return float(c[0] - g[0])

    root = None
    for lo, hi in zip(edges[:-1], edges[1:]):
        d_lo = diff(lo)
        if d_lo > 0:
            root = lo
            break
        probe = lo + 1.0 if math.isinf(hi) else hi
        slope = (diff(probe) - d_lo) / (probe - lo)
        if slope > 0:
            r = lo - d_lo / slope
            if r <= hi:
                root = r
                break
    if root is None:
        return None
    first = max(1, math.floor(root))
    while diff(first) <= 0:  # step past float rounding at an exact tie
        first += 1
    while first > 1 and diff(first - 1) > 0:
        first -= 1
    return Crossover(tokens_exact=root, last_cpu_tokens=first - 1, first_gpu_tokens=first)


def balance_tokens(shape: ExpertShape, flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """m where 2·m·P_e/C = W_e/B, i.e. m = b_w·C/(2·B); with BF16 (b_w=2) m = C/B.

    Worked solution after the exercises: AVX-512 1.8 TFLOP/s over 220 GB/s -> ≈8.2 tokens, AMX
    21.3 TFLOP/s -> ≈97; cross-socket 125 GB/s -> ≈14 and ≈170. Below it the side waits on weights.
    """
    positive("balance point", "flops_per_s", flops_per_s)
    positive("balance point", "bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    return shape.weight_bytes * flops_per_s / (shape.flops_per_token * bandwidth_bytes_per_s)
