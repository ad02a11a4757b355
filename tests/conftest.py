from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "workloads" / "scenarios"


@pytest.fixture
def scenario_path():
    def _p(name: str) -> Path:
        return SCENARIOS / f"{name}.toml"

    return _p
