"""Engine twins of a whole deployment: replicas behind the router, and prefill → KV link → decode instances."""

import pytest

from harness.target.chunked_prefill import ChunkedPrefillScheduler, ChunkedPrefillSettings
from harness.target.des import ArrivingRequest, simulate
from harness.target.disagg import Disaggregated, Replicas, role_scheduler


class Linear:
    def prefill_time_s(self, prompt_tokens, cached_tokens=0):
        return 1e-4 * prompt_tokens

    def decode_step_time_s(self, batch, context_tokens):
        return 0.010


S = ChunkedPrefillSettings("vllm", 8, 4096, True)


def test_prefill_then_transfer_then_decode():
    P, D = role_scheduler(ChunkedPrefillScheduler, "prefill"), role_scheduler(ChunkedPrefillScheduler, "decode")
    # 1000-token prompt: 0.1 s of prefill; 1000 × 1 MB of KV over 10 GB/s with 5 µs: 0.1 s + 5 µs; 4 decode steps of 10 ms
    make = lambda: Disaggregated([P(S, Linear())], [D(S, Linear())], lambda r: r.input_tokens * 1e6, 10e9, 5e-6)  # noqa: E731
    r = simulate(make, [ArrivingRequest(0.0, 1000, 5)])
    assert r.first_token_s[0] == pytest.approx(0.1 + 0.1 + 5e-6)
    assert r.finished_s[0] == pytest.approx(r.first_token_s[0] + 4 * 0.010)
    assert r.output_tokens[0] == 5


def test_the_kv_link_is_shared_by_transfers_in_flight():
    P, D = role_scheduler(ChunkedPrefillScheduler, "prefill"), role_scheduler(ChunkedPrefillScheduler, "decode")
    make = lambda: Disaggregated([P(S, Linear())], [D(S, Linear())], lambda r: r.input_tokens * 2e6, 10e9, 0.0)  # noqa: E731
    # prompt 0: prefill 0–0.1 s, its 2 GB alone at 10 GB/s until 0.2 (half sent); prompt 1 (sent at 0.05) is prefilled
    # 0.1–0.2, then both share the link: prompt 0's last GB at 5 GB/s ends at 0.4, prompt 1's last GB alone at 0.5
    r = simulate(make, [ArrivingRequest(0.0, 1000, 2), ArrivingRequest(0.05, 1000, 2)])
    assert r.first_token_s.tolist() == pytest.approx([0.4, 0.5])


def test_replicas_route_to_the_least_loaded_instance():
    make = lambda: Replicas([ChunkedPrefillScheduler(S, Linear()), ChunkedPrefillScheduler(S, Linear())])  # noqa: E731
    r = simulate(make, [ArrivingRequest(0.0, 1000, 2), ArrivingRequest(0.0, 1000, 2)])
    assert r.first_token_s.tolist() == pytest.approx([0.1, 0.1])  # one prompt each, in parallel
