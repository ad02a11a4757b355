"""Prometheus scraping: vLLM, SGLang and llama.cpp names mapped to one vocabulary; failures become rows."""

import http.server
import threading
import time

from harness.telemetry.prometheus import Scraper, canonical_rows, parse_text

VLLM = """# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="qwen3-8b"} 7.0
vllm:num_requests_running{model_name="qwen3-8b"} 32.0
vllm:kv_cache_usage_perc{model_name="qwen3-8b"} 0.5
vllm:gpu_cache_usage_perc{model_name="qwen3-8b"} 0.5
vllm:prefix_cache_hits_total{model_name="qwen3-8b"} 6144.0
vllm:generation_tokens_total{model_name="qwen3-8b"} 1.5e+06
"""
SGLANG = 'sglang:num_queue_reqs{model_name="m"} 3\nsglang:num_running_reqs{model_name="m"} 10\nsglang:token_usage{model_name="m"} 0.25\n'
LLAMACPP = "llamacpp:requests_deferred 2\nllamacpp:requests_processing 1\nllamacpp:tokens_predicted_total 99\n"


def test_vllm_names():
    c = canonical_rows(parse_text(VLLM))
    assert c == {"queue_depth": 7.0, "running": 32.0, "kv_usage_frac": 0.5, "prefix_hits_tokens_total": 6144.0,
                 "generation_tokens_total": 1.5e6}  # the deprecated alias is not double counted


def test_sglang_and_llamacpp_names():
    assert canonical_rows(parse_text(SGLANG)) == {"queue_depth": 3, "running": 10, "kv_usage_frac": 0.25}
    assert canonical_rows(parse_text(LLAMACPP)) == {"queue_depth": 2, "running": 1, "generation_tokens_total": 99}


def test_labels_with_escapes_and_junk_lines():
    s = parse_text('x{a="q\\"uote",b="2"} 1 1700000000\nnot a metric line\ny NaNx\n')
    assert len(s) == 1 and s[0].labels == {"a": 'q"uote', "b": "2"} and s[0].value == 1.0


class _H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - stdlib name
        body = VLLM.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def test_scraper_about_once_a_second_and_errors_as_rows():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _H)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    rows = []
    t0 = time.perf_counter()
    sc = Scraper([{"role": "prefill", "url": f"http://127.0.0.1:{srv.server_port}/metrics"},
                  {"role": "decode", "url": "http://127.0.0.1:9/metrics"}], rows.extend, interval_s=0.2, t0_fn=lambda: t0)
    sc.start()
    time.sleep(1.1)
    sc.stop()
    elapsed = time.perf_counter() - t0
    srv.shutdown()
    good = [r for r in rows if r["role"] == "prefill" and r["metric"] == "queue_depth"]
    bad = [r for r in rows if r["role"] == "decode"]
    # on its fixed schedule (every 0.2 s from the start, catching up after a delay, never ahead of it): a busy
    # machine can only make it scrape less often than the ~6 times of a quiet one, never more
    assert 1 <= len(good) <= 1 + elapsed / 0.2 and all(r["value"] == 7.0 for r in good)
    assert all(0 <= r["t_s"] <= elapsed for r in good)
    assert bad and all(r["error"] and r["metric"] is None for r in bad)
