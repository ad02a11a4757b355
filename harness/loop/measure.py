"""The loop's measure step: the real llama-server's isolated stages (prefill, decode at batch B, the side requests the
twin's corrections read) and one load run of a served point.

Prompts of exactly P token ids (cache_prompt off) for prefill and TTFT; B concurrent streams for decode; each
request's client view is cross-checked against the engine's own `timings` and `usage`
(harness.target.stage_requests.RequestCheck). The engine's CPU share over each measurement guards against a shared
machine (CpuShare).
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.bench.load import run_load
from harness.engines import http
from harness.errors import HarnessError
from harness.loop.state import RunResult
from harness.loop_records.report import LoadRun
from harness.loop_records.stages import CONTENDED_SHARE, StageMeasurement
from harness.records import new_run_id
from harness.served import Percentiles, ServedMeasurement, ServedPoint
from harness.store import Run
from harness.target.saturation import completion_rate, saturated_rates, saturation_window
from harness.target.stage_requests import (MIXED_PROMPT_SLOT, PREFILL_DECODE_TOKENS, SAVE_PROBE_TOKENS, RequestCheck,
                                           mixed_decode_slots, mixed_phase)
from harness.telemetry.proc import busy_union_s, process_cpu_s  # busy_union_s: shared with bench-pd's engine share
from workloads.config import LoadConfig, SummaryOptions
from workloads.gpu_telemetry import local_sampling
from workloads.summary import measured_requests, read_summary

def _check(phase: str, rep: int, s: http.StreamResult, max_tokens: int | None = None) -> RequestCheck:
    t = s.timings or {}
    u = s.usage or {}
    pm = t.get("prompt_ms")
    eng_p = pm / 1e3 if isinstance(pm, (int, float)) else None
    dm = t.get("predicted_ms")
    n = len(s.chunk_times_s)
    uc = u.get("completion_tokens")
    return RequestCheck(
        phase=phase, rep=rep, client_ttft_s=s.ttft_s, engine_prompt_s=eng_p,
        ttft_minus_engine_prompt_s=(s.ttft_s - eng_p) if (s.ttft_s is not None and eng_p is not None) else None,
        engine_prompt_tokens=t.get("prompt_n"), usage_prompt_tokens=u.get("prompt_tokens"),
        client_chunks=n, usage_completion_tokens=uc, engine_predicted_tokens=t.get("predicted_n"),
        chunks_minus_usage=(n - uc) if isinstance(uc, int) else None,
        engine_decode_s=dm / 1e3 if isinstance(dm, (int, float)) else None,
        client_decode_s=(s.chunk_times_s[-1] - s.chunk_times_s[0]) if n >= 2 else None,
        e2e_s=s.e2e_s, error=s.error, max_tokens=max_tokens, stopped=s.stopped,
    )


class CpuShare:
    """The share of its `threads` cores the engine process got over a measured interval.

    llama.cpp's threads meet at a barrier every operation; when another process takes a core, the
    whole step waits for the descheduled thread, so throughput can fall far below the lost share.
    A share under SHARE_OK marks the measurement as contended (a warning with the remedy, not a silent number).
    """

    SHARE_OK = CONTENDED_SHARE

    def __init__(self, pid: int | None, threads: int):
        self.pid, self.threads = pid, threads
        self.cpu0 = process_cpu_s(pid)
        self.t0 = time.perf_counter()

    def share(self) -> float | None:
        c1 = process_cpu_s(self.pid)
        wall = time.perf_counter() - self.t0
        if c1 is None or self.cpu0 is None or wall <= 0:
            return None
        return (c1 - self.cpu0) / (wall * self.threads)


def token_prompt(n: int, seed: int, vocab: int) -> list[int]:
    """n pseudo-random ordinary token ids (away from the special tokens at both ends of the vocabulary)."""
    rng = random.Random(seed)
    lo = min(1000, max(3, vocab // 8))  # away from the special tokens at both ends, also for a small vocabulary
    hi = max(lo + 1, min(vocab - lo, 200_000))
    return [rng.randrange(lo, hi) for _ in range(n)]


def completion_body(model: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    # cache_prompt off: each measurement processes its whole prompt; ignore_eos: exactly max_tokens
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "cache_prompt": False,
            "ignore_eos": True}


def measure_prompts(endpoint: str, model: str, lengths: Sequence[int], vocab: int, reps: int) -> list[RequestCheck]:
    """`reps` isolated prompts of each length, one at a time, each with one output token (phase "prompt"): the
    prefill correction's further knots, at the served mixes' prompt lengths."""
    checks: list[RequestCheck] = []
    for n in lengths:
        for rep in range(reps):
            s = http.stream(endpoint + "/v1/completions", completion_body(model, token_prompt(int(n), 3000 + 31 * rep + n, vocab), 1))
            if s.status != 200 or s.error:
                raise HarnessError(f"isolated {n}-token prompt request failed (HTTP {s.status}): {s.error}")
            checks.append(_check("prompt", rep, s))
    return checks


def measure_mixed_prompts(endpoint: str, model: str, cases: Sequence[tuple[int, int, int]], vocab: int, reps: int,
                          decode_prompt_tokens: int) -> list[RequestCheck]:
    """Prompts sent while other slots decode (LlamaServerSettings.mixed_correction_by_batch_tokens_s): per (prompt
    tokens P, decode batch B, decode output tokens N) case and rep, B requests of `decode_prompt_tokens` tokens generating
    N each, started together in `mixed_decode_slots(B)` (phase "mixeddecode@P/B"), and, as soon as every one of them has
    streamed its first token, a P-token prompt with one output token in slot MIXED_PROMPT_SLOT (phase "mixed@P/B",
    `sent_after_s` after the decodes' send). Just before the decodes, a P-token prompt of other tokens runs alone in the
    same slot (phase "mixedalone@P/B"): the correction is solved against the engine's prompt time beside the decodes
    less this one's, measured seconds apart, so the host's drift over the window cancels (the windows' 512-token prefill
    moved 7-37 % within a run on the 2026-12-02 evening VM). N must keep the decodes generating until the prompt is done (the caller sizes
    it from the window's own prompt and step times). A prompt that finished after a decode did carries an error and is
    not used. Once the prompt is done, the decodes are stopped (their streams closed, which llama-server answers by
    cancelling them; `stopped`, with `max_tokens` what they asked for) and the next request waits until /slots shows
    every slot idle: run to their end, the decodes of the 2026-12-03 11:18 Gemma loop went on 57 s of their 84 s after
    their prompt was done. An engine without /slots (--no-slots) lets them run to their end."""
    checks: list[RequestCheck] = []
    idle = slots_idle_reader(endpoint)
    for p, bsz, n in cases:
        slots = mixed_decode_slots(bsz)
        for rep in range(reps):
            stop = threading.Event() if idle is not None else None
            a = http.stream(endpoint + "/v1/completions",
                            {**completion_body(model, token_prompt(int(p), 9300 + 43 * rep + p, vocab), 1), "id_slot": MIXED_PROMPT_SLOT})
            if a.status != 200 or a.error:
                raise HarnessError(f"mixed-prompt measurement (the {p}-token prompt alone before {bsz} decodes) failed "
                                   f"(HTTP {a.status}): {a.error}")
            checks.append(_check(mixed_phase(p, bsz, "mixedalone"), rep, a))
            first = threading.Barrier(bsz + 1)
            start = threading.Barrier(bsz)
            box: dict[int, Any] = {}
            t0: list[float] = []

            def decode(i: int, slot: int, p: int = p, n: int = n, rep: int = rep) -> None:
                seen = [False]

                def on_content(_t: float) -> None:
                    if not seen[0]:
                        seen[0] = True
                        first.wait(timeout=600)

                body = {**completion_body(model, token_prompt(decode_prompt_tokens, 9100 + 37 * rep + 7 * i + p, vocab), n),
                        "id_slot": slot, "timings_per_token": True}  # a stopped stream keeps the engine's timings
                try:
                    start.wait(timeout=30)
                    t0.append(time.perf_counter())
                    box[i] = http.stream(endpoint + "/v1/completions", body, on_content=on_content, stop=stop)
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                    box[i] = exc
                if not seen[0]:  # no token streamed: release the caller, which reports it
                    first.abort()

            ths = [threading.Thread(target=decode, args=(i, sl), daemon=True) for i, sl in enumerate(slots)]
            for t in ths:
                t.start()
            try:
                first.wait(timeout=600)
            except threading.BrokenBarrierError:
                for t in ths:
                    t.join(timeout=600)
                bad = next((v for v in box.values() if isinstance(v, BaseException) or not v.chunk_times_s), None)
                if isinstance(bad, BaseException):
                    raise bad from None
                raise HarnessError(f"a decode request of the mixed-prompt measurement (P = {p}, B = {bsz}) streamed no token"
                                   + (f" (HTTP {bad.status}): {bad.error}" if bad is not None else "")) from None
            t_send = time.perf_counter()
            s = http.stream(endpoint + "/v1/completions",
                            {**completion_body(model, token_prompt(int(p), 9200 + 41 * rep + p, vocab), 1), "id_slot": MIXED_PROMPT_SLOT})
            t_done = time.perf_counter()
            if stop is not None:
                stop.set()
            for t in ths:
                t.join(timeout=600)
            if idle is not None:
                wait_slots_idle(idle, f"the mixed-prompt measurement's decodes (P = {p}, B = {bsz}) were stopped")
            ds = [box.get(i) for i in range(bsz)]
            exc = next((d for d in ds if isinstance(d, BaseException)), None)
            if exc is not None:
                raise exc
            if s.status != 200 or s.error or any(d is None or d.status != 200 or d.error for d in ds):
                raise HarnessError(f"mixed-prompt measurement (a {p}-token prompt while {bsz} slots decode) failed: prompt HTTP "
                                   f"{s.status} {s.error}; decodes {[None if d is None else (d.status, d.error) for d in ds]}")
            c = replace(_check(mixed_phase(p, bsz), rep, s), sent_after_s=t_send - min(t0))
            if min(t0) + min(d.e2e_s for d in ds) < t_done:
                c = replace(c, error=f"a decode ({n} tokens) finished before the {p}-token prompt did; raise its tokens")
            checks += [_check(mixed_phase(p, bsz, "mixeddecode"), rep, d, max_tokens=n) for d in ds] + [c]
    return checks


SLOTS_IDLE_TIMEOUT_S = 30.0  # stopped requests must have left every slot by then (llama-server: ~26 ms, 2026-12-03)


def slots_idle_reader(endpoint: str) -> Callable[[], bool | None] | None:
    """A reader of llama-server's /slots: True when no slot is processing, None when the answer is not a slot list; the
    reader itself is None when the engine does not serve /slots now (--no-slots, another server)."""
    def idle() -> bool | None:
        r = http.get(endpoint + "/slots", timeout_s=10.0)  # an engine that is gone raises EngineUnreachable
        try:
            d = r.json() if r.status == 200 else None
        except HarnessError:  # not JSON
            return None
        if not isinstance(d, list) or not d or not all(isinstance(x, dict) and isinstance(x.get("is_processing"), bool) for x in d):
            return None
        return not any(x["is_processing"] for x in d)

    return idle if idle() is not None else None


def wait_slots_idle(idle: Callable[[], bool | None], what: str, timeout_s: float = SLOTS_IDLE_TIMEOUT_S) -> None:
    """Poll `idle` (slots_idle_reader) until every slot is idle; a clear error after `timeout_s`."""
    deadline = time.perf_counter() + timeout_s
    while True:
        state = idle()
        if state:
            return
        if time.perf_counter() > deadline:
            raise HarnessError(f"{what}, but the engine's /slots still showed a slot "
                               + ("processing" if state is False else "in a form this harness does not read")
                               + f" {timeout_s:g} s later; check that nothing else sends requests to this engine.")
        time.sleep(0.005)


def measure_prompt_saves(endpoint: str, model: str, cases: Sequence[tuple[int, int]], vocab: int, reps: int,
                         slots: int) -> list[RequestCheck]:
    """What llama-server's host-RAM prompt cache costs at a task's launch (LlamaServerSettings.prompt_save_s): per
    (prompt, output) case and rep, one request of that shape, then `slots` small requests one at a time (phase
    "save@P/O"), so that the case's slot state is copied at one of their launches (as an idle slot, or when the slot is
    chosen again by LRU); their summed TTFT outside the engine's prompt time, less as many baseline requests' (phase
    "savebase": small requests after small ones), is the copy. The baseline is also the request overhead outside any
    copy. The shapes are the served mixes': a copy's cost depends on the slot's prompt and generated tokens."""
    checks: list[RequestCheck] = []
    seed = [5000]

    def one(phase: str, rep: int, n: int, out: int) -> None:
        seed[0] += 1
        s = http.stream(endpoint + "/v1/completions", completion_body(model, token_prompt(int(n), seed[0], vocab), int(out)))
        if s.status != 200 or s.error:
            raise HarnessError(f"prompt-cache copy measurement ({n}-token prompt, {out} tokens) failed (HTTP {s.status}): {s.error}")
        checks.append(_check(phase, rep, s))

    for rep in range(2 * slots):  # every slot holds a small state; the later ones are the baseline
        one("savebase" if rep >= slots else "savewarm", rep, SAVE_PROBE_TOKENS, 1)
    for rep in range(reps):
        for p, o in cases:
            one(f"case@{p}/{o}", rep, p, o)
            for _ in range(slots):
                one(f"save@{p}/{o}", rep, SAVE_PROBE_TOKENS, 1)
    return checks


def settle_slots(endpoint: str, model: str, vocab: int, slots: int) -> None:
    """Before a served point: one small request per slot, one after another, pinned (`id_slot`) from the highest slot
    id down to 0. Two things the twin assumes of the engine at a point's start follow from it:

    - **the slots' LRU order is the twin's.** llama-server gives an unpinned request the idle slot used least recently;
      the twin starts each point with every slot equally old, and then picks the last of equals first: slots − 1,
      slots − 2, …, 0. After this settle, slot slots − 1 is the least recently used, then slots − 2, …: the engine
      picks the same slots for the same requests. Without it the engine began each point in whatever order the previous
      activity (a stage window's pinned requests, the previous point's finishing order) left, and on a host where
      decoding two slots that are not neighbours costs two passes over the weights (llama_decode's equal split; the
      Intel Xeon VM of 2026-12-03 night: 44 ms against 24.6 ms for neighbours) the engine's batch-2 and batch-3 steps
      in served load were 1.3–1.7 × the twin's: 512/64 × 1.2's TPOT p50 76 ms against a predicted 50 ms;
    - **no slot state is left to copy** into the host-RAM prompt cache (`--cache-ram`): each launch copies the state the
      previous activity left in that slot now, outside the point. Without it the point's first request paid for those
      copies: 80-340 ms of TTFT outside the prompt time in every point of the 2026-12-02 04:40 run, which moved the
      median of a 4-request point by 150 ms. After it the slots hold SAVE_PROBE_TOKENS-token states, whose copies take
      ~0.1 ms."""
    for slot in settle_order(slots):
        s = http.stream(endpoint + "/v1/completions",
                        {**completion_body(model, token_prompt(SAVE_PROBE_TOKENS, 7700 + slot, vocab), 1), "id_slot": slot})
        if s.status != 200 or s.error:
            raise HarnessError(f"the small request that settles the engine's slot {slot} before a served point failed "
                               f"(HTTP {s.status}): {s.error}")


def settle_order(slots: int) -> list[int]:
    """The slots settle_slots pins its requests to, in order: the highest id first, so that afterwards the least
    recently used slot is the one a fresh twin picks first (every slot equally old: the last of equals)."""
    return list(range(slots - 1, -1, -1))


def measure_prefill(endpoint: str, model: str, prompt_tokens: int, vocab: int, reps: int, pid: int | None = None,
                    threads: int = 1) -> tuple[list[StageMeasurement], list[RequestCheck]]:
    checks: list[RequestCheck] = []
    rates, client_rates, ttft, eng_ttft, shares = [], [], [], [], []
    for rep in range(reps):
        cs = CpuShare(pid, threads)
        s = http.stream(endpoint + "/v1/completions", completion_body(model, token_prompt(prompt_tokens, 1000 + rep, vocab),
                                                                    1 + PREFILL_DECODE_TOKENS))
        sh = cs.share()
        if sh is not None:
            shares.append(sh)
        if s.status != 200 or s.error:
            raise HarnessError(f"prefill measurement request failed (HTTP {s.status}): {s.error}")
        c = _check("prefill", rep, s)
        checks.append(c)
        if c.engine_prompt_tokens != prompt_tokens:
            raise HarnessError(
                f"llama.cpp processed {c.engine_prompt_tokens} prompt tokens, not {prompt_tokens}; is the prompt cache on "
                "or the slot context too small? (ctx_size / parallel must exceed the prompt)"
            )
        rates.append(prompt_tokens / c.engine_prompt_s)
        ttft.append(c.client_ttft_s)
        eng_ttft.append(c.engine_prompt_s)
        client_rates.append(prompt_tokens / c.client_ttft_s)
    med = statistics.median
    share = med(shares) if shares else None
    return [
        StageMeasurement("prefill_tokens_per_s", med(rates), med(client_rates), tuple(rates),
                 "engine: prompt_n / prompt_ms; client: P / TTFT", share),
        StageMeasurement("ttft_s", med(eng_ttft), med(ttft), tuple(ttft),
                 "engine: timings.prompt_ms; client: first streamed token (includes HTTP, tokenizer, first sampling)", share),
    ], checks


def measure_decode(endpoint: str, model: str, batch: int, prompt_tokens: int, output_tokens: int, vocab: int,
                   reps: int, pid: int | None = None, threads: int = 1, phase: str = "decode", rep0: int = 0,
                   after_rep: Callable[[int], None] | None = None) -> tuple[StageMeasurement, list[RequestCheck]]:
    """`batch` concurrent streams started together; aggregate tokens/s = Σ per-request decode rates. The checks are
    labelled `phase`@batch ("longdecode" for the long-context decode the context correction reads), reps numbered from
    `rep0`; `after_rep(rep)` runs after each rep is measured (another measurement interleaved with these reps).

    Stream i runs in slot i (llama-server's request field `id_slot`): the B sequences are then consecutive slot ids, so
    each step is one micro-batch (split_equal takes consecutive ids only), the configuration the twin's corrections are
    computed against, whatever slots LRU would have picked after the earlier stages. (On Gemma 3 270M here it made no
    measurable difference, 2026-12-02: batch-2 steps of 29.9-34.7 ms in slots 0+1, 2+3, 0+2 or by LRU, against
    14.6-15.9 ms at batch 1; the batch-2 correction is the step-time fit's own error at B = 2.)"""
    checks: list[RequestCheck] = []
    agg_eng, agg_client, shares = [], [], []
    for rep in range(rep0, rep0 + reps):
        cs = CpuShare(pid, threads)
        results: list[http.StreamResult | None] = [None] * batch
        errors: list[BaseException] = []
        barrier = threading.Barrier(batch)

        def one(i: int) -> None:
            try:
                body = {**completion_body(model, token_prompt(prompt_tokens, 7919 * rep + i, vocab), output_tokens), "id_slot": i}
                barrier.wait(timeout=30)
                results[i] = http.stream(endpoint + "/v1/completions", body)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)

        workers = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(batch)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(timeout=600)
        sh = cs.share()
        if sh is not None:
            shares.append(sh)
        if errors:
            raise errors[0]
        eng = cli = 0.0
        for r in results:
            if r is None or r.status != 200 or r.error:
                raise HarnessError(f"decode measurement at batch {batch} failed: {None if r is None else (r.status, r.error)}")
            c = _check(f"{phase}@{batch}", rep, r)
            checks.append(c)
            n = c.engine_predicted_tokens or 0
            if n < 2 or not c.engine_decode_s:
                raise HarnessError(f"decode measurement at batch {batch}: the engine generated {n} tokens; need >= 2.")
            eng += n / c.engine_decode_s
            if c.client_step_s:
                cli += 1.0 / c.client_step_s
        agg_eng.append(eng)
        agg_client.append(cli)
        if after_rep is not None:
            after_rep(rep)
    return StageMeasurement(f"decode_tokens_per_s@{batch}", statistics.median(agg_eng), statistics.median(agg_client),
                    tuple(agg_eng), "engine: Σ predicted_n / predicted_ms over the concurrent requests; client: Σ 1 / the client's mean step "
                    "(RequestCheck.client_step_s)",
                    statistics.median(shares) if shares else None), checks




