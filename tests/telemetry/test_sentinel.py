"""The host sentinel: its samples' format, the interval medians and the speed ratio the loop reads, and the process
itself (started, sampled, stopped) at a small read size."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pytest

from harness.telemetry.sentinel import (SENTINEL_BYTES, HostSentinel, SentinelSample, busy, interval_cpu_s, main,
                                        parse_samples, speed_ratio)


def test_parse_samples_skips_torn_and_blank_lines():
    text = "100.0 0.006\n\n100.5 0.007\n101.0 0.00\n101.5 abc\n102.0 0.0065\n102.5 0.00"  # the last one torn mid-write
    assert parse_samples(text) == [SentinelSample(100.0, 0.006), SentinelSample(100.5, 0.007), SentinelSample(102.0, 0.0065)]


def test_the_engine_column_is_read_and_filters_busy_samples():
    got = parse_samples("1.0 0.006 1.95\n1.5 0.007 -\n2.0 0.008 0.40\n2.5 0.009 1.80\n")
    assert [x.engine_cpu_per_s for x in got] == [1.95, None, 0.40, 1.80]
    assert [x.wall_s for x in busy(got, 1.8)] == [1.0, 2.5]  # unknown engine use is never counted busy


def test_a_sample_states_the_rate_it_counted():
    assert SentinelSample(0.0, 0.0064).gb_per_s == pytest.approx(SENTINEL_BYTES / 0.0064 / 1e9)


def samples(spec):
    """(start wall, period, cpu seconds...) -> samples"""
    t0, dt, cpus = spec
    return [SentinelSample(t0 + i * dt, c) for i, c in enumerate(cpus)]


def test_interval_median_needs_enough_samples():
    s = samples((0.0, 1.0, [1, 2, 3, 10, 20]))
    assert interval_cpu_s(s, [(0.0, 2.0)]) == 2  # the samples that ended within [0, 2]
    assert interval_cpu_s(s, [(0.0, 4.0)]) == 3
    assert interval_cpu_s(s, [(3.0, 4.0)]) is None  # two samples: under MIN_SAMPLES
    assert interval_cpu_s(s, [(3.0, 4.0)], min_samples=2) == 15
    assert interval_cpu_s(s, [(0.0, 0.5), (3.0, 4.0)]) == 10  # a point's repeats: the union of their spans


def test_speed_ratio_is_the_interval_over_the_median_of_the_references():
    # three reference windows at 6, 7 and 9 ms a read (medians), a point at 8.4 ms: 8.4 / 7
    s = (samples((0.0, 1.0, [0.006] * 5)) + samples((10.0, 1.0, [0.007] * 5)) + samples((20.0, 1.0, [0.009] * 5))
         + samples((30.0, 1.0, [0.0084, 0.0080, 0.0090])))
    refs = [(0.0, 4.0), (10.0, 14.0), (20.0, 24.0)]
    assert speed_ratio(s, [(30.0, 32.0)], refs) == pytest.approx(0.0084 / 0.007)
    # a reference with too few samples is left out; the median of the other two
    assert speed_ratio(s, [(30.0, 32.0)], [(0.0, 4.0), (20.0, 24.0), (40.0, 50.0)]) == pytest.approx(0.0084 / statistics.median([0.006, 0.009]))
    assert speed_ratio(s, [(40.0, 50.0)], refs) is None  # nothing in the interval
    assert speed_ratio(s, [(30.0, 32.0)], [(40.0, 50.0)]) is None  # no reference


def test_the_sentinel_process_samples_until_stopped(tmp_path):
    path = tmp_path / "s" / "sentinel.txt"
    with HostSentinel(path, period_s=0.05, nbytes=1 << 20) as sn:
        deadline = time.time() + 20
        while len(sn.samples()) < 4 and time.time() < deadline:
            time.sleep(0.05)
    got = sn.samples()
    assert len(got) >= 4 and sn.error is None and sn.proc is None
    assert all(x.cpu_s > 0 for x in got) and [x.wall_s for x in got] == sorted(x.wall_s for x in got)
    n = len(got)
    time.sleep(0.3)
    assert len(sn.samples()) == n, "stopped: nothing more written"


def test_the_sentinel_records_a_watched_process_cpu_use(tmp_path):
    import subprocess

    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with HostSentinel(tmp_path / "s.txt", period_s=0.1, nbytes=1 << 16, pid=spin.pid) as sn:
            deadline = time.time() + 20
            while len(sn.samples()) < 6 and time.time() < deadline:
                time.sleep(0.05)
    finally:
        spin.kill()
        spin.wait()
    use = [x.engine_cpu_per_s for x in sn.samples()[1:]]
    assert len(use) >= 5 and all(u is not None and 0 <= u <= 1.5 for u in use)
    assert statistics.median(use) > 0.3, "a spinning process uses most of a core (on a host shared with the test's own work)"


def test_an_orphaned_sentinel_stops(tmp_path):
    """The loop killed outright cannot stop its sentinel: the sentinel stops itself once its parent is gone."""
    import subprocess

    out = tmp_path / "s.txt"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-m', 'harness.telemetry.sentinel', '--out', "
            f"{str(out)!r}, '--period-s', '0.05', '--bytes', '65536']); print(p.pid, flush=True); time.sleep(1.5)")
    parent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    child = int(parent.stdout.split()[0])
    deadline = time.time() + 10
    while Path(f"/proc/{child}").exists() and time.time() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split(")")[-1][:3]
    assert len(parse_samples(out.read_text())) >= 3


def test_a_sentinel_that_cannot_start_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    sn = HostSentinel(tmp_path / "s.txt").start()
    sn.stop()
    assert sn.error and "did not start" in sn.error and sn.samples() == []


def test_bad_arguments_name_the_flag(capsys):
    with pytest.raises(SystemExit):
        main(["--out", "/dev/null", "--period-s", "0"])
    assert "--period-s must be > 0" in capsys.readouterr().err
