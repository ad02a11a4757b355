"""Prometheus text parsing: llama.cpp's page shape, labels, special values, malformed lines."""

from __future__ import annotations

import math

import pytest

from harness.engines.metrics import parse_prometheus
from harness.errors import HarnessError

# the shape llama-server --metrics writes (names from its /metrics page)
LLAMA = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 46
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.123
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
"""


def test_llama_cpp_page():
    s = parse_prometheus(LLAMA)
    assert [(x.name, x.value, x.type) for x in s] == [
        ("llamacpp:prompt_tokens_total", 46.0, "counter"),
        ("llamacpp:prompt_seconds_total", 0.123, "counter"),
        ("llamacpp:requests_processing", 0.0, "gauge"),
    ]


def test_labels_histograms_and_special_values():
    text = """\
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="q\\"x"} 3
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="q"} 4 1700000000000
vllm:e2e_request_latency_seconds_sum{model_name="q"} NaN
up -Inf
"""
    s = parse_prometheus(text)
    assert s[0].labels == {"le": "0.5", "model_name": 'q"x'} and s[0].type == "histogram"
    assert s[1].value == 4 and s[1].labels["le"] == "+Inf"
    assert math.isnan(s[2].value) and s[2].type == "histogram"
    assert s[3].value == -math.inf and s[3].type == "untyped"


def test_malformed_line_is_named():
    with pytest.raises(HarnessError, match=r"line 2 is not Prometheus text format"):
        parse_prometheus("ok 1\nthis is not a metric line at all\n")
    with pytest.raises(HarnessError, match=r"line 1: value 'abc' is not a number"):
        parse_prometheus("x abc\n")
