"""vLLM: `vllm serve` options and command lines, single or prefill/decode disaggregated behind vllm-router.

PD launch (vLLM docs, "NixlConnector Usage Guide" and "Disaggregated Prefilling"; vllm-router's
`--help`): each worker is a `vllm serve` process on its own GPUs (CUDA_VISIBLE_DEVICES) with
`--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'` and its own NIXL
side-channel port (VLLM_NIXL_SIDE_CHANNEL_PORT); the router is
`vllm-router --pd-disaggregation --prefill URL ... --decode URL ... --host H --port P --policy X`.
Needs GPUs: here it is validated and printed (`harness engine CONFIG --dry-run`), not run.
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Annotated, Any, Literal

from pydantic import Field

from harness.engines.config import EngineConfig, FixedPort, Strict, port_and_gpu_conflicts
from harness.engines.launcher import LaunchPlan, ProcessSpec, free_port

SECTION = "vllm"

GpuList = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


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
    out: list[str] = []
    b = cfg.base
    o: Options = cfg.options  # type: ignore[assignment]
    if b.model.gguf_package:
        out.append(f"model.gguf_package: vLLM loads a Hugging Face model (got {b.model.gguf_package!r}); give model.hf_id or model.path")
    per_worker = o.tensor_parallel_size * o.pipeline_parallel_size
    if b.mode == "single":
        if len(o.gpus) != per_worker:
            out.append(
                f"vllm.gpus: {len(o.gpus)} GPU(s) {o.gpus} but tensor_parallel_size × pipeline_parallel_size = {per_worker}; "
                "give one GPU per rank"
            )
        out += port_and_gpu_conflicts({"server.port": b.server.port}, {"vllm.gpus": o.gpus})
        return out
    pd: PdOptions = cfg.pd  # type: ignore[assignment]
    if not b.server.port:
        out.append("server.port: the router's port must be fixed in pd mode (got 0); give a port such as 8000")
    ports: dict[str, int] = {"server.port": b.server.port}
    gpus: dict[str, list[int]] = {}
    for role, workers in (("prefill", pd.prefill), ("decode", pd.decode)):
        for i, w in enumerate(workers):
            where = f"pd.{role}[{i}]"
            if len(w.gpus) != per_worker:
                out.append(
                    f"{where}.gpus: {len(w.gpus)} GPU(s) {w.gpus} but tensor_parallel_size × pipeline_parallel_size = "
                    f"{per_worker}; give one GPU per rank"
                )
            ports[f"{where}.port"] = w.port
            ports[f"{where}.side_channel_port"] = w.side_channel_port
            gpus[f"{where}.gpus"] = w.gpus
    return out + port_and_gpu_conflicts(ports, gpus)


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


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


def _cuda(gpus: list[int]) -> str:
    return ",".join(str(g) for g in gpus)


def plan(cfg: EngineConfig, *, resolve: bool = True, port: int | None = None) -> LaunchPlan:
    o: Options = cfg.options  # type: ignore[assignment]
    b = cfg.base
    host = b.server.host
    extra = list(b.server.extra_args)
    info: dict[str, Any] = {"name": "vllm", "version": installed_version(), "flags": o.model_dump(),
                            "model": b.model.hf_id or b.model.path}
    procs: list[ProcessSpec] = []
    if b.mode == "single":
        p = port if port is not None else (b.server.port or (free_port(host) if resolve else 0))
        argv = serve_args(cfg, host, str(p) if p else "<free port>") + extra
        procs.append(ProcessSpec("server", tuple(argv), host, p, {**b.server.env, "CUDA_VISIBLE_DEVICES": _cuda(o.gpus)},
                                 metrics_path="/metrics"))
        endpoint = procs[0].base_url
    else:
        pd: PdOptions = cfg.pd  # type: ignore[assignment]
        kv = {"kv_connector": pd.kv_connector, "kv_role": "kv_both"}
        if pd.kv_buffer_device != "cuda":
            kv["kv_buffer_device"] = pd.kv_buffer_device
        kv_json = json.dumps(kv, separators=(",", ":"))
        info["pd"] = pd.model_dump()
        for role, workers in (("prefill", pd.prefill), ("decode", pd.decode)):
            for i, w in enumerate(workers):
                argv = serve_args(cfg, host, str(w.port)) + ["--kv-transfer-config", kv_json] + extra
                env = {**b.server.env, "CUDA_VISIBLE_DEVICES": _cuda(w.gpus), "VLLM_NIXL_SIDE_CHANNEL_PORT": str(w.side_channel_port)}
                procs.append(ProcessSpec(f"{role}-{i}", tuple(argv), host, w.port, env, metrics_path="/metrics"))
        rport = port if port is not None else b.server.port
        router = [*pd.router.command, "--pd-disaggregation"]
        for w in pd.prefill:
            router += ["--prefill", f"http://{host}:{w.port}"]
        for w in pd.decode:
            router += ["--decode", f"http://{host}:{w.port}"]
        router += ["--host", host, "--port", str(rport), "--policy", pd.router.policy]
        procs.append(ProcessSpec("router", tuple(router), host, rport, dict(b.server.env)))
        endpoint = procs[-1].base_url
    return LaunchPlan(
        config_name=cfg.name, engine=cfg.engine, mode=b.mode, processes=tuple(procs), endpoint=endpoint,
        served_name=cfg.served_name, engine_info=info,
        startup_timeout_s=b.startup.timeout_s, poll_interval_s=b.startup.poll_interval_s,
        stop_timeout_s=b.startup.stop_timeout_s, probe_prompt=b.startup.probe_prompt,
        probe_max_tokens=b.startup.probe_max_tokens,
    )
