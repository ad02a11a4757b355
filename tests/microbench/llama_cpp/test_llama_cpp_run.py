"""run_llama_cpp_micro end to end with stand-in tools that print the committed real outputs (no build needed):
one micro run with every tool's command line in the manifest; a tool that fails midway leaves the others stored."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.store import Run
from microbench.llama_cpp import run as llrun
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "llama_cpp"
TINY = llrun.Sweep(prompts=(32, 64), batches=(1, 2), gen_tokens=4, batched_reps=1, bench_prompts=(64,), bench_gen_tokens=8,
                   bench_depths=(0, 64), bench_reps=2, op_tokens=(1, 4), op_reps=1)


def _tool(d: Path, name: str, body: str) -> None:
    p = d / name
    p.write_text(f"#!{sys.executable}\nimport sys, shutil\n{body}\n")
    p.chmod(0o755)


@pytest.fixture
def fake_bin(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    _tool(d, "llama-server", "print('version: 11434 (abc1234)')\nprint('built with cc for x86_64')")
    _tool(d, "llama-batched-bench", f"sys.stdout.write(open({str(DATA / 'batched_bench.jsonl')!r}).read())")
    _tool(d, "llama-bench", f"sys.stdout.write(open({str(DATA / 'llama_bench.jsonl')!r}).read())")
    _tool(d, "test-export-graph-ops", f"a = sys.argv\nshutil.copy({str(DATA / 'export_graph_ops.txt')!r}, a[a.index('-o') + 1])")
    _tool(d, "test-backend-ops", f"sys.stdout.write(open({str(DATA / 'test_backend_ops_mul_mat.sql')!r}).read())")
    monkeypatch.setenv("HARNESS_LLAMA_CPP_BIN_DIR", str(d))
    return d


@pytest.fixture
def tiny_gguf(tmp_path):
    pytest.importorskip("gguf")
    from tests.specs.test_gguf_model import write_gguf

    return write_gguf(tmp_path / "tiny.gguf")


def test_one_micro_run_with_versions_and_command_lines(fake_bin, tiny_gguf, tmp_path):
    res = llrun.run_llama_cpp_micro(tiny_gguf, threads=2, out=tmp_path / "results", sweep=TINY, repack=False)
    run = Run(res.path)
    m = run.manifest
    assert m.kind == "micro" and m.status == "complete"
    info = m.extra["llama_cpp"]
    assert info["version"]["version"] == "11434" and info["version"]["commit"] == "abc1234"
    assert info["model"]["family"] == "ggml-q8_0-cpu"  # the tiny file's type
    cmds = info["commands"]
    assert any("--no-repack" in c and "-npp 32,64" in c for c in cmds["llama-batched-bench"])
    assert any("--repack 0" in c for c in cmds["llama-bench"])
    assert len(cmds["test-export-graph-ops"]) == 2 and "--test-file" in cmds["test-backend-ops"][0]
    assert set(m.extra["suites"]) == {"llama_batched_bench", "llama_bench", "llama_cpp_ops"}
    cases = run.table("micro_cases")
    assert set(cases["suite"]) == {"llama_batched_bench", "llama_bench", "llama_cpp_ops"}
    assert len(cases) == 8 + 4 + 16 == res.cases
    assert len(run.table("micro_samples")) >= len(cases)
    raw = run.json("llama_cpp_raw.json")
    assert set(raw) - {"schema_version"} == {"llama-batched-bench", "llama-bench", "test-backend-ops"}
    assert all("cpu_share" in r for r in res.tool_runs)


def test_a_tool_failing_midway_keeps_the_finished_ones(fake_bin, tiny_gguf, tmp_path):
    _tool(fake_bin, "test-backend-ops", "sys.stderr.write('ggml_abort: out of memory\\n')\nsys.exit(3)")
    with pytest.raises(HarnessError, match="(?s)test-backend-ops exited with code 3.*out of memory"):
        llrun.run_llama_cpp_micro(tiny_gguf, threads=2, out=tmp_path / "results", sweep=TINY)
    (path,) = [p.parent for p in (tmp_path / "results").glob("*/*/manifest.json")]
    run = Run(path)
    assert run.manifest.status == "failed"
    assert set(run.table("micro_cases")["suite"]) == {"llama_batched_bench", "llama_bench"}


def test_a_tool_killed_by_a_signal_says_which_and_what_to_do(fake_bin, tiny_gguf, tmp_path):
    # llama-batched-bench on the Intel Xeon VM (2026-12-03): killed by SIGILL on a Q8_0 model with repacking on
    _tool(fake_bin, "llama-batched-bench", "import os, signal\nsys.stderr.write('llama_context: n_ctx = 3072\\n')\n"
                                           "sys.stderr.flush()\nos.kill(os.getpid(), signal.SIGILL)")
    with pytest.raises(HarnessError, match=r"(?s)llama-batched-bench was killed by SIGILL \(an instruction this CPU or VM does "
                                           r"not enable.*--no-repack.*\).*n_ctx = 3072"):
        llrun.run_llama_cpp_micro(tiny_gguf, threads=2, out=tmp_path / "results", sweep=TINY)
    from microbench.llama_cpp.tools import exit_description

    assert exit_description(3) == "exited with code 3"
    assert exit_description(-9) == "was killed by SIGKILL" and exit_description(-200) == "was killed by signal 200"


def test_missing_tool_is_a_skip_with_the_fix(fake_bin, tiny_gguf, tmp_path):
    (fake_bin / "llama-bench").unlink()
    res = llrun.run_llama_cpp_micro(tiny_gguf, threads=2, out=tmp_path / "results", sweep=TINY, which=("batched", "bench"))
    assert [s["suite"] for s in res.skips] == ["llama_bench"] and "HARNESS_LLAMA_CPP_BIN_DIR" in res.skips[0]["reason"]


def test_bad_inputs_are_clear_errors(fake_bin, tiny_gguf, tmp_path):
    with pytest.raises(HarnessError, match="--threads must be an integer >= 1"):
        llrun.run_llama_cpp_micro(tiny_gguf, threads=0, out=tmp_path)
    with pytest.raises(HarnessError, match="does not exist"):
        llrun.run_llama_cpp_micro(tmp_path / "missing.gguf", threads=2, out=tmp_path)
    with pytest.raises(HarnessError, match="--tools"):
        llrun.parse_tools("batched,gpu")
    with pytest.raises(HarnessError, match="prompts must be"):
        llrun.Sweep(prompts=())
    assert json.dumps(llrun.parse_tools("all")) == json.dumps(list(llrun.ALL_TOOLS))
