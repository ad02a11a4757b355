"""The closed loop on a lent GPU in one call: llama.cpp's CUDA build, a random 8B model, two twins, served load.

Steps, each run by microbench/device_loop.sh as its own process with its own time limit (`python -m
harness.bench.device_loop STEP --work WORK`), all state in files under WORK so that a step that dies loses nothing
else:

- `prepare`  — the preset (`--device cuda` on the GPU, `--device cpu` for the dry run) into WORK/plan.json;
- `model`    — a random-weight GGUF of the preset's shape (harness.engines.random_gguf) into WORK/model.gguf;
- `kernels`  — llama.cpp's own benchmarks on it (microbench.llama_cpp: `llama-batched-bench` and
  `test-backend-ops -o MUL_MAT perf` at the model's shapes, every layer on the GPU) into one micro run, and the
  engine's step-time fit of the batched-bench points (harness.calibration.step_time) into WORK/step-time.json;
- `twins`    — the twins of llama-server (harness.target.twin, the scheduler `llama_server.py`): (a) on the step-time
  fit, (b) on the roofline with test-backend-ops' MUL_MAT rates (C at the largest token count, B at one token), and
  (b-proxy) on the roofline with the torch GEMM and decode suites' rates, when the suites ran. The served points are
  planned on (a)'s capacity (else (b)'s), and every twin predicts every point before anything is measured
  (WORK/predictions.json);
- `served`   — llama-server launched from WORK/engine.toml; per mix a capacity burst and each rate point, then the
  same again (repeat 2) while the deadline allows; every load run is appended to WORK/served.jsonl as it ends;
- `compare`  — predicted against measured per point, metric and twin, with the repeat-to-repeat spread
  (harness.bench.device_compare), stored as one run (kind `loop-gpu-device`) under WORK/results/ that
  `harness micro import-device` files.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.bench.device_compare import compare_work, loop_reports, markdown, store_run
from harness.bench.device_work import PRESETS, TWIN_LABELS, Preset, load_preset, read_work, served_point, write_work
from harness.calibration.step_time import fit_from_runs, save_step_time, summary_lines
from harness.engines import http
from harness.engines.config import load_engine_config
from harness.engines.launcher import RunningEngine
from harness.engines.random_gguf import write_random_gguf
from harness.engines.session import make_plan
from harness.errors import HarnessError
from harness.loop.measure import measure_served
from harness.specs.gguf_model import read_gguf
from harness.store import Run, iter_runs
from harness.target.des import backlog_rates
from harness.target.llama_server import settings_from_engine
from harness.target.step_times import RooflineStepTimes
from harness.target.twin import TwinSpec, llama_cpp_twin, predict_point, requests_from_rows, twin_dict
from microbench.llama_cpp.backend_ops import type_bytes
from microbench.llama_cpp.run import run_llama_cpp_micro
from workloads.artifact import WorkloadArtifact, load_artifact, save_artifact
from workloads.mixes import single_turn
from workloads.prompts import prompt_text
from workloads.schedule import make_schedule

def model_path(work: Path) -> Path:
    p = work / "model.gguf"
    if not p.is_file():
        raise HarnessError(f"{p} is missing: the model step did not run or failed.")
    return p


# ------------------------------------------------------------------ steps


def step_prepare(work: Path, device: str, bin_dir: str) -> dict[str, Any]:
    if device not in PRESETS:
        raise HarnessError(f"--device {device!r}: give one of {', '.join(PRESETS)}.")
    work.mkdir(parents=True, exist_ok=True)
    p = PRESETS[device]
    plan = {"preset": p.to_dict(), "bin_dir": str(Path(bin_dir).resolve()), "work": str(work.resolve()),
            "created_unix_s": time.time()}
    write_work(work, "plan.json", plan)
    return plan


def _sh(argv: list[str], timeout_s: float = 20.0) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({exc})"


def step_facts(work: Path) -> dict[str, Any]:
    """The image as found: GPU and driver, glibc, Python and torch, the engine's binaries and what they fail to load."""
    plan = read_work(work, "plan.json", "prepare")
    bins = Path(plan["bin_dir"])
    f: dict[str, Any] = {"device": plan["preset"]["device"], "python": platform.python_version(),
                         "glibc": " ".join(platform.libc_ver()), "bin_dir": str(bins),
                         "ld_library_path": os.environ.get("LD_LIBRARY_PATH", "")}
    if plan["preset"]["device"] == "cuda":
        q = _sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
        parts = [x.strip() for x in q.split(",")]
        f.update(gpu_name=parts[0] if len(parts) == 3 else None, driver=parts[1] if len(parts) == 3 else None,
                 gpu_memory=parts[2] if len(parts) == 3 else None, nvidia_smi=q)
        try:
            # lazy: optional (the torch extra); only the facts step on a GPU asks it
            import torch

            f.update(torch=torch.__version__, torch_cuda=torch.version.cuda)
            if torch.cuda.is_available():
                f["l2_bytes"] = int(torch.cuda.get_device_properties(0).L2_cache_size)
        except ImportError:
            f["torch"] = None
    missing = {}
    for b in ("llama-server", "llama-batched-bench", "test-backend-ops", "test-export-graph-ops"):
        out = _sh(["ldd", str(bins / b)])
        bad = [ln.strip() for ln in out.splitlines() if "not found" in ln]
        if bad or not (bins / b).is_file():
            missing[b] = bad or ["binary missing"]
    f["ldd_not_found"] = missing
    f["llama_server_version"] = _sh([str(bins / "llama-server"), "--version"])[-400:]
    write_work(work, "facts.json", f)
    if missing:
        raise HarnessError(f"the engine's binaries cannot run here: {missing}; see docs/gpu-loop.md (build on the device).")
    return f


