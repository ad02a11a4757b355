"""One engine instance as the twin runs it: the engine's scheduler with its defaults, the step model of the instance's
cards, and the KV room that caps its batch.

Engine defaults, each stated in the prediction's notes when used:

| engine | running requests | tokens per step | KV memory | KV policy | prefill |
|---|---|---|---|---|---|
| vLLM (V1, API server) | max_num_seqs 1024 (256 on A100 and cards under 70 GiB) | max_num_batched_tokens 8192 (2048) | gpu_memory_utilization 0.9 of the card | on demand, recompute preemption | chunked, mixed with decode |
| SGLang | max_running_requests 4096 (bounded by KV) | chunked_prefill_size 8192 (2048 under 35 GiB, 16384 from 160 GiB) | mem_fraction_static 0.88 of the card | reserve on admission | prefill batches run alone (no mixed chunk) |
| TensorRT-LLM (trtllm-serve) | max_batch_size 2048 | max_num_tokens 8192 | free_gpu_memory_fraction 0.9 of what is free | GUARANTEED_NO_EVICT | in-flight, whole contexts (chunked context off) |

Sources: vLLM `EngineArgs.get_batch_defaults` (device memory ≥ 70 GiB and not A100: 8192 / 1024), SGLang
`ServerArgs` (chunked_prefill_size by GPU memory), TensorRT-LLM's LLM API `BuildConfig` and `KvCacheConfig`
defaults. A runtime reserve of 1 GiB per card (CUDA context, NCCL buffers, CUDA graphs) is assumed for every engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError
from harness.model.gpu_step import ELEMENTWISE_KERNELS_PER_LAYER, GpuStepModel
from harness.model.parallel import Parallel
from harness.model.precision import Precision
from harness.model.serving_memory import ServingMemory, serving_memory
from harness.predict.calibration import StepConstants
from harness.specs.gpus import GpuSpec, get_gpu
from harness.specs.links import intra_node_link
from harness.specs.models import ModelSpec
from harness.target.chunked_prefill import ChunkedPrefillScheduler, ChunkedPrefillSettings
from harness.target.trtllm import TrtllmScheduler, TrtllmSettings

GiB = 1024**3
RUNTIME_RESERVE_BYTES = 1.0 * GiB
# step models by (model, GPU, layout, precision, KV bytes, constants, kernels per layer): built once per process, so their
# memoised step times serve every prediction of the same instance shape
_STEP_MODELS: dict[tuple, tuple[StepConstants, GpuStepModel]] = {}
SGLANG_MAX_RUNNING_REQUESTS = 4096
SGLANG_MEM_FRACTION_STATIC = 0.88
VLLM_GPU_MEMORY_UTILIZATION = 0.9
TRTLLM_FREE_GPU_MEMORY_FRACTION = 0.9

def vllm_defaults(gpu: GpuSpec) -> tuple[int, int]:
    big = gpu.hbm_capacity_bytes >= 70 * GiB and not gpu.name.startswith("a100")
    return (1024, 8192) if big else (256, 2048)


def sglang_chunk(gpu: GpuSpec) -> int:
    gib = gpu.hbm_capacity_bytes / GiB
    return 2048 if gib < 35 else 8192 if gib < 160 else 16384


@dataclass(frozen=True)
class InstanceTwin:
    """One role's instance: its scheduler settings, step model and memory."""

    engine: str
    role: str  # "agg", "prefill" or "decode"
    settings: Any  # ChunkedPrefillSettings or TrtllmSettings
    step_model: Any  # GpuStepModel (or a chapter-mode StepTimes)
    memory: ServingMemory | None
    notes: tuple[str, ...]

    @property
    def max_running(self) -> int:
        return self.settings.max_num_seqs

    @property
    def kv_capacity_tokens(self) -> float | None:
        return self.settings.kv_capacity_tokens

    def make_scheduler(self) -> Any:
        if isinstance(self.settings, TrtllmSettings):
            return TrtllmScheduler(self.settings, self.step_model)
        return ChunkedPrefillScheduler(self.settings, self.step_model)


