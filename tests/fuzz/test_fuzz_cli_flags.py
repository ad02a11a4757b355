"""Fuzz: every typed command-line flag with a bad value.

Verbs that finish in a second (the model calculators, calibrate, compare on stored runs) run in full; verbs
that start a load or an engine (bench-pd, sweep, compare-engines, engine, loop, micro run) are parsed only,
since a value that passes would start a measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import math
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import ROOT, SCENARIOS
from tests.fuzz._contract import FUZZ, FUZZ_SLOW, assert_clean, assert_physical, parse_json_output, run_cli

BAD_TEXT = st.one_of(st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e308", "-1e308", "1e-320", "9223372036854775808",
                                      "", " ", "1,2", "0x10", "abc", "1e400", "-0"]),
                     st.integers(-(2**70), 2**70).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                     st.text(max_size=8))

# (argv before the flag, flags to fuzz): each runs in well under a second when the value is good
RUNNABLE = [
    (["model", "experts", str(SCENARIOS / "ch9-ex9.3-cpu-gpu-experts.toml"), "--json"], ["--experts", "--tokens-per-expert"]),
    (["model", "af", str(SCENARIOS / "ch9-ex9.4-af.toml"), "--json"], ["--bandwidth-bytes-per-s", "--startup-latency-s"]),
    (["model", "ep-skew", str(SCENARIOS / "ch9-ex9.5-ep-skew.toml"), "--json"], ["--batches", "--seed"]),
    (["model", "replicas", str(SCENARIOS / "ch9-ex9.6-replicas.toml"), "--json"], ["--replicas", "--free-bytes-per-receiver"]),
]


# the scenario field each override flag sets (errors found after parsing name the field)
FIELD_OF_FLAG = {"--bandwidth-bytes-per-s": "bandwidths_bytes_per_s"}


def _typed_flags(parser: argparse.ArgumentParser, prefix: tuple = ()) -> list[tuple[tuple, str]]:
    out = []
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sp in a.choices.items():
                out += _typed_flags(sp, (*prefix, name))
        elif a.option_strings and a.type is not None:
            out.append((prefix, a.option_strings[0]))
    return out


@functools.lru_cache(maxsize=1)
def all_typed_flags() -> list[tuple[tuple, str]]:
    from harness.cli import build_parser

    return _typed_flags(build_parser())


@FUZZ
@given(data=st.data())
def test_runnable_verbs_with_a_bad_flag(data):
    argv, flags = data.draw(st.sampled_from(RUNNABLE), label="verb")
    flag = data.draw(st.sampled_from(flags), label="flag")
    value = data.draw(BAD_TEXT, label="value")
    code, out, err = run_cli([*argv, flag, value])
    assert_clean(code, err, [flag, flag.lstrip("-").replace("-", "_"), FIELD_OF_FLAG.get(flag, flag)], usage_ok=True,
                 strip=argv[2])
    if code == 0:
        assert_physical(parse_json_output(out))


@FUZZ
@given(value=BAD_TEXT, flag=st.sampled_from(["--bootstrap", "--seed"]))
def test_calibrate_with_a_bad_flag(value, flag):
    with tempfile.TemporaryDirectory(prefix="fuzz-flags-") as tmp:
        code, out, err = run_cli(["calibrate", str(ROOT / "tests" / "data" / "runs" / "synthetic-cpu"),
                                  "--out", str(Path(tmp) / "c.json"), flag, value])
    assert_clean(code, err, [flag], usage_ok=True)


@functools.lru_cache(maxsize=1)
def _compare_runs() -> tuple[str, str]:
    from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run

    d = Path(tempfile.mkdtemp(prefix="fuzz-compare-"))
    return (str(write_synthetic_load_run(d, SyntheticLoad(requests=60), 1, "a")),
            str(write_synthetic_load_run(d, SyntheticLoad(requests=60), 2, "b")))


@FUZZ_SLOW
@given(value=BAD_TEXT, flag=st.sampled_from(["--seed", "--confidence", "--min-effect", "--fail-on"]))  # --bootstrap: see calibrate
def test_compare_with_a_bad_flag(value, flag):
    a, b = _compare_runs()
    with tempfile.TemporaryDirectory(prefix="fuzz-flags-") as tmp:
        code, out, err = run_cli(["compare", a, b, "--to", str(Path(tmp) / "rep"), flag, value])
    assert "Traceback" not in err and "failed unexpectedly" not in err, err
    assert code in (0, 1, 2, 3), (code, err)
    if code == 1:
        assert flag in err or flag.lstrip("-") in err, err


@FUZZ
@given(data=st.data())
def test_every_typed_flag_parses_or_is_a_usage_error(data):
    """argparse converts every typed flag: a bad value is exit 2 naming the flag, never an exception."""
    from harness.cli import build_parser

    prefix, flag = data.draw(st.sampled_from(all_typed_flags()), label="flag")
    value = data.draw(BAD_TEXT, label="value")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            ns = build_parser().parse_args([*prefix, *_positionals(prefix), flag, value])
        except SystemExit as exc:
            assert exc.code == 2, (exc.code, err.getvalue())
            assert flag in err.getvalue() or "required" in err.getvalue() or "argument" in err.getvalue(), err.getvalue()
            return
    v = getattr(ns, flag.lstrip("-").replace("-", "_"), None)
    for x in (v if isinstance(v, list) else [v]):
        assert not (isinstance(x, float) and not math.isfinite(x)), f"{' '.join(prefix)} {flag} {value!r} parsed to {x!r}"
        if flag == "--seed":
            assert x is None or x >= 0, f"{' '.join(prefix)} --seed {value!r} parsed to {x!r}"


def _positionals(prefix: tuple) -> list[str]:
    scen = str(SCENARIOS / "ch9-hetero-pd.toml")
    return {("model", "experts"): [scen], ("model", "af"): [scen], ("model", "ep-skew"): [scen],
            ("model", "replicas"): [scen], ("calibrate",): ["results"], ("report",): ["results"],
            ("compare",): ["a", "b"], ("nightly",): []}.get(prefix, [])