def collect(work: Path, out: Path) -> dict[str, Any]:
    """checks.json: every step's exit status, wall time and result or error, in the order they ran."""
    steps: dict[str, Any] = {}
    checks = work / "checks"
    rcs = sorted(checks.glob("*.rc"), key=lambda q: q.stat().st_mtime) if checks.is_dir() else []
    for rc in rcs:
        name = rc.stem
        d: dict[str, Any] = {"exit": rc.read_text().strip()}
        wall = checks / f"{name}.wall_s"
        if wall.is_file():
            d["wall_s"] = float(wall.read_text().strip() or "nan")
        sj = work / "steps" / f"{name}.json"
        if sj.is_file():
            st = json.loads(sj.read_text())
            d.update({k: st[k] for k in ("status", "error", "result") if k in st})
        elif d["exit"] in ("124", "137"):
            d["status"] = "timed out"
        steps[name] = d
    doc = {"schema_version": 1, "work": str(work), "steps": steps}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(out)
    return doc


def step_model(work: Path) -> dict[str, Any]:
    p = load_preset(work)
    t0 = time.perf_counter()
    path = write_random_gguf(work / "model.gguf.tmp", shape=p.shape, qtype=p.qtype, seed=p.seed)
    wall = time.perf_counter() - t0
    path.replace(work / "model.gguf")
    size = (work / "model.gguf").stat().st_size
    return {"shape": p.shape, "qtype": p.qtype, "params": read_gguf(work / "model.gguf").weight_params, "bytes": size, "write_s": wall,
            "bytes_per_s": size / wall}


