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
  10 % of cudaMemcpyAsync (cupy's runtime binding) issued with the same grouping (the core's copies per
  event pair, back to back, between two CUDA events); a size whose copy is shorter than issuing it
  (host issue time ≥ 75 % of the copy's device time) is kept with `issue_bound: true` and not judged;
- decode_mbu: one Qwen3-8B decode step at batch 1, context 4096, captured in a CUDA graph and replayed
  (microbench.graph_step.time_step), bytes = weights + KV (harness.model.forward), twice: eager ops
  (`mbu_eager_ops`, information) and fused by torch.compile (`mbu_fused`; its logits against an fp32 step
  of the same weights within 1e-2 or no worse than 1.25× the eager step's); passes on MBU fused ≥ 70 %
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
import dataclasses
import json
import platform
import statistics
import sys
import tarfile
import time
from pathlib import Path
from typing import Any, Callable

from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run
from harness.model.forward import decode_step_work
from harness.specs.device_names import spec_name_for_device
from harness.specs.gpus import GPUS
from harness.specs.host import detect_host
from harness.specs.models import get_model
from harness.telemetry.nvml import gpu_facts
from microbench.backends import detect_backends
from microbench.decode import kernel_count
from microbench.graph_step import time_step
from microbench.kernel_profile import profile_step
from microbench.runner import run_micro
from microbench.timing import TimingPolicy, time_cuda
from microbench.transformer import RandomDecoder

D2D_TARGET_FRACTION = 0.85
GEMM_TOLERANCE = 0.03
GRAPH_GEMM_TOLERANCE = 0.05
PINNED_TOLERANCE = 0.10
DECODE_MBU_TARGET = 0.70
PINNED_SIZES = (256 * 2**10, 4 * 2**20, 64 * 2**20, 256 * 2**20)
DECODE_CONTEXT = 4096
PINNED_REFERENCE_SAMPLES = 11
ISSUE_BOUND_FRACTION = 0.75  # host issue time per copy / device time per copy at which a copy loop is issue-bound
FUSED_TOLERANCE = 1e-2  # relative L2 error of the fused step's bf16 logits vs an fp32 step accepted outright (else <= 1.25x eager's)
CHECKS = ("d2d_copy", "gemm_large", "gemm_small_graph", "pinned_sweep", "decode_mbu")
STUB_MACHINE = "stub-device"


# ---------------------------------------------------------------- helpers


def _torch():
    # lazy: optional (the torch extra): a host without it runs the numpy suites
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to torch; the device checks need a GPU")
    return torch


def _spec(torch) -> Any:
    """The GPU spec of cuda:0 by its exact product name, or an error saying how to add one."""
    name = torch.cuda.get_device_name(0)
    slug = spec_name_for_device(name)
    if slug is None:
        raise RuntimeError(f"no GPU spec for device {name!r}; add it to harness/specs/device_names.py and gpus.py")
    return GPUS[slug]


def _policy():
    return TimingPolicy(budget_s=1.0, warmup_s=0.3, min_reps=20)


def _flush_buffer(torch):
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return torch.empty(max(2 * l2, 256 * 2**20), dtype=torch.uint8, device="cuda")


def _base(torch) -> dict[str, Any]:
    return {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda}


# ---------------------------------------------------------------- checks


def check_d2d_copy() -> dict[str, Any]:
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
    # lazy: optional (GPU only): may be missing
    import triton.testing


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
    # lazy: optional (GPU only): may be missing
    import triton.testing


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


def memcpy_async_loop_s(torch, dst_ptr: int, src_ptr: int, nbytes: int, kind: int, reps: int,
                        samples: int = PINNED_REFERENCE_SAMPLES) -> tuple[float, float]:
    """(device seconds per copy, host seconds to issue one copy): `reps` back-to-back cudaMemcpyAsync on the
    current stream between two CUDA events (cupy's runtime binding), median of `samples` such groups."""
    # lazy: optional (GPU only): may be missing
    import cupy

    stream = torch.cuda.current_stream().cuda_stream
    run = cupy.cuda.runtime.memcpyAsync
    for _ in range(3):
        run(dst_ptr, src_ptr, nbytes, kind, stream)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times, issue = [], []
    for _ in range(samples):
        start.record()
        h0 = time.perf_counter()
        for _ in range(reps):
            run(dst_ptr, src_ptr, nbytes, kind, stream)
        issue.append((time.perf_counter() - h0) / reps)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    return statistics.median(times), statistics.median(issue)


def host_issue_s(torch, fn: Callable[[], Any], copies: int, samples: int = 5) -> float:
    """Host seconds to issue one call of `fn` when `copies` are issued back to back (median of `samples` groups)."""
    out = []
    for _ in range(samples):
        torch.cuda.synchronize()
        h0 = time.perf_counter()
        for _ in range(copies):
            fn()
        out.append((time.perf_counter() - h0) / copies)
    torch.cuda.synchronize()
    return statistics.median(out)


def issue_bound(device_s_per_copy: float, host_issue_s_per_copy: float) -> bool:
    """A back-to-back copy loop measures the host's issue rate, not the link, once issuing one copy takes most of
    the time one copy runs (the GPU then waits on the host between copies)."""
    return host_issue_s_per_copy >= ISSUE_BOUND_FRACTION * device_s_per_copy


def pinned_row(direction: str, size: int, ours_s: float, ref_s: float, copies: int, issue_ours_s: float,
               issue_ref_s: float, timer: str) -> dict[str, Any]:
    """One size of the pinned sweep: ours vs the reference at the same grouping; judged unless issue-bound."""
    ratio = (size / ours_s) / (size / ref_s)
    bound = issue_bound(min(ours_s, ref_s), max(issue_ours_s, issue_ref_s))
    good = None if bound else abs(ratio - 1) <= PINNED_TOLERANCE
    row = {"direction": direction, "size_bytes": size, "bytes_counted": "payload once", "copies_per_sample": copies,
           "ours_bytes_per_s": size / ours_s, "memcpy_async_loop_bytes_per_s": size / ref_s, "ratio": ratio,
           "ours_s_per_copy": ours_s, "reference_s_per_copy": ref_s,
           "host_issue_s_per_copy_ours": issue_ours_s, "host_issue_s_per_copy_reference": issue_ref_s,
           "issue_bound": bound, "timer": timer, "pass": good}
    if bound:
        row["verdict"] = (f"not judged: issuing one copy takes {max(issue_ours_s, issue_ref_s) * 1e6:.3g} us on the host vs "
                          f"{min(ours_s, ref_s) * 1e6:.3g} us per copy on the device (>= {ISSUE_BOUND_FRACTION:.0%}), so both "
                          "loops measure their own issue cost (torch copy_ vs cupy memcpyAsync), not the link")
    return row


def check_pinned_sweep() -> dict[str, Any]:
    """Ours (time_cuda, no graph: `copies_per_sample` back-to-back copy_ per event pair) against cudaMemcpyAsync issued
    with the same grouping (same copies between two events), per size and direction. A size whose copy is shorter
    than issuing it is kept, marked issue_bound and not judged; the check passes when every judged size matches."""
    torch = _torch()
    big = max(PINNED_SIZES)
    host = torch.randint(0, 255, (big,), dtype=torch.uint8).pin_memory()
    dev = torch.empty(big, dtype=torch.uint8, device="cuda")
    rows = []
    for size in PINNED_SIZES:
        for name, (d, s, kind) in {"h2d": (dev[:size], host[:size], 1), "d2h": (host[:size], dev[:size], 2)}.items():
            fn = lambda d=d, s=s: d.copy_(s, non_blocking=True)  # noqa: E731
            m = time_cuda(fn, torch, _policy(), allow_graph=False)
            copies = m.inner_reps  # the core's grouping: copies between one pair of events
            ref_s, issue_ref = memcpy_async_loop_s(torch, d.data_ptr(), s.data_ptr(), size, kind, copies)
            rows.append(pinned_row(name, size, m.stats.median_s, ref_s, copies, host_issue_s(torch, fn, copies), issue_ref,
                                   m.timer))
    judged = [r for r in rows if r["pass"] is not None]
    directions = {r["direction"] for r in judged}
    ok = bool(judged) and all(r["pass"] for r in judged) and directions == {"h2d", "d2h"}
    res = {**_base(torch), "sizes": rows, "tolerance": PINNED_TOLERANCE, "issue_bound_fraction": ISSUE_BOUND_FRACTION,
           "reference": "cudaMemcpyAsync loop with the same copies per event pair as ours, CUDA events",
           "issue_bound_sizes": [f"{r['direction']}:{r['size_bytes']}" for r in rows if r["issue_bound"]], "pass": ok}
    if directions != {"h2d", "d2h"}:
        res["why_not_judged"] = "every size of a direction was issue-bound; add larger PINNED_SIZES"
    return res


def fused_accuracy(torch, d, batch: int, context: int) -> dict[str, Any]:
    """Logits of the bf16 eager and fused steps against an fp32 step with the same weights (relative L2 error).

    Both bf16 steps round differently (inductor keeps a fused chain in fp32 and rounds once), so they differ from each
    other by ~1 % of the logits per few layers of a random model (4-5 % after 36 layers): the fused step is judged
    as accurate when its error against fp32 is within FUSED_TOLERANCE or no more than 1.25x the eager step's."""
    ye, yf = d.decode_step(batch, context).float(), d.fused_decode_step(batch, context).float()
    ref = d.with_dtype(torch.float32)
    yr = ref.decode_step(batch, context).float()
    del ref
    torch.cuda.empty_cache()
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    e_eager, e_fused = rel(ye, yr), rel(yf, yr)
    return {"fused_relative_error_vs_eager": rel(yf, ye), "eager_relative_error_vs_fp32": e_eager,
            "fused_relative_error_vs_fp32": e_fused, "fused_tolerance": FUSED_TOLERANCE,
            "fused_accurate": bool(e_fused <= max(FUSED_TOLERANCE, 1.25 * e_eager))}


def _is_gemm_kernel(name: str) -> bool:
    n = name.lower()
    return any(k in n for k in ("gemm", "nvjet", "cutlass", "sm90_xmma", "gemv", "matmul"))


def check_decode_mbu() -> dict[str, Any]:
    """Qwen3-8B decode step at batch 1 as a CUDA-graph replay, twice: eager ops and fused (torch.compile). The check
    passes on the fused one (what engines run); the eager-ops MBU is information."""
    torch = _torch()
    spec = _spec(torch)
    m = get_model("qwen3-8b")
    det = detect_backends(detect_host(), "cuda")
    b = next(x for x in det.backends if x.is_cuda and x.name == "torch")
    d = RandomDecoder(m, torch, b.device, torch.bfloat16, 1, DECODE_CONTEXT, 0)
    w = decode_step_work(m, 1, DECODE_CONTEXT, 2, 2)
    hbm = spec.hbm_bandwidth_bytes_per_s

    def timed(step: Callable[[], Any]) -> dict[str, Any]:
        st = time_step(b, step, _policy())
        out = {"step_median_s": st.primary.stats.median_s, "mode": st.graph_mode, "eager_step_s": st.eager.stats.median_s,
               "launch_overhead_s": st.launch_overhead_s, "mbu": w.bytes / st.primary.stats.median_s / hbm,
               "notes": list(st.notes)}
        try:  # kernels per step and the GEMMs' share: what fusing changed (information, never the verdict)
            rows = profile_step(b, step, steps=2)
            gemm_s = sum(r.time_per_step_s for r in rows if _is_gemm_kernel(r.kernel))
            out.update(kernel_count(rows), kernel_sum_s=sum(r.time_per_step_s for r in rows), gemm_kernel_s=gemm_s,
                       top_kernels=[[r.kernel[:80], r.calls_per_step, r.time_per_step_s] for r in rows[:8]])
        except Exception as exc:  # noqa: BLE001
            out["profile_error"] = f"{type(exc).__name__}: {exc}"
        return out

    eager = timed(lambda: d.decode_step(1, DECODE_CONTEXT))
    why = d.prepare_fused(1, DECODE_CONTEXT)
    fused: dict[str, Any] = {}
    accuracy: dict[str, Any] = {}
    if why is None:
        fused = {**timed(lambda: d.fused_decode_step(1, DECODE_CONTEXT)), **d.fused_shapes[(1, DECODE_CONTEXT)]}
        accuracy = fused_accuracy(torch, d, 1, DECODE_CONTEXT)
    mbu = fused.get("mbu")
    ok = (why is None and fused["mode"] == "graph" and DECODE_MBU_TARGET <= mbu <= 1.0 and accuracy.get("fused_accurate") is True)
    return {**_base(torch), "model": m.name, "batch": 1, "context_tokens": DECODE_CONTEXT, "bytes_counted": w.bytes,
            "weight_bytes": w.weight_bytes, "kv_bytes": w.kv_read_bytes, "target": DECODE_MBU_TARGET,
            "judged_on": "fused step (torch.compile inductor), graph replay",
            "mbu": mbu, "mbu_fused": mbu, "mbu_eager_ops": eager["mbu"],
            "step_median_s_fused": fused.get("step_median_s"), "step_median_s_eager_ops": eager["step_median_s"],
            "mode": fused.get("mode"), "mode_eager_ops": eager["mode"],
            **accuracy, "fused_reason": why,
            "fused": fused, "eager_ops": eager, "pass": bool(ok)}


def run_suites(work: Path, suites: str) -> dict[str, Any]:
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
    if "mbu_eager_ops" in r:
        fused = f"MBU fused {r['mbu_fused']:.1%}" if r.get("mbu_fused") is not None else f"no fused step ({r.get('fused_reason')})"
        return f"{fused}, eager ops {r['mbu_eager_ops']:.1%}"
    for k, fmt in (("fraction_of_spec", "{:.1%} of spec HBM (read+write)"), ("ratio", "ratio {:.3f}"), ("mbu", "MBU {:.1%}"),
                   ("cases", "{} cases")):
        if r.get(k) is not None:
            return fmt.format(r[k])
    return ""


def _stub(name: str, work: Path, suites: str) -> dict[str, Any]:
    """No GPU: a result marked stub (never a pass), or for `suites` a synthetic run of the store."""
    if name != "suites":
        return {"stub": True, "pass": None, "note": "stub check (HARNESS_DEVICE_CHECK_STUB): packaging test, no GPU, no figure"}


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
            facts["nvml"] = gpu_facts()
        except Exception as exc:  # noqa: BLE001
            facts["nvml_error"] = f"{type(exc).__name__}: {exc}"

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
