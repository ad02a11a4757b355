"""The fused (torch.compile) decode step: same result as the eager-ops step, falls back with a reason, recorded apart."""

import json

import pytest

torch = pytest.importorskip("torch")

from harness.specs.host import detect_host  # noqa: E402
from microbench import decode  # noqa: E402
from microbench.backends import detect_backends  # noqa: E402
from microbench.case import Skip  # noqa: E402
from microbench.params import OPS_EAGER, OPS_FUSED, DecodeParams, parse_params  # noqa: E402
from microbench.suite import Planned, SuiteContext  # noqa: E402
from microbench.timing import TimingPolicy  # noqa: E402
from microbench.transformer import TINY, RandomDecoder  # noqa: E402

B, C = 2, 64


def _pair(seed: int = 3) -> tuple[RandomDecoder, RandomDecoder]:
    """Two decoders with the same random weights; norm weights made non-trivial; the slot the step writes poisoned."""
    out = []
    for _ in range(2):
        d = RandomDecoder(TINY, torch, "cpu", torch.float32, B, C, seed=seed)
        g = torch.Generator().manual_seed(seed + 1)
        for lw in d.layers:
            lw["n1"].copy_(1 + 0.1 * torch.randn(lw["n1"].shape, generator=g))
            lw["n2"].copy_(1 + 0.1 * torch.randn(lw["n2"].shape, generator=g))
        for cache in d.k_cache + d.v_cache:
            cache[:, :, C - 1] = float("nan")  # the step must write this slot before attending to it
        out.append(d)
    return out[0], out[1]


@pytest.mark.slow  # compiles the tiny model's layer and head with inductor's C++ backend: ~15-30 s on 2 cores
def test_fused_step_equals_the_eager_step_on_tiny_fp32():
    eager, fused = _pair()
    why = fused.prepare_fused(B, C, warm_calls=1)
    if why is not None and "failed" in why:
        pytest.skip(f"torch.compile does not work on this machine: {why}")
    assert why is None and fused.fused_reason is None
    facts = fused.fused_shapes[(B, C)]
    assert facts["fused_graphs_compiled"] in (None, 2)  # one graph for every layer (no recompile per layer) + the head
    ye, yf = eager.decode_step(B, C), fused.fused_decode_step(B, C)
    assert torch.isfinite(yf).all() and torch.isfinite(ye).all()
    assert float((yf - ye).norm() / ye.norm()) < 1e-5
    for a, b in zip(eager.k_cache + eager.v_cache, fused.k_cache + fused.v_cache):  # the in-place cache write happened
        assert torch.allclose(a[:B, :, C - 1], b[:B, :, C - 1], rtol=1e-4, atol=1e-5)
    assert fused.prepare_fused(B, C) is None  # a prepared shape is not compiled again


def test_compile_that_raises_falls_back_to_eager_with_the_reason(monkeypatch):
    def broken(*a, **kw):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(torch, "compile", broken)
    eager, fused = _pair()
    why = fused.prepare_fused(B, C)
    assert why is not None and "RuntimeError: no C++ compiler found" in why and "eager" in why
    assert fused.fused_reason == why and fused.prepare_fused(B, C) == why
    assert torch.equal(fused.fused_decode_step(B, C), eager.decode_step(B, C))


def test_compiled_function_failing_at_its_first_call_falls_back(monkeypatch):
    def lazy_broken(fn, **kw):  # torch.compile compiles lazily: errors come at the first call
        def call(*a, **k):
            raise RuntimeError("InductorError: triton kernel failed")
        return call

    monkeypatch.setattr(torch, "compile", lazy_broken)
    eager, fused = _pair()
    why = fused.prepare_fused(B, C)
    assert why is not None and "InductorError" in why
    assert torch.equal(fused.fused_decode_step(B, C), eager.decode_step(B, C))


