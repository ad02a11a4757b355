"""Parallel layout of one inference instance: tensor, pipeline and expert parallel sizes, what each GPU holds.

Chapter 9, §9.1.1: an instance may be several cards working on one batch (Fig. 9-1; Qwen3-235B-A22B as
TP2×EP4). With tensor parallelism over `tp` cards (Megatron layout) every attention head and every FFN
column block lives on one card: each card holds 1/tp of the linear weights, computes 1/tp of the linear
FLOPs and reads 1/tp of the KV, and the partial sums meet in two all-reduces per layer (after the
attention output projection and after the FFN down projection) of `tokens × hidden × 2` bytes (BF16
activations). Exceptions, each stated where it is counted: GQA KV heads fewer than `tp` are replicated
(each card keeps at least one), MLA's latent state is replicated on every card (it has no head axis,
§9.2.2), and MLA's down projections (q_a, kv_a) are replicated. MoE experts are split over `ep` groups
of `moe_tp` cards each (moe_tp × ep = tp × attention_dp).

The all-reduce time is the α–β ring bound: T = 2(p−1)·α + 2(p−1)/p · S/B for S bytes over p cards on a
link of per-direction bandwidth B and per-message latency α (the NCCL ring algorithm's cost).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import HarnessError
from harness.specs.models import ModelSpec, tensor_parallel_problem

ACTIVATION_BYTES = 2.0  # all-reduced activations are BF16 in every engine modelled here


@dataclass(frozen=True, slots=True)
class Parallel:
    """How one instance spreads the model: `tp` cards share each layer, `attention_dp` copies of attention
    each serve their own requests, MoE experts over `ep` groups of `moe_tp` cards, `pp` pipeline stages."""

    tp: int = 1
    pp: int = 1
    attention_dp: int = 1
    moe_tp: int | None = None  # None: tp × attention_dp / ep
    ep: int = 1

    def __post_init__(self) -> None:
        for f in ("tp", "pp", "attention_dp", "ep"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"parallel.{f} must be an integer >= 1, got {v!r}.")
        if self.moe_tp is not None and (isinstance(self.moe_tp, bool) or not isinstance(self.moe_tp, int) or self.moe_tp < 1):
            raise HarnessError(f"parallel.moe_tp must be an integer >= 1, got {self.moe_tp!r}.")
        if self.expert_tp * self.ep != self.tp * self.attention_dp:
            raise HarnessError(
                f"parallel: moe_tp × ep ({self.expert_tp} × {self.ep}) must equal tp × attention_dp "
                f"({self.tp} × {self.attention_dp}): the experts are spread over the same cards as attention."
            )

    @property
    def expert_tp(self) -> int:
        return self.moe_tp if self.moe_tp is not None else max(1, self.tp * self.attention_dp // self.ep)

    @property
    def gpus(self) -> int:
        """Cards one instance occupies."""
        return self.tp * self.attention_dp * self.pp

    def describe(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.attention_dp > 1:
            parts.append(f"DP-attention {self.attention_dp}")
        if self.ep > 1 or (self.moe_tp is not None and self.moe_tp != self.tp):
            parts.append(f"MoE TP{self.expert_tp}×EP{self.ep}")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        return " ".join(parts)


def check_parallel(m: ModelSpec, p: Parallel, field: str = "tp") -> None:
    """Refuse a layout the engines refuse: attention heads (and GQA KV heads) must split evenly over `tp`,
    layers over `pp`, experts over `ep`; the error names the field and the sizes that would work."""
    problem = tensor_parallel_problem(m, p.tp, field)
    if problem:
        raise HarnessError(problem + ".")
    if m.n_layers % p.pp:
        raise HarnessError(f"pp = {p.pp} does not divide the {m.n_layers} layers of {m.name}.")
    if m.is_moe and m.n_routed_experts % p.ep:
        raise HarnessError(f"ep = {p.ep} does not divide the {m.n_routed_experts} routed experts of {m.name}.")
    if p.ep > 1 and not m.is_moe:
        raise HarnessError(f"ep = {p.ep}, but {m.name} is a dense model (no experts to spread); leave ep at 1.")


def kv_replication(m: ModelSpec, tp: int) -> float:
    """Copies of each token's KV an instance of `tp` cards keeps: 1 while the KV heads split evenly, tp/h_kv when
    there are fewer KV heads than cards (each card keeps one whole head), tp for MLA's latent (every card keeps it)."""
    if m.attention == "mla":
        return float(tp)
    return max(1.0, tp / m.n_kv_heads)


def allreduce_time_s(payload_bytes: float, gpus: int, bandwidth_bytes_per_s: float, startup_latency_s: float) -> float:
    """Ring all-reduce: 2(p−1)·α + 2(p−1)/p · S/B (0 on one card)."""
    if gpus <= 1 or payload_bytes <= 0:
        return 0.0
    if not bandwidth_bytes_per_s > 0:
        raise HarnessError(f"all-reduce link bandwidth must be > 0 bytes/s, got {bandwidth_bytes_per_s!r}.")
    steps = 2 * (gpus - 1)
    return steps * startup_latency_s + steps / gpus * payload_bytes / bandwidth_bytes_per_s


def allreduces_per_forward(m: ModelSpec) -> int:
    """Two per layer (attention output, FFN output) plus one after the vocabulary-parallel embedding."""
    return 2 * m.n_layers + 1


def tp_split_check(count: int, tp: int, field: str) -> int:
    """Instances in a pool of `count` cards at `tp` cards each; the count must be a multiple."""
    if count % tp:
        raise HarnessError(f"{field}: {count} cards do not form whole TP{tp} instances; give a multiple of {tp} "
                           f"(e.g. {max(tp, count - count % tp)}) or another tp.")
    return count // tp

