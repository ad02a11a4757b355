"""SSE parsing: each event gets the arrival time of the read that completed it; JSON only afterwards."""

import json

from workloads.sse import parse_stream


def _ev(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chunk(text, fin=None, chat=True):
    c = {"index": 0, "finish_reason": fin}
    c.update({"delta": {"content": text}} if chat else {"text": text})
    return {"id": "r1", "choices": [c]}


def test_events_take_the_time_of_the_piece_that_completes_them():
    e1, e2, e3 = _ev(_chunk("a")), _ev(_chunk("b")), _ev(_chunk("c", "length"))
    usage = _ev({"id": "r1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})
    body = e1 + e2 + e3 + usage + b"data: [DONE]\n\n"
    # piece 1 ends inside e2, piece 2 ends after e3, piece 3 is the rest
    cut1, cut2 = len(e1) + 5, len(e1) + len(e2) + len(e3)
    p = parse_stream(body, [cut1, cut2, len(body)], [100, 200, 300], chat=True)
    assert p.content_ns == [100, 200, 200]
    assert p.done_seen and p.finish_reason == "length"
    assert (p.prompt_tokens_usage, p.output_tokens_usage) == (5, 3)
    assert p.response_id == "r1" and p.malformed is None


def test_role_only_and_comment_events_are_not_tokens():
    role = _ev({"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
    body = b": keep-alive\n\n" + role + _ev(_chunk("hi", "stop")) + b"data: [DONE]\n\n"
    p = parse_stream(body, [len(body)], [7], chat=True)
    assert p.content_ns == [7]


def test_completions_text_field():
    body = _ev(_chunk("x", chat=False)) + _ev(_chunk("y", "length", chat=False)) + b"data: [DONE]\n\n"
    p = parse_stream(body, [len(body)], [1], chat=False)
    assert len(p.content_ns) == 2


def test_malformed_event_is_reported():
    body = _ev(_chunk("a")) + b"data: {not json\n\n" + b"data: [DONE]\n\n"
    p = parse_stream(body, [len(body)], [1], chat=True)
    assert p.malformed is not None and p.malformed.startswith("{not json")


def test_done_without_finish_reason_is_visible():
    body = _ev(_chunk("a")) + b"data: [DONE]\n\n"
    p = parse_stream(body, [len(body)], [1], chat=True)
    assert p.done_seen and p.finish_reason is None


def test_error_event_in_stream():
    body = _ev({"error": {"message": "overloaded"}}) + b"data: [DONE]\n\n"
    p = parse_stream(body, [len(body)], [1], chat=True)
    assert "overloaded" in p.server_error


def test_reasoning_deltas_usage_only_chunk_and_multiline_data():
    """Reasoning text counts as output; a usage-only chunk (empty choices) sets usage; multi-line `data:` joins."""
    reasoning = _ev({"id": "r1", "choices": [{"index": 0, "delta": {"reasoning_content": "think"}, "finish_reason": None}]})
    text = b'event: message\ndata: {"id": "r1", "choices": [{"index": 0,\ndata: "delta": {"content": "x"}, "finish_reason": "stop"}]}\n\n'
    usage = _ev({"id": "r1", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}})
    p = parse_stream(reasoning + text + usage + b"data: [DONE]\n\n", [len(reasoning), len(reasoning) + len(text) + len(usage) + 14],
                     [5, 9], chat=True)
    assert p.content_ns == [5, 9] and p.finish_reason == "stop"
    assert (p.prompt_tokens_usage, p.output_tokens_usage) == (7, 2) and p.done_seen and p.malformed is None


def test_non_json_numbers_and_non_object_events_are_malformed():
    for bad in (b'data: {"choices": [{"text": "a", "logprob": NaN}]}\n\n', b"data: [1, 2]\n\n", b"data: \xff\xfe\n\n"):
        p = parse_stream(bad + b"data: [DONE]\n\n", [len(bad) + 14], [1], chat=False)
        assert p.malformed is not None and p.content_ns == [], bad
