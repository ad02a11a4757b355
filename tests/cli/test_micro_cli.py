"""`harness micro`: list, a quick run with --json, and errors that say what to fix (exit 1, no traceback)."""

import json

import pytest

from harness.cli import main


def test_list_json(capsys):
    assert main(["micro", "list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["suites"]) == {"gemm", "decode", "stage", "transfer", "comm", "moe", "storage",
                                   "precision", "mixed_step", "cuda_graphs", "allocator", "offload"}
    assert "torch-cpu" in data["backends"]


def test_run_storage_quick_json(tmp_path, capsys):
    assert main(["micro", "run", "--suite", "storage", "--quick", "--out", str(tmp_path), "--storage-path", str(tmp_path), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert [c["case"].split("-")[1] for c in s["cases"]] == ["write", "read"]
    assert all(c["bytes_per_s"] > 0 for c in s["cases"])


def test_unknown_suite(tmp_path, capsys):
    assert main(["micro", "run", "--suite", "gemm,nope", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: --suite: no suite 'nope'") and "gemm" in err


def test_bad_storage_path(tmp_path, capsys):
    assert main(["micro", "run", "--suite", "storage", "--quick", "--out", str(tmp_path), "--storage-path", str(tmp_path / "nope")]) == 1
    assert "--storage-path" in capsys.readouterr().err


def test_bad_budget_is_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["micro", "run", "--suite", "gemm", "--budget-s", "-1"])
    assert e.value.code == 2 and "--budget-s must be a positive number" in capsys.readouterr().err


def test_import_cli(tmp_path, capsys):
    from pathlib import Path

    f = Path(__file__).parents[1] / "data" / "importers" / "nvbandwidth.json"
    assert main(["micro", "import", "nvbandwidth", str(f), "--out", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cases"] == 4


def test_params_lists_the_typed_contract(capsys):
    from harness.cli import main

    assert main(["micro", "params"]) == 0
    out = capsys.readouterr().out
    assert "decode/1" in out and "context_tokens" in out and "[tokens]" in out and "transfer/1" in out


def test_micro_llama_cpp_with_only_a_model_runs_the_kernels_the_loop_runs(monkeypatch, tmp_path, capsys):
    """`harness micro-llama-cpp --model X` calibrates on the default config's flags, which `harness loop cpu --model X`
    runs llama-server with (repacking off: other kernels, and SIGILL on Q8_0 on the Intel Xeon VM, with it on)."""
    from harness.cli import micro_llama_cpp as cli_mod
    from harness.engines.config import load_engine_config

    seen = {}

    class Res:
        run_id, cases, path, tool_runs, skips, notes = "r", 0, str(tmp_path), [], [], []

    def fake(model, **kw):
        seen.update(kw, model=model)
        return Res()

    monkeypatch.setattr(cli_mod, "run_llama_cpp_micro", fake)
    gguf = tmp_path / "any.gguf"
    gguf.write_bytes(b"GGUF")
    o = load_engine_config("llama-cpp-gemma3-270m").options
    assert main(["micro-llama-cpp", "--model", str(gguf), "--out", str(tmp_path)]) == 0
    assert seen["model"] == str(gguf) and seen["repack"] is o.repack is False
    assert (seen["threads"], seen["n_batch"], seen["n_ubatch"], seen["flash_attn"]) == (o.threads, o.batch_size, o.ubatch_size, o.flash_attn)
    assert main(["micro-llama-cpp", "--model", str(gguf), "--repack", "--out", str(tmp_path)]) == 0
    assert seen["repack"] is True  # asked for explicitly