def step_kernels(work: Path) -> dict[str, Any]:
    p = load_preset(work)
    facts = json.loads((work / "facts.json").read_text()) if (work / "facts.json").is_file() else {}
    run = run_llama_cpp_micro(model_path(work), threads=p.threads, out=work / "results", sweep=p.sweep,
                              gpu_name=facts.get("gpu_name"),
                              which=("batched", "ops"), n_batch=p.n_batch, n_ubatch=p.n_ubatch, repack=False,
                              backend=p.device, progress=lambda s: print(s, flush=True),
                              command_line=["device_loop", "kernels"])
    res: dict[str, Any] = {"micro_run": str(run.path), "cases": run.cases, "notes": run.notes, "skips": run.skips}
    write_work(work / "steps", "kernels-run.json", res)  # twin (b) needs only the run: keep it even if the fit fails
    try:
        cal = fit_from_runs(run.path, seed=p.seed)
    except HarnessError as exc:
        raise HarnessError(f"the step-time fit failed ({exc}); twin (a) will be missing, (b) is built from the run "
                           f"{run.path}") from None
    save_step_time(cal, work / "step-time.json")
    print("\n".join(summary_lines(cal)), flush=True)
    return {**res, "step_time": str(work / "step-time.json")}


def engine_config(work: Path) -> Any:
    """The llama-server config of the served step (written to WORK/engine.toml, then validated like any config)."""
    p = load_preset(work)
    plan = read_work(work, "plan.json", "prepare")
    gpu = p.device == "cuda"
    text = f"""schema_version = 1
name = "device-loop-{p.device}"
engine = "llama.cpp"
description = "llama-server ({'CUDA build, every layer on the GPU' if gpu else 'CPU build'}) serving the device loop's random model"

[model]
path = "{model_path(work)}"
served_name = "random-{p.shape}"

[server]
host = "127.0.0.1"
port = 0

[llama_cpp]
binary = "{Path(plan['bin_dir']) / 'llama-server'}"
threads = {p.threads}
threads_batch = {p.threads}
ctx_size = {p.slots * p.ctx_per_slot}
parallel = {p.slots}
batch_size = {p.n_batch}
ubatch_size = {p.n_ubatch}
n_gpu_layers = {999 if gpu else 0}
metrics = true
seed = 0
repack = false

[startup]
timeout_s = {p.startup_timeout_s:g}
probe_prompt = "Hello"
probe_max_tokens = 1
"""
    (work / "engine.toml").write_text(text)
    return load_engine_config(work / "engine.toml")


def _suite_constants(work: Path) -> dict[str, Any] | None:
    """(b-proxy)'s roofline constants from the torch suites' run: C = the median FLOP/s of the bf16 projection GEMMs
    (not the square reference) at the largest token count, B = the bytes/s of the whole batch-1 decode step (the fused
    one where measured). None without the suites."""
    rows = []
    for r in iter_runs(work / "results", kind="micro"):
        if "llama_cpp" in (r.manifest.extra or {}) or "micro_cases" not in r.tables():
            continue
        rows.append((r, r.table("micro_cases")))
    if not rows:
        return None
    run, df = rows[-1]
    par = df["params_json"].map(json.loads)
    gemm = df[(df["suite"] == "gemm") & (df["dtype"] == "bf16") & df["valid"] & ~par.map(lambda q: bool(q.get("square")))]
    dec = df[(df["suite"] == "decode") & df["valid"] & par.map(lambda q: q.get("kind") == "step" and q.get("batch") == 1)]
    if gemm.empty or dec.empty:
        return None
    m = par[gemm.index].map(lambda q: int(q.get("m") or 0))
    big = gemm[m == m.max()]
    b1 = dec
    fused = b1[b1["case"].str.contains("fused")]
    b1 = fused if not fused.empty else b1
    if big.empty or b1.empty:
        return None
    return {"flops_per_s": float(big["flops_per_s"].median()), "bytes_per_s": float(b1["bytes_per_s"].median()),
            "run_id": run.manifest.run_id, "gemm_cases": list(big["case"]), "decode_cases": list(b1["case"]),
            "source": "torch suites (gemm bf16 at the largest M; decode step at batch 1): a proxy, not llama.cpp's kernels"}


