"""Kernel families: which kind of kernel a constant was measured with, and which kind an engine runs.

A constant measured with one family's kernels says little about another's: torch fp32 SGEMM
reached 93 GFLOP/s on the project's 2-core host where llama.cpp's Q4_K/Q8_0 integer-dot
kernels did the same prefill at 143 GFLOP/s (docs/loop-cpu.md). So every calibrated constant
carries its family, and applying one family's constant to an engine of another is refused unless
the caller says it is a proxy (`--proxy`), in which case the report says so.

Family names (the *device family* — which hardware — is kept separately as `device`):

- ``torch-<dtype>`` — torch kernels on the CPU (``torch-fp32``, ``torch-bf16``);
- ``cuda-<dtype>`` — torch/cuBLAS (or an engine's CUDA kernels) on a GPU (``cuda-bf16``, ``cuda-fp8``);
- ``ggml-<type>-<backend>`` — ggml (llama.cpp) kernels for one weight type on one ggml backend
  (``ggml-q4_K-cpu``, ``ggml-q8_0-cpu``, ``ggml-f16-cuda``); an engine serving a mixed-quant GGUF
  runs the family of its file type (``ggml-q4_K_M-cpu``: Q4_K, Q5_0, Q6_K, Q8_0 tensors);
- ``aic-<engine>-<version>`` — an engine's CUDA kernels as an imported kernel database measured them
  (aiconfigurator's ``systems/data/<system>/<op>/<engine>/<version>``: ``aic-trtllm-1.3.0rc20``,
  ``aic-vllm-0.24.0``); the dtype is the curve's own field. A plan of a CUDA deployment
  (``cuda-<dtype>``) applies them at the same dtype: they are the kernels a served engine runs.
"""

from __future__ import annotations

from harness.errors import HarnessError

def ggml_type_name(name: str) -> str:
    """ggml's spelling of a tensor or file type: "Q4_K" -> "q4_K", "MOSTLY_Q4_K_M" -> "q4_K_M", "BF16" -> "bf16"."""
    s = name.strip()
    if s.upper().startswith("MOSTLY_"):
        s = s[len("MOSTLY_"):]
    parts = s.split("_")
    out = [parts[0].lower()]
    for i, p in enumerate(parts[1:], 1):
        up = p.upper()
        # ggml keeps K (k-quants) and the file type's size suffix (S, M, L, XL after a K) upper-case
        out.append(up if up == "K" or (up in ("S", "M", "L", "XL") and parts[i - 1].upper() == "K") else p.lower())
    return "_".join(out)


def ggml_family(weight_type: str, backend: str = "cpu") -> str:
    """``ggml-<type>-<backend>``, e.g. ggml_family("Q4_K") == "ggml-q4_K-cpu"."""
    if not weight_type:
        raise HarnessError("a ggml kernel family needs the weight type (e.g. Q4_K); none was given.")
    return f"ggml-{ggml_type_name(weight_type)}-{backend.lower()}"


AIC_PREFIX = "aic-"


def aic_family(engine: str, version: str) -> str:
    """``aic-<engine>-<version>``, e.g. aic_family("trtllm", "1.3.0rc20") == "aic-trtllm-1.3.0rc20"."""
    if not engine or not version:
        raise HarnessError(f"an imported kernel family needs the engine and its version; got {engine!r}, {version!r}.")
    return f"{AIC_PREFIX}{engine.lower()}-{version}"


def is_engine_cuda_family(family: str) -> bool:
    """An imported engine's CUDA kernels (``aic-*``): what a CUDA deployment's ``cuda-<dtype>`` plan may apply."""
    return family.startswith(AIC_PREFIX)


def case_family(backend: str, dtype: str, device: str) -> str:
    """The family of a microbenchmark case from its backend, dtype and device columns."""
    if is_engine_cuda_family(backend):  # imported kernel data names its family as the backend
        return backend
    dev = "cpu" if not device or device == "cpu" else ("cuda" if device.startswith("cuda") else device)
    if backend in ("llama.cpp", "ggml", "test-backend-ops", "llama-bench", "llama-batched-bench"):
        return ggml_family(dtype, dev)
    if dev == "cuda":  # torch/cuBLAS, Triton, or the synthetic stand-in for them
        return f"cuda-{dtype}"
    if backend == "torch":
        return f"torch-{dtype}"
    return f"{backend}-{dtype}" if dtype else backend


def check_family(measured: str, engine: str, *, proxy: bool = False, what: str = "constant") -> str | None:
    """None when `measured` is `engine`'s family; with proxy=True a note saying a proxy is used; else an error.

    The error names both families and the fix (calibrate with the engine's kernels, or pass --proxy).
    """
    if not measured or not engine:
        raise HarnessError(f"{what}: kernel family unknown (measured {measured!r}, engine {engine!r}); recalibrate "
                           "with a harness that records families.")
    if measured == engine:
        return None
    if proxy:
        return (f"PROXY: {what} measured with {measured} kernels applied to an engine running {engine} kernels "
                "(--proxy); expect the error docs/loop-cpu.md shows for a proxy calibration")
    raise HarnessError(
        f"{what} was measured with {measured} kernels but the engine runs {engine} kernels; calibrate with the engine's "
        f"own kernels (`harness micro-llama-cpp` for llama.cpp) or pass --proxy to use it anyway (the report then says so)."
    )
