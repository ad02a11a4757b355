"""Unit constants. The model computes in base units (s, bytes, FLOP); only report/ converts."""

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
TFLOP = 1e12
GFLOP = 1e9
MS = 1e-3
US = 1e-6
GBIT = 1e9 / 8  # bytes per second in one Gbit/s

DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}


def dtype_bytes(dtype: str, field: str = "dtype") -> float:
    """Bytes per element of a weight or KV dtype; a bad name raises HarnessError naming the field."""
    from harness.errors import HarnessError

    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise HarnessError(
            f"{field}: unknown dtype {dtype!r}. Known: {', '.join(DTYPE_BYTES)}."
        ) from None
