"""The closed loop on the CPU: calibrate host constants, predict llama.cpp with the Chapter 9 roofline, measure, compare.

1. Calibrate with the microbenchmarks' timing core (microbench.timing via microbench.gemm):
   - matmul throughput C_mm at the model's own prefill shapes (qkv, o, gate_up, down at P
     tokens; torch fp32 on the engine's thread count): C_mm = Σ 2·M·N·K / Σ median time;
   - host read bandwidth B_ws over a buffer the size of the weights one decode step streams
     (the working set the engine really re-reads; on a large-LLC host it stays in cache), and
     B_dram over 4× the last-level cache, for reference.
2. Predict with harness.model.stages.stage_rates on a "GPU-like" host spec (peak = C_mm,
   bandwidth = B_ws, efficiency 1: the constants are already effective values):
   prefill tokens/s = P / max(F_P/C_mm, W_P/B_ws); TTFT = that prefill time;
   decode tokens/s at batch B = B / max(F_D(B)/C_mm, W_D(B)/B_ws) (Chapter 9, §9.2.3), with
   the weight bytes from the GGUF tensor table (streamed bytes per parameter).
3. Measure the real llama-server: prompts of exactly P token ids (cache_prompt off) for
   prefill and TTFT; B concurrent streams (B = 1, 2, 4) for decode; each request's client view
   (TTFT, chunk times) is cross-checked against the engine's own `timings` and `usage`.
4. Report predicted vs measured with the error, and for each quantity the roofline term that
   bound it, so a large error points at the wrong term.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.engines import http
from harness.errors import HarnessError
from harness.specs.gguf_model import GgufModel
from harness.specs.gpus import GpuSpec
from harness.units import fmt_ms, fmt_num

DEFAULT_BATCHES = (1, 2, 4)


# ---------------------------------------------------------------- 1. calibration


@dataclass(frozen=True)
class CpuConstants:
    """Effective host constants measured with the microbenchmark timing core."""

    threads: int
    matmul_flops_per_s: float  # C_mm: FLOP-weighted over the model's prefill projections
    matmul_by_shape: dict[str, dict[str, float]]  # shape -> {m, n, k, flops, median_s, flops_per_s, cv}
    read_bandwidth_bytes_per_s: float  # B_ws: reading a buffer of the decode working set
    working_set_bytes: float
    dram_bandwidth_bytes_per_s: float | None  # B_dram: reading 4× LLC (None when skipped)
    dram_buffer_bytes: float | None
    llc_bytes: float | None
    torch_version: str
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _read_thunk(torch: Any, nbytes: float) -> tuple[Any, float]:
    n = max(1, int(nbytes // 4))
    buf = torch.ones(n, dtype=torch.float32)
    return (lambda: buf.sum()), n * 4.0


def calibrate_cpu(gm: GgufModel, *, prompt_tokens: int, threads: int, quick: bool = False, dram: bool = True) -> CpuConstants:
    """Measure C_mm at the model's shapes and B_ws / B_dram with microbench's timing core."""
    try:
        import torch  # noqa: PLC0415 - only the calibration needs it
    except ImportError:
        raise HarnessError("the CPU loop calibrates with torch; pip install -e '.[torch]' (torch==2.13.0, CPU wheel).") from None
    from harness.specs.host import detect_host  # noqa: PLC0415
    from microbench.backends import detect_backends  # noqa: PLC0415
    from microbench.gemm import gemm_work, matmul_thunk, projections  # noqa: PLC0415
    from microbench.timing import FULL, QUICK  # noqa: PLC0415

    policy = QUICK if quick else FULL
    det = detect_backends(detect_host(), device="cpu", want=("torch",))
    b = next((x for x in det.backends if x.name == "torch"), None)
    if b is None:
        raise HarnessError("no torch CPU backend for the calibration: " + "; ".join(r for _, r in det.missing))
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        by_shape: dict[str, dict[str, float]] = {}
        tot_flops = tot_s = 0.0
        for name, (k, n) in projections(gm.spec).items():
            fn = matmul_thunk(b, prompt_tokens, n, k, "fp32", 1, 0)
            m = b.time(fn, policy)
            flops = gemm_work(prompt_tokens, n, k, 4.0).useful_flops
            by_shape[name] = {"m": prompt_tokens, "n": n, "k": k, "flops": flops, "median_s": m.stats.median_s,
                              "flops_per_s": flops / m.stats.median_s, "cv": m.stats.cv}
            tot_flops += flops * gm.spec.n_layers
            tot_s += m.stats.median_s * gm.spec.n_layers
        ws = float(gm.streamed_weight_bytes)
        fn, nbytes = _read_thunk(torch, ws)
        m = b.time(fn, policy)
        b_ws = nbytes / m.stats.median_s
        b_dram = dram_bytes = None
        if dram and b.cache_bytes:
            dram_bytes = 4.0 * b.cache_bytes if not quick else max(2.0 * b.cache_bytes, ws)
            fn, dram_bytes = _read_thunk(torch, dram_bytes)
            m2 = b.time(fn, QUICK)
            b_dram = dram_bytes / m2.stats.median_s
            del fn
    finally:
        torch.set_num_threads(old_threads)
    return CpuConstants(
        threads=threads, matmul_flops_per_s=tot_flops / tot_s, matmul_by_shape=by_shape,
        read_bandwidth_bytes_per_s=b_ws, working_set_bytes=nbytes, dram_bandwidth_bytes_per_s=b_dram,
        dram_buffer_bytes=dram_bytes, llc_bytes=b.cache_bytes, torch_version=torch.__version__,
        source=(f"microbench.gemm matmul_thunk (torch fp32, {threads} threads) at {gm.spec.name}'s projections × "
                f"{prompt_tokens} tokens; read bandwidth: torch sum over {nbytes / 2**20:.0f} MiB fp32 "
                f"(the decode working set); timing core microbench.timing ({'QUICK' if quick else 'FULL'} policy)"),
    )


def host_gpu_spec(c: CpuConstants, capacity_bytes: float = 1e12) -> GpuSpec:
    """The host as a "GPU-like" spec for harness.model: peak = C_mm, bandwidth = B_ws (effective values)."""
    return GpuSpec(
        name=f"host-cpu-{c.threads}t", peak_bf16_flops_per_s=c.matmul_flops_per_s,
        hbm_bandwidth_bytes_per_s=c.read_bandwidth_bytes_per_s, hbm_capacity_bytes=capacity_bytes,
        source=f"measured: {c.source}",
    )


# ---------------------------------------------------------------- 2. prediction


@dataclass(frozen=True)
class Predicted:
    quantity: str  # "prefill_tokens_per_s", "ttft_s", "decode_tokens_per_s@B"
    value: float
    bound: str  # compute | memory
    compute_s: float  # the compute term of the roofline for the unit of work
    memory_s: float
    flops: float
    bytes: float
    formula: str


def predict(gm: GgufModel, c: CpuConstants, *, prompt_tokens: int, decode_prompt_tokens: int, output_tokens: int,
            batches: tuple[int, ...] = DEFAULT_BATCHES, kv_bytes_per_elem: float = 2.0) -> list[Predicted]:
    """Chapter 9, §9.2.3 roofline with the measured constants (stage_rates on the host spec, efficiency 1)."""
    from harness.model.stages import Efficiency, Workload, stage_rates  # noqa: PLC0415

    gpu = host_gpu_spec(c)
    eff = Efficiency(1.0, 1.0, "measured effective constants (efficiency already inside C_mm and B_ws)")
    bpp = gm.streamed_weight_bytes_per_param
    out: list[Predicted] = []
    pre = stage_rates(gpu, gm.spec, Workload(prompt_tokens, 2, 0, 1, bpp, kv_bytes_per_elem), eff)
    out.append(Predicted("prefill_tokens_per_s", pre.prefill_tokens_per_s, pre.prefill_bound, pre.prefill_compute_s,
                         pre.prefill_memory_s, pre.prefill.flops, pre.prefill.bytes,
                         "P / max(F_P / C_mm, W_P / B_ws)"))
    out.append(Predicted("ttft_s", pre.prefill_s_per_request, pre.prefill_bound, pre.prefill_compute_s,
                         pre.prefill_memory_s, pre.prefill.flops, pre.prefill.bytes, "max(F_P / C_mm, W_P / B_ws)"))
    for bsz in batches:
        st = stage_rates(gpu, gm.spec, Workload(decode_prompt_tokens, output_tokens, 0, bsz, bpp, kv_bytes_per_elem), eff)
        out.append(Predicted(f"decode_tokens_per_s@{bsz}", bsz / st.decode_step_s, st.decode_bound, st.decode_step_compute_s,
                             st.decode_step_memory_s, st.decode_step.flops, st.decode_step.bytes,
                             f"B / max(F_D / C_mm, W_D / B_ws), B = {bsz}, context L + (G-1)/2 = {st.decode_step.context_tokens:g}"))
    return out


# ---------------------------------------------------------------- 3. measurement


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check(phase: str, rep: int, s: http.StreamResult) -> RequestCheck:
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
        e2e_s=s.e2e_s, error=s.error,
    )


def process_cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system, all threads) a process has used, from /proc; None where unavailable."""
    if pid is None:
        return None
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


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
    lo, hi = 1000, max(1001, min(vocab - 1000, 200_000))
    return [rng.randrange(lo, hi) for _ in range(n)]


