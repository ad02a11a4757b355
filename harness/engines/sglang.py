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

from typing import Annotated, Literal

from pydantic import Field

from harness.engines import gpu_server
from harness.engines.config import EngineConfig, FixedPort, Strict
from harness.engines.gpu_server import GpuList, check_launch, plan_launch
from harness.engines.launcher import LaunchPlan

SECTION = "sglang"


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
    o: Options = cfg.options  # type: ignore[assignment]

    def worker_ports(role: str, where: str, w: Worker) -> tuple[list[str], dict[str, int]]:
        problems = []
        if role == "decode" and w.bootstrap_port is not None:
            problems.append(f"{where}.bootstrap_port: only prefill workers have a bootstrap port (got {w.bootstrap_port}); remove it")
        ports = {f"{where}.bootstrap_port": w.bootstrap_port or DEFAULT_BOOTSTRAP_PORT} if role == "prefill" else {}
        return problems, ports

    return check_launch(cfg, section=SECTION, engine_title="SGLang", ranks=o.tp_size, ranks_label="tp_size",
                        pd_ranks_label="sglang.tp_size", worker_ports=worker_ports)


def installed_version() -> str | None:
    return gpu_server.installed_version("sglang")


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


def plan(cfg: EngineConfig, *, resolve: bool = True, port: int | None = None) -> LaunchPlan:
    o: Options = cfg.options  # type: ignore[assignment]

    def pd_worker(role: str, w: Worker) -> tuple[list[str], dict[str, str]]:
        pd: PdOptions = cfg.pd  # type: ignore[assignment]
        flags = ["--disaggregation-mode", role, "--disaggregation-transfer-backend", pd.transfer_backend]
        if role == "prefill":
            flags += ["--disaggregation-bootstrap-port", str(w.bootstrap_port or DEFAULT_BOOTSTRAP_PORT)]
        if pd.ib_device:
            flags += ["--disaggregation-ib-device", pd.ib_device]
        return flags, {}

    return plan_launch(
        cfg, resolve=resolve, port=port, version=installed_version(),
        server_argv=lambda host, p: server_args(cfg, host, p), metrics_path="/metrics" if o.enable_metrics else None,
        pd_worker=pd_worker, router_prefill_args=lambda w: [str(w.bootstrap_port or DEFAULT_BOOTSTRAP_PORT)],
    )
