"""harness.loop.measure's slot idleness: read from llama-server's /slots, waited for with a bounded, clear error."""

from __future__ import annotations

import pytest

from harness.engines import http
from harness.errors import HarnessError
from harness.loop.measure import slots_idle_reader, wait_slots_idle


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

    def fake_run_load(cfg, workdir, timeout_s):
        seen.append(cfg)
        raise RuntimeError("stop here")

    monkeypatch.setattr(m, "_run_load", fake_run_load)
    with pytest.raises(RuntimeError, match="stop here"):
        m.measure_served("http://127.0.0.1:1", "x", "8/2", 1.0, str(tmp_path / "a.parquet"), 5.0, str(tmp_path), tmp_path,
                         None, 1, request_timeout_s=30.0)
    assert seen[0].t0_lead_s == m.LOAD_T0_LEAD_S == 1.0  # see LOAD_T0_LEAD_S: at 0.5 s most points' first request ran slow