def _body(model: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
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


def measure_prefill(endpoint: str, model: str, prompt_tokens: int, vocab: int, reps: int, pid: int | None = None,
                    threads: int = 1) -> tuple[list[Measured], list[RequestCheck]]:
    checks: list[RequestCheck] = []
    rates, client_rates, ttft, eng_ttft, shares = [], [], [], [], []
    for rep in range(reps):
        cs = CpuShare(pid, threads)
        s = http.stream(endpoint + "/v1/completions", _body(model, token_prompt(prompt_tokens, 1000 + rep, vocab), 1))
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
                   reps: int, pid: int | None = None, threads: int = 1) -> tuple[Measured, list[RequestCheck]]:
    """`batch` concurrent streams started together; aggregate tokens/s = Σ per-request decode rates."""
    checks: list[RequestCheck] = []
    agg_eng, agg_client, shares = [], [], []
    for rep in range(reps):
        cs = CpuShare(pid, threads)
        results: list[http.StreamResult | None] = [None] * batch
        errors: list[BaseException] = []
        barrier = threading.Barrier(batch)

        def one(i: int) -> None:
            try:
                body = _body(model, token_prompt(prompt_tokens, 7919 * rep + i, vocab), output_tokens)
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
            c = _check(f"decode@{batch}", rep, r)
            checks.append(c)
            n = c.engine_predicted_tokens or 0
            if n < 2 or not c.engine_decode_s:
                raise HarnessError(f"decode measurement at batch {batch}: the engine generated {n} tokens; need >= 2.")
            eng += n / c.engine_decode_s
            if c.client_decode_s:
                cli += (c.client_chunks - 1) / c.client_decode_s
        agg_eng.append(eng)
        agg_client.append(cli)
    return Measured(f"decode_tokens_per_s@{batch}", statistics.median(agg_eng), statistics.median(agg_client),
                    tuple(agg_eng), "engine: Σ predicted_n / predicted_ms over the concurrent requests; client: Σ (chunks-1)/(last-first chunk)",
                    statistics.median(shares) if shares else None), checks


