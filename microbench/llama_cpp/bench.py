"""llama-bench: prompt processing (pp) and generation (tg) with every repetition's time kept.

Command: `llama-bench -m MODEL -t THREADS -p P1,P2,.. -n G -d D1,D2,.. -r REPS -b N_BATCH -ub N_UBATCH
--repack 0|1 -o jsonl`. A pp test times the prefill of P random tokens after D tokens already in the
cache (depth); a tg test times G single-token decode steps starting at depth D. Output, one object per
test (tools/llama-bench/llama-bench.cpp, jsonl printer): the build (build_commit, build_number,
cpu_info, backends), model (model_type, model_size, model_n_params), settings (n_threads, n_batch,
n_ubatch, flash_attn, repack, type_k, type_v), the test (n_prompt, n_gen, n_depth), avg_ns,
stddev_ns and `samples_ns`, one entry per repetition.

Cases (suite "llama_bench"): `pp{P}-d{D}` — a prefill, time = sample; `tg{G}-d{D}` — one decode
step at batch 1, time = sample / G, at mean context D + (G+1)/2 keys.
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.errors import HarnessError
from microbench.llama_cpp._cases import case, json_lines

TOOL = "llama-bench"
SUITE = "llama_bench"


def command_args(model: str, *, prompts: Sequence[int], gen_tokens: int, depths: Sequence[int] = (0,), threads: int,
                 reps: int = 3, n_batch: int = 2048, n_ubatch: int = 512, repack: bool = True,
                 flash_attn: str | None = None) -> list[str]:
    if reps < 1:
        raise HarnessError(f"{TOOL}: repetitions must be >= 1, got {reps!r}.")
    args = ["-m", model, "-t", str(threads), "-p", ",".join(map(str, prompts)) if prompts else "0",
            "-n", str(gen_tokens), "-d", ",".join(map(str, depths or (0,))), "-r", str(reps),
            "-b", str(n_batch), "-ub", str(n_ubatch), "--repack", "1" if repack else "0", "-o", "jsonl"]
    if flash_attn is not None:
        args += ["-fa", {"on": "1", "off": "0"}.get(flash_attn, flash_attn)]
    return args


def parse_rows(text: str) -> list[dict[str, Any]]:
    rows = json_lines(text, "samples_ns", TOOL)
    if not rows:
        raise HarnessError(f"{TOOL}: no JSON result lines with samples_ns in the output; run it with -o jsonl "
                           "(llama.cpp from mid-2024 or later prints samples_ns).")
    for r in rows:
        for k in ("n_prompt", "n_gen", "samples_ns"):
            if k not in r:
                raise HarnessError(f"{TOOL}: a result lacks {k!r}; unsupported llama.cpp version: {str(r)[:200]}")
        if not r["samples_ns"]:
            raise HarnessError(f"{TOOL}: a result has no samples (n_prompt {r['n_prompt']}, n_gen {r['n_gen']}).")
    return rows


def facts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The build and host facts llama-bench reports (the same in every row)."""
    r = rows[0]
    return {k: r.get(k) for k in ("build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_type",
                                  "model_size", "model_n_params", "type_k", "type_v")}


def cases(outputs: Sequence[str], *, dtype: str, family: str, work_model: Any = None, command_lines: Sequence[str] = ()) -> list:
    out = []
    for text in outputs:
        for r in parse_rows(text):
            p, g, d = int(r["n_prompt"]), int(r["n_gen"]), int(r.get("n_depth") or 0)
            common = {"tool": TOOL, "family": family, "batch": 1, "depth_tokens": d, "threads": r.get("n_threads"),
                      "n_batch": r.get("n_batch"), "n_ubatch": r.get("n_ubatch"), "flash_attn": r.get("flash_attn"),
                      "repack": r.get("repack"), "type_k": r.get("type_k"), "type_v": r.get("type_v"),
                      "repetitions": len(r["samples_ns"]), "command_lines": list(command_lines)}
            ns = [float(x) for x in r["samples_ns"]]
            if p > 0 and g == 0:
                fl = by = 0.0
                if work_model is not None:
                    chunks = work_model.prefill_work(p, d)
                    fl, by = sum(c.flops for c in chunks), sum(c.bytes for c in chunks)
                out.append(case(SUITE, f"pp{p}-d{d}", TOOL, dtype,
                                {**common, "phase": "prefill", "prompt_tokens": p, "context_tokens": float(d), "n_steps": 1,
                                 "time_is": "one repetition: prefill of prompt_tokens after depth_tokens cached"},
                                [x / 1e9 for x in ns], fl, by))
            elif g > 0 and p == 0:
                ctx = d + (g + 1) / 2.0
                fl = by = 0.0
                if work_model is not None:
                    w = work_model.decode_work(1, ctx)
                    fl, by = w.flops, w.bytes
                out.append(case(SUITE, f"tg{g}-d{d}", TOOL, dtype,
                                {**common, "phase": "decode", "prompt_tokens": d, "gen_tokens": g, "context_tokens": ctx,
                                 "n_steps": g, "time_is": "one repetition / n_gen: one decode step at batch 1"},
                                [x / 1e9 / g for x in ns], fl, by))
            # a combined pp+tg test (-pg) mixes both phases; it is not a step time and is not recorded
    return out
