"""Resource bounds of the plan (issue 18): a large cluster is planned in bounded memory in every output
mode; a cluster too large to search is refused with a clear error instead of running out of memory."""

import json
import math
import re
import tracemalloc

import pytest

from harness.cli import main
from harness.report.plans.plan import render_text
from harness.errors import HarnessError
from harness.model.plan import plan
from harness.model.record import as_json
from harness.specs.scenario import load_scenario
from tests.conftest import SCENARIOS

FOUR_POOLS = "".join(f'[[pools]]\ngpu = "{g}"\ncount = {{n}}\n\n' for g in ("a100-80gb-sxm", "h20-96gb", "h100-sxm", "h200-sxm"))


def _cluster(tmp_path, count: int, types: int = 4) -> str:
    """ch9-hetero-pd with `types` GPU types of `count` cards each (the reference allocations still name two)."""
    text = (SCENARIOS / "ch9-hetero-pd.toml").read_text()
    pools = "".join(FOUR_POOLS.split("\n\n")[i] + "\n\n" for i in range(types)).replace("{n}", str(count))
    text = re.sub(r'(\[\[pools\]\]\ngpu = "[^"]+"\ncount = \d+\n\n)+', pools, text)
    p = tmp_path / f"{types}x{count}.toml"
    p.write_text(text)
    return str(p)


@pytest.fixture(scope="module")
def four_by_64(tmp_path_factory):
    return _cluster(tmp_path_factory.mktemp("plan"), 64)


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_four_types_of_64_cards_plan_in_bounded_memory(four_by_64):
    # 65^4 ≈ 1.8e7 allocations, searched twice (the plan and its 90%-efficiency sensitivity)
    s = load_scenario(four_by_64)
    text_peak = _peak_bytes(lambda: render_text(plan(s, include_grid=False)))
    json_peak = _peak_bytes(lambda: json.dumps(as_json(plan(s, include_grid=True))))
    assert text_peak < 100 * 2**20, f"text plan peaked at {text_peak / 2**20:.0f} MiB"
    assert json_peak < 100 * 2**20, f"JSON plan peaked at {json_peak / 2**20:.0f} MiB"


def test_grid_too_large_to_list_is_left_out_and_said(four_by_64, capsys):
    assert main(["model", "plan", four_by_64, "--json"]) == 0
    out = capsys.readouterr()
    r = json.loads(out.out)
    assert r["pd"]["grid"] is None and "17,850,625 allocations" in r["pd"]["grid_omitted"]
    assert "warning: pd.grid left out" in out.err and "--no-grid" in out.err
    assert main(["model", "plan", four_by_64, "--json", "--no-grid"]) == 0
    out = capsys.readouterr()
    # stderr may name the calibration-database entry the plan used; the grid warning is gone
    assert "grid_omitted" not in json.loads(out.out)["pd"] and "pd.grid" not in out.err


@pytest.mark.parametrize("argv", [[], ["--json"], ["--json", "--no-grid"]])
def test_every_output_mode_of_the_cli_is_bounded(four_by_64, capsys, argv):
    peak = _peak_bytes(lambda: main(["model", "plan", four_by_64, *argv]))
    capsys.readouterr()
    assert peak < 500 * 2**20, f"`harness model plan {' '.join(argv)}` peaked at {peak / 2**20:.0f} MiB"


def test_a_billion_cards_is_a_clear_error(tmp_path, capsys):
    # issue 18: pools.count = 1e9 ran `harness model plan` to 12 GB and the OOM killer; now the model refuses the
    # search before allocating anything, naming the field to change
    assert main(["model", "plan", _cluster(tmp_path, 10**9, types=2)]) == 1
    assert "fewer cards per pool (pools.count)" in capsys.readouterr().err
    # a smaller cluster still beyond what the search scores: refused the same way
    path = _cluster(tmp_path, 10_000, types=2)
    with pytest.raises(HarnessError, match=r"pools: the PD search has 100,020,001 allocations"):
        plan(load_scenario(path), include_grid=False)
    assert main(["model", "plan", path]) == 1
    assert "fewer cards per pool (pools.count)" in capsys.readouterr().err


def test_benchmark_plan_four_types_of_64_cards(benchmark, four_by_64):
    """The 4×64 plan (issue 18: < 1 s on a quiet machine); `pytest --benchmark-enable` times it."""
    s = load_scenario(four_by_64)
    r = benchmark(lambda: render_text(plan(s, include_grid=False)))
    assert "PD best" in r


def test_an_arrival_rate_of_1e308_is_a_clear_error(tmp_path, capsys):
    # issue 18: arrival_rate_per_s = 1e308 ended in an OverflowError in the scale-out
    text = (SCENARIOS / "ch9-hetero-pd.toml").read_text().replace("arrival_rate_per_s = 3.5", "arrival_rate_per_s = 1e308")
    path = tmp_path / "fast.toml"
    path.write_text(text)
    with pytest.raises(HarnessError, match=r"workload\.arrival_rate_per_s = 1e\+308 is above 1e\+09 requests/s"):
        plan(load_scenario(path), include_grid=False)
    assert main(["model", "plan", str(path)]) == 1
    err = capsys.readouterr().err
    assert "error: workload.arrival_rate_per_s" in err and "Traceback" not in err  # after any calibration note


def test_scale_out_refuses_an_infinite_number_of_copies():
    from harness.model.deployment import scale_out

    with pytest.raises(HarnessError, match="arrival_rate_per_s = 1e\\+308 needs more than 1e308 copies"):
        scale_out(1e-3, 1e308, None)
    assert scale_out(4.55, 1e9, None).copies_to_sustain == math.floor(1e9 / 4.55) + 1