def build_instance(engine: str, role: str, model: ModelSpec, gpu_name: str, parallel: Parallel, precision: Precision,
                   kv_bytes_per_elem: float, constants: StepConstants, *, max_batch: int | None = None,
                   max_num_tokens: int | None = None, chunked_prefill: bool | None = None,
                   step_model: Any = None, kv_limit: bool = True) -> InstanceTwin:
    """The twin of one `engine` instance of `parallel.gpus` cards of `gpu_name` in `role`."""
    gpu = get_gpu(gpu_name)
    notes: list[str] = []
    if step_model is None:
        link = intra_node_link(gpu.name)
        if parallel.tp > 1 and link is None and (constants.tables is None or parallel.tp not in constants.tables.allreduce):
            raise HarnessError(f"TP{parallel.tp} on {gpu.name}: no NVLink known for this GPU and no measured all-reduce; "
                               "give tp = 1 or a GPU with NVLink.")
        if parallel.tp > 1 and (constants.tables is None or parallel.tp not in constants.tables.allreduce) \
                and parallel.tp not in (constants.constants.allreduce if constants.constants else {}):
            notes.append(f"all-reduce: ring α–β bound on {link.name if link else '?'} (no measured all-reduce for "
                         f"{parallel.tp} cards)")
        # TensorRT-LLM fuses the residual add and RMSNorm into its all-reduce when tp > 1 (AllReduceFusionOp
        # RESIDUAL_RMS_NORM): one element-wise kernel per layer is left, the gated activation
        ew = 1 if engine == "trtllm" and parallel.tp > 1 else ELEMENTWISE_KERNELS_PER_LAYER
        key = (model, gpu.name, parallel, precision.name, kv_bytes_per_elem, id(constants), ew)
        step_model = _STEP_MODELS.get(key)
        if step_model is None or step_model[0] is not constants:
            sm = GpuStepModel(model, gpu, parallel, precision, kv_bytes_per_elem, constants.constants,
                              link.bandwidth_bytes_per_s if link else None, link.startup_latency_s if link else 5e-6,
                              constants.tables, ew)
            _STEP_MODELS[key] = step_model = (constants, sm)
        step_model = step_model[1]
    if engine == "vllm":
        seqs, budget = vllm_defaults(gpu)
        seqs = max_batch or seqs
        budget = max_num_tokens or budget
        if chunked_prefill is False:
            budget = max(budget, 1 << 17)
            notes.append("vLLM chunked prefill off: a prompt is prefilled whole")
        mem = _memory(model, gpu, parallel, precision, kv_bytes_per_elem, VLLM_GPU_MEMORY_UTILIZATION, "card", budget, seqs)
        notes.append(f"vLLM defaults: max_num_seqs {seqs}, max_num_batched_tokens {budget}, gpu_memory_utilization "
                     f"{VLLM_GPU_MEMORY_UTILIZATION}, chunked prefill mixed with decode, KV on demand with recompute preemption")
        settings: Any = ChunkedPrefillSettings("vllm", seqs, budget, True, prefix_caching=False,
                                               kv_capacity_tokens=mem.kv_tokens if kv_limit else None,
                                               kv_policy="on-demand", fast_forward=True)
    elif engine == "sglang":
        chunk = max_num_tokens or sglang_chunk(gpu)
        if chunked_prefill is False:
            chunk = max(chunk, 1 << 17)
        seqs = max_batch or SGLANG_MAX_RUNNING_REQUESTS
        mem = _memory(model, gpu, parallel, precision, kv_bytes_per_elem, SGLANG_MEM_FRACTION_STATIC, "card", chunk, seqs)
        notes.append(f"SGLang defaults: max_running_requests {seqs}, chunked_prefill_size {chunk}, mem_fraction_static "
                     f"{SGLANG_MEM_FRACTION_STATIC}, prefill batches alone, KV reserved on admission")
        settings = ChunkedPrefillSettings("sglang", seqs, chunk, False, prefix_caching=False,
                                          kv_capacity_tokens=mem.kv_tokens if kv_limit else None, kv_policy="reserve",
                                          fast_forward=True)
    elif engine == "trtllm":
        bs = max_batch or 2048
        budget = max_num_tokens or 8192
        chunked = bool(chunked_prefill)
        mem = _memory(model, gpu, parallel, precision, kv_bytes_per_elem, TRTLLM_FREE_GPU_MEMORY_FRACTION,
                      "free after weights", budget, bs)
        notes.append(f"TensorRT-LLM defaults: max_batch_size {bs}, max_num_tokens {budget}, free_gpu_memory_fraction "
                     f"{TRTLLM_FREE_GPU_MEMORY_FRACTION}, chunked context {'on' if chunked else 'off'}, GUARANTEED_NO_EVICT")
        settings = TrtllmSettings(bs, budget, chunked, kv_capacity_tokens=mem.kv_tokens if kv_limit else None,
                                  fast_forward=True)
    else:
        raise HarnessError(f"engine {engine!r} has no twin; give vllm, sglang or trtllm.")
    return InstanceTwin(engine, role, settings, step_model, mem, tuple(notes))


def _memory(model: ModelSpec, gpu: GpuSpec, parallel: Parallel, precision: Precision, kv_bytes: float, fraction: float,
            of: str, budget: int, seqs: int) -> ServingMemory:
    return serving_memory(model, gpu, parallel, precision, kv_bytes, usable_fraction=fraction, fraction_of=of,  # type: ignore[arg-type]
                          step_tokens=min(budget, 1 << 16), max_batch=min(seqs, 4096), runtime_bytes_per_card=RUNTIME_RESERVE_BYTES)
