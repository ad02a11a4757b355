"""A load run interrupted by SIGTERM/SIGINT to its whole process group: every request ends as one record, those in
flight as `cancelled`, the part writer (its own session) survives the signal, and the user is told what was kept."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.store import Run
from harness.target.process import start_target
from workloads.artifact import save_artifact
from workloads.config import LoadConfig
from workloads.mixes import single_turn
from workloads.schedule import constant

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def slow_target():
    # 200 tokens 10 ms apart: each request streams for ~2 s, so several are in flight at any instant
    t = start_target(["--profile", "fixed", "--ttft-s", "0.05", "--itl-s", "0.01"], max_lifetime_s=300)
    yield t
    t.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_process_group_keeps_cancelled_records(tmp_path, slow_target, sig):
    art = single_turn("sig", constant(5.0, 30.0), input_tokens=20, output_tokens=200)
    cfg = LoadConfig(target_url=slow_target.url, artifact_path=str(save_artifact(art, tmp_path)), run_id=f"sig-{sig.name}",
                     results_dir=str(tmp_path / "results"), progress=True)
    cfg_path = cfg.save(tmp_path / "load-config.json")
    proc = subprocess.Popen([sys.executable, "-m", "workloads.loadrun", str(cfg_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 90
    done = 0
    for line in proc.stdout:
        done = json.loads(line).get("progress", {}).get("done", 0)
        if done >= 8 or time.monotonic() > deadline:
            break
    os.killpg(proc.pid, sig)  # the whole group, as Ctrl-C or `kill -- -PGID` would
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "cancelled" in err and "harness report" in err
    run = Run(next(Path(tmp_path / "results").glob("*/*/manifest.json")).parent)
    assert run.manifest.status == "failed" and any("interrupted" in n for n in run.manifest.notes)
    df = run.table("requests")
    assert sorted(df["request_index"]) == list(range(art.count))  # every request once
    classes = df["error_class"].value_counts().to_dict()
    assert classes.get("cancelled", 0) >= 1 and classes.get("ok", 0) >= 8 and set(classes) <= {"ok", "cancelled", "not_sent"}
    c = df[df["error_class"] == "cancelled"]
    assert c["sent_ns"].notna().all() and (c["e2e_s"] > 0).all()
    s = run.json("summary.json")
    assert s["cancelled"] == classes["cancelled"] and s["stopped"] == sig.name
