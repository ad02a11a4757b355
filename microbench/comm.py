"""comm suite: torch.distributed point-to-point and collectives between processes of ONE host, sizes swept.

What is measured, exactly:
- gloo: CPU processes exchanging buffers over TCP on the loopback interface (127.0.0.1): the host's
  memory copies and kernel socket path, no network card. Host clock (perf_counter_ns).
- NCCL: one process per visible GPU (WORLD = the device count, at most MAX_WORLD) on this host, so
  NCCL's intra-node transports (NVLink / PCIe peer-to-peer, or shared memory through the host).
  NCCL_SOCKET_IFNAME=lo only pins its bootstrap sockets to the loopback interface; no NIC, no RDMA,
  no InfiniBand/RoCE path is exercised (for those, import perftest / nccl-tests runs from a real
  cluster). Timed with CUDA events on each rank's current stream around the steps; rank 0 reports.
Both: the processes rendezvous through a file (no TCP store server); every rank runs the same repetition
plan (rank 0's, broadcast as a device tensor on NCCL); a barrier precedes every sample so the ranks
start aligned; warm-up first; raw samples kept.

Counted bytes (nccl-tests' doc/PERFORMANCE.md): S is the operation's size as nccl-tests defines it
(all_reduce, all_to_all: each rank's buffer; all_gather: the gathered output; send/recv: the payload,
one way, each sample half a ping-pong round trip). algbw = S / t; busbw = algbw × factor with
factor = 2(n−1)/n (all_reduce), (n−1)/n (all_gather, reduce_scatter, all_to_all), 1 (broadcast,
reduce, send/recv). A case's counted bytes are S × factor, so its bytes/s IS busbw, which is what
compares with the link's per-direction peak (NVLink from NVML's active links, else the PCIe link;
gloo on loopback has no link peak).
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import queue as _queue
import tempfile
import time
from datetime import timedelta
from typing import Any, Iterator

from harness.units import KiB, MiB
from microbench.case import CaseResult, Peak, Skip, Work
from microbench.gpu_link import read_nvlink_peak
from microbench.suite import Item, Planned, SuiteContext
from microbench.timing import TimingPolicy, measurement_from_samples, plan_reps
from microbench.transfer import pcie_peak

NAME = "comm"
DESCRIPTION = "send/recv, all_reduce, all_gather, all_to_all over torch.distributed: NCCL between this host's GPUs, gloo between CPU processes on 127.0.0.1"
GLOO_WORLD = 2
MAX_WORLD = 8
JOIN_TIMEOUT_S = 180
OPS = ("sendrecv", "all_reduce", "all_gather", "all_to_all")
QUICK_OPS = ("sendrecv", "all_reduce", "all_to_all")


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' bus-bandwidth correction factor for `op` on `world` ranks (doc/PERFORMANCE.md)."""
    n = world
    if n < 1:
        raise ValueError(f"world must be >= 1, got {n}")
    factors = {
        "all_reduce": 2 * (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "all_gather": (n - 1) / n,
        "all_to_all": (n - 1) / n,
        "broadcast": 1.0,
        "reduce": 1.0,
        "sendrecv": 1.0,
    }
    if op not in factors:
        raise ValueError(f"no bus factor for {op!r}; known: {', '.join(factors)}")
    return factors[op]


def bandwidths(op: str, size_bytes: float, time_s: float, world: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s: S/t and S/t × bus_factor."""
    alg = size_bytes / time_s
    return alg, alg * bus_factor(op, world)


def nccl_world(device_count: int) -> int:
    return max(0, min(device_count, MAX_WORLD))


def _worker(rank: int, world: int, init_file: str, backend: str, sizes: list[int], ops: list[str], policy: dict, queue: Any) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    # lazy: optional (the torch extra): a host without it runs the numpy suites
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    pol = TimingPolicy(**policy)
    nccl = backend == "nccl"
    dev = torch.device(f"cuda:{rank}") if nccl else torch.device("cpu")
    if nccl:
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=timedelta(seconds=120),
                            **({"device_id": dev} if nccl else {}))
    sync = torch.cuda.synchronize if nccl else (lambda: None)

    def barrier() -> None:
        if nccl:
            dist.barrier(device_ids=[rank])
            torch.cuda.synchronize()
        else:
            dist.barrier()

    out = []
    try:
        for op in ops:
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
                elif op == "all_reduce":
                    def step() -> None:
                        dist.all_reduce(y)
                elif op == "all_gather":
                    part = torch.ones(n // world, dtype=torch.float32, device=dev)
                    gathered = torch.empty((n // world) * world, dtype=torch.float32, device=dev)

                    def step() -> None:
                        dist.all_gather_into_tensor(gathered, part)
                else:
                    def step() -> None:
                        dist.all_to_all_single(y, x)
                for _ in range(max(2, pol.min_warmup)):
                    step()
                sync()
                barrier()
                t0 = time.perf_counter_ns()
                for _ in range(3):
                    step()
                sync()
                est_s = (time.perf_counter_ns() - t0) / 3e9
                plan = torch.tensor(plan_reps(est_s, pol), dtype=torch.int64, device=dev)  # NCCL broadcasts device tensors only
                dist.broadcast(plan, 0)  # every rank must run the same number of steps
                inner, reps = int(plan[0]), int(plan[1])
                samples = []
                for _ in range(reps):
                    barrier()  # the ranks start each sample together: rank 0 does not time the others' lateness
                    if nccl:
                        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        a.record()
                        for _ in range(inner):
                            step()
                        b.record()
                        b.synchronize()
                        samples.append(a.elapsed_time(b) / 1e3 / inner)
                    else:
                        t0 = time.perf_counter_ns()
                        for _ in range(inner):
                            step()
                        samples.append((time.perf_counter_ns() - t0) / 1e9 / inner)
                if rank == 0:
                    out.append({"op": op, "size": size, "inner": inner, "samples": samples})
        if rank == 0:
            queue.put({"ok": True, "results": out, "world": world})
    except Exception as exc:  # noqa: BLE001 - report to the parent, which turns it into a skip with the reason
        if rank == 0:
            queue.put({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        dist.destroy_process_group()


def run_group(backend: str, sizes: list[int], policy: TimingPolicy, world: int = GLOO_WORLD, ops: tuple[str, ...] = OPS) -> dict:
    """Start `world` processes, collect rank 0's samples; kill them if they outlive JOIN_TIMEOUT_S."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="harness-comm-") as d:
        init_file = os.path.join(d, "rendezvous")
        procs = [ctx.Process(target=_worker, args=(r, world, init_file, backend, sizes, list(ops), dataclasses.asdict(policy), q), daemon=True)
                 for r in range(world)]
        for p in procs:
            p.start()

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


def _cases_from(ctx: SuiteContext, dist_backend: str, device: str, res: dict, peak: Peak) -> list:
    out = []
    world = res.get("world", GLOO_WORLD)
    measures = ("gloo over TCP on the loopback interface between CPU processes of this host" if dist_backend == "gloo" else
                f"NCCL between {world} GPUs of this host (intra-node transports; no NIC/RDMA)")
    timer = "perf_counter_ns" if dist_backend == "gloo" else "cuda-events"
    for r in res["results"]:
        op, size = r["op"], r["size"]
        samples = r["samples"]
        if op == "sendrecv":
            samples = [s / 2 for s in samples]  # one way = half the round trip
        m = measurement_from_samples(samples, r["inner"], timer, ctx.policy)
        factor = bus_factor(op, world)
        alg, bus = bandwidths(op, size, m.stats.median_s, world)
        params = {"op": op, "size_bytes": size, "payload_bytes": size, "link": dist_backend, "direction": op, "world": world,
                  "measures": measures, "bus_factor": factor, "algbw_bytes_per_s": alg, "busbw_bytes_per_s": bus,
                  "bytes_counted": "S x bus factor (nccl-tests busbw)"}
        if op == "sendrecv":
            params["time_is"] = "half a ping-pong round trip"
        if op == "all_to_all":
            params["bytes_leaving_each_rank"] = size * (world - 1) / world
        out.append(CaseResult(NAME, f"{dist_backend}-{op}-{size}", "torch.distributed", device, "fp32", params,
                              Work(useful_bytes=float(size) * factor), m, peak))
    return out


def nccl_peak(b) -> Peak:
    """Per-direction peak of the link NCCL uses between this host's GPUs: NVLink when active, else PCIe."""
    nv = read_nvlink_peak(b.module, b.index)
    return nv if nv.bytes_per_s else pcie_peak(b)


def cases(ctx: SuiteContext) -> Iterator[Item]:
    labels = [b.label for b in ctx.backends]
    if "torch-cpu" not in labels and "torch-cuda" not in labels:
        yield Skip(NAME, "all", "torch.distributed needs torch")
        return
    sizes = [4 * KiB, 1 * MiB] if ctx.quick else [4 * KiB * 4**i for i in range(9)]  # 4 KiB … 256 MiB
    ops = QUICK_OPS if ctx.quick else OPS
    b = ctx.backend("torch-cuda")
    if b is not None:
        n = b.module.cuda.device_count()
        world = nccl_world(n)
        if world < 2:
            yield Skip(NAME, "nccl", f"NCCL point-to-point and collectives need at least 2 GPUs; {n} visible")
        else:
            def nccl(b=b, world=world) -> list:
                res = run_group("nccl", sizes, ctx.policy, world, ops)
                if not res["ok"]:
                    raise RuntimeError(f"NCCL group failed: {res['error']}")
                return _cases_from(ctx, "nccl", f"cuda:0-{world - 1}", res, nccl_peak(b))

            yield Planned(NAME, "nccl", nccl)
    if ctx.backend("torch-cpu") is not None:
        def gloo() -> list:
            res = run_group("gloo", sizes, ctx.policy, GLOO_WORLD, ops)
            if not res["ok"]:
                raise RuntimeError(f"gloo group failed: {res['error']}")
            return _cases_from(ctx, "gloo", "cpu", res, Peak(None, None, "gloo over loopback TCP: no link spec applies"))

        yield Planned(NAME, "gloo", gloo)
