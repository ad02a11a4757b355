"""The device check's pinned-sweep rows: like-for-like grouping, and issue-bound sizes kept but not judged."""

from microbench.device_check import ISSUE_BOUND_FRACTION, PINNED_TOLERANCE, _summary, issue_bound, pinned_row

KIB = 2**10


def test_a_copy_shorter_than_its_issue_cost_is_issue_bound():
    assert issue_bound(6e-6, 5e-6)  # 5 us to issue a 6 us copy: the GPU waits on the host
    assert not issue_bound(80e-6, 5e-6)
    assert issue_bound(10e-6, ISSUE_BOUND_FRACTION * 10e-6)


def test_issue_bound_row_is_kept_with_its_ratio_and_not_judged():
    # the H200's 256 KiB h2d: ours 1.29x the reference, both loops bound by their own issue cost
    r = pinned_row("h2d", 256 * KIB, 5.0e-6, 6.45e-6, 200, 5.0e-6, 6.4e-6, "cuda-events")
    assert r["issue_bound"] and r["pass"] is None and "not judged" in r["verdict"]
    assert r["ratio"] == 6.45e-6 / 5.0e-6 and r["copies_per_sample"] == 200


def test_link_bound_rows_are_judged_on_the_tolerance():
    good = pinned_row("d2h", 64 * 2**20, 1.30e-3, 1.31e-3, 1, 8e-6, 3e-6, "cuda-events")
    assert not good["issue_bound"] and good["pass"] is True and "verdict" not in good
    bad = pinned_row("d2h", 64 * 2**20, 1.30e-3, 1.30e-3 * (1 + 2 * PINNED_TOLERANCE), 1, 8e-6, 3e-6, "cuda-events")
    assert bad["pass"] is False


def test_decode_summary_names_both_mbus_and_a_missing_fused_step():
    assert _summary({"mbu_eager_ops": 0.466, "mbu_fused": 0.75, "mbu": 0.75}) == "MBU fused 75.0%, eager ops 46.6%"
    s = _summary({"mbu_eager_ops": 0.466, "mbu_fused": None, "mbu": None, "fused_reason": "triton is not installed"})
    assert "no fused step (triton is not installed)" in s
