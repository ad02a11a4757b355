"""Unit constants and the one set of text formatters (fmt_*): the model computes in base units (s, bytes, FLOP);
only report/ and the CLI renderers convert, through these."""

import math

from harness.errors import HarnessError

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
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise HarnessError(
            f"{field}: unknown dtype {dtype!r}. Known: {', '.join(DTYPE_BYTES)}."
        ) from None


# ---- formatting for text output (report/ and cli/ turn base units into ms, %, GB here, in one place) ----


def is_missing(x: object) -> bool:
    """True for None and for a number that is not finite (NaN, inf): shown as the `missing` text."""
    if x is None:
        return True
    try:
        return not math.isfinite(x)  # type: ignore[arg-type]
    except TypeError:
        return False


def fmt_num(x: float | None, spec: str = ".3g", scale: float = 1.0, suffix: str = "", missing: str = "—") -> str:
    """`x * scale` in format `spec` followed by `suffix` (e.g. " ms"); `missing` for None / NaN / inf."""
    return missing if is_missing(x) else format(x * scale, spec) + suffix  # type: ignore[operator]


def fmt_ms(x: float | None, nd: int = 1, suffix: str = " ms", missing: str = "—") -> str:
    """Seconds shown as milliseconds with `nd` decimals: 0.01234 -> "12.3 ms"."""
    return fmt_num(x, f".{nd}f", 1e3, suffix, missing)


def fmt_pct(x: float | None, nd: int = 1, missing: str = "n/a", sign: bool = False) -> str:
    """A fraction shown as a percentage: 0.4567 -> "45.7%" (with `sign`, "+45.7%")."""
    return fmt_num(x, f"{'+' if sign else ''}.{nd}%", 1.0, "", missing)


def fmt_si(x: float | None, unit: str, nd: int = 3, nd_unprefixed: int | None = None, missing: str = "—") -> str:
    """A base-unit value with an SI prefix: 2.5e9, "B/s" -> "2.5 GB/s" (`nd` significant digits)."""
    if is_missing(x):
        return missing
    for f, p in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= f:  # type: ignore[arg-type]
            return f"{x / f:.{nd}g} {p}{unit}"  # type: ignore[operator]
    return f"{x:.{nd_unprefixed or nd}g} {unit}"
