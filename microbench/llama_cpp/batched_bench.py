"""llama-batched-bench: prefill time vs prompt length and decode step time at batch × context, from the engine's code.

Command: `llama-batched-bench -m MODEL -c CTX -b N_BATCH -ub N_UBATCH -t THREADS -npp P1,P2,.. -ntg G
-npl B1,B2,.. --output-format jsonl [-fa on|off|auto] [--no-repack]` (CTX = max B·(P+G), so no combination
is skipped). For each (P, G, B) the tool clears the KV cache, prefills B sequences of P random tokens
(timed: t_pp), then runs G decode steps of B tokens, one per sequence (timed: t_tg, each step
synchronised). Output line (tools/batched-bench/batched-bench.cpp):
{"n_kv_max", "n_batch", "n_ubatch", "flash_attn", "is_pp_shared", "n_gpu_layers", "n_threads",
"n_threads_batch", "pp", "tg", "pl", "n_kv", "t_pp" s, "speed_pp", "t_tg" s, "speed_tg", "t", "speed"}.

Cases (suite "llama_batched_bench"): `pp{P}-b{B}` — prefill of B×P tokens, time t_pp; and
`tg{G}-pp{P}-b{B}` — one decode step, time t_tg / G, at mean context P + (G+1)/2 keys per sequence
(step i attends the P prompt keys, the i earlier generated ones and itself). Repeated runs of the
tool are the raw samples.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from harness.errors import HarnessError
from microbench.llama_cpp._cases import case, json_lines

TOOL = "llama-batched-bench"
SUITE = "llama_batched_bench"


def command_args(model: str, *, prompts: Sequence[int], gen_tokens: int, batches: Sequence[int], threads: int,
                 n_batch: int = 2048, n_ubatch: int = 512, flash_attn: str | None = None, repack: bool = True) -> list[str]:
    if not prompts or not batches or gen_tokens < 1:
        raise HarnessError(f"{TOOL}: need prompt lengths, batches and >= 1 generated token (got {prompts}, {batches}, {gen_tokens}).")
    ctx = max(b * (p + gen_tokens) for p in prompts for b in batches)
    args = ["-m", model, "-c", str(ctx), "-b", str(n_batch), "-ub", str(n_ubatch), "-t", str(threads), "-tb", str(threads),
            "-npp", ",".join(map(str, prompts)), "-ntg", str(gen_tokens), "-npl", ",".join(map(str, batches)),
            "--output-format", "jsonl"]
    if flash_attn is not None:
        args += ["-fa", flash_attn]
    if not repack:
        args.append("--no-repack")
    return args


def parse_rows(text: str) -> list[dict[str, Any]]:
    """The tool's JSON lines; an output without any is an error naming the flag that produces them."""
    rows = json_lines(text, "t_tg", TOOL)
    if not rows:
        raise HarnessError(f"{TOOL}: no JSON result lines in the output; run it with --output-format jsonl "
                           "(or every batch × prompt combination exceeded -c).")
    for r in rows:
        for k in ("pp", "tg", "pl", "t_pp", "t_tg"):
            if k not in r:
                raise HarnessError(f"{TOOL}: a result line lacks {k!r}; unsupported llama.cpp version: {r}")
    return rows


def mean_decode_context(pp: int, tg: int) -> float:
    """Keys attended per sequence, averaged over the G steps: P + (G+1)/2."""
    return pp + (tg + 1) / 2.0


def cases(outputs: Sequence[str], *, dtype: str, family: str, work_model: Any = None, command_lines: Sequence[str] = ()) -> list:
    """One prefill and one decode case per (P, G, B), the repeated runs' times as samples."""
    groups: dict[tuple[int, int, int], list[dict[str, Any]]] = defaultdict(list)
    for text in outputs:
        for r in parse_rows(text):
            groups[(int(r["pp"]), int(r["tg"]), int(r["pl"]))].append(r)
    out = []
    for (pp, tg, pl), rows in sorted(groups.items()):
        r0 = rows[0]
        common = {"tool": TOOL, "family": family, "batch": pl, "prompt_tokens": pp, "gen_tokens": tg,
                  "n_kv_max": r0.get("n_kv_max"), "n_batch": r0.get("n_batch"), "n_ubatch": r0.get("n_ubatch"),
                  "flash_attn": r0.get("flash_attn"), "is_pp_shared": r0.get("is_pp_shared"),
                  "n_gpu_layers": r0.get("n_gpu_layers"), "threads": r0.get("n_threads"),
                  "threads_batch": r0.get("n_threads_batch"), "repetitions": len(rows), "command_lines": list(command_lines)}
        fl = by = 0.0
        if work_model is not None and pl == 1:
            chunks = work_model.prefill_work(pp)
            fl, by = sum(c.flops for c in chunks), sum(c.bytes for c in chunks)
        out.append(case(SUITE, f"pp{pp}-b{pl}", TOOL, dtype,
                        {**common, "phase": "prefill", "context_tokens": 0.0, "n_steps": 1,
                         "time_is": "t_pp: prefill of batch x prompt_tokens tokens"},
                        [float(r["t_pp"]) for r in rows], fl, by))
        ctx = mean_decode_context(pp, tg)
        fl = by = 0.0
        if work_model is not None:
            w = work_model.decode_work(pl, ctx)
            fl, by = w.flops, w.bytes
        out.append(case(SUITE, f"tg{tg}-pp{pp}-b{pl}", TOOL, dtype,
                        {**common, "phase": "decode", "context_tokens": ctx, "n_steps": tg,
                         "time_is": "t_tg / tg: one decode step of batch sequences"},
                        [float(r["t_tg"]) / tg for r in rows], fl, by))
    return out
