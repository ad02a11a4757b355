"""SGLang: `sglang.launch_server` options and command lines, single or prefill/decode disaggregated behind its router.

PD launch (SGLang docs, "PD Disaggregation"; `python -m sglang.launch_server --help`): a prefill
worker runs with `--disaggregation-mode prefill` and a bootstrap port
(`--disaggregation-bootstrap-port`, default 8998), a decode worker with
`--disaggregation-mode decode`; both name the KV transfer backend
(`--disaggregation-transfer-backend mooncake|nixl`) and, for Mooncake over RDMA, the NICs
(`--disaggregation-ib-device`). The router is
`python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT --decode URL --host H --port P`.
Needs GPUs: here it is validated and printed (`harness engine CONFIG --dry-run`), not run.
"""

from __future__ import annotations

import importlib.metadata
from typing import Annotated, Any, Literal

from pydantic import Field

from harness.engines.config import EngineConfig, FixedPort, Strict, port_and_gpu_conflicts
from harness.engines.launcher import LaunchPlan, ProcessSpec, free_port

SECTION = "sglang"

GpuList = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class Options(Strict):
    command: Annotated[list[str], Field(min_length=1)] = ["python", "-m", "sglang.launch_server"]
    gpus: GpuList = [0]  # single mode: CUDA_VISIBLE_DEVICES of the server
    tp_size: Annotated[int, Field(ge=1)] = 1
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    context_length: Annotated[int, Field(ge=1)] | None = None
    mem_fraction_static: Annotated[float, Field(gt=0, le=1)] | None = None
    max_running_requests: Annotated[int, Field(ge=1)] | None = None
    chunked_prefill_size: int | None = None  # -1 disables chunking
    kv_cache_dtype: Literal["auto", "fp8_e5m2", "fp8_e4m3"] = "auto"
    quantization: str | None = None
    attention_backend: str | None = None
    disable_radix_cache: bool = False
    enable_metrics: bool = True  # --enable-metrics: Prometheus /metrics
    random_seed: int | None = None


class Worker(Strict):
    gpus: GpuList
    port: FixedPort
    bootstrap_port: FixedPort | None = None  # prefill only; SGLang's default is 8998


class Router(Strict):
    command: Annotated[list[str], Field(min_length=1)] = ["python", "-m", "sglang_router.launch_router"]
    policy: Literal["random", "round_robin", "cache_aware", "power_of_two"] = "round_robin"


class PdOptions(Strict):
    transfer_backend: Literal["mooncake", "nixl"] = "mooncake"
    ib_device: str | None = None  # e.g. "mlx5_0" or "mlx5_0,mlx5_1" (Mooncake over RDMA)
    prefill: Annotated[list[Worker], Field(min_length=1)]
    decode: Annotated[list[Worker], Field(min_length=1)]
    router: Router = Router()


DEFAULT_BOOTSTRAP_PORT = 8998


