"""allocator suite: reserved vs allocated memory over a mixed serving workload, per allocator (Chapter 19, §19.8).

§19.8: "torch.cuda.memory_reserved() and memory_allocated() track fragmentation: reserved is what
the allocator holds, allocated what tensors use; a large gap means fragmentation", and switching to
cudaMallocAsync is done with PYTORCH_ALLOC_CONF=backend:cudaMallocAsync. The allocator is chosen
at process start, so each configuration runs the same seeded workload in a child process:

  per step: new requests arrive with a prompt of 256…4096 tokens (prefill activations [L, H] ×3,
  written then freed, and a KV tensor of L·kv/token kept); every live request's KV grows by 16
  tokens every 16 steps by reallocation (new tensor, copy, free: the growth pattern that fragments
  a caching allocator); finished requests free their KV; decode activations [B, H] come and go.

Recorded per step: allocated and reserved bytes and the step's wall time (device synchronised).
Derived: peak reserved, peak allocated, fragmentation at the reserved peak 1 − allocated/reserved,
the mean of that over steps, and reserved at the end. Counted work per step: the bytes the
workload writes (activations, new KV, growth copies: read + write).

GPU configurations: native caching allocator, native with expandable segments, cudaMallocAsync.
CPU stand-in (labelled as one): glibc malloc as configured by default vs with a fixed 64 KiB mmap
threshold (large blocks are returned to the OS on free); "reserved" is the process's resident set
above its baseline, "allocated" the bytes of the workload's live tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from harness.errors import HarnessError
from microbench.backends import Backend
from microbench.case import CaseResult, Skip, Work
from microbench.suite import Item, Planned, SuiteContext
from microbench.timing import measurement_from_samples

NAME = "allocator"
DESCRIPTION = "reserved vs allocated over a mixed workload: native caching vs cudaMallocAsync (§19.8; CPU: glibc malloc stand-in)"

GPU_CONFIGS: dict[str, dict[str, str]] = {
    "native": {"PYTORCH_ALLOC_CONF": "backend:native", "PYTORCH_CUDA_ALLOC_CONF": "backend:native"},
    "native-expandable": {"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    "cudaMallocAsync": {"PYTORCH_ALLOC_CONF": "backend:cudaMallocAsync", "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
}
CPU_CONFIGS: dict[str, dict[str, str]] = {
    "glibc-default": {},
    "glibc-mmap-64k": {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"},
}
ENV_KEYS = sorted({k for c in (*GPU_CONFIGS.values(), *CPU_CONFIGS.values()) for k in c})


def workload_plan(steps: int, seed: int) -> list[dict[str, Any]]:
    """The seeded event list every configuration replays: arrivals (prompt, output), the same in every child."""
    if steps < 1:
        raise HarnessError(f"allocator workload: steps must be >= 1, got {steps!r}.")
    rng = random.Random(seed)
    return [{"arrive": rng.random() < 0.25, "prompt": rng.randint(256, 4096), "output": rng.randint(16, 256)} for _ in range(steps)]


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(device: str, steps: int, seed: int, hidden: int, kv_bytes_per_token: int) -> dict[str, Any]:
    """Run the workload here (the allocator is whatever this process's environment selected)."""
    # lazy: optional (the torch extra): a host without it runs the numpy suites
    import torch

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.init()
    live: dict[int, Any] = {}  # request id -> KV tensor (uint8)
    meta: dict[int, list[int]] = {}  # request id -> [tokens, remaining outputs]
    base_rss = 0 if cuda else _rss_bytes()
    rows, times, written = [], [], []
    nid = 0
    for i, ev in enumerate(workload_plan(steps, seed)):
        t0 = time.perf_counter()
        w = 0
        if ev["arrive"]:
            L = ev["prompt"]
            acts = [torch.ones((L, hidden), dtype=torch.bfloat16, device=dev) for _ in range(3)]
            w += sum(a.numel() * a.element_size() for a in acts)
            live[nid] = torch.ones(L * kv_bytes_per_token, dtype=torch.uint8, device=dev)
            w += L * kv_bytes_per_token
            meta[nid] = [L, ev["output"]]
            nid += 1
            del acts
        for r in list(live):
            meta[r][1] -= 1
            if meta[r][1] <= 0:
                del live[r], meta[r]
            elif i % 16 == 0:
                old = live[r]
                meta[r][0] += 16
                new = torch.empty(meta[r][0] * kv_bytes_per_token, dtype=torch.uint8, device=dev)
                new[: old.numel()].copy_(old)
                new[old.numel():].fill_(1)
                w += 2 * old.numel() + (new.numel() - old.numel())
                live[r] = new
                del old
        if live:
            dec = torch.ones((len(live), hidden), dtype=torch.bfloat16, device=dev)
            w += dec.numel() * dec.element_size()
            del dec
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        written.append(w)
        allocated = sum(t.numel() for t in live.values())
        if cuda:
            rows.append((torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)))
        else:
            rows.append((allocated, max(0, _rss_bytes() - base_rss)))
    return {"device": device, "torch": torch.__version__, "times_s": times, "written_bytes": written, "timeline": rows,
            "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ}}


def fragmentation(timeline: list[tuple[int, int]]) -> dict[str, float]:
    """Peaks and fragmentation 1 − allocated/reserved (at the reserved peak, and averaged over steps with reserved > 0)."""
    if not timeline:
        raise HarnessError("allocator: empty timeline; the workload ran no steps.")
    peak_i = max(range(len(timeline)), key=lambda i: timeline[i][1])
    a_pk, r_pk = timeline[peak_i]
    fr = [1.0 - min(a, r) / r for a, r in timeline if r > 0]
    return {
        "peak_allocated_bytes": float(max(a for a, _ in timeline)),
        "peak_reserved_bytes": float(r_pk),
        "fragmentation_at_peak": (1.0 - min(a_pk, r_pk) / r_pk) if r_pk > 0 else 0.0,
        "mean_fragmentation": sum(fr) / len(fr) if fr else 0.0,
        "final_allocated_bytes": float(timeline[-1][0]),
        "final_reserved_bytes": float(timeline[-1][1]),
        "reserved_over_allocated_at_peak": (r_pk / a_pk) if a_pk > 0 else float("inf"),
    }


def run_config(ctx: SuiteContext, b: Backend, name: str, env: dict[str, str], steps: int, hidden: int, kv_tok: int) -> CaseResult:
    full_env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS} | env
    root = Path(__file__).resolve().parents[1]
    full_env["PYTHONPATH"] = f"{root}{os.pathsep}{full_env['PYTHONPATH']}" if full_env.get("PYTHONPATH") else str(root)
    device = "cuda:0" if b.is_cuda else "cpu"
    cmd = [sys.executable, "-m", "microbench.allocator", "--child", "--device", device, "--steps", str(steps),
           "--seed", str(ctx.seed), "--hidden", str(hidden), "--kv-bytes-per-token", str(kv_tok)]
    try:
        p = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise HarnessError(f"allocator {name}: the child process ran past 600 s and was stopped; use --quick.") from None
    if p.returncode != 0:
        tail = (p.stderr or "").strip().splitlines()[-3:]
        raise HarnessError(f"allocator {name}: the child process failed (exit {p.returncode}): {' | '.join(tail)}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    frag = fragmentation([tuple(r) for r in out["timeline"]])
    # samples: mean step time over blocks of steps, so each sample carries the same mean work as the count below
    ts = out["times_s"]
    k = max(1, len(ts) // 20)
    blocks = [sum(ts[i:i + k]) / len(ts[i:i + k]) for i in range(0, len(ts), k)]
    m = measurement_from_samples(blocks, k, "perf_counter_ns", ctx.policy)
    tl = out["timeline"]
    stride = max(1, len(tl) // 200)
    params = {"allocator": name, "env": out["env"], "steps": steps, "hidden": hidden, "kv_bytes_per_token": kv_tok,
              "stand_in": None if b.is_cuda else "glibc malloc on the host: reserved = resident set above baseline",
              **frag, "timeline_allocated_bytes": [r[0] for r in tl[::stride]], "timeline_reserved_bytes": [r[1] for r in tl[::stride]]}
    work = Work(useful_bytes=sum(out["written_bytes"]) / len(out["written_bytes"]))
    return ctx.result(NAME, f"mixed-{name}", b, "bf16", params, work, m,
                      notes=(f"fragmentation at the reserved peak {frag['fragmentation_at_peak']:.0%}",))


def cases(ctx: SuiteContext) -> Iterator[Item]:
    for b in ctx.backends:
        if b.name != "torch":
            yield Skip(NAME, b.label, "the allocators compared are torch's (and, on the CPU, glibc's under torch)")
            continue
        if b.is_cuda:
            configs, steps, hidden, kv_tok = GPU_CONFIGS, (200 if ctx.quick else 1000), 4096, 147456  # Qwen3-8B: 144 KiB/token
        else:
            configs, steps, hidden, kv_tok = CPU_CONFIGS, (80 if ctx.quick else 400), 256, 2304  # scaled down 64×
            yield Skip(NAME, f"{b.label}-cudaMallocAsync", "cudaMallocAsync and the CUDA caching allocator need a GPU; "
                       "this CPU run compares glibc malloc settings instead")
        for name, env in configs.items():
            yield Planned(NAME, f"mixed-{name}", lambda b=b, name=name, env=env, steps=steps, hidden=hidden, kv_tok=kv_tok:
                          run_config(ctx, b, name, env, steps, hidden, kv_tok))


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="allocator suite child: run the mixed workload under this environment's allocator")
    ap.add_argument("--child", action="store_true", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--kv-bytes-per-token", type=int, default=2304)
    a = ap.parse_args(argv)
    print(json.dumps(child(a.device, a.steps, a.seed, a.hidden, a.kv_bytes_per_token)))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