# ---------------------------------------------------------------- 4. comparison and report


@dataclass(frozen=True)
class Comparison:
    quantity: str
    predicted: float
    measured: float  # engine-side
    measured_client: float | None
    error_pct: float  # (predicted - measured) / measured
    bound: str
    compute_s: float
    memory_s: float
    verdict: str
    engine_cpu_share: float | None = None
    contended: bool = False  # the engine got less than CpuShare.SHARE_OK of its cores: rerun on an idle host

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LoopReport:
    model: dict[str, Any]
    engine: dict[str, Any]
    constants: CpuConstants
    predicted: tuple[Predicted, ...]
    measured: tuple[Measured, ...]
    comparisons: tuple[Comparison, ...]
    checks: tuple[RequestCheck, ...]
    settings: dict[str, Any]
    run_dir: str | None = None
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "engine": self.engine, "constants": self.constants.to_dict(),
            "predicted": [asdict(p) for p in self.predicted], "measured": [asdict(m) for m in self.measured],
            "comparisons": [c.to_dict() for c in self.comparisons], "checks": [c.to_dict() for c in self.checks],
            "settings": self.settings, "run_dir": self.run_dir, "notes": list(self.notes),
        }


def _is_time(q: str) -> bool:
    """A duration (ttft_s), not a rate (prefill_tokens_per_s)."""
    return q.endswith("_s") and not q.endswith("_per_s")


