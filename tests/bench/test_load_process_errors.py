"""run_load: a load process that dies without an `error:` line is a clear HarnessError with its log kept, not a
RuntimeError with a traceback."""

import pytest

from harness.bench import load as load_mod
from harness.errors import HarnessError
from workloads.artifact import save_artifact
from workloads.config import LoadConfig
from workloads.mixes import single_turn
from workloads.schedule import constant


def test_silent_death_is_a_clear_error(tmp_path, monkeypatch):
    art = single_turn("x", constant(1.0, 1.0), input_tokens=2, output_tokens=1)
    cfg = LoadConfig(target_url="http://127.0.0.1:9", artifact_path=str(save_artifact(art, tmp_path)), run_id="dies",
                     results_dir=str(tmp_path / "results"), progress=False)
    monkeypatch.setattr(load_mod.sys, "executable", "/bin/sh")  # `sh -m workloads.loadrun ...` fails at once, no error: line
    with pytest.raises(HarnessError, match=r"the load process exited with status \d+ without an error message") as e:
        load_mod.run_load(cfg, tmp_path, progress=None, timeout_s=30)
    msg = str(e.value)
    assert "whole log:" in msg and "Traceback" not in msg
    assert (tmp_path / "results" / "load-process-dies.log").is_file()
