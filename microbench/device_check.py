"""The acceptance checks of a lent GPU, one per process (run by microbench/device_check.sh), and their packaging.

Checks (issue 16, "the device check must fit the device"), each writes WORK/checks/<name>.json:

- d2d_copy: a 1 GiB device-to-device copy through the timing core, L2-cold (buffers ≫ 2× L2), bytes
  counted read + write (2 × payload, what HBM moves; nvbandwidth counts the payload once, given too),
  against ≥ 85 % of the GPU spec's HBM bandwidth;
- gemm_large: an 8192³ bf16 GEMM (2·8192³ FLOP) timed by the core with an L2 flush, within 3 % of
  triton.testing.do_bench (median, same flush) on the same op;
- gemm_small_graph: a 128×4096×4096 bf16 GEMM, short enough that the core replays it from a CUDA
  graph, within 5 % of triton.testing.do_bench_cudagraph (median);
- pinned_sweep: pinned H2D and D2H copies of 256 KiB … 256 MiB through the core, each size within
  10 % of a loop of cudaMemcpyAsync timed by CUDA events (cupy's runtime binding);
- decode_mbu: one Qwen3-8B decode step at batch 1, context 4096, captured in a CUDA graph and replayed
  (microbench.graph_step.time_step when present), bytes = weights + KV (harness.model.forward), MBU ≥ 70 %
  of the spec HBM bandwidth;
- suites: the listed suites in --quick form into WORK/results (a run of the store), device cuda only.

`collect` merges the per-check files into OUT/checks.json after every check (a check that died has
its exit status there), `package` packs WORK into OUT/run.tar.gz. `--stub` (HARNESS_DEVICE_CHECK_STUB=1
in the script) runs the same steps without a GPU: every check writes a result marked stub, the
suites step writes a synthetic run; it tests the packaging, never a GPU. Imports only what the device
image has (torch, triton, cupy, pandas, pyarrow, nvidia-ml-py), never harness.cli.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Callable

D2D_TARGET_FRACTION = 0.85
GEMM_TOLERANCE = 0.03
GRAPH_GEMM_TOLERANCE = 0.05
PINNED_TOLERANCE = 0.10
DECODE_MBU_TARGET = 0.70
PINNED_SIZES = (256 * 2**10, 4 * 2**20, 64 * 2**20, 256 * 2**20)
DECODE_CONTEXT = 4096
CHECKS = ("d2d_copy", "gemm_large", "gemm_small_graph", "pinned_sweep", "decode_mbu")
STUB_MACHINE = "stub-device"


# ---------------------------------------------------------------- helpers


def _torch():
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch; the device checks need a GPU")
    return torch


def _spec(torch) -> Any:
    """The GPU spec of cuda:0 by its exact product name, or an error saying how to add one."""
    from harness.specs.device_names import spec_name_for_device
    from harness.specs.gpus import GPUS

    name = torch.cuda.get_device_name(0)
    slug = spec_name_for_device(name)
    if slug is None:
        raise RuntimeError(f"no GPU spec for device {name!r}; add it to harness/specs/device_names.py and gpus.py")
    return GPUS[slug]


def _policy():
    from microbench.timing import TimingPolicy

    return TimingPolicy(budget_s=1.0, warmup_s=0.3, min_reps=20)


def _flush_buffer(torch):
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return torch.empty(max(2 * l2, 256 * 2**20), dtype=torch.uint8, device="cuda")


def _base(torch) -> dict[str, Any]:
    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}


# ---------------------------------------------------------------- checks


def check_d2d_copy() -> dict[str, Any]:
    from microbench.timing import time_cuda

    torch = _torch()
    spec = _spec(torch)
    n = 2**30
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    m = time_cuda(lambda: dst.copy_(src), torch, _policy(), allow_graph=False)
    bw = 2 * n / m.stats.median_s
    target = D2D_TARGET_FRACTION * spec.hbm_bandwidth_bytes_per_s
    ok = bool(torch.equal(dst[:4096], src[:4096]))
    return {**_base(torch), "payload_bytes": n, "bytes_counted": "read+write (2 x payload: one read and one write of HBM)",
            "bytes_per_s_read_plus_write": bw, "bytes_per_s_payload_once_nvbandwidth": n / m.stats.median_s,
            "spec_hbm_bytes_per_s": spec.hbm_bandwidth_bytes_per_s, "fraction_of_spec": bw / spec.hbm_bandwidth_bytes_per_s,
            "target_fraction": D2D_TARGET_FRACTION, "median_s": m.stats.median_s, "cv": m.stats.cv, "timer": m.timer,
            "copy_verified": ok, "pass": bool(ok and bw >= target and bw <= spec.hbm_bandwidth_bytes_per_s)}


def check_gemm_large() -> dict[str, Any]:
    import triton.testing

    from microbench.timing import time_cuda

    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((8192, 8192), generator=g, device="cuda", dtype=torch.bfloat16)
    b = torch.randn((8192, 8192), generator=g, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    fn = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    buf = _flush_buffer(torch)
    ours = time_cuda(fn, torch, _policy(), flush=buf.zero_, allow_graph=False)
    theirs_ms = triton.testing.do_bench(fn, warmup=200, rep=1000, return_mode="median")
    ratio = ours.stats.median_s / (theirs_ms / 1e3)
    ref = (a[:64].float() @ b.float())
    err = float((c[:64].float() - ref).norm() / ref.norm())
    flops = 2 * 8192**3
    return {**_base(torch), "flops_counted": flops, "ours_median_s": ours.stats.median_s, "do_bench_median_s": theirs_ms / 1e3,
            "ratio": ratio, "tolerance": GEMM_TOLERANCE, "flops_per_s": flops / ours.stats.median_s, "timer": ours.timer,
            "relative_error_vs_fp32": err, "pass": bool(abs(ratio - 1) <= GEMM_TOLERANCE and err < 1e-2)}


def check_gemm_small_graph() -> dict[str, Any]:
    import triton.testing

    from microbench.timing import time_cuda

    torch = _torch()
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn((128, 4096), generator=g, device="cuda", dtype=torch.bfloat16)
    b = torch.randn((4096, 4096), generator=g, device="cuda", dtype=torch.bfloat16)
    c = torch.empty((128, 4096), device="cuda", dtype=torch.bfloat16)
    fn = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    ours = time_cuda(fn, torch, _policy(), allow_graph=True)
    theirs_ms = triton.testing.do_bench_cudagraph(fn, rep=200, return_mode="median")
    ratio = ours.stats.median_s / (theirs_ms / 1e3)
    on_graph = "graph" in ours.timer
    return {**_base(torch), "shape": [128, 4096, 4096], "flops_counted": 2 * 128 * 4096 * 4096, "ours_median_s": ours.stats.median_s,
            "do_bench_cudagraph_median_s": theirs_ms / 1e3, "ratio": ratio, "tolerance": GRAPH_GEMM_TOLERANCE,
            "timer": ours.timer, "graph_path_used": on_graph,
            "pass": bool(on_graph and abs(ratio - 1) <= GRAPH_GEMM_TOLERANCE)}


def memcpy_async_loop_s(torch, dst_ptr: int, src_ptr: int, nbytes: int, kind: int, reps: int) -> float:
    """Seconds per copy of `reps` back-to-back cudaMemcpyAsync on the current stream, between two CUDA events."""
    import cupy

    stream = torch.cuda.current_stream().cuda_stream
    run = cupy.cuda.runtime.memcpyAsync
    for _ in range(3):
        run(dst_ptr, src_ptr, nbytes, kind, stream)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        for _ in range(reps):
            run(dst_ptr, src_ptr, nbytes, kind, stream)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return sorted(times)[len(times) // 2]


def check_pinned_sweep() -> dict[str, Any]:
    from microbench.timing import time_cuda

    torch = _torch()
    big = max(PINNED_SIZES)
    host = torch.randint(0, 255, (big,), dtype=torch.uint8).pin_memory()
    dev = torch.empty(big, dtype=torch.uint8, device="cuda")
    rows, ok = [], True
    for size in PINNED_SIZES:
        for name, (d, s, kind) in {"h2d": (dev[:size], host[:size], 1), "d2h": (host[:size], dev[:size], 2)}.items():
            m = time_cuda(lambda d=d, s=s: d.copy_(s, non_blocking=True), torch, _policy(), allow_graph=False)
            reps = max(4, min(200, int(0.05 / max(size / 25e9, 1e-6))))
            ref = memcpy_async_loop_s(torch, d.data_ptr(), s.data_ptr(), size, kind, reps)
            ratio = (size / m.stats.median_s) / (size / ref)
            good = abs(ratio - 1) <= PINNED_TOLERANCE
            ok &= good
            rows.append({"direction": name, "size_bytes": size, "bytes_counted": "payload once",
                         "ours_bytes_per_s": size / m.stats.median_s, "memcpy_async_loop_bytes_per_s": size / ref,
                         "ratio": ratio, "timer": m.timer, "pass": good})
    return {**_base(torch), "sizes": rows, "tolerance": PINNED_TOLERANCE, "reference": "cudaMemcpyAsync loop, CUDA events",
            "pass": bool(ok)}


def check_decode_mbu() -> dict[str, Any]:
    from harness.model.forward import decode_step_work
    from harness.specs.host import detect_host
    from harness.specs.models import get_model
    from microbench.backends import detect_backends
    from microbench.transformer import RandomDecoder

    torch = _torch()
    spec = _spec(torch)
    m = get_model("qwen3-8b")
    det = detect_backends(detect_host(), "cuda")
    b = next(x for x in det.backends if x.is_cuda and x.name == "torch")
    d = RandomDecoder(m, torch, b.device, torch.bfloat16, 1, DECODE_CONTEXT, 0)
    step = lambda: d.decode_step(1, DECODE_CONTEXT)  # noqa: E731
    try:
        from microbench.graph_step import time_step  # the suite's own graph-captured step
    except ImportError:
        time_step = None
    if time_step is not None:
        st = time_step(b, step, _policy())
        meas, mode, extra = st.primary, st.graph_mode, {"eager_step_s": st.eager.stats.median_s,
                                                         "launch_overhead_s": st.launch_overhead_s, "notes": list(st.notes)}
    else:
        meas, mode, extra = b.time(step, _policy(), allow_graph=True), "core (no microbench.graph_step here)", {}
    w = decode_step_work(m, 1, DECODE_CONTEXT, 2, 2)
    mbu = w.bytes / meas.stats.median_s / spec.hbm_bandwidth_bytes_per_s
    return {**_base(torch), "model": m.name, "batch": 1, "context_tokens": DECODE_CONTEXT, "bytes_counted": w.bytes,
            "weight_bytes": w.weight_bytes, "kv_bytes": w.kv_read_bytes, "step_median_s": meas.stats.median_s, "mode": mode,
            "mbu": mbu, "target": DECODE_MBU_TARGET, **extra,
            "pass": bool(mode == "graph" and DECODE_MBU_TARGET <= mbu <= 1.0)}


def run_suites(work: Path, suites: str) -> dict[str, Any]:
    from microbench.runner import run_micro

    t0 = time.perf_counter()
    s = run_micro(suites, quick=True, out=work / "results", device="cuda", storage_path=work,
                  command_line=["microbench/device_check.sh", suites])
    bad = [c["case_id"] for c in s.cases if not c["valid"]]
    return {"suites": suites, "run_id": s.run_id, "path": str(s.path), "cases": len(s.cases), "skips": len(s.skips),
            "invalid_cases": bad, "notes": list(s.notes), "seconds": time.perf_counter() - t0, "pass": not bad}


CHECK_FNS: dict[str, Callable[[], dict[str, Any]]] = {
    "d2d_copy": check_d2d_copy, "gemm_large": check_gemm_large, "gemm_small_graph": check_gemm_small_graph,
    "pinned_sweep": check_pinned_sweep, "decode_mbu": check_decode_mbu,
}


# ---------------------------------------------------------------- steps, stub mode and packaging


def run_check(name: str, work: Path, stub: bool, suites: str) -> int:
    out = work / "checks"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        if stub:
            res = _stub(name, work, suites)
        elif name == "suites":
            res = run_suites(work, suites)
        else:
            res = CHECK_FNS[name]()
        rc = 0
    except Exception as exc:  # noqa: BLE001 - one check failing must not lose the others: record it and go on
        res, rc = {"error": f"{type(exc).__name__}: {exc}", "pass": False}, 1
    res = {"check": name, "seconds": time.perf_counter() - t0, **res}
    (out / f"{name}.json").write_text(json.dumps(res, indent=2, default=str))
    print(f"{name}: {'PASS' if res.get('pass') else ('stub' if stub else 'FAIL')} {_summary(res)}", flush=True)
    return rc


def _summary(r: dict[str, Any]) -> str:
    if "error" in r:
        return r["error"]
    for k, fmt in (("fraction_of_spec", "{:.1%} of spec HBM (read+write)"), ("ratio", "ratio {:.3f}"), ("mbu", "MBU {:.1%}"),
                   ("cases", "{} cases")):
        if k in r:
            return fmt.format(r[k])
    return ""


def _stub(name: str, work: Path, suites: str) -> dict[str, Any]:
    """No GPU: a result marked stub (never a pass), or for `suites` a synthetic run of the store."""
    if name != "suites":
        return {"stub": True, "pass": None, "note": "stub check (HARNESS_DEVICE_CHECK_STUB): packaging test, no GPU, no figure"}
    import dataclasses

    from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run

    m = dataclasses.replace(SyntheticMachine(machine=STUB_MACHINE, n_samples=4), suites=("decode", "transfer"))
    path = write_synthetic_run(work / "results", m, seed=7)
    return {"stub": True, "pass": None, "suites": suites, "path": str(path), "note": "synthetic run, not a measurement"}


def collect(work: Path, out_file: Path, attempted: list[str]) -> None:
    """OUT/checks.json from every check file so far; an attempted check without one died (its rc file says how)."""
    checks: dict[str, Any] = {}
    for name in attempted:
        f = work / "checks" / f"{name}.json"
        rc_file = work / "checks" / f"{name}.rc"
        rc = rc_file.read_text().strip() if rc_file.is_file() else None
        if f.is_file():
            try:
                checks[name] = json.loads(f.read_text())
            except json.JSONDecodeError as exc:
                checks[name] = {"check": name, "pass": False, "error": f"unreadable result ({exc})"}
        else:
            why = {"124": "timed out (its per-check limit)", "137": "killed (time limit or memory)"}.get(str(rc), f"exit status {rc}")
            checks[name] = {"check": name, "pass": False, "error": f"no result: {why}"}
        if rc is not None:
            checks[name]["exit_status"] = int(rc) if rc.lstrip("-").isdigit() else rc
    facts = work / "facts.json"
    doc = {"version": 1, "written_unix_s": time.time(), "facts": json.loads(facts.read_text()) if facts.is_file() else {},
           "checks": checks, "passed": sorted(k for k, v in checks.items() if v.get("pass") is True),
           "failed": sorted(k for k, v in checks.items() if v.get("pass") is False)}
    tmp = out_file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(out_file)


def package(work: Path, out_file: Path) -> None:
    """WORK (results/, checks/, facts.json) -> one .tar.gz, paths relative to WORK."""
    tmp = out_file.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for part in ("results", "checks", "facts.json"):
            if (work / part).exists():
                tar.add(work / part, arcname=part)
    tmp.replace(out_file)


def write_facts(work: Path, stub: bool) -> None:
    facts: dict[str, Any] = {"stub": stub}
    if not stub:
        try:
            from harness.telemetry.nvml import gpu_facts

            facts["nvml"] = gpu_facts()
        except Exception as exc:  # noqa: BLE001
            facts["nvml_error"] = f"{type(exc).__name__}: {exc}"
    import platform

    facts["host"] = platform.node()
    (work / "facts.json").write_text(json.dumps(facts, indent=2, default=str))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("name", choices=[*CHECKS, "suites"])
    c.add_argument("--work", required=True)
    c.add_argument("--suites", default="gemm,decode,transfer,stage")
    c.add_argument("--stub", action="store_true")
    co = sub.add_parser("collect")
    co.add_argument("--work", required=True)
    co.add_argument("--out", required=True)
    co.add_argument("--attempted", default="")
    p = sub.add_parser("package")
    p.add_argument("--work", required=True)
    p.add_argument("--out", required=True)
    f = sub.add_parser("facts")
    f.add_argument("--work", required=True)
    f.add_argument("--stub", action="store_true")
    a = ap.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    if a.cmd == "check":
        return run_check(a.name, work, a.stub, a.suites)
    if a.cmd == "collect":
        collect(work, Path(a.out), [x for x in a.attempted.split(",") if x])
        return 0
    if a.cmd == "package":
        package(work, Path(a.out))
        return 0
    write_facts(work, a.stub)
    return 0


if __name__ == "__main__":
    sys.exit(main())
