"""harness.loop.measure: slot idleness read from llama-server's /slots, waited for with a bounded, clear error; the settle
before each served point, which leaves the slots in the order the twin starts from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.engines import http
from harness.errors import HarnessError
from harness.loop.measure import slots_idle_reader, wait_slots_idle
from harness.served import ServedPoint
from harness.target.stage_requests import SAVE_PROBE_TOKENS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "target"))
from slot_picks import SlotPicks  # noqa: E402


def _answer(monkeypatch, status: int, body: bytes) -> None:
    monkeypatch.setattr(http, "get", lambda url, timeout_s=30.0: http.HttpResponse(status, body, 0.001))


def test_slots_are_read_as_idle_or_processing(monkeypatch):
    _answer(monkeypatch, 200, b'[{"id": 0, "is_processing": false}, {"id": 1, "is_processing": false}]')
    idle = slots_idle_reader("http://127.0.0.1:1")
    assert idle is not None and idle() is True
    _answer(monkeypatch, 200, b'[{"id": 0, "is_processing": false}, {"id": 1, "is_processing": true}]')
    assert idle() is False


@pytest.mark.parametrize("status, body", [(501, b'{"error": {"message": "This server does not support slots endpoint."}}'),
                                          (200, b"not json"), (200, b"[]"), (200, b'{"slots": []}'),
                                          (200, b'[{"id": 0, "is_processing": "no"}]')])
def test_no_reader_where_the_engine_does_not_serve_slots(monkeypatch, status, body):
    _answer(monkeypatch, status, body)
    assert slots_idle_reader("http://127.0.0.1:1") is None


def test_waiting_ends_when_idle_and_names_what_was_waited_for_when_not():
    answers = iter([False, False, True])
    wait_slots_idle(lambda: next(answers), "stopped")  # returns at the third answer
    with pytest.raises(HarnessError, match=r"^the decodes were stopped, but the engine's /slots still showed a slot processing "
                                           r"0.05 s later; check that nothing else"):
        wait_slots_idle(lambda: False, "the decodes were stopped", timeout_s=0.05)
    with pytest.raises(HarnessError, match="in a form this harness does not read"):
        wait_slots_idle(lambda: None, "the decodes were stopped", timeout_s=0.05)


def test_an_engine_that_is_gone_is_said_so_at_once():
    from harness.engines.launcher import free_port  # noqa: PLC0415

    with pytest.raises(http.EngineUnreachable):
        slots_idle_reader(f"http://127.0.0.1:{free_port()}")


def test_served_points_give_the_load_generator_a_one_second_lead(monkeypatch, tmp_path):
    """The loop's points start their schedule 1 s after the load process is set up (LOAD_T0_LEAD_S; at 0.5 s most points'
    first request ran slow)."""
    import harness.loop.measure as m

    seen = []

    def fake_run_load(cfg, workdir, progress, timeout_s):
        seen.append(cfg)
        raise RuntimeError("stop here")

    monkeypatch.setattr(m, "run_load", fake_run_load)
    with pytest.raises(RuntimeError, match="stop here"):
        m.measure_served("http://127.0.0.1:1", "x", ServedPoint(8, 2, rate_per_s=1.0, workload="8/2"), str(tmp_path / "a.parquet"),
                         5.0, str(tmp_path), tmp_path, None, 1, request_timeout_s=30.0)
    assert seen[0].t0_lead_s == m.LOAD_T0_LEAD_S == 1.0  # see LOAD_T0_LEAD_S: at 0.5 s most points' first request ran slow


def _slots_taken(settle: list[int] | None, slots: int = 4) -> list[int]:
    """In the twin of llama-server: the settle's small requests pinned to `settle` one after another (None: none),
    then `slots` unpinned long requests one after another; the slot each of those took."""
    picks = SlotPicks(slots)
    picks.pinned(settle or [])
    return picks.take(slots)


def test_the_settle_pins_one_small_request_per_slot_highest_id_first(monkeypatch):
    from harness.loop import measure

    bodies = []

    def stream(url, body, **kw):
        bodies.append((url, body))
        return http.StreamResult(200, 0.01, 0.01, (0.01,), "x", "length", None, None)

    monkeypatch.setattr(http, "stream", stream)
    measure.settle_slots("http://127.0.0.1:1", "m", 1000, 4)
    assert [b["id_slot"] for _, b in bodies] == measure.settle_order(4) == [3, 2, 1, 0]
    assert all(u.endswith("/v1/completions") and b["max_tokens"] == 1 and len(b["prompt"]) == SAVE_PROBE_TOKENS
               for u, b in bodies)
    monkeypatch.setattr(http, "stream", lambda url, body, **kw: http.StreamResult(503, None, 0.01, (), "", None, None, None, "loading"))
    with pytest.raises(HarnessError, match=r"settles the engine's slot 3 before a served point failed \(HTTP 503\): loading"):
        measure.settle_slots("http://127.0.0.1:1", "m", 1000, 4)


@pytest.mark.parametrize("slots", [4, 6])
def test_after_the_settle_the_engine_picks_the_slots_a_fresh_twin_picks(slots):
    from harness.loop.measure import settle_order

    fresh = _slots_taken(None, slots)  # how the twin starts every point: all slots equally old, the last of equals first
    assert fresh == list(range(slots - 1, -1, -1))
    assert _slots_taken(settle_order(slots), slots) == fresh
    # whatever order the previous activity left (here slots used odd ids first, then even ones, as a stage window's
    # pinned requests or a point's finishing order may leave them), the settle restores the fresh twin's
    scrambled = [i for i in range(slots) if i % 2] + [i for i in range(slots) if not i % 2]
    assert _slots_taken(scrambled, slots) != fresh
    assert _slots_taken(scrambled + settle_order(slots), slots) == fresh
    # the order matters: settled lowest id first, the engine would pick 0, 1, ... where the twin picks the highest first
    assert _slots_taken(list(range(slots)), slots) != fresh
