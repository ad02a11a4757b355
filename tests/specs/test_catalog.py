"""GPU and link catalogs: every entry carries a source; bad lookups list the known names."""

import pytest

from harness.errors import HarnessError
from harness.specs import GPUS, LINKS, get_gpu, get_link


def test_issue_required_gpus_present_with_datasheet_numbers():
    want = {
        "a100-80gb-sxm": (312e12, 2039e9),
        "a100-40gb-pcie": (312e12, 1555e9),
        "h20-96gb": (148e12, 4096e9),
        "h100-sxm": (989.4e12, 3350e9),
        "h200-sxm": (989.4e12, 4800e9),
    }
    for name, (flops, bw) in want.items():
        g = get_gpu(name)
        assert (g.peak_bf16_flops_per_s, g.hbm_bandwidth_bytes_per_s) == (flops, bw)
    assert get_gpu("h200-sxm").hbm_capacity_bytes == 141e9
    assert get_gpu("h20-96gb").hbm_capacity_bytes == 96e9


def test_links():
    want = {"nic-200g": 25e9, "cx7-400g": 50e9, "eth-100g": 12.5e9, "eth-50g": 6.25e9, "eth-10g": 1.25e9,
            "pcie4-x16": 25e9, "nvlink-a100": 300e9, "nvlink-h100": 450e9}
    for name, bw in want.items():
        assert get_link(name).bandwidth_bytes_per_s == bw
        assert get_link(name).startup_latency_s == 5e-6


def test_every_spec_names_its_source():
    for spec in [*GPUS.values(), *LINKS.values()]:
        assert len(spec.source) > 10


def test_unknown_names():
    with pytest.raises(HarnessError, match="No GPU spec 'h100'. Known: .*h100-sxm"):
        get_gpu("h100")
    with pytest.raises(HarnessError, match="No link spec"):
        get_link("infiniband")
