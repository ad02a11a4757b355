"""One session's turns on the client: the request body of each turn and, in a live session, the server's replies carried
into the next turn, as a chat client sends them.

Live (`--replies live`, the artifact's meta `replies`): the artifact holds each turn's new user text only; turn k is
sent as the conversation so far, chat: [user 0, assistant reply 0, user 1, ..., user k] with each reply the text the
server actually streamed; completions: the same texts concatenated. Synthetic: the artifact's prompt is sent as it is
(the history with stand-in replies of the replies' lengths). A turn whose request failed carries the text it received
(possibly none), and the session goes on: its next turns keep their place in the open-loop schedule.

Each record gets, besides the usual columns:
  prompt_tokens_target   the client's count of the whole prompt: previous prompt + previous reply + new text (live)
  reused_prefix_tokens   tokens of this prompt the session already sent or received, as a prefix: live, the previous
                         prompt and its reply (server-counted reply: usage, else content events); synthetic, the previous
                         prompt only (the stand-in differs from what the server produced, so it cannot be reused); 0 on
                         a session's first turn. Compared with the server's usage.prompt_tokens_details.cached_tokens
                         (`cached_tokens_usage`) where it reports one (workloads.reuse_summary).
"""

from __future__ import annotations

import json
from typing import Any


class Conversation:
    __slots__ = ("live", "chat", "messages", "text", "prev_prompt_tokens", "prev_reply_tokens")

    def __init__(self, live: bool, chat: bool):
        self.live = live
        self.chat = chat
        self.messages: list[dict[str, str]] = []
        self.text = ""
        self.prev_prompt_tokens: int | None = None
        self.prev_reply_tokens = 0

    def request(self, item: dict[str, Any], base: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        """The turn's JSON body (`base`: model, max_tokens, stream options, ...) and the item its record describes."""
        turn = int(item["turn"])
        later = turn > 0 and self.prev_prompt_tokens is not None
        n_new = int(item["prompt_tokens_target"])
        if self.live and later:
            reused = self.prev_prompt_tokens + self.prev_reply_tokens
            n_prompt = reused + n_new
            if self.chat:
                self.messages.append({"role": "user", "content": item["prompt"]})
                body = {**base, "messages": self.messages}
            else:
                self.text = f"{self.text} {item['prompt']}"
                body = {**base, "prompt": self.text}
        else:
            reused = self.prev_prompt_tokens if later else 0
            n_prompt = n_new
            if self.chat:
                self.messages = [{"role": "user", "content": item["prompt"]}]
                body = {**base, "messages": self.messages}
            else:
                self.text = item["prompt"]
                body = {**base, "prompt": self.text}
        self.prev_prompt_tokens = n_prompt
        return json.dumps(body).encode(), {**item, "prompt_tokens_target": n_prompt, "reused_prefix_tokens": int(reused or 0)}

    def reply(self, raw: dict[str, Any]) -> None:
        """Carry the server's reply into the next turn (live sessions keep its text; both count its tokens)."""
        p = raw.get("parse")
        n = p.output_tokens_usage if p is not None and isinstance(p.output_tokens_usage, int) else (len(p.content_ns) if p else 0)
        self.prev_reply_tokens = int(n)
        if self.live:
            text = (p.text or "") if p is not None else ""
            if self.chat:
                self.messages.append({"role": "assistant", "content": text})
            else:
                self.text = self.text + text
