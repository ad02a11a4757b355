"""The three device checks of the microbenchmark issue, for a lent GPU (run by microbench/device_check.sh).

1. device-to-device copy of 1 GiB through the timing core, counted read + write, against
   90 % of 4.3 TB/s (the copy bandwidth seen on this workplace's H200s, KINDS.md);
2. an 8192³ bf16 GEMM timed by the core within 3 % of triton.testing.do_bench (median) on the same op;
3. pinned host↔device copies through the core within 10 % of a plain synchronous cudaMemcpy loop
   (cupy.cuda.runtime.memcpy, or libcudart through ctypes).
Writes checks.json in --out and prints one line per check; exit 0 when the checks ran (pass or
not: the numbers are the result), 1 when no GPU is there.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from microbench.timing import FULL, TimingPolicy, time_cuda

COPY_TARGET_BYTES_PER_S = 0.9 * 4.3e12
GEMM_TOLERANCE = 0.03
PINNED_TOLERANCE = 0.10


def plain_memcpy_loop_s(dst_ptr: int, src_ptr: int, nbytes: int, kind: int, reps: int) -> float:
    """Median seconds of one synchronous cudaMemcpy, host clock around each call."""
    try:
        import cupy

        memcpy = cupy.cuda.runtime.memcpy
    except ImportError:
        import ctypes

        lib = ctypes.CDLL("libcudart.so")

        def memcpy(d: int, s: int, n: int, k: int) -> None:
            rc = lib.cudaMemcpy(ctypes.c_void_p(d), ctypes.c_void_p(s), ctypes.c_size_t(n), ctypes.c_int(k))
            if rc != 0:
                raise RuntimeError(f"cudaMemcpy returned {rc}")

    for _ in range(3):
        memcpy(dst_ptr, src_ptr, nbytes, kind)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        memcpy(dst_ptr, src_ptr, nbytes, kind)
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def run_suites(out: Path) -> int:
    """Every suite in --quick form into out/results/ (a module function: the comm suite spawns processes)."""
    from harness.report.micro import render_summary
    from microbench.progress import ProgressBar
    from microbench.runner import run_micro

    t0 = time.perf_counter()
    s = run_micro("all", quick=True, out=out / "results", storage_path=out, progress=ProgressBar(force=True),
                  command_line=["microbench/device_check.sh", str(out)])
    print(render_summary(s.to_dict()))
    print(f"suites took {time.perf_counter() - t0:.0f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--suites", action="store_true", help="run every suite in --quick form instead of the three checks")
    args = ap.parse_args(argv)
    if args.suites:
        return run_suites(Path(args.out))
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device; the device checks need a GPU", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pol = TimingPolicy(budget_s=1.0, warmup_s=0.2, min_reps=20)
    dev = "cuda:0"
    res: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}

    # 1. D2D copy, read + write counted
    n = 2**30
    src, dst = torch.ones(n, dtype=torch.uint8, device=dev), torch.empty(n, dtype=torch.uint8, device=dev)
    m = time_cuda(lambda: dst.copy_(src), torch, pol)
    bw = 2 * n / m.stats.median_s
    res["d2d_copy"] = {"bytes_per_s_read_plus_write": bw, "target": COPY_TARGET_BYTES_PER_S, "pass": bw >= COPY_TARGET_BYTES_PER_S,
                       "median_s": m.stats.median_s, "cv": m.stats.cv, "timer": m.timer}
    del src, dst

    # 2. 8192³ bf16 GEMM vs triton.testing.do_bench
    g = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn((8192, 8192), generator=g, device=dev, dtype=torch.bfloat16)
    b = torch.randn((8192, 8192), generator=g, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    fn = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush_buf = torch.empty(2 * l2, dtype=torch.uint8, device=dev)
    ours = time_cuda(fn, torch, pol, flush=flush_buf.zero_)
    try:
        import triton.testing

        theirs_ms = triton.testing.do_bench(fn, warmup=200, rep=1000, return_mode="median")
        ratio = ours.stats.median_s / (theirs_ms / 1e3)
        res["gemm_8192_bf16"] = {"ours_median_s": ours.stats.median_s, "do_bench_median_s": theirs_ms / 1e3, "ratio": ratio,
                                 "flops_per_s": 2 * 8192**3 / ours.stats.median_s, "pass": abs(ratio - 1) <= GEMM_TOLERANCE}
    except ImportError as exc:
        res["gemm_8192_bf16"] = {"ours_median_s": ours.stats.median_s, "skipped": f"triton not importable: {exc}"}
    del a, b, c, flush_buf

    # 3. pinned H2D / D2H vs a plain cudaMemcpy loop
    size = 256 * 2**20
    host = torch.ones(size, dtype=torch.uint8, pin_memory=True)
    devbuf = torch.empty(size, dtype=torch.uint8, device=dev)
    for name, (d, s, kind) in {"h2d": (devbuf, host, 1), "d2h": (host, devbuf, 2)}.items():
        mm = time_cuda(lambda d=d, s=s: d.copy_(s, non_blocking=True), torch, pol, allow_graph=False)
        ref_s = plain_memcpy_loop_s(d.data_ptr(), s.data_ptr(), size, kind, 20)
        ours_bw, ref_bw = size / mm.stats.median_s, size / ref_s
        res[f"pinned_{name}"] = {"ours_bytes_per_s": ours_bw, "plain_memcpy_bytes_per_s": ref_bw, "ratio": ours_bw / ref_bw,
                                 "pass": abs(ours_bw / ref_bw - 1) <= PINNED_TOLERANCE}

    (out / "checks.json").write_text(json.dumps(res, indent=2))
    print(f"device checks on {res['gpu']} (torch {res['torch']}, CUDA {res['cuda']}):")
    d2d = res["d2d_copy"]
    print(f"  D2D copy 1 GiB: {d2d['bytes_per_s_read_plus_write'] / 1e12:.2f} TB/s (read+write), target >= {COPY_TARGET_BYTES_PER_S / 1e12:.2f}: "
          f"{'PASS' if d2d['pass'] else 'FAIL'}")
    gm = res["gemm_8192_bf16"]
    if "ratio" in gm:
        print(f"  GEMM 8192^3 bf16: core {gm['ours_median_s'] * 1e3:.3f} ms vs do_bench {gm['do_bench_median_s'] * 1e3:.3f} ms "
              f"(ratio {gm['ratio']:.3f}, {gm['flops_per_s'] / 1e12:.0f} TFLOP/s): {'PASS' if gm['pass'] else 'FAIL'}")
    else:
        print(f"  GEMM 8192^3 bf16: {gm['skipped']}")
    for name in ("h2d", "d2h"):
        p = res[f"pinned_{name}"]
        print(f"  pinned {name}: core {p['ours_bytes_per_s'] / 1e9:.1f} GB/s vs cudaMemcpy loop {p['plain_memcpy_bytes_per_s'] / 1e9:.1f} GB/s "
              f"(ratio {p['ratio']:.3f}): {'PASS' if p['pass'] else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
