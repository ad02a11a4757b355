"""Expert capacity and reuse: what resident experts cost in HBM, and what one batch reads and computes.

Chapter 9, §9.3.3. Holding weights and serving them in time are different questions: resident
bytes are experts × W_e × layers; the bytes a batch reads depend on how many distinct experts its
assignments touch (uniform spread, concentrated, or random with E[U] = E·[1-(1-K/E)^M]), while its
useful FLOPs are fixed by the assignments alone (M·K·2·P_e).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.errors import HarnessError
from harness.model.forward import expected_active_experts
from harness.specs._validate import non_negative, positive, positive_int


@dataclass(frozen=True, slots=True)
class ResidentExperts:
    expert_bytes: float  # W_e
    n_experts: int  # routed experts per layer (E)
    resident_per_layer: int
    n_layers: int
    all_experts_per_layer_bytes: float  # E·W_e (Qwen3-235B-A22B: 4.5 GiB)
    resident_per_layer_bytes: float  # r·W_e (32 experts: 1.125 GiB)
    resident_all_layers_bytes: float  # r·W_e·n_layers (94 layers: ≈106 GiB)
    free_bytes: float  # HBM given to experts
    fits: bool
    max_resident_per_layer: int  # largest r with r·W_e·n_layers ≤ free_bytes (capped at E)

    def to_dict(self) -> dict:
        return asdict(self)


def resident_expert_memory(
    expert_bytes: float, n_experts: int, resident_per_layer: int, n_layers: int, free_bytes: float
) -> ResidentExperts:
    """Resident bytes r·W_e per layer and r·W_e·n_layers in all, against the HBM left for experts (§9.3.3)."""
    positive("resident experts", "expert_bytes", expert_bytes)
    positive_int("resident experts", "n_experts", n_experts)
    positive_int("resident experts", "n_layers", n_layers)
    non_negative("resident experts", "free_bytes", free_bytes)
    if isinstance(resident_per_layer, bool) or not isinstance(resident_per_layer, int) or not 0 <= resident_per_layer <= n_experts:
        raise HarnessError(
            f"resident_per_layer must be an integer in [0, n_experts] = [0, {n_experts}], got {resident_per_layer!r}; "
            "a layer cannot keep more experts resident than it has."
        )
    total = resident_per_layer * expert_bytes * n_layers
    return ResidentExperts(
        expert_bytes=expert_bytes,
        n_experts=n_experts,
        resident_per_layer=resident_per_layer,
        n_layers=n_layers,
        all_experts_per_layer_bytes=n_experts * expert_bytes,
        resident_per_layer_bytes=resident_per_layer * expert_bytes,
        resident_all_layers_bytes=total,
        free_bytes=free_bytes,
        fits=total <= free_bytes,
        max_resident_per_layer=min(n_experts, int(free_bytes // (expert_bytes * n_layers))),
    )


@dataclass(frozen=True, slots=True)
class RoutingReads:
    """Weight bytes one batch reads when each touched expert's weights are read once."""

    routing: str  # "uniform" | "concentrated" | "random"
    experts_touched: float  # distinct experts (expected value for random routing)
    rows_per_touched_expert: float
    weight_bytes: float
    read_s: float | None  # weight_bytes / read bandwidth, when one is given

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class BatchReuse:
    tokens: int  # M
    top_k: int  # K
    n_experts: int  # E
    assignments: int  # M·K
    useful_flops: float  # M·K·2·P_e, the same for every routing (§9.3.3: 19.3 GFLOPs)
    uniform: RoutingReads  # assignments spread evenly: min(E, M·K) experts
    concentrated: RoutingReads  # every token picks the same K experts
    random: RoutingReads  # independent uniform top-K per token: E[U]

    def to_dict(self) -> dict:
        return {
            "tokens": self.tokens, "top_k": self.top_k, "n_experts": self.n_experts,
            "assignments": self.assignments, "useful_flops": self.useful_flops,
            "uniform": self.uniform.to_dict(), "concentrated": self.concentrated.to_dict(), "random": self.random.to_dict(),
        }


def check_routing(n_experts: int, top_k: int, tokens: int) -> None:
    """Validate E, K, M for a routing model: K distinct experts out of E, at least zero tokens."""
    positive_int("routing", "n_experts", n_experts)
    positive_int("routing", "top_k", top_k)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise HarnessError(f"routing: tokens must be an integer >= 0, got {tokens!r}.")
    if top_k > n_experts:
        raise HarnessError(
            f"routing: top_k ({top_k}) exceeds n_experts ({n_experts}); a token chooses top_k distinct experts, "
            "so choose at most as many as exist."
        )


def batch_reuse(
    n_experts: int, top_k: int, tokens: int, expert_params: int, weight_bytes_per_param: float,
    read_bandwidth_bytes_per_s: float | None = None,
) -> BatchReuse:
    """Same assignments, three routings (§9.3.3): 64 tokens × top-8 of 128 -> 4.5 GiB uniform,
    288 MiB concentrated, E[U]≈126 experts = 4.43 GiB random; at 220 GB/s 22.0 ms vs 1.37 ms."""
    check_routing(n_experts, top_k, tokens)
    positive_int("routing", "expert_params", expert_params)
    positive("routing", "weight_bytes_per_param", weight_bytes_per_param)
    if read_bandwidth_bytes_per_s is not None:
        positive("routing", "read_bandwidth_bytes_per_s", read_bandwidth_bytes_per_s)
    w_e = expert_params * weight_bytes_per_param
    a = tokens * top_k

    def reads(name: str, touched: float) -> RoutingReads:
        nbytes = touched * w_e
        return RoutingReads(
            name, touched, a / touched if touched else 0.0, nbytes,
            None if read_bandwidth_bytes_per_s is None else nbytes / read_bandwidth_bytes_per_s,
        )

    return BatchReuse(
        tokens=tokens,
        top_k=top_k,
        n_experts=n_experts,
        assignments=a,
        useful_flops=a * 2.0 * expert_params,
        uniform=reads("uniform", float(min(n_experts, a))),
        concentrated=reads("concentrated", float(top_k if tokens else 0)),
        random=reads("random", expected_active_experts(n_experts, top_k, tokens)),
    )
