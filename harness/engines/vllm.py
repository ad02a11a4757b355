"""vLLM: `vllm serve` options and command lines, single or prefill/decode disaggregated behind vllm-router.

PD launch (vLLM docs, "NixlConnector Usage Guide" and "Disaggregated Prefilling"; vllm-router's
`--help`): each worker is a `vllm serve` process on its own GPUs (CUDA_VISIBLE_DEVICES) with
`--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'` and its own NIXL
side-channel port (VLLM_NIXL_SIDE_CHANNEL_PORT); the router is
`vllm-router --pd-disaggregation --prefill URL ... --decode URL ... --host H --port P --policy X`.
Needs GPUs: here it is validated and printed (`harness engine CONFIG --dry-run`), not run.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field

from harness.engines import gpu_server
from harness.engines.config import EngineConfig, FixedPort, Strict
from harness.engines.gpu_server import GpuList, check_launch, plan_launch
from harness.engines.launcher import LaunchPlan

SECTION = "vllm"


class Options(Strict):
    command: Annotated[list[str], Field(min_length=1)] = ["vllm", "serve"]
    gpus: GpuList = [0]  # single mode: CUDA_VISIBLE_DEVICES of the server
    tensor_parallel_size: Annotated[int, Field(ge=1)] = 1
    pipeline_parallel_size: Annotated[int, Field(ge=1)] = 1
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    max_model_len: Annotated[int, Field(ge=1)] | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.9
    max_num_seqs: Annotated[int, Field(ge=1)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=1)] | None = None
    enable_prefix_caching: bool | None = None  # None: vLLM's default
    enable_chunked_prefill: bool | None = None
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    quantization: str | None = None
    enforce_eager: bool = False
    seed: int | None = None


class Worker(Strict):
    gpus: GpuList
    port: FixedPort
    side_channel_port: FixedPort  # VLLM_NIXL_SIDE_CHANNEL_PORT


class Router(Strict):
    command: Annotated[list[str], Field(min_length=1)] = ["vllm-router"]
    policy: Literal["round_robin", "random", "cache_aware", "power_of_two", "consistent_hash"] = "round_robin"


class PdOptions(Strict):
    kv_connector: Literal["NixlConnector", "LMCacheConnectorV1", "P2pNcclConnector", "MooncakeConnector"] = "NixlConnector"
    kv_buffer_device: Literal["cuda", "cpu"] = "cuda"
    prefill: Annotated[list[Worker], Field(min_length=1)]
    decode: Annotated[list[Worker], Field(min_length=1)]
    router: Router = Router()


def check(cfg: EngineConfig) -> list[str]:
    o: Options = cfg.options  # type: ignore[assignment]

    def worker_ports(role: str, where: str, w: Worker) -> tuple[list[str], dict[str, int]]:
        return [], {f"{where}.side_channel_port": w.side_channel_port}

    ranks_label = "tensor_parallel_size × pipeline_parallel_size"
    return check_launch(cfg, section=SECTION, engine_title="vLLM", ranks=o.tensor_parallel_size * o.pipeline_parallel_size,
                        ranks_label=ranks_label, pd_ranks_label=ranks_label, worker_ports=worker_ports)


def installed_version() -> str | None:
    return gpu_server.installed_version("vllm")


def serve_args(cfg: EngineConfig, host: str, port: str) -> list[str]:
    """`vllm serve MODEL` with the typed options (flag names as in `vllm serve --help`)."""
    o: Options = cfg.options  # type: ignore[assignment]
    b = cfg.base
    argv = [*o.command, b.model.hf_id or b.model.path or "", "--host", host, "--port", port,
            "--served-model-name", cfg.served_name,
            "--tensor-parallel-size", str(o.tensor_parallel_size),
            "--pipeline-parallel-size", str(o.pipeline_parallel_size),
            "--dtype", o.dtype, "--gpu-memory-utilization", f"{o.gpu_memory_utilization:g}",
            "--kv-cache-dtype", o.kv_cache_dtype]
    for flag, v in (("--max-model-len", o.max_model_len), ("--max-num-seqs", o.max_num_seqs),
                    ("--max-num-batched-tokens", o.max_num_batched_tokens), ("--quantization", o.quantization),
                    ("--seed", o.seed)):
        if v is not None:
            argv += [flag, str(v)]
    for name, v in (("enable-prefix-caching", o.enable_prefix_caching), ("enable-chunked-prefill", o.enable_chunked_prefill)):
        if v is not None:
            argv.append(f"--{name}" if v else f"--no-{name}")
    if o.enforce_eager:
        argv.append("--enforce-eager")
    return argv


def kv_transfer_config(pd: PdOptions) -> str:
    """The `--kv-transfer-config` JSON of every pd worker."""
    kv = {"kv_connector": pd.kv_connector, "kv_role": "kv_both"}
    if pd.kv_buffer_device != "cuda":
        kv["kv_buffer_device"] = pd.kv_buffer_device
    return json.dumps(kv, separators=(",", ":"))


def plan(cfg: EngineConfig, *, resolve: bool = True, port: int | None = None) -> LaunchPlan:
    def pd_worker(role: str, w: Worker) -> tuple[list[str], dict[str, str]]:
        pd: PdOptions = cfg.pd  # type: ignore[assignment]
        return ["--kv-transfer-config", kv_transfer_config(pd)], {"VLLM_NIXL_SIDE_CHANNEL_PORT": str(w.side_channel_port)}

    return plan_launch(
        cfg, resolve=resolve, port=port, version=installed_version(),
        server_argv=lambda host, p: serve_args(cfg, host, p), metrics_path="/metrics",
        pd_worker=pd_worker, router_prefill_args=lambda w: [],
    )
