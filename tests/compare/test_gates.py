"""gates: parsing with clear errors, breach only past the bound and significant."""

import math

import pytest

from harness.compare.gates import Gate, _outcome, check_known, parse_gates
from harness.errors import HarnessError


def test_parse_directions_and_patterns():
    g = parse_gates("ttft_p99_s:5%, output_tokens_per_s:-3%,gemm:o-t64:torch:cpu:fp32/median_s:+10.5%,*/median_s:20%")
    assert g == [Gate("ttft_p99_s", 0.05), Gate("output_tokens_per_s", -0.03),
                 Gate("gemm:o-t64:torch:cpu:fp32/median_s", 0.105), Gate("*/median_s", 0.2)]
    assert parse_gates(None) == []


@pytest.mark.parametrize("spec, match", [
    ("ttft_p99_s:5", "percent sign is required"),
    ("ttft_p99_s", "write METRIC:PERCENT"),
    (":5%", "write METRIC:PERCENT"),
    ("ttft_p99_s:abc%", "cannot read 'ttft_p99_s:abc%'"),
    ("ttft_p99_s:0%", "non-zero"),
    ("ttft_p99_s:5%,,tpot_p50_s:5%", "empty item"),
    ("", "METRIC:PERCENT items"),
])
def test_parse_errors_name_the_item_and_fix(spec, match):
    with pytest.raises(HarnessError, match=match):
        parse_gates(spec)


def test_unknown_metric_lists_known():
    with pytest.raises(HarnessError, match="no compared metric matches 'ttft_p95_s'.*ttft_p99_s"):
        check_known([Gate("ttft_p95_s", 0.05)], ["ttft_p50_s", "ttft_p99_s"])


def test_outcomes():
    up = Gate("ttft_p99_s", 0.05)
    assert _outcome(up, "m", "a", "b", 0.10, 0.06, 0.14).status == "breach"
    assert _outcome(up, "m", "a", "b", 0.10, -0.01, 0.2).status == "warning"  # past the bound, not significant
    assert _outcome(up, "m", "a", "b", 0.03, 0.01, 0.05).status == "pass"
    assert _outcome(up, "m", "a", "b", -0.30, -0.4, -0.2).status == "pass"  # faster never breaches a rise gate
    down = Gate("output_tokens_per_s", -0.03)
    assert _outcome(down, "m", "a", "b", -0.05, -0.07, -0.04).status == "breach"
    assert _outcome(down, "m", "a", "b", +0.05, 0.04, 0.07).status == "pass"
    assert _outcome(down, "m", "a", "b", math.nan, math.nan, math.nan).status == "no data"
