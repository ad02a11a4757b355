"""The embedded target over HTTP: OpenAI-compatible streaming, vLLM-named metrics, labelled simulated, emit log."""

import json
import urllib.error
import urllib.request

import pytest

from harness.target.process import start_target
from harness.telemetry.prometheus import canonical_rows, parse_text


@pytest.fixture(scope="module")
def target(request):
    root = request.config.rootpath
    t = start_target(["--scenario", str(root / "workloads/scenarios/ch9-hetero-pd.toml"), "--startup-s", "0", "--time-scale", "0.01"],
                     max_lifetime_s=120)
    yield t
    t.stop()


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=30)


def test_stream_has_tokens_usage_and_done(target):
    r = _post(target.url + "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "one two three"}],
                                                    "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}})
    assert r.headers["X-Harness-Simulated"] == "true"
    events = [e for e in r.read().decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    objs = [json.loads(e[6:]) for e in events[:-1]]
    assert sum(1 for o in objs if o["choices"]) == 5
    assert objs[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8,
                                 "prompt_tokens_details": {"cached_tokens": 0}}
    assert objs[-2]["choices"][0]["finish_reason"] == "length"


def test_non_stream_completion(target):
    r = json.loads(_post(target.url + "/v1/completions", {"model": "m", "prompt": "a b", "max_tokens": 3}).read())
    assert r["usage"]["completion_tokens"] == 3 and r["choices"][0]["text"].split() == ["tok"] * 3


@pytest.mark.parametrize("body,field", [
    ({"model": "m", "prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"model": "m", "prompt": 5}, "prompt"),
])
def test_bad_requests_name_the_field(target, body, field):
    with pytest.raises(urllib.error.HTTPError) as exc:
        _post(target.url + "/v1/completions", body)
    assert exc.value.code == 400
    assert json.loads(exc.value.read())["error"]["param"] == field


def test_metrics_in_vllm_naming_labelled_simulated(target):
    for path, role in (("/metrics", "all"), ("/prefill/metrics", "prefill"), ("/decode/metrics", "decode")):
        text = urllib.request.urlopen(target.url + path, timeout=10).read().decode()
        samples = parse_text(text)
        names = {s.name for s in samples}
        assert {"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "harness_simulated"} <= names
        assert all(s.labels["engine"] == "harness-simulated" and s.labels["pool"] == role for s in samples)
        assert "queue_depth" in canonical_rows(samples)


def test_info_and_emit_log(target):
    info = json.loads(urllib.request.urlopen(target.url + "/harness/info", timeout=10).read())
    assert info["simulated"] is True and info["mode"] == "pd"
    assert info["prefill_gpus"] == ["a100-80gb-sxm"] * 4 and info["decode_gpus"] == ["h20-96gb"] * 4  # example 9.2's allocation
    log = json.loads(urllib.request.urlopen(target.url + "/harness/emit_log", timeout=10).read())
    assert len(log["emit_ns"]) == len(log["token_index"]) == len(log["scheduled_ns"]) > 0
    assert all(e >= s - 1_000_000 for e, s in zip(log["emit_ns"], log["scheduled_ns"]))


def _usage(target, text, max_tokens=2):
    r = _post(target.url + "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": text}],
                                                    "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}})
    events = [json.loads(e[6:]) for e in r.read().decode().split("\n\n") if e and e != "data: [DONE]"]
    return events[-1]["usage"]


def test_usage_reports_the_prefix_cache_hits_as_cached_tokens(target):
    from workloads.prompts import synthetic_words

    history = synthetic_words(3 * 512 + 100, seed=4901)
    first = _usage(target, history)
    assert first["prompt_tokens_details"]["cached_tokens"] == 0 and first["prompt_tokens"] == 3 * 512 + 100
    again = _usage(target, history + " " + synthetic_words(40, seed=4902))  # the next turn resends the history
    assert again["prompt_tokens_details"]["cached_tokens"] == 3 * 512  # its three full 512-word blocks were cached


def test_profile_endpoints_write_a_trace_of_the_window(target, tmp_path):
    out = tmp_path / "prof"
    r = json.loads(_post(target.url + "/start_profile", {"output_dir": str(out)}).read())
    assert r == {"status": "started", "output_dir": str(out), "simulated": True}
    with pytest.raises(urllib.error.HTTPError) as exc:  # twice: refused, the first stays on
        _post(target.url + "/start_profile", {})
    assert exc.value.code == 400 and "already running" in json.loads(exc.value.read())["error"]["message"]
    _usage(target, "one two three", max_tokens=4)
    r = json.loads(urllib.request.urlopen(urllib.request.Request(target.url + "/stop_profile", data=b"", method="POST"),
                                          timeout=30).read())
    trace = json.loads(open(r["trace_file"]).read())
    assert r["trace_file"].startswith(str(out)) and r["simulated"] is True and r["span_s"] > 0
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 1 and spans[0]["args"]["tokens"] == 4 and spans[0]["name"].startswith("chatcmpl-")
    assert sum(e["args"]["tokens"] for e in trace["traceEvents"] if e["ph"] == "C") == 4
    assert "SIMULATED" in trace["otherData"]["source"]
    with pytest.raises(urllib.error.HTTPError) as exc:
        _post(target.url + "/stop_profile", {})
    assert "not running" in json.loads(exc.value.read())["error"]["message"]