# ---------------------------------------------------------------- served load


def fit_prompts(endpoint: str, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Rewrite each row's prompt so the engine's tokenizer makes it exactly prompt_tokens_target tokens (BOS included).

    Uses llama-server's /tokenize and /detokenize (the engine's own tokenizer); returns the rows and how
    many could not be made exact (their target is replaced by the engine's count, so the twin sees the truth).
    """
    out, inexact = [], 0
    bos = _tokenize(endpoint, "", True)  # what the server adds to every prompt (BOS for most models)
    n_special = len(bos)
    for r in rows:
        target = int(r["prompt_tokens_target"]) - n_special
        ids = _tokenize(endpoint, r["prompt"], False)
        while len(ids) < target:  # synthetic words: extend by repetition
            ids = ids + ids[: target - len(ids)]
        ids = ids[:target]
        text = _detokenize(endpoint, ids)
        n = len(_tokenize(endpoint, text, True))
        if n != target + n_special and text[:1].isspace():
            # SentencePiece vocabularies add the leading space themselves: the detokenized text's own one is one token more
            n2 = len(_tokenize(endpoint, text.lstrip(), True))
            if abs(n2 - target - n_special) < abs(n - target - n_special):
                text, n = text.lstrip(), n2
        if n != target + n_special:
            inexact += 1
        out.append({**r, "prompt": text, "prompt_tokens_target": n})
    return out, inexact


def _tokenize(endpoint: str, text: str, add_special: bool) -> list[int]:
    r = http.post_json(endpoint + "/tokenize", {"content": text, "add_special": add_special})
    if r.status != 200:
        raise HarnessError(f"llama-server /tokenize answered HTTP {r.status}: {r.text[:200]}")
    toks = r.json().get("tokens")
    if not isinstance(toks, list):
        raise HarnessError(f"llama-server /tokenize returned no token list: {r.text[:200]}")
    return [t if isinstance(t, int) else t.get("id") for t in toks]


def _detokenize(endpoint: str, ids: list[int]) -> str:
    r = http.post_json(endpoint + "/detokenize", {"tokens": ids})
    if r.status != 200:
        raise HarnessError(f"llama-server /detokenize answered HTTP {r.status}: {r.text[:200]}")
    return str(r.json().get("content", ""))


def saturated_rate(finished_s: list[float], chunk_s: Sequence[Sequence[float]] | None = None,
                   output_tokens: Sequence[float] | None = None) -> float | None:
    """Requests/s at saturation by harness.target.saturation (the twin's estimator): the output tokens emitted between
    the 20th and 80th percentile completion instant, over that time and the mean output length. `chunk_s` holds each
    request's content-chunk instants and `output_tokens` its token count (a chunk carries count / chunks tokens).
    Without chunks: completions in the window over its length (None below 10 completions)."""
    if chunk_s is None or output_tokens is None:
        return completion_rate(finished_s)
    w = saturation_window(finished_s)
    if w is None:
        return None
    per_chunk = [(float(n) / len(c) if n == n and n > 0 else 1.0) if len(c) else 0.0 for c, n in zip(chunk_s, output_tokens)]

    def tokens_in(a: float, b: float) -> float:
        return sum(k * sum(1 for t in c if a <= t < b) for c, k in zip(chunk_s, per_chunk))

    r = saturated_rates(w, tokens_in, sum(output_tokens) / len(output_tokens) if output_tokens else 0.0)
    return r[0] if r else None


# the load generator's lead from its set-up to the schedule's t0 (its users, one per request of the point, spawn and
# connect in it): 1 s, the load generator's default. It was 0.5 s from 2026-12-03 14:45 to 17:05 (fd11644, to save
# ~0.5 s a point). In the three loop runs at 0.5 s, 8 of the 12 first requests of the 128/256 points took longer
# than every lone 128-token request of their run (engine prompt time: Gemma 646-1044 ms against 416-742 ms, the
# second model 314-489 against 168-195 ms); in the three runs at 1 s before (11:18, 13:41, 14:26) none of 12 did, nor
# in the two after (8 points). A two-request point's TTFT p50 is half its first request: 128/256 x 0.2 moved 27-29 %.
# The cause was not isolated (an A/B on a fresh engine showed +27 % for the first request at 0.5 s and -7 % at 1 s,
# three rounds each); the 0.5 s saved a point is not worth it
LOAD_T0_LEAD_S = 1.0
# a served point's summary: every intended send of the point measured (the twin predicts the same window), no SLOs
LOOP_SUMMARY = SummaryOptions(warmup_s=0.0, cooldown_s=0.0, slo_ttft_s=None, slo_tpot_s=None, slo_e2e_s=None)


def measure_served(endpoint: str, served_name: str, point: ServedPoint, artifact_path: str | Path, span_s: float,
                   results_dir: str, workdir: Any, pid: int | None, threads: int, request_timeout_s: float, repeat: int = 0,
                   drain_limit_s: float | None = None, gpu: dict[str, Any] | None = None) -> RunResult:
    """Run the load generator on one artifact against the engine and read its stored requests table.

    `drain_limit_s`: at most this long after the last intended send; requests still running then are recorded as
    cancelled (the point is then cut and its figures cover the completed requests only). None: request timeout + 10 s.
    A burst (`span_s` 0, every request intended at 0) has an empty window of intended sends: its figures count all.
    `gpu`: the GPU telemetry fields of the load config (harness.loop.gpu_telemetry); None: this host's GPUs when the
    engine runs here and NVML sees one."""
    cfg = LoadConfig(
        target_url=endpoint, artifact_path=str(artifact_path), run_id=new_run_id("loop-load"), results_dir=results_dir,
        model=served_name, max_concurrency=256, request_timeout_s=request_timeout_s,
        drain_timeout_s=request_timeout_s + 10.0 if drain_limit_s is None else float(drain_limit_s), t0_lead_s=LOAD_T0_LEAD_S,
        scrape=[{"role": "all", "url": f"{endpoint}/metrics"}], extra_body={"ignore_eos": True},
        summary=LOOP_SUMMARY, manifest_extra={"bench": "loop served point", "mix": point.workload, "rate_per_s": point.rate_per_s, "repeat": repeat},
        engine={"name": "llama.cpp", "simulated": False, "url": endpoint}, progress=False,
        **(gpu if gpu is not None else {"gpu_local": local_sampling(endpoint)}),  # GPU telemetry beside the requests
    )
    cpu0 = process_cpu_s(pid)
    run_dir = run_load(cfg, workdir, progress=None, timeout_s=span_s + cfg.drain_timeout_s + 120.0)
    cpu1 = process_cpu_s(pid)
    cpu_s = cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None
    return read_load_run(run_dir, point, span_s, repeat=repeat, engine_cpu_s=cpu_s, threads=threads, summary=cfg.summary)


def read_load_run(run_dir: str | Path, point: ServedPoint, span_s: float, *, repeat: int = 0, engine_cpu_s: float | None = None,
                  threads: int = 1, summary: SummaryOptions = LOOP_SUMMARY) -> RunResult:
    """One stored load run of `point` as the loop reads it (also offline, for runs measured elsewhere): its figures,
    the capacity statistic, the engine's side (its CPU share when `engine_cpu_s`, the engine's CPU seconds over the
    run, is known) and the measured requests' TTFT and TPOT. A burst (`span_s` 0, every request intended at 0) has an
    empty window of intended sends: its figures count all."""
    run = Run(run_dir)
    s = read_summary(run).load
    df = run.table("requests")
    ok = df[df["error_class"] == "ok"]
    busy = busy_union_s([(a / 1e9, b / 1e9) for a, b in zip(df["sent_ns"], df["last_byte_ns"]) if a is not None and b is not None
                         and a == a and b == b])
    share = engine_cpu_s / (busy * threads) if engine_cpu_s is not None and busy > 0 else None
    med = (lambda col: float(ok[col].median()) if len(ok) and col in ok and ok[col].notna().any() else None)
    # the requests the summary's percentiles cover (a burst's window is empty: all of them)
    in_window = ok if span_s <= 0 else measured_requests(df, span_s=span_s, options=summary)[1]
    samples = {col: tuple(float(x) for x in in_window[col] if x == x) for col in ("ttft_s", "tpot_s") if col in in_window}
    n_total, n_ok, errors = int(s.requests_total), int(s.requests_ok), dict(s.errors_by_class)
    if span_s <= 0:
        n_total, n_ok = len(df), len(ok)
        errors = {str(k): int(v) for k, v in df["error_class"].value_counts().items()}  # with "ok", as the summary counts
    saturated = (saturated_rate([float(x) / 1e9 for x in ok["last_byte_ns"]], [[float(t) / 1e9 for t in c] for c in ok["chunk_ns"]],
                                [float(u) if u == u and u > 0 else float(k) for u, k in zip(ok["output_tokens_usage"], ok["output_tokens_chunks"])])
                 if len(ok) else None)
    served = ServedMeasurement(point, str(run_dir), ttft_s=s.ttft_s, tpot_s=s.tpot_s, e2e_s=s.e2e_s,
                               request_throughput_per_s=float(s.request_throughput_per_s),
                               output_tokens_per_s=float(s.output_tokens_per_s), capacity_requests_per_s=saturated,
                               requests_ok=n_ok, requests_total=n_total)
    load = LoadRun(str(run_dir), repeat, n_total, n_ok, errors, busy, share, med("engine_prompt_n"), med("engine_predicted_n"))
    return RunResult(served, load, samples)