def _kernel_constants(rows: list[dict[str, Any]], family: str, cache_bytes: int | None) -> dict[str, Any]:
    """(b)'s roofline constants from test-backend-ops MUL_MAT at the model's weight shapes (the engine's kernel family):
    C = Σ FLOPs / Σ time at the largest token count measured; B = Σ bytes / Σ time at the smallest, over the shapes
    whose weights exceed twice `cache_bytes` (the GPU's L2). The tool repeats each op on the same weights, so a shape
    that fits the L2 is timed from the cache, faster than a decode step that streams every weight from HBM once; on a
    GPU only the larger shapes (the LM head) measure the HBM path. `cache_bytes` None (the CPU: its LLC holds the dry
    run's model, as it holds the engine's): every shape. `rows`: the ops cases' params with median_s, useful_flops,
    useful_bytes."""
    ws = [r for r in rows if r.get("family") == family and r.get("role") == "weights"]
    if not ws:
        raise HarnessError(f"no test-backend-ops MUL_MAT results of family {family} in the kernels step's run; its ops tool "
                           "did not run (see the log).")
    hi_t, lo_t = max(int(r["tokens"]) for r in ws), min(int(r["tokens"]) for r in ws)
    hi = [r for r in ws if int(r["tokens"]) == hi_t]
    lo = [r for r in ws if int(r["tokens"]) == lo_t]
    note = "every weight shape"
    if cache_bytes:
        big = [r for r in lo if _weight_bytes(r) > 2 * cache_bytes]
        if big:
            note = (f"{len(big)} of {len(lo)} weight shapes, those over 2 x the {cache_bytes / 2**20:.0f} MiB L2 (the others "
                    "are timed from the cache by the tool's repeats)")
            lo = big
        else:
            note = f"every weight shape: none exceeds 2 x the {cache_bytes / 2**20:.0f} MiB L2, so B is cache-inflated"
    return {"flops_per_s": sum(r["useful_flops"] for r in hi) / sum(r["median_s"] for r in hi),
            "bytes_per_s": sum(r["useful_bytes"] for r in lo) / sum(r["median_s"] for r in lo),
            "flops_tokens": hi_t, "bytes_tokens": lo_t, "flops_shapes": len(hi), "bytes_shapes": len(lo), "bytes_from": note,
            "family": family, "source": "test-backend-ops perf -o MUL_MAT at the model's shapes"}


def _weight_bytes(r: dict[str, Any]) -> float:
    k, n = int(r["k"]), int(r["n"])
    return type_bytes(str(r["weight_type"]), k * n)


def _ops_rows(work: Path) -> tuple[list[dict[str, Any]], str]:
    """The test-backend-ops cases of the kernels step's micro run (params with the case's median and work), and the
    engine's kernel family (the model's file type on the run's backend); ([], "") without them."""
    f = work / "steps" / "kernels-run.json"
    if not f.is_file():
        return [], ""
    run = Run(json.loads(f.read_text())["micro_run"])
    if "micro_cases" not in run.tables():
        return [], ""
    df = run.table("micro_cases")
    df = df[df["suite"] == "llama_cpp_ops"]
    return ([{**json.loads(r["params_json"]), "median_s": float(r["median_s"]), "useful_flops": float(r["useful_flops"]),
              "useful_bytes": float(r["useful_bytes"])} for _, r in df.iterrows()],
            run.manifest.extra["llama_cpp"]["model"]["family"])


