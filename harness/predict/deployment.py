"""What `harness predict` is asked: a deployment (engine, GPU, model, precision, parallel layout, aggregated or
disaggregated workers) and a workload (lengths, closed-loop concurrency or an arrival rate). Validated records:
a bad value raises a HarnessError naming the field, the value and the fix."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from harness.errors import HarnessError
from harness.model.parallel import Parallel
from harness.model.precision import get_precision
from harness.specs.gpus import get_gpu
from harness.specs.links import get_link
from harness.specs.limits import context_problem
from harness.specs.models import ModelSpec, get_model
from harness.units import DTYPE_BYTES

ENGINES = ("vllm", "sglang", "trtllm")
Mode = Literal["agg", "disagg"]


@dataclass(frozen=True)
class Workers:
    """One role's instances: how many, each one's parallel layout, and the most requests one runs at once
    (None: the engine's default; in disaggregated serving the prefill / decode batch)."""

    count: int = 1
    parallel: Parallel = field(default_factory=Parallel)
    max_batch: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise HarnessError(f"workers: count must be an integer >= 1, got {self.count!r}.")
        if self.max_batch is not None and (isinstance(self.max_batch, bool) or not isinstance(self.max_batch, int)
                                           or self.max_batch < 1):
            raise HarnessError(f"workers: max_batch must be an integer >= 1 (or unset: the engine's default), got {self.max_batch!r}.")

    @property
    def gpus(self) -> int:
        return self.count * self.parallel.gpus


@dataclass(frozen=True)
class Deployment:
    engine: str
    gpu: str
    model: str  # catalog name, Hugging Face config.json path, or GGUF path
    precision: str = "bf16"
    kv_dtype: str = "bf16"
    mode: Mode = "agg"
    workers: Workers = field(default_factory=Workers)  # agg: the instances
    prefill: Workers | None = None  # disagg
    decode: Workers | None = None  # disagg
    kv_link: str = "cx7-400g"  # disagg: the link each card of a prefill instance sends its KV shard over
    max_num_tokens: int | None = None  # the engine's token budget per step (None: its default)
    chunked_prefill: bool | None = None  # None: the engine's default

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise HarnessError(f"engine {self.engine!r} is not modelled; give one of {', '.join(ENGINES)}.")
        get_gpu(self.gpu)
        get_precision(self.precision)
        if self.kv_dtype not in ("bf16", "fp16", "fp8"):
            raise HarnessError(f"kv_dtype {self.kv_dtype!r}: give bf16 or fp8 (the KV cache dtypes the engines use).")
        if self.mode not in ("agg", "disagg"):
            raise HarnessError(f"mode {self.mode!r}: give agg (prefill and decode on the same instances) or disagg.")
        if self.mode == "disagg":
            if self.prefill is None or self.decode is None:
                raise HarnessError("mode disagg needs prefill and decode workers (--prefill-workers N --decode-workers M, "
                                   "each with its --prefill-tp / --decode-tp and batch).")
            get_link(self.kv_link)
        if self.max_num_tokens is not None and (isinstance(self.max_num_tokens, bool) or self.max_num_tokens < 1):
            raise HarnessError(f"max_num_tokens must be an integer >= 1, got {self.max_num_tokens!r}.")

    @property
    def model_spec(self) -> ModelSpec:
        return get_model(self.model)

    @property
    def kv_bytes_per_elem(self) -> float:
        return DTYPE_BYTES[self.kv_dtype]

    @property
    def gpus(self) -> int:
        if self.mode == "agg":
            return self.workers.gpus
        assert self.prefill is not None and self.decode is not None
        return self.prefill.gpus + self.decode.gpus


LengthDist = Literal["fixed", "uniform"]


@dataclass(frozen=True)
class Workload:
    """Requests of `input_tokens` / `output_tokens` — fixed, or uniform: within ±range_ratio of them (`range_mode`
    "symmetric", today's `vllm bench serve --random-range-ratio`) or between range_ratio × them and them ("below", the
    older benchmark_serving.py that InferenceMAX runs) — sent by `concurrency` closed-loop clients (each sends when its last request ends) or
    at `rate_per_s` (Poisson). `requests` are measured after `warmup_requests` (not measured)."""

    input_tokens: int
    output_tokens: int
    concurrency: int | None = None
    rate_per_s: float | None = None
    requests: int | None = None  # None: 4 × concurrency (closed loop), or 60 s of arrivals (open loop), at least 64
    warmup_requests: int | None = None  # None: 2 × concurrency (closed loop; aiperf's default in aiconfigurator's bench), 0 open
    range_ratio: float = 0.0
    range_mode: Literal["symmetric", "below"] = "symmetric"
    seed: int = 0

    def __post_init__(self) -> None:
        for f in ("input_tokens", "output_tokens"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"workload.{f} must be an integer >= 1, got {v!r}.")
            problem = context_problem(v, f)
            if problem:
                raise HarnessError(f"workload.{problem}")
        if (self.concurrency is None) == (self.rate_per_s is None):
            raise HarnessError("workload: give either --concurrency N (closed loop: N clients, each sending when its last "
                               "request ends) or --rate R (requests per second, Poisson arrivals), not both.")
        if self.concurrency is not None and (isinstance(self.concurrency, bool) or self.concurrency < 1):
            raise HarnessError(f"workload.concurrency must be an integer >= 1, got {self.concurrency!r}.")
        if self.rate_per_s is not None and not (math.isfinite(self.rate_per_s) and self.rate_per_s > 0):
            raise HarnessError(f"workload.rate_per_s must be a positive number of requests per second, got {self.rate_per_s!r}.")
        if self.range_mode not in ("symmetric", "below"):
            raise HarnessError(f"workload.range_mode must be 'symmetric' ([(1-r)·L, (1+r)·L]) or 'below' ([r·L, L]), got {self.range_mode!r}.")
        if self.range_mode == "symmetric" and not 0.0 <= self.range_ratio < 1.0:
            raise HarnessError(f"workload.range_ratio must be in [0, 1) (lengths uniform in [(1-r)·L, (1+r)·L]), got {self.range_ratio!r}.")
        if self.range_mode == "below" and not 0.0 < self.range_ratio <= 1.0:
            raise HarnessError(f"workload.range_ratio must be in (0, 1] with range_mode 'below' (lengths uniform in [r·L, L]), "
                               f"got {self.range_ratio!r}.")
        for f in ("requests", "warmup_requests"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < (1 if f == "requests" else 0)):
                raise HarnessError(f"workload.{f} must be an integer >= {1 if f == 'requests' else 0}, got {v!r}.")

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None

    @property
    def measured_requests(self) -> int:
        if self.requests is not None:
            return self.requests
        if self.concurrency is not None:
            return max(64, 4 * self.concurrency)
        return max(64, int(round(60.0 * (self.rate_per_s or 1.0))))

    @property
    def warmup(self) -> int:
        if self.warmup_requests is not None:
            return self.warmup_requests
        return 2 * self.concurrency if self.concurrency is not None else 0

    def length_range(self, nominal: int) -> tuple[int, int]:
        """The [low, high] token counts a request's length is drawn from (equal when lengths are fixed)."""
        if self.range_mode == "below":
            return max(1, int(nominal * self.range_ratio)), nominal
        r = self.range_ratio
        return max(1, int(nominal * (1 - r))), int(nominal * (1 + r))

    @property
    def max_input_tokens(self) -> int:
        return self.length_range(self.input_tokens)[1]

    @property
    def max_output_tokens(self) -> int:
        return self.length_range(self.output_tokens)[1]

    @property
    def fixed_lengths(self) -> bool:
        return (self.range_mode == "symmetric" and self.range_ratio == 0) or (self.range_mode == "below" and self.range_ratio == 1)

    def describe(self) -> str:
        lens = f"ISL {self.input_tokens} / OSL {self.output_tokens}"
        if not self.fixed_lengths:
            lo_i, hi_i = self.length_range(self.input_tokens)
            lo_o, hi_o = self.length_range(self.output_tokens)
            lens += f" (uniform {lo_i}–{hi_i} / {lo_o}–{hi_o})"
        load = f"closed loop, concurrency {self.concurrency}" if self.closed_loop else f"Poisson arrivals at {self.rate_per_s:g} req/s"
        return f"{lens}, {load}, {self.measured_requests} requests measured after {self.warmup} warm-up"
