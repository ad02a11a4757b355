"""The calibration report renders from the committed fixture runs: valid PNGs, self-contained HTML, Markdown."""

import base64
import re
import struct

import numpy as np
import pytest

from harness.cli import main
from harness.report.registry import pick_renderer
from harness.records import new_manifest
from harness.report.calibration import ReportOptions, render
from harness.store import RunWriter
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "data" / "runs"


def assert_valid_png(data: bytes) -> None:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    width, height = struct.unpack(">II", data[16:24])
    assert kind == b"IHDR" and length == 13 and width > 100 and height > 100
    assert data.rstrip(b"\x00").endswith(b"IEND\xaeB`\x82")
    from matplotlib.image import imread
    import io

    img = imread(io.BytesIO(data), format="png")
    assert img.shape[0] == height and img.shape[1] == width
    assert float(np.std(img[..., :3])) > 0.01  # something was drawn, not a blank canvas


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    written = render(FIXTURES / "synthetic-h200", out, ReportOptions(n_bootstrap=50))
    return out, written


def test_images_are_valid_non_empty_pngs(report):
    out, written = report
    pngs = [p for p in written if p.suffix == ".png"]
    names = {p.stem for p in pngs}
    assert {"efficiency-vs-batch", "efficiency-vs-tokens", "pd-heatmap", "startup-drain", "stage-rates",
            "link-pcie-h2d-pinned", "link-pcie-d2h-pinned", "roofline-h200-sxm"} <= names
    for p in pngs:
        assert_valid_png(p.read_bytes())


def test_html_is_self_contained_and_embeds_every_figure(report):
    out, written = report
    html = (out / "index.html").read_text()
    imgs = re.findall(r'<img alt="[^"]*" src="([^"]+)"', html)
    assert len(imgs) == len([p for p in written if p.suffix == ".png"])
    for src in imgs:
        assert src.startswith("data:image/png;base64,")
        assert_valid_png(base64.b64decode(src.split(",", 1)[1]))
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert "What changed" in html and "4 A100 → P / 4 H20 → D is the best allocation" in html


def test_markdown_summary_links_figures_and_tables(report):
    out, _ = report
    md = (out / "summary.md").read_text()
    for link in re.findall(r"\]\((figures/[^)]+\.png)\)", md):
        assert (out / link).is_file()
    assert "| conclusion | source | chapter | datasheet defaults | calibrated [95%] | verdict |" in md
    # the datasheet column reproduces the chapter: 4.55 req/s and the 43 s drain (example 9.2, §9.6.1)
    assert "4.55 req/s (holds)" in md and "43.2 s (holds)" in md
    # same device family only: H200 (Hopper) stands for H20 (Hopper), not for A100 (Ampere)
    assert "measured (proxy: h200-sxm)" in md and "proxy (auto, same device family only)" in md
    assert "the efficiency curves measured on h200-sxm stand for h20-96gb (hopper)" in md
    assert "not applied across device families: a100-80gb-sxm (ampere)" in md


def test_load_runs_are_compared_when_present(tmp_path):
    import shutil

    shutil.copytree(FIXTURES / "synthetic-h200", tmp_path / "m")
    mf = new_manifest("load", run_id="load-fixture", machine="m")
    with RunWriter(mf, tmp_path) as w:
        w.write_json("summary.json", {"load": {"request_throughput_per_s": 3.4, "ttft_s": {"p50": 0.95},
                                                "intended_rate_per_s": 3.5}})
    written = render(tmp_path / "m", tmp_path / "out", ReportOptions(n_bootstrap=20))
    assert any(p.name == "load-throughput.png" for p in written)
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "| load-fixture | 3.40 | 3.50 |" in md and "950 ms" in md


def test_report_cli_picks_the_renderer_by_run_kind(tmp_path, capsys):
    assert pick_renderer(FIXTURES / "synthetic-cpu") == "calibration"
    code = main(["report", str(FIXTURES / "synthetic-cpu"), "--to", str(tmp_path / "r"), "--bootstrap", "20"])
    out = capsys.readouterr().out
    assert code == 0 and str(tmp_path / "r" / "index.html") in out
    md = (tmp_path / "r" / "summary.md").read_text()
    # issue 17: a CPU's efficiency is not applied to A100/H20 by default; the report says how to ask for it
    assert "not applied across device families: a100-80gb-sxm (ampere), h20-96gb (hopper)" in md
    assert "--proxy a100-80gb-sxm=cpu" in md and "calibrated column repeats the datasheet column" in md
    assert "FAILS" not in md.split("What changed")[1].split("##")[0]
    assert "SYNTHETIC" in md


def test_report_cli_errors(tmp_path, capsys):
    code = main(["report", str(tmp_path), "--to", str(tmp_path / "r")])
    assert code == 1 and "no runs below" in capsys.readouterr().err
    code = main(["report", str(FIXTURES / "synthetic-cpu"), "--to", str(tmp_path / "r"), "--renderer", "nope"])
    assert code == 1 and "no renderer 'nope'" in capsys.readouterr().err
    code = main(["report", str(FIXTURES / "synthetic-cpu"), "--to", str(tmp_path / "r"), "--proxy", "h20-96gb=tpu"])
    err = capsys.readouterr().err
    assert code == 1 and "measured: cpu" in err and "Traceback" not in err


def test_simulated_load_runs_are_kept_out(tmp_path):
    import shutil

    shutil.copytree(FIXTURES / "synthetic-h200", tmp_path / "m")
    mf = new_manifest("load", run_id="load-simulated", machine="m", engine={"name": "harness-simulated", "simulated": True})
    with RunWriter(mf, tmp_path) as w:
        w.write_json("summary.json", {"load": {"request_throughput_per_s": 3.4, "ttft_s": {"p50": 0.95}}})
    render(tmp_path / "m", tmp_path / "out", ReportOptions(n_bootstrap=20))
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "load-simulated" not in md and "1 load run(s) against a simulated target left out" in md


def test_explicit_cross_family_proxy_is_still_possible(tmp_path):
    render(FIXTURES / "synthetic-cpu", tmp_path / "out", ReportOptions(n_bootstrap=20, proxy="a100-80gb-sxm=cpu"))
    md = (tmp_path / "out" / "summary.md").read_text()
    assert "proxy as given: a100-80gb-sxm ← cpu" in md and "measured (proxy: cpu)" in md
