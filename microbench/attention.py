"""Decode attention through the kernels engines use: each SDPA backend by name, FlashAttention, FlashInfer.

`scaled_dot_product_attention` picks a backend at run time (flash, memory-efficient, cuDNN, math);
a decode attention number means little without knowing which ran. So every SDPA backend is
forced in turn (`torch.nn.attention.sdpa_kernel([backend])`) and recorded; one that refuses the
shape (GQA, decode q_len = 1, the dtype, the device) is a skip with torch's reason. Where the
packages are installed, the kernels vLLM and SGLang call for decode run on the same cache:
FlashAttention's `flash_attn_with_kvcache` (layout [B, S, H, D]) and FlashInfer's
`single_decode_with_kv_cache` (one request, so batch 1 only). Neither is on the device image as
described (KINDS.md), so there they are skips naming the package.

Work (the decode suite's counting): bytes = B·C·kv_bytes_per_token (K and V read once);
FLOPs = B·C·4·h_q·d_h per layer. One layer per call here (the cache of layer 0), so counts are per layer.
"""

from __future__ import annotations

from typing import Any, Callable

SDPA_BACKENDS = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")


def sdpa_call(torch: Any, backend: str, q: Any, k: Any, v: Any) -> Callable[[], Any]:
    """A thunk running SDPA with only `backend` allowed; raises (at the first call) if that backend refuses."""
    # lazy: optional (the torch extra): a host without it runs the numpy suites
    from torch.nn.attention import SDPBackend, sdpa_kernel

    be = getattr(SDPBackend, backend)
    F = torch.nn.functional

    def run() -> Any:
        with sdpa_kernel([be]):
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return run


def try_backend(torch: Any, backend: str, q: Any, k: Any, v: Any) -> tuple[Callable[[], Any] | None, str | None]:
    """(thunk, None) if `backend` runs this shape, else (None, reason)."""
    try:
        # lazy: optional (the torch extra): a host without it runs the numpy suites
        from torch.nn.attention import SDPBackend
    except ImportError as exc:
        return None, f"torch.nn.attention is not available ({exc})"
    if not hasattr(SDPBackend, backend):
        return None, f"this torch has no SDPA backend {backend}"
    fn = sdpa_call(torch, backend, q, k, v)
    try:
        with torch.inference_mode():
            fn()
    except Exception as exc:  # noqa: BLE001 - torch says why the backend cannot run the shape
        return None, f"SDPA backend {backend} refused the decode shape: {str(exc).splitlines()[0][:200]}"
    return fn, None


def flash_attn_call(torch: Any, q: Any, k: Any, v: Any) -> tuple[Callable[[], Any] | None, str | None]:
    """FlashAttention's decode kernel on the same cache; q [B, Hq, 1, D], k/v [B, Hkv, C, D] (transposed to [B, C, H, D])."""
    try:
        # lazy: optional (GPU only): may be missing
        from flash_attn import flash_attn_with_kvcache
    except ImportError as exc:
        return None, f"flash-attn is not installed ({exc}); pip install flash-attn on the GPU machine to measure it"
    qf = q.transpose(1, 2).contiguous()
    kf, vf = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()

    def run() -> Any:
        return flash_attn_with_kvcache(qf, kf, vf)

    try:
        run()
    except Exception as exc:  # noqa: BLE001
        return None, f"flash_attn_with_kvcache failed on this shape: {str(exc).splitlines()[0][:200]}"
    return run, None


def flashinfer_call(torch: Any, q: Any, k: Any, v: Any) -> tuple[Callable[[], Any] | None, str | None]:
    """FlashInfer's single-request decode kernel (batch 1): q [Hq, D], k/v [C, Hkv, D]."""
    try:
        # lazy: optional (GPU only): may be missing
        import flashinfer
    except ImportError as exc:
        return None, f"flashinfer is not installed ({exc}); install it on the GPU machine to measure it"
    if q.shape[0] != 1:
        return None, "FlashInfer's single_decode_with_kv_cache serves one request; batch > 1 needs its paged-KV wrapper (not wired)"
    qf = q[0, :, 0].contiguous()
    kf, vf = k[0].transpose(0, 1).contiguous(), v[0].transpose(0, 1).contiguous()

    def run() -> Any:
        return flashinfer.single_decode_with_kv_cache(qf, kf, vf)

    try:
        run()
    except Exception as exc:  # noqa: BLE001
        return None, f"flashinfer.single_decode_with_kv_cache failed on this shape: {str(exc).splitlines()[0][:200]}"
    return run, None
