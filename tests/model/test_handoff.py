"""Direct vs pooled P→D hand-off (Chapter 9, §9.7.1, Fig. 9-45/9-46)."""

import pytest

from harness.errors import HarnessError
from harness.model.handoff import handoff_comparison
from harness.model.kv import kv_bytes
from harness.specs.models import get_model
from harness.units import GiB

V = kv_bytes(get_model("qwen3-8b"), 8192, 2)
RECOMPUTE_S = 0.8563738676512821  # 8192-token prefill on A100 at 50 % (test_kv_tiers pins it at 856 ms)


def test_direct_vs_pooled():
    # §9.7.1: direct 48.3 ms; pooled 96.6 ms (48.3 more, 2.25 GiB moved); one later reuse nets ≈760 ms
    h = handoff_comparison(V, 25e9, 25e9, 25e9, RECOMPUTE_S, 1)
    assert h.direct_s == pytest.approx(48.3e-3, abs=0.1e-3)
    assert h.pooled_s == pytest.approx(96.6e-3, abs=0.1e-3)
    assert h.extra_hop_s == pytest.approx(48.3e-3, abs=0.1e-3)
    assert h.pooled_link_bytes == 2.25 * GiB
    assert h.net_saving_s == pytest.approx(0.760, abs=1e-3) and h.pool_pays


def test_no_reuse_only_costs():
    h = handoff_comparison(V, 25e9, 25e9, 25e9, RECOMPUTE_S, 0)
    assert h.net_saving_s == pytest.approx(-h.extra_hop_s) and not h.pool_pays


def test_validation():
    with pytest.raises(HarnessError, match="pool_read_bytes_per_s"):
        handoff_comparison(V, 25e9, 25e9, 0, RECOMPUTE_S)
