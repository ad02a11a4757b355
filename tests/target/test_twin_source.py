"""`--calibration FILE` turned into the target's twin: a twin.json or a step-time calibration (with its engine config);
every wrong file, engine, setting or host is refused naming the field, the values and the fix, or with --proxy said."""

from __future__ import annotations

import json

import pytest

from harness.errors import HarnessError
from harness.target.twin_source import is_local_url, load_target_twin
from twin_fixtures import engine_config, random_model, roofline_twin, write_json, write_step_time, write_twin


def test_local_urls():
    assert is_local_url("http://127.0.0.1:8000") and is_local_url("http://localhost:1/v1") and is_local_url("http://[::1]:80")
    assert not is_local_url("http://10.0.0.5:8000") and not is_local_url(None)


def test_a_twin_json_alone_is_self_contained_and_says_its_host_is_unknown(tmp_path):
    p = write_twin(tmp_path / "twin.json")
    t = load_target_twin(str(p))
    assert t.spec.settings == roofline_twin().settings and t.spec.step_times == roofline_twin().step_times
    assert (t.source.kind, t.source.engine, t.source.machine, t.source.engine_config) == ("twin.json", "llama.cpp", None, None)
    assert any("not recorded" in n for n in t.notes)


def test_a_twin_json_of_a_loop_run_takes_the_run_host_and_a_local_target_must_be_that_host(tmp_path):
    from harness.records import machine_fingerprint, new_manifest
    from harness.store import RunWriter

    for machine in (machine_fingerprint(), "cpu--some-other-cpu"):
        w = RunWriter(new_manifest("loop-cpu", machine=machine), tmp_path / machine)
        p = write_twin(w.path / "twin.json")
        if machine == machine_fingerprint():
            t = load_target_twin(str(p), target_local=True)
            assert t.source.machine == machine and t.notes == ()
            continue
        with pytest.raises(HarnessError, match=r"measured on cpu--some-other-cpu \(field machine\).*this host.*--proxy"):
            load_target_twin(str(p), target_local=True)
        t = load_target_twin(str(p), target_local=True, proxy=True)
        assert any(n.startswith("PROXY: ") and "cpu--some-other-cpu" in n for n in t.notes)
        remote = load_target_twin(str(p), target_local=False)  # a target elsewhere cannot be checked: said so
        assert any("not on this host" in n for n in remote.notes)


@pytest.mark.parametrize("content,expected", [
    (None, "does not exist; give the twin.json"),
    ("{not json", "is not valid JSON"),
    (b"\xff\xfe\x00binary", "is not UTF-8"),
    ("[1, 2]", "holds a JSON list, not an object"),
    ('{"format": "harness-calibration", "schema_version": 2}', "is a GPU calibration.*harness loop gpu --calibration"),
    ('{"hello": 1}', "neither a twin.json .* nor a step-time calibration.*fields hello"),
    ('{"format": "harness-step-time", "format_version": 1}', "give --engine-config NAME"),
])
def test_bad_calibration_files_name_the_problem_and_the_fix(tmp_path, content, expected):
    p = tmp_path / "cal.json"
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None:
        p.write_text(content)
    with pytest.raises(HarnessError, match=expected):
        load_target_twin(str(p))


def test_a_twin_json_newer_than_the_harness_or_broken_is_refused(tmp_path):
    d = json.loads(write_twin(tmp_path / "twin.json").read_text())
    with pytest.raises(HarnessError, match="newer than this harness"):
        load_target_twin(str(write_json(tmp_path / "new.json", {**d, "schema_version": 99})))
    broken = {**d, "step_times": {"kind": "roofline"}}
    with pytest.raises(HarnessError, match="missing or has a bad field"):
        load_target_twin(str(write_json(tmp_path / "broken.json", broken)))


def test_a_twin_json_must_match_the_engine_config(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")  # the twin.json check reads the config only, not the model
    cfg = engine_config(tmp_path, model, parallel=4, ctx_size=4096)
    ok = load_target_twin(str(write_twin(tmp_path / "twin.json")), engine_config=str(cfg))
    assert ok.source.engine_config == str(cfg)
    other = write_twin(tmp_path / "twin2.json", roofline_twin(slots=2))
    with pytest.raises(HarnessError, match=r"settings.slots is 2 but engine config 'fake-llama' sets 4.*--proxy"):
        load_target_twin(str(other), engine_config=str(cfg))
    t = load_target_twin(str(other), engine_config=str(cfg), proxy=True)
    assert any(n.startswith("PROXY: ") and "settings.slots" in n for n in t.notes)


def test_a_step_time_calibration_needs_a_llama_cpp_engine_config_and_is_checked(tmp_path):
    pytest.importorskip("gguf", reason="the gguf package writes the test model; pip install -e .")
    model = random_model(tmp_path)
    cal = write_step_time(tmp_path, model, threads=1)
    with pytest.raises(HarnessError, match="step-time calibration.*give --engine-config NAME.*No default is assumed"):
        load_target_twin(str(cal))
    t = load_target_twin(str(cal), engine_config=str(engine_config(tmp_path, model, threads=1)), target_local=True)
    assert t.source.kind == "step-time" and t.spec.step_times.to_dict()["kind"] == "calibrated"
    assert t.spec.settings.slots == 2 and t.notes == () and t.spec.notes == ()
    # the same checks as the loop's: another thread count is refused, or said with --proxy
    cfg4 = engine_config(tmp_path, model, threads=4, name="four-threads")
    with pytest.raises(HarnessError, match="measured with 1 threads but the engine runs 4.*--proxy"):
        load_target_twin(str(cal), engine_config=str(cfg4))
    t = load_target_twin(str(cal), engine_config=str(cfg4), proxy=True)
    assert any(n.startswith("PROXY: ") and "threads" in n for n in t.spec.notes)
    from harness.engines.config import ENGINE_CONFIG_DIR

    with pytest.raises(HarnessError, match="is for 'vllm'; a step-time calibration is fitted for llama.cpp"):
        load_target_twin(str(cal), engine_config=str(ENGINE_CONFIG_DIR / "vllm-qwen3-8b.toml"))
