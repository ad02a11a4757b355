"""How the chapter-9 PD plan changes with the KV-cache dtype (Chapter 19, §19.6 KV quantisation).

The KV dtype enters the model in one place, bytes per token (§9.2.2: 2·n·h_kv·d_h·b for GQA,
n·(d_c+d_r)·b for MLA), and from there:
    V_KV = L·bytes/token                      the state one request hands from P to D
    link term of μ_PD = 1/(α + V_KV/B_net)    §9.2.3, example 9.2 (20.7/s for 1.125 GiB at 25 GB/s)
    decode step bytes = weights + B·C·bytes/token → step time, r_D and the D-pool rate (§9.2.3)
    KV production r = V_KV/d_P and tier retention C/r (§9.5.2: HBM ≈45 s, host ≈195 s, SSD ≈2722 s)
    decode batch that fits: ⌊(HBM − weights)/final KV per request⌋
Every row is the full plan (harness.model.plan.plan) re-run with only workload.kv_dtype changed, so
the PD allocation, its bound and the chunked-prefill bound follow. Quantisation scales (one fp16
scale per group of 64 for HQQ-style int4/int8) are not counted; they add 2/64 bytes per element.
Quality loss is outside the model: §19.6 keeps the newest 128 tokens in full precision for that reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Sequence

from harness.errors import HarnessError
from harness.model import kv_tiers
from harness.model.forward import param_counts
from harness.model.kv import kv_bytes
from harness.specs.models import get_model
from harness.specs.scenario import Scenario
from harness.specs.storage import get_server, per_gpu_tiers
from harness.units import DTYPE_BYTES

KV_DTYPES: tuple[str, ...] = ("bf16", "fp8", "int8", "int4")


@dataclass(frozen=True, slots=True)
class KvDtypeRow:
    kv_dtype: str
    kv_bytes_per_elem: float
    kv_bytes_per_token: float
    state_bytes: float  # V_KV of one request's input
    link_requests_per_s: float | None  # 1/(α + V/B); None without a link
    pd_requests_per_s: float | None  # best μ_PD
    pd_bound: str | None
    pd_prefill: dict[str, int] | None
    colocated_requests_per_s: float
    chunked_colocated_requests_per_s: float
    decode_step_s: dict[str, float]  # per GPU type, at the scenario's batch and mean context
    decode_step_bytes: dict[str, float]
    decode_calls_per_s: dict[str, float]
    hidden_prefill_tokens_per_decode_step: dict[str, float]
    max_decode_batch: dict[str, int]  # requests whose final KV fits beside the weights
    kv_production_bytes_per_s: float  # r = V/d_P on the fastest prefill GPU
    retention_s: dict[str, float | None]  # tier -> C/r (None: unbounded pool)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _with_kv_dtype(s: Scenario, kv_dtype: str) -> Scenario:
    if kv_dtype not in DTYPE_BYTES:
        raise HarnessError(f"kv_dtype: unknown dtype {kv_dtype!r}. Known: {', '.join(DTYPE_BYTES)}.")
    return s.model_copy(update={"workload": s.workload.model_copy(update={"kv_dtype": kv_dtype})})


def max_decode_batch(hbm_capacity_bytes: float, weight_bytes: float, final_state_bytes: float) -> int:
    """⌊(HBM − weights) / final KV per request⌋: the decode batch whose KV fits (§9.2.3, §9.7.2 memory check)."""
    if final_state_bytes <= 0:
        raise HarnessError(f"final_state_bytes must be > 0, got {final_state_bytes!r}.")
    return max(0, math.floor((hbm_capacity_bytes - weight_bytes) / final_state_bytes))


def kv_dtype_row(s: Scenario, kv_dtype: str, server: str = "dgx-a100") -> KvDtypeRow:
    """One dtype's plan; `server` supplies the per-GPU storage tiers for retention (§9.5.2 uses a DGX A100)."""
    from harness.model.plan import plan  # the plan imports the whole model; keep this module light to import

    s2 = _with_kv_dtype(s, kv_dtype)
    p = plan(s2, include_grid=False)
    model = get_model(s.workload.model)
    b = DTYPE_BYTES[kv_dtype]
    kv = p.kv
    sr = p.stage_rates
    w_bytes = p.memory.weight_bytes
    final = kv.final_bytes_per_request
    from harness.specs.gpus import get_gpu

    fastest = min(sr, key=lambda g: sr[g].prefill_s_per_request)
    r = kv_tiers.kv_production_rate_bytes_per_s(kv.bytes_per_request, sr[fastest].prefill_s_per_request)
    tiers = per_gpu_tiers(get_server(server), param_counts(model).total * DTYPE_BYTES[s.workload.weight_dtype])
    retention = {t.name: (None if math.isinf(t.capacity_bytes) else kv_tiers.retention_s(t.capacity_bytes, r)) for t in tiers}
    best = p.pd.best if p.pd else None
    return KvDtypeRow(
        kv_dtype=kv_dtype,
        kv_bytes_per_elem=b,
        kv_bytes_per_token=kv.bytes_per_token,
        state_bytes=kv.bytes_per_request,
        link_requests_per_s=(1.0 / kv.transfer_s) if kv.transfer_s else None,
        pd_requests_per_s=best.requests_per_s if best else None,
        pd_bound=best.bound if best else None,
        pd_prefill=dict(best.prefill) if best else None,
        colocated_requests_per_s=p.colocated.requests_per_s,
        chunked_colocated_requests_per_s=p.chunked_colocated.requests_per_s,
        decode_step_s={g: v.decode_step_s for g, v in sr.items()},
        decode_step_bytes={g: v.decode_step.bytes for g, v in sr.items()},
        decode_calls_per_s={g: v.decode_calls_per_s for g, v in sr.items()},
        hidden_prefill_tokens_per_decode_step={g: v.hidden_prefill_tokens_per_decode_step for g, v in sr.items()},
        max_decode_batch={g: max_decode_batch(get_gpu(g).hbm_capacity_bytes, w_bytes, final) for g in sr},
        kv_production_bytes_per_s=r,
        retention_s=retention,
    )