def check(cfg: EngineConfig) -> list[str]:
    out: list[str] = []
    b = cfg.base
    o: Options = cfg.options  # type: ignore[assignment]
    if b.model.gguf_package:
        out.append(f"model.gguf_package: SGLang loads a Hugging Face model (got {b.model.gguf_package!r}); give model.hf_id or model.path")
    if b.mode == "single":
        if len(o.gpus) != o.tp_size:
            out.append(f"sglang.gpus: {len(o.gpus)} GPU(s) {o.gpus} but tp_size = {o.tp_size}; give one GPU per rank")
        out += port_and_gpu_conflicts({"server.port": b.server.port}, {"sglang.gpus": o.gpus})
        return out
    pd: PdOptions = cfg.pd  # type: ignore[assignment]
    if not b.server.port:
        out.append("server.port: the router's port must be fixed in pd mode (got 0); give a port such as 8000")
    ports: dict[str, int] = {"server.port": b.server.port}
    gpus: dict[str, list[int]] = {}
    for role, workers in (("prefill", pd.prefill), ("decode", pd.decode)):
        for i, w in enumerate(workers):
            where = f"pd.{role}[{i}]"
            if len(w.gpus) != o.tp_size:
                out.append(f"{where}.gpus: {len(w.gpus)} GPU(s) {w.gpus} but sglang.tp_size = {o.tp_size}; give one GPU per rank")
            if role == "decode" and w.bootstrap_port is not None:
                out.append(f"{where}.bootstrap_port: only prefill workers have a bootstrap port (got {w.bootstrap_port}); remove it")
            ports[f"{where}.port"] = w.port
            if role == "prefill":
                ports[f"{where}.bootstrap_port"] = w.bootstrap_port or DEFAULT_BOOTSTRAP_PORT
            gpus[f"{where}.gpus"] = w.gpus
    return out + port_and_gpu_conflicts(ports, gpus)


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def server_args(cfg: EngineConfig, host: str, port: str) -> list[str]:
    """`sglang.launch_server` with the typed options (flag names as in its `--help`)."""
    o: Options = cfg.options  # type: ignore[assignment]
    b = cfg.base
    argv = [*o.command, "--model-path", b.model.hf_id or b.model.path or "", "--host", host, "--port", port,
            "--served-model-name", cfg.served_name, "--tp-size", str(o.tp_size), "--dtype", o.dtype,
            "--kv-cache-dtype", o.kv_cache_dtype]
    for flag, v in (("--context-length", o.context_length), ("--mem-fraction-static", o.mem_fraction_static),
                    ("--max-running-requests", o.max_running_requests), ("--chunked-prefill-size", o.chunked_prefill_size),
                    ("--quantization", o.quantization), ("--attention-backend", o.attention_backend),
                    ("--random-seed", o.random_seed)):
        if v is not None:
            argv += [flag, f"{v:g}" if isinstance(v, float) else str(v)]
    if o.disable_radix_cache:
        argv.append("--disable-radix-cache")
    if o.enable_metrics:
        argv.append("--enable-metrics")
    return argv


def _cuda(gpus: list[int]) -> str:
    return ",".join(str(g) for g in gpus)


def plan(cfg: EngineConfig, *, resolve: bool = True, port: int | None = None) -> LaunchPlan:
    o: Options = cfg.options  # type: ignore[assignment]
    b = cfg.base
    host = b.server.host
    extra = list(b.server.extra_args)
    info: dict[str, Any] = {"name": "sglang", "version": installed_version(), "flags": o.model_dump(),
                            "model": b.model.hf_id or b.model.path}
    procs: list[ProcessSpec] = []
    if b.mode == "single":
        p = port if port is not None else (b.server.port or (free_port(host) if resolve else 0))
        argv = server_args(cfg, host, str(p) if p else "<free port>") + extra
        procs.append(ProcessSpec("server", tuple(argv), host, p, {**b.server.env, "CUDA_VISIBLE_DEVICES": _cuda(o.gpus)},
                                 metrics_path="/metrics" if o.enable_metrics else None))
        endpoint = procs[0].base_url
    else:
        pd: PdOptions = cfg.pd  # type: ignore[assignment]
        info["pd"] = pd.model_dump()
        for role, workers in (("prefill", pd.prefill), ("decode", pd.decode)):
            for i, w in enumerate(workers):
                argv = server_args(cfg, host, str(w.port)) + [
                    "--disaggregation-mode", role, "--disaggregation-transfer-backend", pd.transfer_backend]
                if role == "prefill":
                    argv += ["--disaggregation-bootstrap-port", str(w.bootstrap_port or DEFAULT_BOOTSTRAP_PORT)]
                if pd.ib_device:
                    argv += ["--disaggregation-ib-device", pd.ib_device]
                procs.append(ProcessSpec(f"{role}-{i}", tuple(argv + extra), host, w.port,
                                         {**b.server.env, "CUDA_VISIBLE_DEVICES": _cuda(w.gpus)},
                                         metrics_path="/metrics" if o.enable_metrics else None))
        rport = port if port is not None else b.server.port
        router = [*pd.router.command, "--pd-disaggregation"]
        for w in pd.prefill:
            router += ["--prefill", f"http://{host}:{w.port}", str(w.bootstrap_port or DEFAULT_BOOTSTRAP_PORT)]
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