def verdict(p: Predicted, measured: float) -> str:
    """Which roofline term is wrong and by how much, stated from the measurement."""
    if _is_time(p.quantity):
        actual_s = measured
    else:
        units = p.value * max(p.compute_s, p.memory_s)  # tokens in the unit of work
        actual_s = units / measured
    term_s = p.compute_s if p.bound == "compute" else p.memory_s
    other_s = p.memory_s if p.bound == "compute" else p.compute_s
    ratio = actual_s / term_s if term_s > 0 else math.inf
    if abs(ratio - 1) <= 0.2:
        return f"within 20%: the {p.bound} term ({term_s * 1e3:.3g} ms) explains the measured {actual_s * 1e3:.3g} ms"
    if ratio > 1:
        implied = (p.flops if p.bound == "compute" else p.bytes) / actual_s
        unit = "GFLOP/s" if p.bound == "compute" else "GB/s"
        return (f"the {p.bound} term is {ratio:.2f}× too small ({term_s * 1e3:.3g} ms predicted, {actual_s * 1e3:.3g} ms "
                f"measured): the engine reaches {implied / 1e9:.3g} {unit} on this work, not the calibrated "
                f"{(p.flops if p.bound == 'compute' else p.bytes) / term_s / 1e9:.3g}; the other term is {other_s * 1e3:.3g} ms")
    return (f"the engine is {1 / ratio:.2f}× faster than the {p.bound} term ({term_s * 1e3:.3g} ms predicted, "
            f"{actual_s * 1e3:.3g} ms measured): the calibrated constant understates what the engine's kernels reach")


def compare(predicted: list[Predicted], measured: list[Measured]) -> list[Comparison]:
    by_q = {m.quantity: m for m in measured}
    out = []
    for p in predicted:
        m = by_q.get(p.quantity)
        if m is None:
            continue
        contended = m.engine_cpu_share is not None and m.engine_cpu_share < CpuShare.SHARE_OK
        v = verdict(p, m.value)
        if contended:
            v = (f"CONTENDED: the engine got {m.engine_cpu_share:.0%} of its cores while measured (other processes ran); "
                 f"the number reflects that, rerun on an idle host. {v}")
        out.append(Comparison(p.quantity, p.value, m.value, m.client_value, (p.value - m.value) / m.value * 100.0,
                              p.bound, p.compute_s, p.memory_s, v, m.engine_cpu_share, contended))
    return out


