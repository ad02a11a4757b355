"""comm suite: torch.distributed send/recv and all_to_all between processes, sizes swept.

NCCL between GPUs (needs two; the RDMA/NIC and NVLink path, and MoE dispatch/combine shape),
gloo between CPU processes on loopback. The processes rendezvous through a file (no TCP store
server) and gloo/NCCL sockets are pinned to the loopback interface, so nothing listens beyond
127.0.0.1. Rank 0 times with the shared core's discipline: warm-up, a repetition plan sized by
the time budget (broadcast so every rank runs the same number of steps), raw samples kept.

Counted bytes: send/recv, the payload one way (each sample is half a ping-pong round trip);
all_to_all_single, each rank's buffer of `size` bytes, of which size·(W-1)/W leave the rank.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from datetime import timedelta
from typing import Any, Iterator

from harness.units import KiB, MiB
from microbench.case import Peak, Skip, Work
from microbench.suite import Item, Planned, SuiteContext
from microbench.timing import TimingPolicy, measurement_from_samples, plan_reps

NAME = "comm"
DESCRIPTION = "send/recv and all_to_all over torch.distributed: NCCL between GPUs, gloo between CPU processes on 127.0.0.1"
WORLD = 2
JOIN_TIMEOUT_S = 180


def _worker(rank: int, world: int, init_file: str, backend: str, sizes: list[int], policy: dict, queue: Any) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    pol = TimingPolicy(**policy)
    dev = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    sync = torch.cuda.synchronize if backend == "nccl" else (lambda: None)
    out = []
    try:
        for op in ("sendrecv", "all_to_all"):
            for size in sizes:
                n = size // 4
                x = torch.ones(n, dtype=torch.float32, device=dev)
                y = torch.empty(n, dtype=torch.float32, device=dev)
                if op == "sendrecv":
                    def step() -> None:
                        if rank == 0:
                            dist.send(x, 1)
                            dist.recv(y, 1)
                        elif rank == 1:
                            dist.recv(y, 0)
                            dist.send(y, 0)
                else:
                    def step() -> None:
                        dist.all_to_all_single(y, x)
                for _ in range(max(2, pol.min_warmup)):
                    step()
                sync()
                t0 = time.perf_counter_ns()
                for _ in range(3):
                    step()
                sync()
                est_s = (time.perf_counter_ns() - t0) / 3e9
                plan = torch.tensor(plan_reps(est_s, pol), dtype=torch.int64)
                dist.broadcast(plan, 0)  # every rank must run the same number of steps
                inner, reps = int(plan[0]), int(plan[1])
                samples = []
                for _ in range(reps):
                    t0 = time.perf_counter_ns()
                    for _ in range(inner):
                        step()
                    sync()
                    samples.append((time.perf_counter_ns() - t0) / 1e9 / inner)
                if rank == 0:
                    out.append({"op": op, "size": size, "inner": inner, "samples": samples})
        if rank == 0:
            queue.put({"ok": True, "results": out})
    except Exception as exc:  # noqa: BLE001 - report to the parent, which turns it into a skip with the reason
        if rank == 0:
            queue.put({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        dist.destroy_process_group()


def run_group(backend: str, sizes: list[int], policy: TimingPolicy) -> dict:
    """Start WORLD processes, collect rank 0's samples; kill them if they outlive JOIN_TIMEOUT_S."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="harness-comm-") as d:
        init_file = os.path.join(d, "rendezvous")
        procs = [ctx.Process(target=_worker, args=(r, WORLD, init_file, backend, sizes, dataclasses.asdict(policy), q), daemon=True)
                 for r in range(WORLD)]
        for p in procs:
            p.start()
        import queue as _queue

        deadline = time.monotonic() + JOIN_TIMEOUT_S
        res = None
        try:
            while res is None:
                try:
                    res = q.get(timeout=1.0)
                except _queue.Empty:
                    dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                    if dead:  # a rank died (e.g. it could not start): fail now, not at the timeout
                        res = {"ok": False, "error": f"a rank exited with code {dead[0]} before reporting"}
                    elif time.monotonic() > deadline:
                        res = {"ok": False, "error": f"no result from rank 0 within {JOIN_TIMEOUT_S} s"}
        finally:
            for p in procs:
                p.join(timeout=10)
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=5)
    return res


def _cases_from(ctx: SuiteContext, backend_label: str, dist_backend: str, device: str, res: dict) -> list:
    from microbench.case import CaseResult

    out = []
    peak = Peak(None, None, f"{dist_backend} over {'loopback' if dist_backend == 'gloo' else 'NVLink/PCIe'}: no link spec applied")
    for r in res["results"]:
        samples = r["samples"]
        if r["op"] == "sendrecv":
            samples = [s / 2 for s in samples]  # one way = half the round trip
            params = {"payload_bytes": r["size"], "size_bytes": r["size"], "link": dist_backend, "direction": "send", "time_is": "half a ping-pong round trip", "world": WORLD}
        else:
            params = {"buffer_bytes": r["size"], "size_bytes": r["size"], "link": dist_backend, "direction": "all_to_all", "bytes_leaving_each_rank": r["size"] * (WORLD - 1) / WORLD, "world": WORLD}
        m = measurement_from_samples(samples, r["inner"], "perf_counter_ns" + ("+cuda-sync" if dist_backend == "nccl" else ""), ctx.policy)
        out.append(CaseResult(NAME, f"{dist_backend}-{r['op']}-{r['size']}", "torch.distributed", device, "fp32", params,
                              Work(useful_bytes=float(r["size"])), m, peak))
    return out


def cases(ctx: SuiteContext) -> Iterator[Item]:
    labels = [b.label for b in ctx.backends]
    if "torch-cpu" not in labels and "torch-cuda" not in labels:
        yield Skip(NAME, "all", "torch.distributed needs torch")
        return
    sizes = [4 * KiB, 1 * MiB] if ctx.quick else [4 * KiB * 4**i for i in range(9)]  # 4 KiB … 256 MiB
    b = ctx.backend("torch-cuda")
    if b is not None:
        n = b.module.cuda.device_count()
        if n < WORLD:
            yield Skip(NAME, "nccl", f"NCCL send/recv and all_to_all need {WORLD} GPUs; {n} visible")
        else:
            def nccl() -> list:
                res = run_group("nccl", sizes, ctx.policy)
                if not res["ok"]:
                    raise RuntimeError(f"NCCL group failed: {res['error']}")
                return _cases_from(ctx, "torch-cuda", "nccl", "cuda:0-1", res)

            yield Planned(NAME, "nccl", nccl)
    if ctx.backend("torch-cpu") is not None:
        def gloo() -> list:
            res = run_group("gloo", sizes, ctx.policy)
            if not res["ok"]:
                raise RuntimeError(f"gloo group failed: {res['error']}")
            return _cases_from(ctx, "torch-cpu", "gloo", "cpu", res)

        yield Planned(NAME, "gloo", gloo)
