"""Stage rates per GPU type: roofline time of a prefill and a decode step with efficiency constants.

Chapter 9, §9.2.3: d_P = L_new / r_P, d_D = (G-1) / r_D; each stage time is max(FLOPs/(η_c·peak),
bytes/(η_b·bandwidth)). Defaults η = 0.5 (the chapter's assumption); a calibration file overrides.

An instance of `tp` cards (tensor parallel, harness.model.parallel; §9.1.1 Fig. 9-1) splits each stage's
FLOPs and weight bytes over its cards, and its KV bytes too except the copies each card must keep (GQA heads
fewer than cards, MLA's latent); the roofline is taken per card, and the instance adds two all-reduces per layer
(plus one after the embedding) of `tokens × hidden × 2` bytes on the cards' link, the ring α–β bound. Stage
times are then per instance: d_P, d_D and r_P, r_D are one instance's. With tp = 1 nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from harness.errors import HarnessError
from harness.model.forward import DecodeStepWork, PrefillWork, decode_step_work, mean_decode_context, prefill_work
from harness.model.parallel import ACTIVATION_BYTES, allreduce_time_s, kv_replication
from harness.specs.gpus import GpuSpec
from harness.specs.models import ModelSpec

Bound = Literal["compute", "memory"]


DEFAULT_EFFICIENCY = 0.5  # the chapter's assumption for both fractions (§9.2.3)
DEFAULT_EFFICIENCY_SOURCE = "default 50% of peak (Chapter 9, §9.2.3)"


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fractions of datasheet peak reached: compute (MFU-like) and HBM bandwidth (MBU-like)."""

    compute: float = DEFAULT_EFFICIENCY
    bandwidth: float = DEFAULT_EFFICIENCY
    source: str = DEFAULT_EFFICIENCY_SOURCE

    def __post_init__(self) -> None:
        for f in ("compute", "bandwidth"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v <= 1):
                raise HarnessError(
                    f"efficiency.{f} must be in (0, 1] (a fraction of datasheet peak), got {v!r}; "
                    "an efficiency above 100% is a measurement or spec error."
                )

    @classmethod
    def from_scenario(cls, compute: float, bandwidth: float, source: str) -> "Efficiency":
        """A scenario's pair; the chapter's 50%/50% keeps the chapter's label, whether written out or left default."""
        if (compute, bandwidth) == (DEFAULT_EFFICIENCY, DEFAULT_EFFICIENCY):
            return cls()
        return cls(compute, bandwidth, source)

    def scaled(self, factor: float) -> "Efficiency":
        return Efficiency(min(1.0, self.compute * factor), min(1.0, self.bandwidth * factor), f"{self.source} ×{factor:g}")


@dataclass(frozen=True, slots=True)
class Workload:
    """Work one request brings (Chapter 9, §9.2.3)."""

    input_tokens: int
    output_tokens: int
    cached_prefix_tokens: int = 0
    decode_batch: int = 32
    weight_bytes_per_param: float = 2.0
    kv_bytes_per_elem: float = 2.0

    def __post_init__(self) -> None:
        if self.input_tokens < 1:
            raise HarnessError(f"workload.input_tokens must be >= 1, got {self.input_tokens!r}.")
        if self.output_tokens < 1:
            raise HarnessError(f"workload.output_tokens must be >= 1, got {self.output_tokens!r}.")
        if not 0 <= self.cached_prefix_tokens < self.input_tokens:
            raise HarnessError(
                f"workload.cached_prefix_tokens must be in [0, input_tokens) = [0, {self.input_tokens}), "
                f"got {self.cached_prefix_tokens!r}; the last input token is always recomputed."
            )
        if self.decode_batch < 1:
            raise HarnessError(f"workload.decode_batch must be >= 1, got {self.decode_batch!r}.")

    @property
    def new_tokens(self) -> int:
        return self.input_tokens - self.cached_prefix_tokens

    @property
    def decode_calls(self) -> int:
        return self.output_tokens - 1

    @property
    def mean_context_tokens(self) -> float:
        return mean_decode_context(self.input_tokens, self.output_tokens)


