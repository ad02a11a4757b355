"""The report registry: every renderer follows the one protocol, and `harness report` picks by run kind."""

import inspect

import pytest

from harness.errors import HarnessError
from harness.report import RENDERERS
from harness.report.registry import pick_renderer, renderer, report, run_kinds
from harness.report.renderer import ReportOptions


@pytest.mark.parametrize("name", sorted(RENDERERS))
def test_every_renderer_takes_source_out_dir_and_the_one_options_record(name):
    params = list(inspect.signature(renderer(name)).parameters.values())
    assert [p.name for p in params][1:] == ["out_dir", "options"]
    assert params[2].default is None  # callable as render(source, out_dir)
    assert isinstance(run_kinds(name), tuple)


def test_each_run_kind_has_at_most_one_default_renderer():
    kinds = [k for n in RENDERERS for k in run_kinds(n)]
    assert len(kinds) == len(set(kinds)) and {"micro", "load", "sweep"} <= set(kinds)


def test_a_load_run_is_rendered_by_bench_pd_and_an_unknown_name_is_refused(tmp_path):
    from harness.compare.synthetic import SyntheticLoad, write_synthetic_load_run

    path = write_synthetic_load_run(tmp_path / "results", SyntheticLoad(requests=40))
    assert pick_renderer(path) == "bench-pd"
    written = report(path, tmp_path / "rep", None, ReportOptions())
    assert {p.name for p in written} == {"report.html", "summary.md"}
    with pytest.raises(HarnessError, match="no renderer 'nope'; known: bench-pd, calibration, ch19, compare"):
        report(path, tmp_path / "rep2", "nope")
