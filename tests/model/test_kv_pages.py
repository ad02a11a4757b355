"""Pages and persistence (Chapter 9, §9.5.3, Fig. 9-36, footnote 23)."""

import pytest

from harness.errors import HarnessError
from harness.model.kv_pages import contiguous_pages, missing_page_decision, page_layout, reusable_prefix
from harness.specs.models import get_model
from harness.units import KiB, MiB

Q8 = get_model("qwen3-8b")


def test_page_and_segments():
    # §9.5.3: a 16-token page is 2.25 MiB; split per layer and K/V it is 72 segments of 32 KiB
    p = page_layout(Q8, 16, 2)
    assert p.page_bytes == 2.25 * MiB
    assert (p.segments_per_page, p.segment_bytes) == (72, 32 * KiB)
    mla = page_layout(get_model("deepseek-v3"), 16, 2)
    assert mla.segments_per_page == 61  # one latent segment per layer


def test_read_64_use_63():
    # Fig. 9-36, footnote 23: 64 pages read for 1024 tokens, 63 used (1008 tokens); 144 MiB read, 141.75 MiB used
    r = reusable_prefix(1024, 16, 2.25 * MiB, contiguous_pages(64))
    assert (r.pages_read, r.pages_used, r.tokens_reused, r.tokens_to_compute) == (64, 63, 1008, 16)
    assert r.bytes_read == 144 * MiB
    assert r.bytes_used == 141.75 * MiB
    assert r.bytes_wasted == 2.25 * MiB


def test_only_the_leading_run_counts():
    r = reusable_prefix(1024, 16, 2.25 * MiB, contiguous_pages(64, missing_at=10))
    assert r.pages_used == 10 and r.tokens_to_compute == 1024 - 160


def test_wait_or_recompute():
    # §9.5.3: after 1 s of waiting the wait already exceeds the 0.856 s recompute of the whole 8K prefix
    assert missing_page_decision(1.0, 0.856).action == "recompute"
    assert missing_page_decision(0.1, 0.856).action == "wait"
    assert missing_page_decision(0.1, 0.856, expected_remaining_wait_s=2.0).action == "recompute"
    assert missing_page_decision(2.0, 0.856, expected_remaining_wait_s=0.01).action == "wait"


def test_validation():
    with pytest.raises(HarnessError, match="cover more than"):
        reusable_prefix(100, 16, 1.0, contiguous_pages(8))
    with pytest.raises(HarnessError, match="missing_page_index"):
        contiguous_pages(4, 4)
    with pytest.raises(HarnessError, match="tokens_per_page"):
        page_layout(Q8, 0, 2)
