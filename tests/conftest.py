from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "workloads" / "scenarios"


@pytest.fixture
def scenario_path():
    def _p(name: str) -> Path:
        return SCENARIOS / f"{name}.toml"

    return _p


def scenario_variant(tmp_path: Path, name: str, *edits: tuple[str, str], base: str = "ch9-hetero-pd") -> str:
    """A copy of a shipped scenario with text edits (each `old` must be present), written under tmp_path."""
    text = (SCENARIOS / f"{base}.toml").read_text()
    for old, new in edits:
        assert old in text, f"{old!r} is not in {base}.toml"
        text = text.replace(old, new)
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return str(p)


@pytest.fixture
def speed_goals_judged(request) -> bool:
    """True when benchmarks run (`make bench` / --benchmark-enable): only then is a speed goal asserted, so a busy
    machine cannot fail `make test` (which runs with --benchmark-disable)."""
    cfg = request.config
    return bool(cfg.getoption("benchmark_enable") or not cfg.getoption("benchmark_disable"))
