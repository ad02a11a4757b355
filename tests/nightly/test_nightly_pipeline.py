"""The nightly pipeline end to end on the CPU (quick form), and drift through the CLI: exit 3 naming the constants."""

import dataclasses

import pytest

from harness.cli import main
from harness.nightly.history import load_history


@pytest.mark.slow
def test_nightly_quick_end_to_end(tmp_path, capsys):
    res, hist, rep = tmp_path / "results", tmp_path / "results" / "history", tmp_path / "reports"
    argv = ["nightly", "--quick", "--suite", "transfer", "--device", "cpu", "--results", str(res), "--history", str(hist),
            "--report-dir", str(rep)]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    report = [ln for ln in out if ln.startswith("report: ")]
    assert len(report) == 1 and report[0].endswith("index.html")
    lines = [ln for ln in out if ln.split(" ", 1)[0] in ("OK", "DRIFT", "NEW")]
    h = load_history(hist)
    assert len(lines) == h["constant"].nunique() > 10  # one summary line per constant
    assert all(ln.startswith("NEW") for ln in lines)  # the first night has no baseline
    assert set(h["source"]) <= {"micro", "calibration"} and h["run_id"].nunique() == 1
    html = open(report[0].removeprefix("report: ")).read()
    assert "Pipeline" in html and "Trends" in html and "data:image/png;base64," in html
    # every step either ran or says why it did not
    assert "calibration" in html


def _transfer_rate_change(size: float, alpha: float, bw0: float, bw1: float) -> float:
    return (alpha + size / bw0) / (alpha + size / bw1) - 1


def test_drift_exit_3_names_only_the_drifted_constants(tmp_path, capsys):
    from harness.calibration.synthetic import SyntheticMachine, write_synthetic_run

    res, hist, rep = tmp_path / "results", tmp_path / "history", tmp_path / "reports"
    base = SyntheticMachine(suites=("transfer", "storage"))
    runs = [str(write_synthetic_run(res, base, seed=s)) for s in range(8)]
    common = ["--history", str(hist), "--report-dir", str(rep), "--results", str(res)]
    argv = ["nightly", *common, "--no-calibrate"]
    for r in runs:
        argv += ["--from-run", r]
    assert main(argv) == 0
    quiet = capsys.readouterr().out.splitlines()
    judged = [ln for ln in quiet if ln.split(" ", 1)[0] in ("OK", "DRIFT", "NEW")]
    assert judged and all(ln.startswith("OK") for ln in judged)  # night 8 against the 7 before it: no drift
    # night 9: the pinned host-to-device link lost 30 % of its bandwidth
    links = list(base.links)
    links[0] = ("pcie", "h2d", "pinned", links[0][3], links[0][4] * 0.7)
    drifted = write_synthetic_run(res, dataclasses.replace(base, links=tuple(links)), seed=8)
    rc = main(["nightly", *common, "--no-calibrate", "--from-run", str(drifted)])
    cap = capsys.readouterr()
    assert rc == 3
    flagged = {ln.split()[1] for ln in cap.out.splitlines() if ln.startswith("DRIFT")}
    assert flagged and all(":pcie-h2d-" in c for c in flagged)  # nothing else drifted
    alpha, bw0 = base.links[0][3], base.links[0][4]
    for s in base.transfer_sizes:
        cid = f"transfer:pcie-h2d-pinned-{s}:synthetic:cuda:0:u8"
        change = _transfer_rate_change(s, alpha, bw0, 0.7 * bw0)
        if change < -0.15:
            assert cid in flagged, (cid, change)
        if change > -0.05:
            assert cid not in flagged, (cid, change)
    assert cap.err.startswith(f"error: {len(flagged)} constant(s) drifted on synthetic-h200: ")
    assert "report: " in cap.err
    ok = [ln for ln in cap.out.splitlines() if ln.startswith("OK")]
    assert ok and not any(":pcie-h2d-" in ln.split()[1] and "1073741824" in ln for ln in ok)


def test_nightly_bad_inputs_exit_1(tmp_path, capsys):
    assert main(["nightly", "--from-run", str(tmp_path / "nope"), "--history", str(tmp_path / "h")]) == 1
    assert "is not a run directory" in capsys.readouterr().err
    assert main(["nightly", "--from-run", str(tmp_path), "--min-history", "20", "--history", str(tmp_path / "h")]) == 1
    assert capsys.readouterr().err.startswith("error: --min-history (20) cannot exceed --baseline-runs (10)")
