"""Model specs: catalog and Hugging Face config.json reading (dense, GQA, MoE, MLA)."""

import dataclasses
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.model.forward import param_counts
from harness.specs.models import MODELS, get_model, model_from_hf_config

HF = Path(__file__).resolve().parents[1] / "data" / "hf"


def test_hf_qwen3_matches_catalog_shape():
    m = model_from_hf_config(HF / "qwen3-8b.config.json")
    cat = MODELS["qwen3-8b"]
    for f in ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "intermediate_size", "vocab_size", "attention"):
        assert getattr(m, f) == getattr(cat, f), f
    assert param_counts(m).total == param_counts(cat).total


def test_hf_deepseek_v3_mla_and_moe():
    m = model_from_hf_config(HF / "deepseek-v3.config.json")
    assert m.attention == "mla" and (m.kv_lora_rank, m.qk_rope_head_dim) == (512, 64)
    assert m.n_routed_experts == 256 and m.n_dense_layers == 3 and m.n_shared_experts == 1
    # DeepSeek-V3: 671B parameters in total (without the 14B MTP module): within 1 %
    assert param_counts(m).total == pytest.approx(671e9, rel=0.01)


def test_hf_mixtral_style_moe():
    m = model_from_hf_config(HF / "mixtral-like.config.json")
    assert m.is_moe and m.n_routed_experts == 8 and m.n_experts_per_token == 2
    assert m.head_dim == 128  # hidden / heads when head_dim is absent
    # Mixtral 8x7B: 46.7B parameters
    assert param_counts(m).total == pytest.approx(46.7e9, rel=0.01)


def test_qwen3_235b_expert_is_36_mib():
    # Chapter 9, example 9.3: each Qwen3-235B-A22B expert holds 36 MiB of BF16 weights
    assert param_counts(get_model("qwen3-235b-a22b")).expert * 2 / 2**20 == pytest.approx(36)


def test_more_experts_chosen_than_exist_is_refused():
    with pytest.raises(HarnessError, match="n_experts_per_token"):
        model_from_hf_config(HF / "bad-topk.config.json")


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(HarnessError, match="does not exist"):
        get_model(str(tmp_path / "nope.json"))
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(HarnessError, match="not valid JSON"):
        model_from_hf_config(bad)
    bad.write_text('{"hidden_size": 8}')
    with pytest.raises(HarnessError, match="num_hidden_layers"):
        model_from_hf_config(bad)


def test_unknown_catalog_name_lists_known():
    with pytest.raises(HarnessError, match="Known: deepseek-r1, deepseek-v3, gpt-oss-120b, llama-3.1-70b, llama-3.1-8b, qwen3-235b-a22b, qwen3-32b, qwen3-8b"):
        get_model("llama-9000")


def test_spec_validation_names_field():
    with pytest.raises(HarnessError, match="n_layers must be a positive integer"):
        dataclasses.replace(MODELS["qwen3-8b"], n_layers=0)


def _scenario_with_model_file(tmp_path, ref: str) -> Path:
    from tests.conftest import SCENARIOS

    d = tmp_path / "scenarios"
    d.mkdir()
    (d / "models").mkdir()
    (d / "models" / "qwen3.config.json").write_text((HF / "qwen3-8b.config.json").read_text())
    p = d / "s.toml"
    p.write_text((SCENARIOS / "ch9-hetero-pd.toml").read_text().replace('model = "qwen3-8b"', f'model = "{ref}"'))
    return p


def test_config_json_path_in_a_scenario_is_relative_to_the_scenario_file(tmp_path, monkeypatch):
    # issue 18: it was resolved against the working directory
    from harness.model.plan import plan
    from harness.specs.scenario import load_scenario

    p = _scenario_with_model_file(tmp_path, "models/qwen3.config.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    s = load_scenario(p)
    assert Path(s.workload.model) == (p.parent / "models" / "qwen3.config.json").resolve()
    got = plan(s, include_grid=False)
    assert got.kv.bytes_per_token == 144 * 1024  # Qwen3-8B: 2·36·8·128·2 bytes
    assert got.pd.best.requests_per_s == pytest.approx(4.55, abs=0.005)


def test_config_json_path_in_a_kv_scenario_is_relative_too(tmp_path, monkeypatch):
    from harness.specs.scenario_kv import load_kind
    from tests.conftest import SCENARIOS

    d = tmp_path / "kv"
    d.mkdir()
    (d / "q.config.json").write_text((HF / "qwen3-8b.config.json").read_text())
    text = (SCENARIOS / "ch9-kv-tiers.toml").read_text().replace('model = "qwen3-8b"', 'model = "q.config.json"', 1)
    (d / "kv.toml").write_text(text)
    monkeypatch.chdir(tmp_path)
    s = load_kind(str(d / "kv.toml"), "kv-tiers")
    assert Path(s.compute.model) == (d / "q.config.json").resolve()


def test_bench_pd_default_scenario_works_from_any_directory(tmp_path, monkeypatch):
    import argparse

    from harness.cli.bench import add_arguments
    from harness.specs.scenario import load_scenario

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    monkeypatch.chdir(tmp_path)
    assert load_scenario(parser.parse_args([]).scenario).name == "ch9-hetero-pd"


def test_a_binary_config_json_is_a_clear_error(tmp_path):
    from harness.errors import HarnessError
    from harness.specs.models import model_from_hf_config

    p = tmp_path / "config.json"
    p.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(HarnessError, match="not UTF-8 text"):
        model_from_hf_config(p)