def _step_results(monkeypatch, compile_fn, options=None) -> tuple[list, list]:
    monkeypatch.setattr(torch, "compile", compile_fn)
    host = detect_host()
    ctx = SuiteContext(quick=True, policy=TimingPolicy(budget_s=0.01, warmup_s=0.0, min_reps=3, max_reps=5), host=host,
                       detected=detect_backends(host, "cpu"), options=options if options is not None else {"decode_fused": True})
    items = [i for i in decode.cases(ctx) if "-step-" in i.case]
    results, skips = [], []
    for it in items:
        if isinstance(it, Skip):
            skips.append(it)
            continue
        assert isinstance(it, Planned)
        got = it.run()
        (skips if isinstance(got, Skip) else results).append(got)
    return results, skips


def test_suite_records_eager_and_fused_steps_under_distinct_names(monkeypatch):
    # identity "compile": the fused path runs its uncompiled functions, fast; the suite plumbing is what is tested
    results, skips = _step_results(monkeypatch, lambda fn, **kw: fn)
    by_case = {r.case: r for r in results}
    assert "tiny-gqa-step-b1-c256" in by_case and "tiny-gqa-step-fused-b1-c256" in by_case
    assert len(by_case) == len(results) == 6 and not skips  # batches 1, 8, 32, each eager and fused
    for r in results:
        p = parse_params(r.params, r.case_id)
        assert isinstance(p, DecodeParams) and p.kind == "step"
        assert p.ops == (OPS_FUSED if "-fused-" in r.case else OPS_EAGER)
        if "-fused-" in r.case:
            assert r.params["fused_compile_and_warmup_s"] >= 0 and any(n.startswith("fused step: compiled") for n in r.notes)
        assert json.loads(r.to_row()["params_json"])["ops"] == p.ops
    assert "micro_kernels" in by_case["tiny-gqa-step-fused-b1-c256"].tables  # the first batch is profiled, both ways
    assert "micro_kernels" in by_case["tiny-gqa-step-b1-c256"].tables
    assert by_case["tiny-gqa-step-b1-c256"].params["kernels_per_step"] is None  # CPU: aten ops, not kernels


def test_suite_skips_the_fused_step_with_the_compile_error(monkeypatch):
    def broken(*a, **kw):
        raise RuntimeError("no C++ compiler found")

    results, skips = _step_results(monkeypatch, broken)
    assert {r.case for r in results} == {"tiny-gqa-step-b1-c256", "tiny-gqa-step-b8-c256", "tiny-gqa-step-b32-c256"}
    assert len(skips) == 3 and all("no C++ compiler found" in s.reason and "-fused-" in s.case for s in skips)


def test_fused_step_is_off_on_the_cpu_by_default(monkeypatch):
    monkeypatch.delenv(decode.FUSED_CPU_ENV, raising=False)
    results, skips = _step_results(monkeypatch, lambda fn, **kw: fn, options={})
    assert len(results) == 3 and all(parse_params(r.params).ops == OPS_EAGER for r in results)
    assert len(skips) == 3 and all(decode.FUSED_CPU_ENV in s.reason for s in skips)
    monkeypatch.setenv(decode.FUSED_CPU_ENV, "1")
    host = detect_host()
    ctx = SuiteContext(quick=True, policy=TimingPolicy(), host=host, detected=detect_backends(host, "cpu"))
    assert decode.fused_wanted(ctx, ctx.backends[0])[0]


def test_old_decode_records_without_ops_still_read():
    p = DecodeParams(model="qwen3-8b", kind="step", batch=4, context_tokens=4096, mode="graph").to_params()
    del p["ops"]
    back = parse_params(p, "decode:old")
    assert back.ops is None and back.batch == 4


def test_with_dtype_copies_weights_and_caches_for_a_reference():
    d = RandomDecoder(TINY, torch, "cpu", torch.float32, B, C, seed=5)
    ref = d.with_dtype(torch.float64)
    assert ref.dtype == torch.float64 and ref.k_cache[0].dtype == torch.float64
    assert ref.k_cache[0].data_ptr() != d.k_cache[0].data_ptr()  # its steps write its own caches
    y, yr = d.decode_step(B, C), ref.decode_step(B, C)
    assert float((y.double() - yr).norm() / yr.norm()) < 1e-5
