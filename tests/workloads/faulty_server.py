"""A deliberately faulty OpenAI-style server for the reliability tests (aiohttp on 127.0.0.1, in a thread).

The first word of the prompt picks the behaviour: ok, http500, reset (connection dropped mid-stream),
malformed (an undecodable event), stall (no bytes past the client's timeout), early_done ([DONE]
before any finish_reason). Every Authorization header seen is kept for the API-key test.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading

from aiohttp import web

STALL_S = 4.0  # bounded: the server gives up on a stalled stream after this


def _chunk(text: str, fin: str | None = None) -> bytes:
    obj = {"id": "f-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": fin}]}
    return f"data: {json.dumps(obj)}\n\n".encode()


class FaultyServer:
    def __init__(self) -> None:
        self.auth_headers: list[str] = []
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.auth_headers.append(request.headers.get("Authorization", ""))
        body = await request.json()
        mode = body["messages"][0]["content"].split()[0]
        if mode == "http500":
            return web.json_response({"error": {"message": "internal error"}}, status=500)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk(" a"))
        await resp.write(_chunk(" b"))
        if mode == "reset":
            await asyncio.sleep(0.05)
            request.transport.abort()
            return resp
        if mode == "malformed":
            await resp.write(b"data: {this is not json\n\n")
        if mode == "stall":
            await asyncio.sleep(STALL_S)
            return resp
        if mode != "early_done":
            await resp.write(_chunk(" c", "length"))
            await resp.write(f"data: {json.dumps({'id': 'f-1', 'choices': [], 'usage': {'prompt_tokens': 3, 'completion_tokens': 3}})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def start(self) -> "FaultyServer":
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_post("/v1/chat/completions", self._handle)
            self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
            loop.run_until_complete(self._runner.setup())
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            loop.run_until_complete(web.SockSite(self._runner, sock).start())
            self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
