"""Queue-aware prefetch and eviction vs LRU and FIFO (Chapter 9, §9.5.2, Fig. 9-35; CachedAttention)."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import HarnessError
from harness.model.kv_eviction import compare_policies, multi_turn_trace, simulate_eviction

# Sessions 3, 6, 2, 4 fill 4 host slots; 5 and 1 arrive; then 2, 3, 4 are queued and 6 comes last.
TRACE = [3, 6, 2, 4, 5, 1, 2, 3, 4, 6]


def test_queue_aware_evicts_latest_next_use_and_prefetches():
    # Traced by hand (Fig. 9-35's rule, W = 3): at 5 the victim is 6 (not in the queue, older than 4); at 1 it is 5;
    # while 2 runs, 6 enters the window and is prefetched from SSD in place of 1 -> every reuse is a host hit.
    q = simulate_eviction(TRACE, 4, "queue-aware", lookahead=3)
    assert (q.reuse_requests, q.host_hits, q.ssd_hits, q.misses, q.prefetches) == (4, 4, 0, 0, 1)
    assert q.host_hit_share == 1.0
    # LRU evicts 3, 6, 4, 5 by recency: only 2 is still in host when reused; 3, 4 and 6 come from SSD
    lru = simulate_eviction(TRACE, 4, "lru")
    assert (lru.host_hits, lru.ssd_hits, lru.misses, lru.prefetches) == (1, 3, 0, 0)
    fifo = simulate_eviction(TRACE, 4, "fifo")
    assert fifo.host_hits + fifo.ssd_hits == 4 and fifo.host_hits < q.host_hits


def test_limited_ssd_drops_states():
    # With no SSD every demotion is a drop: a reuse after eviction must recompute
    r = simulate_eviction(TRACE, 4, "lru", ssd_slots=0)
    assert r.ssd_hits == 0 and r.misses == 3 and r.ssd_drops == r.host_evictions
    assert r.hit_rate == pytest.approx(1 / 4)


def test_generated_trace_shape():
    # CachedAttention's shape (86 % hits, >99.6 % from host, vs 58 % / 48 % for LRU / FIFO, <1 % from host):
    # on a deterministic multi-turn trace the queue-aware policy hits more and serves its hits from host.
    t = multi_turn_trace(400, 6, 64, seed=7)
    res = compare_policies(t, host_slots=8, ssd_slots=32)
    qa, lru, fifo = res["queue-aware"], res["lru"], res["fifo"]
    assert qa.hit_rate > lru.hit_rate and qa.hit_rate > fifo.hit_rate
    assert qa.host_hit_share > 0.99
    assert lru.host_hit_share < 0.5 and fifo.host_hit_share < 0.5
    assert qa.reuse_requests == 400 * 5  # every turn after the first can hit


def test_trace_is_deterministic():
    a = multi_turn_trace(50, 4, 10, seed=3)
    assert a == multi_turn_trace(50, 4, 10, seed=3)
    assert a != multi_turn_trace(50, 4, 10, seed=4)
    assert Counter(a) == {s: 4 for s in range(50)}


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=60), st.integers(1, 5))
def test_full_lookahead_without_prefetch_is_beladys_min(trace, slots):
    # Evicting the latest next use with the whole future known is Belady's MIN: no policy has more host hits.
    opt = simulate_eviction(trace, slots, "queue-aware", lookahead=None, prefetch=False)
    for p in ("lru", "fifo"):
        assert opt.host_hits >= simulate_eviction(trace, slots, p).host_hits
    # with an unbounded SSD every reuse is a hit for every policy; only the tier differs
    assert opt.hit_rate == (1.0 if opt.reuse_requests else 0.0)


def test_validation():
    with pytest.raises(HarnessError, match="policy 'lfu' is unknown"):
        simulate_eviction(TRACE, 4, "lfu")
    with pytest.raises(HarnessError, match="host_slots"):
        simulate_eviction(TRACE, 0, "lru")
    with pytest.raises(HarnessError, match="active_sessions"):
        multi_turn_trace(10, 2, 0)
