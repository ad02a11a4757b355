"""Client totals of a load run against llama.cpp counter deltas: arithmetic on known inputs."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.engines.crosscheck import crosscheck_llama_cpp, render_rows
from harness.engines.metrics import Scrape, parse_prometheus
from harness.errors import HarnessError


def scrape(**v: float) -> Scrape:
    names = {"prompt_tokens": "llamacpp:prompt_tokens_total", "cached": "llamacpp:prompt_tokens_cached_total",
             "prompt_s": "llamacpp:prompt_seconds_total", "pred": "llamacpp:tokens_predicted_total",
             "pred_s": "llamacpp:tokens_predicted_seconds_total", "calls": "llamacpp:n_decode_total"}
    text = "".join(f"{names[k]} {x}\n" for k, x in v.items())
    return Scrape("http://x/metrics", 0.0, tuple(parse_prometheus(text)), text)


def requests() -> pd.DataFrame:
    return pd.DataFrame({
        "error_class": ["ok", "ok", "timeout"],
        "prompt_tokens_usage": [100, 120, None], "output_tokens_usage": [10, 10, None], "output_tokens_chunks": [10, 9, 3],
        "ttft_s": [0.5, 0.7, None], "e2e_s": [1.5, 1.7, None],
    })


def test_rows_from_known_totals():
    before = scrape(prompt_tokens=2, cached=0, prompt_s=0.1, pred=1, pred_s=0.0, calls=1)
    after = scrape(prompt_tokens=202, cached=20, prompt_s=0.9, pred=21, pred_s=1.8, calls=11)
    rows = {r.quantity: r for r in crosscheck_llama_cpp(requests(), before, after)}
    assert rows["requests ok / all"].client == 2 and rows["requests ok / all"].engine == 3
    r = rows["prompt tokens (usage) vs processed + cached"]
    assert (r.client, r.engine, r.difference) == (220, 220, 0)
    assert rows["output tokens (usage) vs generated"].difference == 0
    assert rows["output tokens (streamed chunks) vs usage"].difference == -1  # one chunk carried two tokens
    t = rows["mean TTFT vs mean prompt time [s]"]
    assert t.client == pytest.approx(0.6) and t.engine == pytest.approx(0.4) and t.difference == pytest.approx(0.2)
    d = rows["decode time Σ(E2E − TTFT) vs generation time [s]"]
    assert d.client == pytest.approx(2.0) and d.engine == pytest.approx(1.8) and d.relative == pytest.approx(0.2 / 1.8)
    assert rows["mean decode batch (tokens per decode call)"].engine == pytest.approx(2.0)
    assert "| mean TTFT vs mean prompt time [s] | 0.6 | 0.4 | 0.2 | +50.0% |" in render_rows(list(rows.values()))


def test_metrics_off_is_named():
    with pytest.raises(HarnessError, match="start it with metrics = true"):
        crosscheck_llama_cpp(requests(), scrape(prompt_tokens=1), scrape(prompt_tokens=2))


def test_foreign_table_is_refused():
    with pytest.raises(HarnessError, match="no column 'ttft_s'"):
        crosscheck_llama_cpp(requests().drop(columns=["ttft_s"]), scrape(), scrape())
