"""Step 3 of the CPU loop: measure the real llama-server — isolated stages (prefill, decode at batch B) and served load.

Prompts of exactly P token ids (cache_prompt off) for prefill and TTFT; B concurrent streams for
decode; each request's client view is cross-checked against the engine's own `timings` and `usage`.
The engine's CPU share over each measurement guards against a shared machine (CpuShare).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Sequence

from harness.compare.stats import median_interval
from harness.engines import http
from harness.errors import HarnessError
from harness.target.saturation import completion_rate, saturated_rates, saturation_window
from harness.telemetry.proc import process_cpu_s

@dataclass(frozen=True)
class RequestCheck:
    """One request: what the client saw next to what the engine reported (the per-run cross-check)."""

    phase: str  # "prefill" | "decode@B"
    rep: int
    client_ttft_s: float | None
    engine_prompt_s: float | None  # timings.prompt_ms
    ttft_minus_engine_prompt_s: float | None  # client overhead + first sampling + HTTP
    engine_prompt_tokens: int | None  # timings.prompt_n
    usage_prompt_tokens: int | None
    client_chunks: int
    usage_completion_tokens: int | None
    engine_predicted_tokens: int | None  # timings.predicted_n
    chunks_minus_usage: int | None
    engine_decode_s: float | None  # timings.predicted_ms
    client_decode_s: float | None  # first to last chunk
    e2e_s: float
    error: str | None
    window: int = 0  # the stage window it was measured in (harness.loop.windows; 0: before the served points)
    sent_after_s: float | None = None  # mixed prompts: sent this long after the decode request it joined was sent
    max_tokens: int | None = None  # the output tokens asked for (recorded where a request may be stopped before them)
    stopped: bool = False  # the client closed the stream before its end (a mixed prompt's decodes once the prompt is
    # done): no usage; the engine's timings are those of its last streamed token

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def client_step_s(self) -> float | None:
        """The client's mean decode step: first to last content event over the events between; or, when the stream
        carried fewer content events than tokens, (E2E − TTFT) over tokens − 1. llama-server holds back a token whose
        text is empty (e.g. part of an incomplete UTF-8 character), so the events then no longer mark each token:
        a random-weight model's stream of 20 events for 64 tokens read as a step 3.3x too long (2026-12-01)."""
        tokens = self.usage_completion_tokens or self.engine_predicted_tokens or self.client_chunks
        if self.client_chunks >= tokens:
            return self.client_decode_s / (self.client_chunks - 1) if self.client_decode_s and self.client_chunks >= 2 else None
        if tokens < 2 or self.client_ttft_s is None or self.e2e_s <= self.client_ttft_s:
            return None
        return (self.e2e_s - self.client_ttft_s) / (tokens - 1)


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

    SHARE_OK = 0.85

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
    import random  # noqa: PLC0415

    rng = random.Random(seed)
    lo = min(1000, max(3, vocab // 8))  # away from the special tokens at both ends, also for a small vocabulary
    hi = max(lo + 1, min(vocab - lo, 200_000))
    return [rng.randrange(lo, hi) for _ in range(n)]


def completion_body(model: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    # cache_prompt off: each measurement processes its whole prompt; ignore_eos: exactly max_tokens
    return {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "cache_prompt": False,
            "ignore_eos": True}


@dataclass(frozen=True)
class Measured:
    quantity: str
    value: float  # engine-side figure (llama.cpp's own timings) — the primary measurement
    client_value: float | None  # the same quantity from the client's clock
    samples: tuple[float, ...]
    note: str
    engine_cpu_share: float | None = None  # median share of its cores the engine got while measured


PREFILL_DECODE_TOKENS = 32  # tokens each isolated prefill then decodes alone: the batch-1 step at the long prompt's context


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


MIXED_PROMPT_SLOT = 1  # the prompt's slot; the decodes take slot 0 and then 2, 3, ...: slot 0 and 1 are consecutive, so
# llama_decode's equal split puts the first decode token and the prompt's first token in one micro-batch


def mixed_decode_slots(batch: int) -> tuple[int, ...]:
    """The slots of `batch` decoding requests beside a prompt in MIXED_PROMPT_SLOT."""
    return tuple(i for i in range(batch + 1) if i != MIXED_PROMPT_SLOT)


MIXED_KINDS = ("mixed", "mixeddecode", "mixedalone")  # the prompt beside decodes, its decodes, the same prompt alone just before


def mixed_phase(prompt_tokens: int, batch: int, kind: str = "mixed") -> str:
    """The phase of a mixed-prompt measurement's prompt ("mixed@P/B"), of its decodes ("mixeddecode@P/B") or of the
    same-length prompt sent alone just before them ("mixedalone@P/B")."""
    if kind not in MIXED_KINDS:
        raise ValueError(f"mixed-prompt phase kind {kind!r}: one of {', '.join(MIXED_KINDS)}")
    return f"{kind}@{int(prompt_tokens)}/{int(batch)}"


def parse_mixed_phase(phase: str) -> tuple[str, int, int] | None:
    """(kind, P, B) of a mixed-prompt phase (kind one of MIXED_KINDS); None for any other phase."""
    kind, _, rest = phase.partition("@")
    if kind not in MIXED_KINDS or "/" not in rest:
        return None
    p, b = rest.split("/", 1)
    return kind, int(p), int(b)


def mixed_alone_prompt_s(checks: Sequence[Any]) -> dict[tuple[int, int, int, int], float]:
    """(window, rep, P, B) -> the engine's prompt time of the P-token prompt sent alone just before that rep's decodes
    (phase "mixedalone@P/B", without error): what each prompt beside decodes is paired with."""
    out: dict[tuple[int, int, int, int], float] = {}
    for c in checks:
        ph = parse_mixed_phase(c.phase)
        if ph and ph[0] == "mixedalone" and not c.error and c.engine_prompt_s is not None:
            out[(c.window, c.rep, ph[1], ph[2])] = float(c.engine_prompt_s)
    return out


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


SAVE_PROBE_TOKENS = 16  # the small requests around a prompt-cache copy: their own slot states copy in ~0.1 ms
COPY_PHASES = ("savewarm", "savebase", "save@", "case@")  # the phases measure_prompt_saves labels its requests with


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
                    threads: int = 1) -> tuple[list[Measured], list[RequestCheck]]:
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
        Measured("prefill_tokens_per_s", med(rates), med(client_rates), tuple(rates),
                 "engine: prompt_n / prompt_ms; client: P / TTFT", share),
        Measured("ttft_s", med(eng_ttft), med(ttft), tuple(ttft),
                 "engine: timings.prompt_ms; client: first streamed token (includes HTTP, tokenizer, first sampling)", share),
    ], checks


def measure_decode(endpoint: str, model: str, batch: int, prompt_tokens: int, output_tokens: int, vocab: int,
                   reps: int, pid: int | None = None, threads: int = 1, phase: str = "decode", rep0: int = 0,
                   after_rep: Callable[[int], None] | None = None) -> tuple[Measured, list[RequestCheck]]:
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
    return Measured(f"decode_tokens_per_s@{batch}", statistics.median(agg_eng), statistics.median(agg_client),
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


@dataclass(frozen=True)
class ServedMeasurement:
    """One load run against the real engine: the load generator's figures plus the engine's share of its cores."""

    mix: str
    rate_per_s: float
    run_dir: str
    requests_total: int
    requests_ok: int
    errors_by_class: dict[str, int]
    request_throughput_per_s: float
    output_tokens_per_s: float
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    tpot_p50_s: float | None
    e2e_p50_s: float | None
    saturated_rps: float | None  # requests/s by harness.target.saturation (output tokens in the 20th-80th pct completion window)
    engine_busy_s: float  # union of [sent, last byte] over the requests: the engine had work
    engine_cpu_share: float | None  # engine CPU-s / (busy_s × threads)
    engine_prompt_tokens_median: float | None  # timings.prompt_n as the engine counted
    engine_output_tokens_median: float | None
    # the distribution-free MEASURED_MEDIAN_CONFIDENCE interval of the median TTFT and TPOT over the measured requests
    # (harness.compare.stats.median_interval): how far the sample pins its own p50; None below 6 requests, and for a
    # median over --repeats
    ttft_p50_interval_s: tuple[float, float] | None = None
    tpot_p50_interval_s: tuple[float, float] | None = None
    ttft_p50_interval_n: int | None = None  # how many values each interval was taken over (the successful requests in
    tpot_p50_interval_n: int | None = None  # the summary's window with that figure), for ServedComparison.requests_to_pin

    @property
    def contended(self) -> bool:
        return self.engine_cpu_share is not None and self.engine_cpu_share < CpuShare.SHARE_OK

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "contended": self.contended}


MEASURED_MEDIAN_CONFIDENCE = 0.95  # the confidence of ServedMeasurement's median intervals

REPEATED_FIGURES = ("request_throughput_per_s", "output_tokens_per_s", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "e2e_p50_s",
                    "saturated_rps", "engine_prompt_tokens_median", "engine_output_tokens_median")


def combine_repeats(ms: list[ServedMeasurement]) -> ServedMeasurement:
    """The same artifact measured several times: each figure the median over the repeats that have it, the counts
    summed, the CPU share the lowest (a point is contended when any repeat was), the first repeat's run folder."""
    if len(ms) == 1:
        return ms[0]
    med = {}
    for f in REPEATED_FIGURES:
        v = [getattr(m, f) for m in ms if getattr(m, f) is not None]
        med[f] = statistics.median(v) if v else None
    errors: dict[str, int] = {}
    for m in ms:
        for k, n in m.errors_by_class.items():
            errors[k] = errors.get(k, 0) + int(n)
    shares = [m.engine_cpu_share for m in ms if m.engine_cpu_share is not None]
    return replace(ms[0], requests_total=sum(m.requests_total for m in ms), requests_ok=sum(m.requests_ok for m in ms),
                   errors_by_class=errors, engine_busy_s=sum(m.engine_busy_s for m in ms), engine_cpu_share=min(shares) if shares else None,
                   ttft_p50_interval_s=None, tpot_p50_interval_s=None, ttft_p50_interval_n=None, tpot_p50_interval_n=None, **med)


def busy_union_s(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals (seconds)."""
    tot, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot


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


def _run_load(cfg: Any, workdir: Any, timeout_s: float) -> Any:
    from harness.bench.load import run_load  # noqa: PLC0415 - the use-case layer's load runner

    return run_load(cfg, workdir, progress=None, timeout_s=timeout_s)


def measure_served(endpoint: str, served_name: str, mix: str, rate_per_s: float, artifact_path: str, span_s: float,
                   results_dir: str, workdir: Any, pid: int | None, threads: int, request_timeout_s: float,
                   drain_limit_s: float | None = None) -> ServedMeasurement:
    """Run the load generator on one artifact against the engine and read its stored requests table.

    `drain_limit_s`: at most this long after the last intended send; requests still running then are recorded as
    cancelled (the point is then cut and its figures cover the completed requests only). None: request timeout + 10 s."""
    from harness.records import new_run_id  # noqa: PLC0415
    from harness.store import Run  # noqa: PLC0415
    from workloads.config import LoadConfig, SummaryOptions  # noqa: PLC0415

    cfg = LoadConfig(
        target_url=endpoint, artifact_path=str(artifact_path), run_id=new_run_id("loop-load"), results_dir=results_dir,
        model=served_name, max_concurrency=256, request_timeout_s=request_timeout_s,
        drain_timeout_s=request_timeout_s + 10.0 if drain_limit_s is None else float(drain_limit_s), t0_lead_s=LOAD_T0_LEAD_S,
        scrape=[{"role": "all", "url": f"{endpoint}/metrics"}], extra_body={"ignore_eos": True},
        summary=SummaryOptions(warmup_s=0.0, cooldown_s=0.0, slo_ttft_s=None, slo_tpot_s=None, slo_e2e_s=None),
        manifest_extra={"bench": "loop-cpu served point", "mix": mix, "rate_per_s": rate_per_s},
        engine={"name": "llama.cpp", "simulated": False, "url": endpoint}, progress=False,
    )
    cpu0 = process_cpu_s(pid)
    run_dir = _run_load(cfg, workdir, span_s + cfg.drain_timeout_s + 120.0)
    cpu1 = process_cpu_s(pid)
    run = Run(run_dir)
    from workloads.summary import measured_requests, read_summary  # noqa: PLC0415

    s = read_summary(run).load
    df = run.table("requests")
    ok = df[df["error_class"] == "ok"]
    busy = busy_union_s([(a / 1e9, b / 1e9) for a, b in zip(df["sent_ns"], df["last_byte_ns"]) if a is not None and b is not None
                         and a == a and b == b])
    share = None
    if cpu0 is not None and cpu1 is not None and busy > 0:
        share = (cpu1 - cpu0) / (busy * threads)
    med = (lambda col: float(ok[col].median()) if len(ok) and col in ok and ok[col].notna().any() else None)
    # the requests the summary's percentiles cover (a burst's window is empty: all of them)
    in_window = ok if span_s <= 0 else measured_requests(df, span_s=span_s, options=cfg.summary)[1]

    def interval(col: str) -> Any:
        return (median_interval(in_window[col].astype(float), MEASURED_MEDIAN_CONFIDENCE) if len(in_window) and col in in_window
                else None)

    ttft_iv, tpot_iv = interval("ttft_s"), interval("tpot_s")

    n_total, n_ok, errors = s.requests_total, s.requests_ok, dict(s.errors_by_class)
    if span_s <= 0:  # a burst (every request intended at 0): the summary's window of intended sends is empty; count all
        n_total, n_ok = len(df), len(ok)
        errors = {str(k): int(v) for k, v in df["error_class"].value_counts().items()}  # with "ok", as the summary counts
    return ServedMeasurement(
        mix=mix, rate_per_s=rate_per_s, run_dir=str(run_dir), requests_total=n_total,
        requests_ok=n_ok, errors_by_class=errors,
        request_throughput_per_s=s.request_throughput_per_s, output_tokens_per_s=s.output_tokens_per_s,
        ttft_p50_s=s.ttft_s.p50, ttft_p90_s=s.ttft_s.p90, tpot_p50_s=s.tpot_s.p50, e2e_p50_s=s.e2e_s.p50,
        saturated_rps=saturated_rate([float(x) / 1e9 for x in ok["last_byte_ns"]], [[float(t) / 1e9 for t in c] for c in ok["chunk_ns"]],
                                     [float(u) if u == u and u > 0 else float(k) for u, k in zip(ok["output_tokens_usage"], ok["output_tokens_chunks"])])
        if len(ok) else None,
        engine_busy_s=busy, engine_cpu_share=share,
        engine_prompt_tokens_median=med("engine_prompt_n"), engine_output_tokens_median=med("engine_predicted_n"),
        ttft_p50_interval_s=None if ttft_iv is None else (ttft_iv.low, ttft_iv.high),
        tpot_p50_interval_s=None if tpot_iv is None else (tpot_iv.low, tpot_iv.high),
        ttft_p50_interval_n=None if ttft_iv is None else ttft_iv.n, tpot_p50_interval_n=None if tpot_iv is None else tpot_iv.n,
    )