def build_twins(work: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """{name: TwinSpec} for the twins that can be built, and {name: why not} for the others."""
    cfg = engine_config(work)
    gm = read_gguf(model_path(work))
    settings = settings_from_engine(cfg.options, cfg.base.server.extra_args, sliding_window=gm.sliding_window,
                                    n_ctx_train=gm.context_length)
    bpp = gm.streamed_weight_bytes_per_param
    twins: dict[str, Any] = {}
    missing: dict[str, str] = {}
    st = work / "step-time.json"
    if st.is_file():
        twins["a"] = llama_cpp_twin(cfg, str(st), gm=gm)
    else:
        missing["a"] = "no step-time calibration (the kernels step or its fit failed: see checks.json)"
    rows, family = _ops_rows(work)
    if rows:
        facts = json.loads((work / "facts.json").read_text()) if (work / "facts.json").is_file() else {}
        k = _kernel_constants(rows, family, facts.get("l2_bytes"))
        twins["b"] = TwinSpec("llama.cpp", settings, RooflineStepTimes(gm.spec, k["flops_per_s"], k["bytes_per_s"], bpp, 2.0,
                                                                       f"roofline: {k['source']}"),
                              gm.path, f"roofline on {k['family']} MUL_MAT rates", (json.dumps(k),))
    else:
        missing["b"] = "no test-backend-ops MUL_MAT results (the kernels step failed before its ops tool: see checks.json)"
    sc = _suite_constants(work)
    if sc is not None:
        twins["b_proxy"] = TwinSpec("llama.cpp", settings, RooflineStepTimes(gm.spec, sc["flops_per_s"], sc["bytes_per_s"], bpp, 2.0,
                                                                             "roofline: torch suites (proxy)"),
                                    gm.path, sc["source"], (json.dumps(sc),))
    else:
        missing["b_proxy"] = "no torch gemm and decode suite results (suites step skipped or failed)"
    return twins, missing


def _artifact(mix: tuple[int, int], rate: float, duration_s: float, seed: int, point: int) -> Any:
    if math.isinf(rate):  # a capacity burst: every request intended at t = 0
        n = int(duration_s)
        sched = make_schedule("trace", timestamps_s=[0.0] * n)
        return single_turn(f"device-capacity-{mix[0]}-{mix[1]}", sched, input_tokens=mix[0], output_tokens=mix[1],
                           api="completions", seed=seed * 1000 + 999 - point, meta={"capacity_requests": n})
    sched = make_schedule("poisson", rate_per_s=rate, duration_s=duration_s, seed=seed * 1000 + point)
    if sched.count == 0:
        sched = make_schedule("constant", rate_per_s=max(rate, 1.0 / duration_s), duration_s=duration_s, seed=seed)
    return single_turn(f"device-{mix[0]}-{mix[1]}", sched, input_tokens=mix[0], output_tokens=mix[1], api="completions",
                       seed=seed * 1000 + point)


def _predict(twin: Any, art: Any, rate: float, span_s: float) -> dict[str, Any]:
    reqs = requests_from_rows(art.rows)
    if math.isinf(rate):
        rps, tok = backlog_rates(twin.make_scheduler, reqs)
        return {"capacity_rps": rps, "capacity_output_tokens_per_s": tok}
    return predict_point(twin.make_scheduler, reqs, rate_per_s=rate, span_s=span_s).to_dict()


def step_twins(work: Path) -> dict[str, Any]:
    """Plan the points on (a)'s burst capacity (else (b)'s) and predict every point with every twin."""
    p = load_preset(work)
    twins, missing = build_twins(work)
    if not twins:
        raise HarnessError("no twin could be built: " + "; ".join(f"{k}: {v}" for k, v in missing.items()))
    (work / "twins").mkdir(exist_ok=True)
    for name, t in twins.items():
        write_work(work / "twins", f"{name}.json", twin_dict(t))
    planner = "a" if "a" in twins else next(iter(twins))
    arts = work / "artifacts"
    arts.mkdir(exist_ok=True)
    points: list[dict[str, Any]] = []
    for mi, mix in enumerate(p.mixes):
        name = f"{mix[0]}/{mix[1]}"
        burst = _artifact(mix, math.inf, p.burst_requests, p.seed, mi)
        bpath = save_artifact(burst, arts)
        pred = {k: _predict(t, burst, math.inf, 0.0) for k, t in twins.items()}
        cap = pred[planner]["capacity_rps"]
        points.append({"point": len(points), "mix": name, "kind": "burst", "fraction": None, "rate_per_s": None,
                       "requests": burst.count, "artifact": str(bpath), "predicted": pred})
        for f in p.rate_fractions:
            art = _artifact(mix, f * cap, p.point_s, p.seed, len(points))
            pred = {k: _predict(t, art, f * cap, p.point_s) for k, t in twins.items()}
            points.append({"point": len(points), "mix": name, "kind": "rate", "fraction": f, "rate_per_s": f * cap,
                           "requests": art.count, "artifact": str(save_artifact(art, arts)), "predicted": pred})
    doc = {"planned_on": planner, "twins": {k: {"label": TWIN_LABELS[k], "source": t.source, "notes": list(t.notes)}
                                            for k, t in twins.items()},
           "twins_missing": missing, "points": points}
    write_work(work, "predictions.json", doc)
    return {"planned_on": planner, "twins": sorted(twins), "missing": missing, "points": len(points)}


def fresh_rows(rows: list[dict[str, Any]], salt: int) -> list[dict[str, Any]]:
    """The same arrivals and lengths with other prompt words, so a repeat does not hit the engine's prompt cache."""
    return [{**r, "prompt": prompt_text(int(r["prompt_tokens_target"]), 1_000_003 * (salt + 1) + 7919 * i + 13)}
            for i, r in enumerate(rows)]


def step_served(work: Path, deadline_unix_s: float) -> dict[str, Any]:
    """Launch llama-server and measure every planned point once, then again, while the deadline allows."""
    p = load_preset(work)
    pred = read_work(work, "predictions.json", "twins")
    cfg = engine_config(work)
    plan = make_plan(cfg)
    out = work / "served.jsonl"
    load_root = work / "results"
    skipped: list[str] = []
    done = 0
    with RunningEngine(plan, log_dir=work / "engine-log") as eng:
        print(f"llama-server ready in {eng.time_to_ready.ready_s:.1f} s at {plan.endpoint}", flush=True)
        write_work(work, "engine-startup.json", {"ready_s": eng.time_to_ready.ready_s, "endpoint": plan.endpoint,
                                              "command": [pr.argv for pr in plan.processes]})
        _warm_up(plan.endpoint, plan.served_name, p.slots)
        for rep in range(p.repeats):
            for pt in pred["points"]:
                burst = pt["kind"] == "burst"
                est_s = _estimate_s(pt, p, pred["planned_on"])
                left = deadline_unix_s - time.time()
                if est_s > left:
                    skipped.append(f"point {pt['point']} repeat {rep + 1}: needs ~{est_s:.0f} s, {left:.0f} s left")
                    continue
                art = load_artifact(pt["artifact"])
                wd = Path(tempfile.mkdtemp(prefix="device-loop-point-", dir=work))
                path = Path(pt["artifact"])
                if rep:
                    path = save_artifact(WorkloadArtifact(art.name, fresh_rows(art.rows, 1000 * pt["point"] + rep),
                                                          {**art.meta, "repeat": rep}), wd)
                point = served_point(pt)
                timeout_s = max(60.0, 4 * p.point_s)
                print(f"{'burst' if burst else 'point'} {pt['point']} ({pt['mix']}, "
                      f"{'burst of %d' % pt['requests'] if burst else point.load_text()}), repeat {rep + 1}", flush=True)
                t0 = time.time()
                r = measure_served(plan.endpoint, plan.served_name, point, str(path), 0.0 if burst else p.point_s,
                                   str(load_root), wd, None, p.threads, request_timeout_s=timeout_s, repeat=rep,
                                   drain_limit_s=None if burst else min(timeout_s, 3 * p.point_s))
                row = {"point": pt["point"], "repeat": rep, "wall_s": time.time() - t0, "measurement": r.served.to_dict(),
                       "load": asdict(r.run)}
                with out.open("a") as f:
                    f.write(json.dumps(row, default=str) + "\n")
                done += 1
                if eng.procs and eng.procs[0][1].poll() is not None:
                    raise HarnessError(f"llama-server exited with code {eng.procs[0][1].returncode} during the served step.")
    return {"measured": done, "skipped": skipped}


def _warm_up(endpoint: str, served_name: str, slots: int) -> None:
    """One round of `slots` concurrent short requests, then one alone, not recorded: the engine's first batches of each
    size pay one-time costs (CUDA graph capture per batch shape) that no served point should carry."""

    def one(i: int) -> None:
        http.post_json(f"{endpoint}/v1/completions", {"model": served_name, "prompt": prompt_text(64, 7 + i), "max_tokens": 16,
                                                      "ignore_eos": True, "cache_prompt": False}, timeout_s=60.0)

    with ThreadPoolExecutor(slots) as ex:
        list(ex.map(one, range(slots)))
    one(slots)


def _estimate_s(pt: dict[str, Any], p: Preset, planner: str) -> float:
    """Seconds one measurement needs: the load process's start (~4 s), the schedule, the drain; a burst 1.5 × its
    length as the planning twin predicts it."""
    if pt["kind"] == "burst":
        cap = pt["predicted"].get(planner, {}).get("capacity_rps")
        return 4.0 + 1.5 * pt["requests"] / cap if cap else 30.0
    return 4.0 + 1.6 * p.point_s


def step_compare(work: Path) -> dict[str, Any]:
    cmp = compare_work(work)
    write_work(work, "comparison.json", cmp)
    (work / "comparison.md").write_text(markdown(cmp))
    reports: dict[str, Any] = {}
    report_error = None
    try:  # the loop's own verdicts (absolute and repeatability) per twin; the table above stands without them
        reports = loop_reports(work)
    except HarnessError as exc:
        report_error = str(exc)
        print(f"warning: the loop reports could not be made: {exc}", flush=True)
    run = store_run(work, cmp, reports)
    print(markdown(cmp), flush=True)
    errors = [str(r) for r in reports.values() if isinstance(r, Exception)] + ([report_error] if report_error else [])
    return {"run": str(run), "rows": len(cmp["rows"]), "verdict": cmp["verdict"],
            "loop_reports": sorted(k for k, r in reports.items() if not isinstance(r, Exception)), "loop_report_errors": errors}


STEPS = ("prepare", "facts", "model", "kernels", "twins", "served", "compare", "collect")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.bench.device_loop", description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=STEPS)
    ap.add_argument("--work", required=True, help="the call's work folder (all state lives there)")
    ap.add_argument("--device", default="cuda", help="prepare: cuda (the lent GPU) or cpu (the dry run)")
    ap.add_argument("--bin-dir", help="prepare: the folder holding llama-server and the tools")
    ap.add_argument("--out", help="collect: the checks.json to write")
    ap.add_argument("--deadline-unix-s", type=float, default=math.inf, help="served: start no measurement that would end later")
    a = ap.parse_args(argv)
    work = Path(a.work)
    if a.step == "collect":
        collect(work, Path(a.out or work / "checks.json"))
        return 0
    t0 = time.time()
    status: dict[str, Any] = {"step": a.step, "started_unix_s": t0}

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # the step's time limit (timeout's SIGTERM): unwind, so llama-server is stopped too

    signal.signal(signal.SIGTERM, on_term)
    try:
        if a.step == "prepare":
            if not a.bin_dir:
                raise HarnessError("prepare needs --bin-dir (the folder holding llama-server).")
            res = step_prepare(work, a.device, a.bin_dir)
        elif a.step == "facts":
            res = step_facts(work)
        elif a.step == "model":
            res = step_model(work)
        elif a.step == "kernels":
            res = step_kernels(work)
        elif a.step == "twins":
            res = step_twins(work)
        elif a.step == "served":
            res = step_served(work, a.deadline_unix_s)
        else:
            res = step_compare(work)
        status.update(status="ok", result=res)
        rc = 0
    except HarnessError as exc:
        status.update(status="error", error=str(exc))
        print(f"error: {exc}", file=sys.stderr, flush=True)
        rc = 1
    except KeyboardInterrupt:
        status.update(status="interrupted", error="stopped at its time limit (SIGTERM) or by Ctrl-C; what it wrote is kept")
        rc = 124
    status["wall_s"] = time.time() - t0
    (work / "steps").mkdir(parents=True, exist_ok=True)
    write_work(work / "steps", f"{a.step}.json", status)
    return rc


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
