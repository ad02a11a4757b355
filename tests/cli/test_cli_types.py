"""cli.harden_types: float flags refuse nan/inf and seeds refuse negatives at parse time (exit 2, flag named)."""

import pytest

from harness.cli import main


@pytest.mark.parametrize("argv, flag", [
    (["bench-pd", "--request-timeout-s", "nan"], "--request-timeout-s"),
    (["model", "af", "x.toml", "--startup-latency-s", "inf"], "--startup-latency-s"),
    (["calibrate", "results", "--seed", "-1"], "--seed"),
    (["sweep", "--lambda", "-inf"], "--lambda"),
])
def test_bad_values_are_usage_errors_naming_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and flag in err and "Traceback" not in err


def test_good_values_still_parse():
    from harness.cli import build_parser

    ns = build_parser().parse_args(["calibrate", "results", "--seed", "3", "--bootstrap", "50"])
    assert ns.seed == 3
    ns = build_parser().parse_args(["bench-pd", "--request-timeout-s", "1.5"])
    assert ns.request_timeout_s == 1.5
