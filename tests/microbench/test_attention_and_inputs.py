"""Decode attention kernels chosen by name (CPU: the backends torch has there), and the decoder's static inputs."""

import pytest

torch = pytest.importorskip("torch")

from microbench.attention import flash_attn_call, flashinfer_call, try_backend  # noqa: E402
from microbench.transformer import TINY, RandomDecoder  # noqa: E402


def _qkv(batch=2, ctx=64):
    g = torch.Generator().manual_seed(0)
    q = torch.randn((batch, 8, 1, 64), generator=g)
    k = torch.randn((batch, 2, ctx, 64), generator=g)
    v = torch.randn((batch, 2, ctx, 64), generator=g)
    return q, k, v


def test_sdpa_backends_by_name_agree_or_refuse_with_a_reason():
    q, k, v = _qkv()
    math_fn, why = try_backend(torch, "MATH", q, k, v)
    assert why is None
    ref = math_fn()
    flash_fn, why = try_backend(torch, "FLASH_ATTENTION", q, k, v)
    if flash_fn is not None:
        assert torch.allclose(flash_fn(), ref, atol=1e-4)
    fn, why = try_backend(torch, "CUDNN_ATTENTION", q, k, v)
    assert fn is None and "CUDNN_ATTENTION" in why
    fn, why = try_backend(torch, "NO_SUCH_BACKEND", q, k, v)
    assert fn is None and "no SDPA backend" in why


def test_engine_kernels_absent_are_named():
    q, k, v = _qkv(batch=1)
    for call, pkg in ((flash_attn_call, "flash"), (flashinfer_call, "flashinfer")):
        fn, why = call(torch, q, k, v)
        if fn is None:
            assert pkg in why.lower()


def test_decode_inputs_are_static_and_reused():
    d = RandomDecoder(TINY, torch, "cpu", torch.float32, 4, 64, seed=0)
    ids, pos = d.inputs("decode", 4, 64)
    assert d.inputs("decode", 4, 64)[0] is ids  # the same tensors every step: nothing copied to the device per call
    assert ids.shape == (4, 1) and pos.tolist() == [63]
    a = d.decode_step(4, 64)
    b = d.decode_step(4, 64)
    assert torch.equal(a, b)  # same inputs, same cache rows rewritten: the same logits
    pids, ppos = d.inputs("prefill", 1, 16)
    assert pids.shape == (1, 16) and ppos.tolist() == list(range(16))
