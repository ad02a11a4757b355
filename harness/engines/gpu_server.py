"""What the GPU serving engines (vLLM, SGLang) share: GPU lists, rank and port/GPU checks, single and PD launch plans.

A launch is one server on its GPUs (mode "single"), or prefill and decode workers, each a server
on its own GPUs, behind a router that takes `--pd-disaggregation --prefill URL ... --decode URL ...
--host H --port P --policy X` (mode "pd"). The engine module supplies what differs: its server's
command line, its worker's extra flags and environment, and its own field names in the messages.
"""

from __future__ import annotations

import importlib.metadata
from typing import Annotated, Any, Callable

from pydantic import Field

from harness.engines.config import EngineConfig, port_and_gpu_conflicts
from harness.engines.launcher import LaunchPlan, ProcessSpec, free_port

GpuList = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def cuda_visible_devices(gpus: list[int]) -> str:
    return ",".join(str(g) for g in gpus)


def _ranks_problem(where: str, gpus: list[int], ranks_label: str, ranks: int) -> list[str]:
    if len(gpus) == ranks:
        return []
    return [f"{where}: {len(gpus)} GPU(s) {gpus} but {ranks_label} = {ranks}; give one GPU per rank"]


def check_launch(cfg: EngineConfig, *, section: str, engine_title: str, ranks: int, ranks_label: str, pd_ranks_label: str,
                 worker_ports: Callable[[str, str, Any], tuple[list[str], dict[str, int]]]) -> list[str]:
    """Cross-field checks of a vLLM or SGLang config; each problem names the field and the fix.

    Each server gets one GPU per rank (`ranks`, named `ranks_label` in single mode and
    `pd_ranks_label` in pd mode; `section` is the engine's config section); the router's port is
    fixed in pd mode; no two processes share a port or a GPU. `worker_ports(role, where, worker)` gives a worker's own problems and the ports
    it opens besides its server port (keys name the fields).
    """
    out: list[str] = []
    b = cfg.base
    o: Any = cfg.options
    if b.model.gguf_package:
        out.append(f"model.gguf_package: {engine_title} loads a Hugging Face model (got {b.model.gguf_package!r}); give model.hf_id or model.path")
    if b.mode == "single":
        out += _ranks_problem(f"{section}.gpus", o.gpus, ranks_label, ranks)
        out += port_and_gpu_conflicts({"server.port": b.server.port}, {f"{section}.gpus": o.gpus})
        return out
    pd: Any = cfg.pd
    if not b.server.port:
        out.append("server.port: the router's port must be fixed in pd mode (got 0); give a port such as 8000")
    ports: dict[str, int] = {"server.port": b.server.port}
    gpus: dict[str, list[int]] = {}
    for role, workers in (("prefill", pd.prefill), ("decode", pd.decode)):
        for i, w in enumerate(workers):
            where = f"pd.{role}[{i}]"
            out += _ranks_problem(f"{where}.gpus", w.gpus, pd_ranks_label, ranks)
            problems, own_ports = worker_ports(role, where, w)
            out += problems
            ports[f"{where}.port"] = w.port
            ports.update(own_ports)
            gpus[f"{where}.gpus"] = w.gpus
    return out + port_and_gpu_conflicts(ports, gpus)


def plan_launch(cfg: EngineConfig, *, resolve: bool, port: int | None, version: str | None,
                server_argv: Callable[[str, str], list[str]], metrics_path: str | None,
                pd_worker: Callable[[str, Any], tuple[list[str], dict[str, str]]],
                router_prefill_args: Callable[[Any], list[str]]) -> LaunchPlan:
    """The launch plan of a vLLM or SGLang config.

    `server_argv(host, port)` is the engine's server command line; `pd_worker(role, worker)` gives
    a pd worker's flags after it and its environment beyond server.env and CUDA_VISIBLE_DEVICES;
    `router_prefill_args(worker)` what the router's `--prefill URL` takes after the URL.
    """
    o: Any = cfg.options
    b = cfg.base
    host = b.server.host
    extra = list(b.server.extra_args)
    info: dict[str, Any] = {"name": cfg.engine, "version": version, "flags": o.model_dump(),
                            "model": b.model.hf_id or b.model.path}
    procs: list[ProcessSpec] = []
    if b.mode == "single":
        p = port if port is not None else (b.server.port or (free_port(host) if resolve else 0))
        argv = server_argv(host, str(p) if p else "<free port>") + extra
        procs.append(ProcessSpec("server", tuple(argv), host, p,
                                 {**b.server.env, "CUDA_VISIBLE_DEVICES": cuda_visible_devices(o.gpus)}, metrics_path=metrics_path))
        endpoint = procs[0].base_url
    else:
        pd: Any = cfg.pd
        info["pd"] = pd.model_dump()
        for role, workers in (("prefill", pd.prefill), ("decode", pd.decode)):
            for i, w in enumerate(workers):
                flags, env = pd_worker(role, w)
                argv = server_argv(host, str(w.port)) + flags + extra
                procs.append(ProcessSpec(f"{role}-{i}", tuple(argv), host, w.port,
                                         {**b.server.env, "CUDA_VISIBLE_DEVICES": cuda_visible_devices(w.gpus), **env},
                                         metrics_path=metrics_path))
        rport = port if port is not None else b.server.port
        router = [*pd.router.command, "--pd-disaggregation"]
        for w in pd.prefill:
            router += ["--prefill", f"http://{host}:{w.port}", *router_prefill_args(w)]
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
