"""Storage tier specs (Chapter 9, §9.5.2, Fig. 9-29, footnote 17)."""

import math

import pytest

from harness.errors import HarnessError
from harness.model.forward import param_counts
from harness.specs.models import get_model
from harness.specs.storage import SsdSpec, get_server, get_ssd, per_gpu_tiers
from harness.units import GiB

WEIGHTS = param_counts(get_model("qwen3-8b")).total * 2


def test_d7_p5520_endurance():
    # §9.5.2: 3.84 TB at 1 DWPD allows 44.4 MB/s on average
    ssd = get_ssd("solidigm-d7-p5520-3.84tb")
    assert (ssd.seq_read_bytes_per_s, ssd.seq_write_bytes_per_s) == (7.1e9, 4.2e9)
    assert ssd.endurance_write_bytes_per_s == pytest.approx(44.4e6, abs=0.05e6)


def test_dgx_a100_per_gpu_tiers():
    # Fig. 9-29: HBM ≤ 63.6 GB (80 − 16.4 GB weights), host 256 GiB, SSD 3.84 TB, remote pool unbounded
    tiers = {t.name: t for t in per_gpu_tiers(get_server("dgx-a100"), WEIGHTS)}
    assert list(tiers) == ["hbm", "host", "ssd", "remote"]
    assert tiers["hbm"].capacity_bytes == pytest.approx(63.6e9, abs=0.05e9)
    assert tiers["host"].capacity_bytes == 256 * GiB
    assert tiers["ssd"].capacity_bytes == pytest.approx(3.84e12)
    assert math.isinf(tiers["remote"].capacity_bytes)
    assert [h.bandwidth_bytes_per_s for h in tiers["remote"].fetch_hops] == [25e9, 25e9]  # NIC, then PCIe
    assert tiers["remote"].to_dict()["capacity_bytes"] is None


def test_bad_specs_name_the_field():
    with pytest.raises(HarnessError, match="seq_read_bytes_per_s"):
        SsdSpec("x", 1e12, 0, 1e9, 1, 5, "test")
    with pytest.raises(HarnessError, match="No server spec 'dgx-h100'"):
        get_server("dgx-h100")
    with pytest.raises(HarnessError, match="weight_bytes"):
        per_gpu_tiers(get_server("dgx-a100"), 90e9)