def run_loop(
    config: str = "llama-cpp-gemma3-270m",
    *,
    prompt_tokens: int = 512,
    decode_prompt_tokens: int = 32,
    output_tokens: int = 64,
    batches: tuple[int, ...] = DEFAULT_BATCHES,
    reps: int = 3,
    quick: bool = False,
    results_dir: str | None = "results",
    log_dir: str | None = None,
    command_line: list[str] | None = None,
) -> LoopReport:
    """Calibrate (engine not running, so it does not compete for the cores), predict, launch, measure, compare, store."""
    from harness.engines.config import load_engine_config  # noqa: PLC0415
    from harness.engines.launcher import RunningEngine  # noqa: PLC0415
    from harness.engines.llama_cpp import resolve_model  # noqa: PLC0415
    from harness.engines.session import make_plan  # noqa: PLC0415
    from harness.specs.gguf_model import read_gguf  # noqa: PLC0415

    for name, v, lo in (("--prompt-tokens", prompt_tokens, 2), ("--decode-prompt-tokens", decode_prompt_tokens, 1),
                        ("--output-tokens", output_tokens, 3), ("--reps", reps, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise HarnessError(f"{name} must be an integer >= {lo}, got {v!r}.")
    if not batches or any(not isinstance(b, int) or b < 1 for b in batches):
        raise HarnessError(f"--batches must be positive integers such as 1,2,4, got {batches!r}.")
    cfg = load_engine_config(config)
    if cfg.engine != "llama.cpp":
        raise HarnessError(f"the CPU loop runs llama.cpp; config {cfg.name!r} is for {cfg.engine!r}. Use llama-cpp-gemma3-270m.")
    o = cfg.options
    slots, slot_ctx = o.parallel, (o.ctx_size // o.parallel if o.ctx_size else None)  # type: ignore[attr-defined]
    if max(batches) > slots:
        raise HarnessError(f"--batches {max(batches)} exceeds the engine's llama_cpp.parallel = {slots} slots; a larger batch would queue.")
    if slot_ctx is not None and max(prompt_tokens + 1, decode_prompt_tokens + output_tokens) > slot_ctx:
        raise HarnessError(
            f"a request needs up to {max(prompt_tokens + 1, decode_prompt_tokens + output_tokens)} tokens of context but each slot "
            f"has ctx_size / parallel = {slot_ctx}; lower --prompt-tokens/--output-tokens or raise llama_cpp.ctx_size."
        )
    threads = o.threads or 1  # type: ignore[attr-defined]
    load_before = os.getloadavg()[0]  # other work on the host shows up in both calibration and measurement
    gm = read_gguf(resolve_model(cfg))
    consts = calibrate_cpu(gm, prompt_tokens=prompt_tokens, threads=threads, quick=quick)
    pred = predict(gm, consts, prompt_tokens=prompt_tokens, decode_prompt_tokens=decode_prompt_tokens,
                   output_tokens=output_tokens, batches=batches)
    plan = make_plan(cfg)
    measured: list[Measured] = []
    checks: list[RequestCheck] = []
    with RunningEngine(plan, log_dir=log_dir) as eng:
        url, model = plan.endpoint, plan.served_name
        # warm-up: the first requests after load page weights in and size buffers
        http.post_json(url + "/v1/completions", _body(model, token_prompt(prompt_tokens, 1, gm.spec.vocab_size), 2))
        pid = eng.procs[0][1].pid if eng.procs else None
        ms, cs = measure_prefill(url, model, prompt_tokens, gm.spec.vocab_size, reps, pid, threads)
        measured += ms
        checks += cs
        for bsz in batches:
            m, cs = measure_decode(url, model, bsz, decode_prompt_tokens, output_tokens, gm.spec.vocab_size, reps, pid, threads)
            measured.append(m)
            checks += cs
        ttr = eng.time_to_ready
    comps = compare(pred, measured)
    settings = {"load_average_1m_before_after": [load_before, os.getloadavg()[0]], "config": cfg.name, "prompt_tokens": prompt_tokens, "decode_prompt_tokens": decode_prompt_tokens,
                "output_tokens": output_tokens, "batches": list(batches), "reps": reps, "quick": quick, "threads": threads,
                "kv_dtype": "f16 (llama.cpp default)", "time_to_ready": ttr.to_dict() if ttr else None}
    model_d = {"gguf": gm.path, "architecture": gm.architecture, "file_type": gm.file_type, "spec": asdict(gm.spec),
               "weight_bytes": gm.weight_bytes, "streamed_weight_bytes": gm.streamed_weight_bytes,
               "streamed_weight_bytes_per_param": gm.streamed_weight_bytes_per_param}
    report = LoopReport(model_d, plan.manifest_engine(), consts, tuple(pred), tuple(measured), tuple(comps), tuple(checks), settings)
    if results_dir is not None:
        report = _store(report, results_dir, command_line)
    return report


def _store(report: LoopReport, results_dir: str, command_line: list[str] | None) -> LoopReport:
    from dataclasses import replace  # noqa: PLC0415

    from harness.records import new_manifest  # noqa: PLC0415
    from harness.store import RunWriter  # noqa: PLC0415

    man = new_manifest("loop-cpu", engine=report.engine, command_line=command_line,
                       extra={"loop_settings": report.settings, "model": report.model, "constants": report.constants.to_dict()})
    with RunWriter(man, results_dir) as w:
        w.append("loop_comparison", [c.to_dict() for c in report.comparisons])
        w.append("loop_requests", [c.to_dict() for c in report.checks])
        w.append("loop_calibration", [{"shape": k, **v} for k, v in report.constants.matmul_by_shape.items()])
        report = replace(report, run_dir=str(w.path))
        w.write_json("loop_report.json", report.to_dict())
        w.write_json("loop_report.md.json", {"markdown": render_markdown(report)})
    return report


def _fmt(q: str, v: float | None) -> str:
    return fmt_ms(v) if _is_time(q) else fmt_num(v, ".1f")


def render_markdown(r: LoopReport) -> str:
    """The loop's report as Markdown (what docs/loop-cpu.md shows)."""
    c = r.constants
    s = r.settings
    lines = [
        f"Model: `{r.model['gguf'].rsplit('/', 1)[-1]}` ({r.model['architecture']}, {r.model['file_type']}); "
        f"streamed weights per forward pass {r.model['streamed_weight_bytes'] / 2**20:.1f} MiB "
        f"({r.model['streamed_weight_bytes_per_param']:.3f} bytes/param).",
        f"Engine: llama.cpp {r.engine.get('version')} (release {r.engine.get('release') or 'unknown'}, "
        f"commit {r.engine.get('commit') or 'unknown'}), {s['threads']} threads, "
        f"{r.engine['flags']['parallel']} slots. Prompt {s['prompt_tokens']} tokens; decode: {s['decode_prompt_tokens']}-token "
        f"prompts, {s['output_tokens']} output tokens; {s['reps']} repetitions (median). Host load average (1 min) "
        f"{s['load_average_1m_before_after'][0]:.1f} before, {s['load_average_1m_before_after'][1]:.1f} after.",
        "",
        "Calibrated constants (microbench timing core, engine stopped):",
        "",
        f"- C_mm = {c.matmul_flops_per_s / 1e9:.1f} GFLOP/s (torch fp32 at the model's projections, {c.threads} threads)",
        f"- B_ws = {c.read_bandwidth_bytes_per_s / 1e9:.1f} GB/s (read of {c.working_set_bytes / 2**20:.0f} MiB, the decode working set)",
    ]
    if c.dram_bandwidth_bytes_per_s:
        lines.append(f"- B_dram = {c.dram_bandwidth_bytes_per_s / 1e9:.1f} GB/s (read of {c.dram_buffer_bytes / 2**20:.0f} MiB, "
                     f"4× the {c.llc_bytes / 2**20:.0f} MiB LLC; reference only)")
    lines += [
        "",
        "| quantity | predicted | measured (engine) | measured (client) | error | bound | compute term | memory term | engine CPU share |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for x in r.comparisons:
        lines.append(f"| {x.quantity} | {_fmt(x.quantity, x.predicted)} | {_fmt(x.quantity, x.measured)} | "
                     f"{_fmt(x.quantity, x.measured_client)} | {x.error_pct:+.0f}% | {x.bound} | "
                     f"{x.compute_s * 1e3:.2f} ms | {x.memory_s * 1e3:.2f} ms | "
                     f"{'—' if x.engine_cpu_share is None else f'{x.engine_cpu_share:.0%}'}{' (contended)' if x.contended else ''} |")
    lines += ["", "Which term is wrong:", ""]
    lines += [f"- {x.quantity}: {x.verdict}" for x in r.comparisons]
    # the per-run cross-check of the client against the engine
    pre = [k for k in r.checks if k.phase == "prefill" and k.ttft_minus_engine_prompt_s is not None]
    mism = [k for k in r.checks if k.chunks_minus_usage not in (0, None)]
    lines += ["", "Client vs engine (every request):", ""]
    if pre:
        d = [k.ttft_minus_engine_prompt_s * 1e3 for k in pre]
        lines.append(f"- TTFT − engine prompt time: median {statistics.median(d):.1f} ms, range {min(d):.1f}…{max(d):.1f} ms over {len(d)} prefill requests")
    lines.append(f"- streamed chunks vs usage.completion_tokens: {len(mism)} of {len(r.checks)} requests differ"
                 + (f" ({', '.join(f'{k.phase}#{k.rep}: {k.chunks_minus_usage:+d}' for k in mism[:6])})" if mism else ""))
    eu = [k for k in r.checks if k.usage_completion_tokens is not None and k.engine_predicted_tokens is not None
          and k.usage_completion_tokens != k.engine_predicted_tokens]
    lines.append(f"- usage.completion_tokens vs timings.predicted_n: {len(eu)} of {len(r.checks)} requests differ")
    if r.run_dir:
        lines += ["", f"Stored: `{r.run_dir}`"]
    return "\n".join(lines) + "\n"
