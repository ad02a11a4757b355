"""A scenario's `model` may be a GGUF file (issue 15): its shape comes from the file; weight_dtype must be explicit."""

import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="the gguf package writes the test model; pip install -e .")

from harness.errors import HarnessError  # noqa: E402
from harness.model.plan import plan  # noqa: E402
from harness.specs.models import get_model  # noqa: E402
from harness.specs.scenario import parse_scenario  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gguf_model import write_gguf  # noqa: E402


def _data(scenario_path, model, dtype=None):
    d = tomllib.loads(Path(scenario_path("ch9-hetero-pd")).read_text())
    d["workload"]["model"] = str(model)
    d["workload"].pop("weight_dtype", None)
    if dtype:
        d["workload"]["weight_dtype"] = dtype
    return d


def test_gguf_model_in_a_scenario(tmp_path, scenario_path):
    p = write_gguf(tmp_path / "m.gguf")
    s = parse_scenario(_data(scenario_path, p, "int8"))
    assert get_model(s.workload.model).n_layers == 2  # read from the file
    assert plan(s, include_grid=False) is not None


def test_gguf_model_needs_an_explicit_weight_dtype(tmp_path, scenario_path):
    p = write_gguf(tmp_path / "m.gguf")
    with pytest.raises(HarnessError, match="weight_dtype"):
        parse_scenario(_data(scenario_path, p))


def test_missing_gguf_is_named(tmp_path, scenario_path):
    with pytest.raises(HarnessError, match="GGUF file does not exist"):
        parse_scenario(_data(scenario_path, tmp_path / "nope.gguf", "int8"))
