"""Multi-turn sessions on the client: each turn's body carries the replies the server streamed (live) or the artifact's
stand-ins (synthetic); the records' prompt length and reused prefix; the parser keeps the text and cached tokens."""

import json

import pandas as pd

from workloads.conversation import Conversation
from workloads.reuse_summary import reuse_lines, summarise_reuse
from workloads.sse import SSEParser, StreamParse

BASE = {"model": "m", "max_tokens": 4, "stream": True}


def _item(turn, prompt, n):
    return {"request_index": turn, "session_id": 0, "turn": turn, "prompt": prompt, "prompt_tokens_target": n, "api": "chat"}


def _raw(text, n):
    return {"parse": StreamParse(content_ns=[1] * n, output_tokens_usage=n, text=text)}


def test_live_chat_turns_carry_the_server_replies():
    c = Conversation(live=True, chat=True)
    body, it = c.request(_item(0, "hello there", 2), BASE)
    assert json.loads(body)["messages"] == [{"role": "user", "content": "hello there"}] and it["reused_prefix_tokens"] == 0
    c.reply(_raw(" hi you", 2))
    body, it = c.request(_item(1, "and now", 2), BASE)
    assert json.loads(body)["messages"] == [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": " hi you"},
                                            {"role": "user", "content": "and now"}]
    assert it["prompt_tokens_target"] == 2 + 2 + 2 and it["reused_prefix_tokens"] == 4 and json.loads(body)["max_tokens"] == 4
    c.reply(_raw(" ok", 1))
    _, it = c.request(_item(2, "last", 1), BASE)
    assert it["prompt_tokens_target"] == 6 + 1 + 1 and it["reused_prefix_tokens"] == 7


def test_live_completions_concatenate_and_a_failed_turn_carries_nothing():
    c = Conversation(live=True, chat=False)
    c.request(_item(0, "a b", 2), BASE)
    c.reply({"parse": None})  # the first turn failed: nothing came back
    body, it = c.request(_item(1, "c", 1), BASE)
    assert json.loads(body)["prompt"] == "a b c" and it["reused_prefix_tokens"] == 2


def test_synthetic_turns_send_the_artifact_prompt_and_reuse_only_the_previous_prompt():
    c = Conversation(live=False, chat=True)
    c.request(_item(0, "a b", 2), BASE)
    c.reply(_raw(" x y z", 3))
    body, it = c.request(_item(1, "a b w w w c", 6), BASE)
    assert json.loads(body)["messages"] == [{"role": "user", "content": "a b w w w c"}]
    assert it["prompt_tokens_target"] == 6 and it["reused_prefix_tokens"] == 2  # the stand-in reply is not what the server said


def test_parser_keeps_text_and_cached_tokens_only_when_asked():
    ev = (b'data: {"id":"r","choices":[{"delta":{"content":" one"}}]}\n\ndata: {"id":"r","choices":[{"delta":{"content":" two"},'
          b'"finish_reason":"length"}]}\n\ndata: {"id":"r","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,'
          b'"prompt_tokens_details":{"cached_tokens":8}}}\n\ndata: [DONE]\n\n')
    keep = SSEParser(True, keep_text=True)
    keep.feed(ev, 5)
    r = keep.result()
    assert r.text == " one two" and r.cached_tokens_usage == 8 and r.content_ns == [5, 5]
    plain = SSEParser(True)
    plain.feed(ev, 5)
    assert plain.result().text is None and plain.result().cached_tokens_usage == 8


def test_reuse_summary():
    df = pd.DataFrame([
        {"session_id": 0, "turn": 0, "error_class": "ok", "prompt_tokens_target": 600, "reused_prefix_tokens": 0, "cached_tokens_usage": 0},
        {"session_id": 0, "turn": 1, "error_class": "ok", "prompt_tokens_target": 1208, "reused_prefix_tokens": 608, "cached_tokens_usage": 512},
        {"session_id": 0, "turn": 2, "error_class": "ok", "prompt_tokens_target": 1816, "reused_prefix_tokens": 1216, "cached_tokens_usage": 1024},
        {"session_id": 1, "turn": 1, "error_class": "timeout", "prompt_tokens_target": 1208, "reused_prefix_tokens": 608,
         "cached_tokens_usage": None},
    ])
    r = summarise_reuse(df, "live")
    assert (r.sessions, r.later_turns, r.reused_prefix_tokens, r.cached_tokens, r.cached_reported) == (2, 2, 1824, 1536, 2)
    assert r.cached_of_reused == 1536 / 1824 and [t.turn for t in r.by_turn] == [1, 2]
    assert "served 1536 from its prefix cache (84% of the history resent" in reuse_lines(r)[0]
    none = summarise_reuse(df.assign(cached_tokens_usage=None), "live")
    assert none.cached_tokens is None and "reported no cached_tokens" in reuse_lines(none)[0]
    assert summarise_reuse(df[df["turn"] == 0]) is None