def kv_dtype_table(s: Scenario, dtypes: Sequence[str] = KV_DTYPES, server: str = "dgx-a100") -> list[KvDtypeRow]:
    """The plan of `s` under each KV dtype, in the order given (the report's KV-dtype table)."""
    if not dtypes:
        raise HarnessError(f"kv dtypes: give at least one of {', '.join(DTYPE_BYTES)}.")
    return [kv_dtype_row(s, d, server) for d in dtypes]


def mixed_precision_state_bytes(bytes_per_token_full: float, tokens: int, residual_tokens: int, quant_bytes_per_elem: float,
                                full_bytes_per_elem: float) -> float:
    """KV bytes when the newest `residual_tokens` stay in full precision and the rest are quantised
    (§19.6: "the last 128 tokens in full precision, the rest in 4 bits"):
        V = min(R, L)·b_tok + max(0, L − R)·b_tok·(b_q/b_full)."""
    if tokens < 0 or residual_tokens < 0:
        raise HarnessError(f"tokens and residual_tokens must be >= 0, got {tokens!r} and {residual_tokens!r}.")
    if not (quant_bytes_per_elem > 0 and full_bytes_per_elem > 0):
        raise HarnessError("quant_bytes_per_elem and full_bytes_per_elem must be > 0 bytes.")
    full = min(residual_tokens, tokens)
    return full * bytes_per_token_full + (tokens - full) * bytes_per_token_full * quant_bytes_per_elem / full_bytes_per_elem


def state_bytes(model_name: str, tokens: int, kv_dtype: str) -> float:
    """V_KV of `tokens` tokens of `model_name` in `kv_dtype` (a convenience for the report)."""
    if kv_dtype not in DTYPE_BYTES:
        raise HarnessError(f"kv_dtype: unknown dtype {kv_dtype!r}. Known: {', '.join(DTYPE_BYTES)}.")
    return kv_bytes(get_model(model_name), tokens, DTYPE_BYTES[kv_dtype])
