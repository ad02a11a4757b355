"""The contract every fuzzed input is held to: exit 0 with physically possible figures, or exit 1 with a message
naming the field; never a traceback, never an unexpected failure, and bounded memory."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import resource
from typing import Any, Iterable

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# a few seconds per input kind; deadline off: a CLI call takes a variable time on a busy machine. FUZZ_EXAMPLES=500
# (and FUZZ_RANDOM=1 for fresh examples each run) explores further.
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "25")), deadline=None,
                derandomize=os.environ.get("FUZZ_RANDOM") != "1", database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ_SLOW = settings(FUZZ, max_examples=max(FUZZ.max_examples // 3, 5))  # for verbs that render figures (~0.7 s each)

MEMORY_HEADROOM_BYTES = 1536 * 2**20  # one fuzzed call may grow the address space by at most this much

# values a user might type by mistake, and the shapes TOML / JSON can hold
NASTY_NUMBERS = st.one_of(
    st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, -(2**63), 10**11, 10**20, 0.0, -0.0, 1e-300, 1e308, -1e308,
                     math.inf, -math.inf, math.nan, 0.5, 1.5, -0.2]),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
)
NASTY_SCALARS = st.one_of(NASTY_NUMBERS, st.booleans(), st.text(max_size=12),
                          st.sampled_from(["", "true", "nan", "a100-80gb-sxm", "h100", "../x", "\x00"]))
NASTY_VALUES = st.one_of(NASTY_SCALARS, st.lists(NASTY_SCALARS, max_size=3),
                         st.dictionaries(st.text(min_size=1, max_size=6), NASTY_SCALARS, max_size=2))


@contextlib.contextmanager
def bounded_memory(headroom_bytes: int = MEMORY_HEADROOM_BYTES):
    """Cap this process's address space at its current size plus `headroom_bytes` for the block, so a call that
    would run the machine out of memory raises MemoryError (which the CLI reports) instead."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        vm_bytes = int(f.read().split()[0]) * resource.getpagesize()
    cap = vm_bytes + headroom_bytes
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """harness.cli.main in this process, with stdout/stderr captured and memory bounded."""
    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    with bounded_memory(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, err: str, names: Iterable[str], *, usage_ok: bool = False, strip: str | None = None) -> None:
    """Exit 0, or exit 1 (2 for argparse usage) with `error: ...` naming one of `names` (`strip`, the input's path, is
    not counted as naming anything); never a traceback."""
    assert "Traceback" not in err, err
    assert "failed unexpectedly" not in err, err
    allowed = (0, 1, 2) if usage_ok else (0, 1)
    assert code in allowed, (code, err)
    if code == 1:
        assert "error:" in err, err
        names = [str(n) for n in names if str(n)]
        body = err if strip is None else err.replace(strip, "<file>")
        assert any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", body) for n in names), \
            f"the message names none of {names}: {err}"


# figures that cannot be negative: times, rates, sizes, counts (by the unit in their name)
NON_NEGATIVE_SUFFIXES = ("_s", "_per_s", "_bytes", "_tokens", "_flops", "_count", "_hz", "_gib", "_gb", "_ms")
SIGNED_PREFIXES = ("net_", "delta", "diff", "change", "saved", "gain", "margin", "slack", "excess", "surplus", "headroom")  # differences may be < 0


def assert_physical(obj: Any, path: str = "") -> None:
    """Every number in a JSON result is finite; those whose name carries a time, rate or size unit are >= 0."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            assert_physical(v, f"{path}.{k}" if path else str(k))
        return
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            assert_physical(v, f"{path}[{i}]")
        return
    if isinstance(obj, bool) or not isinstance(obj, (int, float)):
        return
    assert math.isfinite(obj), f"{path} = {obj!r} is not finite"
    leaf = path.rsplit(".", 1)[-1].split("[", 1)[0]
    if leaf.endswith(NON_NEGATIVE_SUFFIXES) and not leaf.startswith(SIGNED_PREFIXES):
        assert obj >= 0, f"{path} = {obj!r} is negative"


def parse_json_output(out: str) -> Any:
    assert out.strip(), "exit 0 printed nothing"
    return json.loads(out)