@dataclass(frozen=True, slots=True)
class StageRates:
    gpu: str
    efficiency: Efficiency
    prefill: PrefillWork
    decode_step: DecodeStepWork
    prefill_compute_s: float
    prefill_memory_s: float
    prefill_s_per_request: float  # d_P
    prefill_tokens_per_s: float  # r_P
    prefill_bound: Bound
    decode_step_compute_s: float
    decode_step_memory_s: float
    decode_step_s: float
    decode_calls_per_s: float  # r_D
    decode_s_per_request: float  # d_D
    decode_bound: Bound
    decode_calls_per_request: int
    tensor_parallel: int = 1  # cards per instance; the times above are one instance's
    prefill_allreduce_s: float = 0.0  # inside prefill_s_per_request
    decode_step_allreduce_s: float = 0.0  # inside decode_step_s

    @property
    def colocated_s_per_request(self) -> float:
        return self.prefill_s_per_request + self.decode_s_per_request

    @property
    def allreduce_s_per_request(self) -> float:
        """A TP instance's all-reduce seconds for one request (prefill + its share of the decode steps'); 0 at tp = 1."""
        return self.prefill_allreduce_s + self.decode_calls_per_request * self.decode_step_allreduce_s / self.decode_step.batch

    @property
    def compute_s_per_request(self) -> float:
        """Compute-side GPU-seconds of both stages (for the ideal chunked-prefill bound); a TP instance's all-reduces
        occupy it too (they neither hide compute nor are hidden by it in this bound)."""
        return (self.prefill_compute_s + self.decode_calls_per_request * self.decode_step_compute_s / self.decode_step.batch
                + self.allreduce_s_per_request)

    @property
    def memory_s_per_request(self) -> float:
        return (self.prefill_memory_s + self.decode_calls_per_request * self.decode_step_memory_s / self.decode_step.batch
                + self.allreduce_s_per_request)

    @property
    def hidden_prefill_tokens_per_decode_step(self) -> float:
        """Prefill tokens that fit in the idle compute of one memory-bound decode step (§9.2.3: ≈490 A100, ≈85 H20)."""
        idle = max(0.0, self.decode_step_memory_s - self.decode_step_compute_s)
        per_token_s = self.prefill_compute_s / self.prefill.new_tokens
        return idle / per_token_s

    def json_fields(self) -> dict[str, Any]:
        """The documented JSON of one GPU type's stage rates (docs/model.md, `stage_rates.<gpu>`)."""
        return {
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "decode_calls_per_s": self.decode_calls_per_s,
            "prefill_s_per_request": self.prefill_s_per_request,
            "decode_s_per_request": self.decode_s_per_request,
            "colocated_s_per_request": self.colocated_s_per_request,
            "bound": {"prefill": self.prefill_bound, "decode": self.decode_bound},
            "prefill_flops": self.prefill.flops,
            "prefill_bytes": self.prefill.bytes,
            "prefill_compute_s": self.prefill_compute_s,
            "prefill_memory_s": self.prefill_memory_s,
            "decode_step_s": self.decode_step_s,
            "decode_step_flops": self.decode_step.flops,
            "decode_step_bytes": self.decode_step.bytes,
            "decode_step_weight_bytes": self.decode_step.weight_bytes,
            "decode_step_kv_bytes": self.decode_step.kv_read_bytes,
            "decode_step_compute_s": self.decode_step_compute_s,
            "decode_step_memory_s": self.decode_step_memory_s,
            "hidden_prefill_tokens_per_decode_step": self.hidden_prefill_tokens_per_decode_step,
            "efficiency": self.efficiency,
        } | ({"tensor_parallel": self.tensor_parallel, "prefill_allreduce_s": self.prefill_allreduce_s,
              "decode_step_allreduce_s": self.decode_step_allreduce_s} if self.tensor_parallel > 1 else {})


def _roofline(flops: float, nbytes: float, gpu: GpuSpec, eff: Efficiency) -> tuple[float, float, float, Bound]:
    tc = flops / (eff.compute * gpu.peak_bf16_flops_per_s)
    tm = nbytes / (eff.bandwidth * gpu.hbm_bandwidth_bytes_per_s)
    return tc, tm, max(tc, tm), ("compute" if tc >= tm else "memory")


def stage_rates(gpu: GpuSpec, model: ModelSpec, work: Workload, eff: Efficiency | None = None, *, tp: int = 1,
                link_bandwidth_bytes_per_s: float | None = None, link_startup_latency_s: float = 0.0) -> StageRates:
    """r_P, r_D, d_P, d_D and which roofline bound applies, for one instance of `tp` cards of one GPU type."""
    eff = eff or Efficiency()
    pw = prefill_work(model, work.new_tokens, work.cached_prefix_tokens, work.weight_bytes_per_param, work.kv_bytes_per_elem)
    dw = decode_step_work(model, work.decode_batch, work.mean_context_tokens, work.weight_bytes_per_param, work.kv_bytes_per_elem)
    ar_p = ar_d = 0.0
    if tp == 1:
        ptc, ptm, pt, pb = _roofline(pw.flops, pw.bytes, gpu, eff)
        dtc, dtm, dt, db = _roofline(dw.flops, dw.bytes, gpu, eff)
    else:
        if not link_bandwidth_bytes_per_s:
            raise HarnessError(f"tp = {tp} on {gpu.name}: the cards' link bandwidth is needed for the all-reduces.")
        repl = kv_replication(model, tp)
        kv_p = pw.kv_write_bytes + pw.kv_read_bytes
        ptc, ptm, pt, pb = _roofline(pw.flops / tp, (pw.bytes - kv_p) / tp + kv_p * repl / tp, gpu, eff)
        dtc, dtm, dt, db = _roofline(dw.flops / tp, dw.weight_bytes / tp + dw.kv_read_bytes * repl / tp, gpu, eff)
        n_ar = 2 * model.n_layers + 1
        ar_p = n_ar * allreduce_time_s(work.new_tokens * model.hidden_size * ACTIVATION_BYTES, tp,
                                       link_bandwidth_bytes_per_s, link_startup_latency_s)
        ar_d = n_ar * allreduce_time_s(work.decode_batch * model.hidden_size * ACTIVATION_BYTES, tp,
                                       link_bandwidth_bytes_per_s, link_startup_latency_s)
        pt, dt = pt + ar_p, dt + ar_d
    r_d = work.decode_batch / dt
    return StageRates(
        gpu=gpu.name,
        efficiency=eff,
        prefill=pw,
        decode_step=dw,
        prefill_compute_s=ptc,
        prefill_memory_s=ptm,
        prefill_s_per_request=pt,
        prefill_tokens_per_s=work.new_tokens / pt,
        prefill_bound=pb,
        decode_step_compute_s=dtc,
        decode_step_memory_s=dtm,
        decode_step_s=dt,
        decode_calls_per_s=r_d,
        decode_s_per_request=work.decode_calls / r_d,
        decode_bound=db,
        decode_calls_per_request=work.decode_calls,
        tensor_parallel=tp,
        prefill_allreduce_s=ar_p,
        decode_step_allreduce_s=ar_d,
    )
