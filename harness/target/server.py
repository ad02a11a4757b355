"""The embedded target's HTTP side: an OpenAI-compatible streaming server (aiohttp) in front of a simulated engine.

Serves /v1/chat/completions and /v1/completions (stream and non-stream, stream_options.include_usage; usage carries
`prompt_tokens_details.cached_tokens` where the emulated engine models a prefix cache), /v1/models, /health,
Prometheus /metrics in vLLM's naming (plus /prefill/metrics and /decode/metrics for the two PD pools),
/start_profile and /stop_profile as vLLM and SGLang have them (harness.target.profiler), /harness/info and
/harness/emit_log. Every response carries
`X-Harness-Simulated: true` and every metric the label engine="harness-simulated": nothing here is a
GPU measurement. Tokens are synthetic words; the prompt's token count is its whitespace word count.
The emit log keeps, per streamed token, the perf_counter_ns just before the bytes were handed to
the socket, so a client's timing error can be measured against it, and the instant the engine scheduled it
(`scheduled_ns`); per request, the instant of its arrival at the engine (`arrival_ns`), so latency can be
judged in the target's simulated time, free of the machine's scheduling delays.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from array import array
from pathlib import Path
from typing import Any

from aiohttp import web

from harness.target.engine import PREFIX_BLOCK_TOKENS, Engine, FixedTimingEngine, SimRequest
from harness.target.profiler import DEFAULT_DIR, ProfileError, TargetProfiler

SIMULATED_HEADER = {"X-Harness-Simulated": "true"}
EMIT_LOG_MAX_TOKENS = 20_000_000  # ~480 MB of log at worst; beyond this the log stops growing (and says so)


def count_prompt_tokens(text: str) -> tuple[int, tuple[int, ...]]:
    """Token count (whitespace words) and cumulative hashes of full PREFIX_BLOCK_TOKENS-word blocks."""
    words = text.split()
    hashes = []
    h = 0
    for i in range(len(words) // PREFIX_BLOCK_TOKENS):
        h = hash((h, tuple(words[i * PREFIX_BLOCK_TOKENS:(i + 1) * PREFIX_BLOCK_TOKENS])))
        hashes.append(h)
    return max(1, len(words)), tuple(hashes)


class EmitLog:
    def __init__(self) -> None:
        self.request_ids: list[str] = []
        self.request_index = array("q")
        self.token_index = array("q")
        self.emit_ns = array("q")
        self.scheduled_ns = array("q")
        self.arrival_ns = array("q")  # per request; -1 until it reached the engine
        self.dropped = 0

    def add_request(self, request_id: str) -> int:
        self.request_ids.append(request_id)
        self.arrival_ns.append(-1)
        return len(self.request_ids) - 1

    def set_arrival(self, req_idx: int, arrival_ns: int) -> None:
        self.arrival_ns[req_idx] = arrival_ns

    def add(self, req_idx: int, first_token: int, n: int, emit_ns: int, scheduled_ns: int) -> None:
        if len(self.emit_ns) + n > EMIT_LOG_MAX_TOKENS:
            self.dropped += n
            return
        for k in range(n):
            self.request_index.append(req_idx)
            self.token_index.append(first_token + k)
            self.emit_ns.append(emit_ns)
            self.scheduled_ns.append(scheduled_ns)

    def to_dict(self, since: int = 0) -> dict[str, Any]:
        return {
            "clock": "perf_counter_ns (CLOCK_MONOTONIC on Linux: comparable across processes of one host)",
            "request_ids": self.request_ids,
            "request_index": self.request_index[since:].tolist(),
            "token_index": self.token_index[since:].tolist(),
            "emit_ns": self.emit_ns[since:].tolist(),
            "scheduled_ns": self.scheduled_ns[since:].tolist(),
            "arrival_ns": self.arrival_ns.tolist(),  # per request (request_ids order), not sliced by `since`
            "dropped_tokens": self.dropped,
        }


class _Sink:
    """Pre-rendered SSE pieces of one streamed response."""

    __slots__ = ("resp", "head", "log_index", "chat")

    def __init__(self, resp: web.StreamResponse, request_id: str, model: str, chat: bool, log_index: int):
        self.resp = resp
        self.chat = chat
        self.log_index = log_index
        kind = "chat.completion.chunk" if chat else "text_completion"
        self.head = (
            f'data: {{"id":"{request_id}","object":"{kind}","created":{int(time.time())},"model":"{model}","choices":[{{"index":0,'
        ).encode()

    def chunks(self, first: int, n: int, total: int) -> bytes:
        out = []
        for i in range(first, first + n):
            fin = '"length"' if i == total - 1 else "null"
            if self.chat:
                role = '"role":"assistant",' if i == 0 else ""
                body = f'"delta":{{{role}"content":" tok"}},"logprobs":null,"finish_reason":{fin}}}]}}\n\n'
            else:
                body = f'"text":" tok","logprobs":null,"finish_reason":{fin}}}]}}\n\n'
            out.append(self.head + body.encode())
        return b"".join(out)


class TargetServer:
    def __init__(self, engine: Engine | FixedTimingEngine, info: dict[str, Any], model_name: str, profile_dir: str | None = None):
        self.engine = engine
        self.info = info
        self.model_name = model_name
        self.log = EmitLog()
        self.requests_total = 0
        self.engine.emit = self._emit
        self.profiler = TargetProfiler(self.log, Path(profile_dir) if profile_dir else DEFAULT_DIR)
        # an emulated prefix cache sets each request's cached_tokens (chapter P pool, llama-server slots); reported in usage
        self.reports_cached_tokens = isinstance(engine, Engine)

    # -- engine -> sockets ------------------------------------------------------------------------
    async def _emit(self, items: list[tuple[SimRequest, int]], scheduled_ns: int) -> None:
        for req, n in items:
            sink: _Sink = req.sink  # type: ignore[assignment]
            if sink is None:  # non-streaming: nothing to write until the end
                continue
            data = sink.chunks(req.emitted - n, n, req.output_tokens)
            t = time.perf_counter_ns()
            try:
                await sink.resp.write(data)
            except (ConnectionError, RuntimeError, asyncio.CancelledError):
                self._cancel(req)
                continue
            self.log.add(sink.log_index, req.emitted - n, n, t, scheduled_ns)

    @staticmethod
    def _cancel(req: SimRequest) -> None:
        req.cancelled = True
        if req.done is not None and not req.done.done():
            req.done.set_result(None)

    # -- handlers -----------------------------------------------------------------------------
    @staticmethod
    def _error(status: int, message: str, field: str | None = None) -> web.Response:
        body = {"error": {"message": message, "type": "invalid_request_error", "param": field, "code": status}}
        return web.json_response(body, status=status, headers=SIMULATED_HEADER)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        chat = request.path.endswith("/chat/completions")
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return self._error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return self._error(400, "request body must be a JSON object")
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not msgs:
                return self._error(400, "messages must be a non-empty list", "messages")
            parts = []
            for m in msgs:
                c = m.get("content") if isinstance(m, dict) else None
                if isinstance(c, list):
                    parts += [p.get("text", "") for p in c if isinstance(p, dict)]
                elif isinstance(c, str):
                    parts.append(c)
            text = " ".join(parts)
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                return self._error(400, "prompt must be a string", "prompt")
            text = prompt
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 16))
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            return self._error(400, f"max_tokens must be a positive integer, got {max_tokens!r}", "max_tokens")
        stream = bool(body.get("stream", False))
        opts = body.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage", False)) if isinstance(opts, dict) else False
        n_in, hashes = count_prompt_tokens(text)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        req = SimRequest(rid, n_in, max_tokens, hashes)
        self.requests_total += 1
        if not stream:
            self.engine.submit(req)
            await req.done
            if req.rejected:
                return self._error(400, req.rejected, "prompt")
            usage = self._usage(req)
            text_out = " tok" * max_tokens
            choice = {"index": 0, "finish_reason": "length"}
            choice.update({"message": {"role": "assistant", "content": text_out}} if chat else {"text": text_out})
            return web.json_response(
                {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                 "model": self.model_name, "choices": [choice], "usage": usage},
                headers=SIMULATED_HEADER,
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **SIMULATED_HEADER})
        await resp.prepare(request)
        req.sink = _Sink(resp, rid, self.model_name, chat, self.log.add_request(rid))
        self.engine.submit(req)
        self.log.set_arrival(req.sink.log_index, self.engine.clock.wall_ns(req.arrival_s))
        try:
            await req.done
        except asyncio.CancelledError:
            self._cancel(req)
            raise
        if req.cancelled:
            return resp
        try:
            if req.rejected:
                err = json.dumps({"error": {"message": req.rejected, "type": "invalid_request_error", "code": 400}})
                await resp.write(f"data: {err}\n\n".encode())
                await resp.write_eof()
                return resp
            if include_usage:
                u = json.dumps({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": int(time.time()),
                                "model": self.model_name, "choices": [], "usage": self._usage(req)}, separators=(",", ":"))
                await resp.write(f"data: {u}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return resp

    def _usage(self, req: SimRequest) -> dict[str, Any]:
        u: dict[str, Any] = {"prompt_tokens": req.input_tokens, "completion_tokens": req.output_tokens,
                             "total_tokens": req.input_tokens + req.output_tokens}
        if self.reports_cached_tokens:
            u["prompt_tokens_details"] = {"cached_tokens": int(req.cached_tokens)}
        return u

    async def start_profile(self, request: web.Request) -> web.Response:
        """vLLM / SGLang's POST /start_profile; an optional JSON body {"output_dir": DIR} (SGLang's field) picks where."""
        body: Any = {}
        if request.can_read_body:
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                return self._error(400, "the body of /start_profile must be JSON, e.g. {\"output_dir\": \"/tmp/prof\"}")
        out = body.get("output_dir") if isinstance(body, dict) else None
        try:
            return web.json_response(self.profiler.start(out if isinstance(out, str) else None), headers=SIMULATED_HEADER)
        except ProfileError as exc:
            return self._error(400, str(exc))

    async def stop_profile(self, request: web.Request) -> web.Response:
        try:
            return web.json_response(self.profiler.stop(), headers=SIMULATED_HEADER)
        except ProfileError as exc:
            return self._error(400, str(exc))

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "harness-simulated"}]},
                                 headers=SIMULATED_HEADER)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok (simulated)\n", headers=SIMULATED_HEADER)

    async def info_handler(self, request: web.Request) -> web.Response:
        return web.json_response({**self.info, "requests_total": self.requests_total, "emit_log_tokens": len(self.log.emit_ns),
                                  "lag": {"count": self.engine.lag.count, "max_s": self.engine.lag.max_s,
                                          "mean_s": self.engine.lag.total_s / self.engine.lag.count if self.engine.lag.count else 0.0}},
                                 headers=SIMULATED_HEADER)

    async def emit_log(self, request: web.Request) -> web.Response:
        try:
            since = int(request.query.get("since", "0"))
        except ValueError:
            return self._error(400, "since must be an integer", "since")
        return web.json_response(self.log.to_dict(since), headers=SIMULATED_HEADER)

    async def metrics(self, request: web.Request) -> web.Response:
        role = "all"
        if request.path.startswith("/prefill/"):
            role = "prefill"
        elif request.path.startswith("/decode/"):
            role = "decode"
        return web.Response(text=self.render_metrics(role), content_type="text/plain", headers=SIMULATED_HEADER)

    def render_metrics(self, role: str) -> str:
        """Prometheus text format, vLLM metric names, for one pool ("prefill", "decode") or both ("all")."""
        eng = self.engine
        if isinstance(eng, FixedTimingEngine):
            p = d = eng.stats
            pools = {"all": [p], "prefill": [p], "decode": [p]}[role]
            kv_frac = 0.0
            extra: dict[str, float] = {}
        else:
            p, d = eng.prefill_stats, eng.decode_stats
            colocated = eng.mode == "colocated"
            pools = {"all": [p] if colocated else [p, d], "prefill": [p], "decode": [p] if colocated else [d]}[role]
            kv_src = p if colocated else d
            kv_frac = kv_src.kv_tokens / eng.kv_capacity_tokens if eng.kv_capacity_tokens and role != "prefill" else 0.0
            extra = {}
            if eng.link is not None and role != "decode":
                extra = {"harness_kv_transfers_in_flight": eng.link.in_flight, "harness_kv_transfer_bytes_total": eng.link.bytes_total}
        lbl = f'{{model_name="{self.model_name}",engine="harness-simulated",pool="{role}"}}'
        vals = {
            "vllm:num_requests_running": ("gauge", sum(x.running for x in pools)),
            "vllm:num_requests_waiting": ("gauge", sum(x.waiting for x in pools)),
            "vllm:kv_cache_usage_perc": ("gauge", kv_frac),
            "vllm:gpu_cache_usage_perc": ("gauge", kv_frac),
            "vllm:prompt_tokens_total": ("counter", sum(x.prompt_tokens_total for x in pools)),
            "vllm:generation_tokens_total": ("counter", sum(x.generation_tokens_total for x in pools)),
            "vllm:prefix_cache_queries_total": ("counter", sum(x.prefix_queries_tokens_total for x in pools)),
            "vllm:prefix_cache_hits_total": ("counter", sum(x.prefix_hits_tokens_total for x in pools)),
            "vllm:request_success_total": ("counter", sum(x.requests_finished_total for x in pools)),
        }
        lines = ["# HELP harness_simulated 1: this endpoint is the harness's simulated target, not a GPU engine.",
                 "# TYPE harness_simulated gauge", f"harness_simulated{lbl} 1"]
        for name, (typ, v) in vals.items():
            lines += [f"# TYPE {name} {typ}", f"{name}{lbl} {float(v):.17g}"]
        for name, v in {**extra, "harness_target_lag_seconds_max": eng.lag.max_s}.items():
            lines += [f"# TYPE {name} gauge", f"{name}{lbl} {float(v):.17g}"]
        return "\n".join(lines) + "\n"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        for path in ("/metrics", "/prefill/metrics", "/decode/metrics"):
            app.router.add_get(path, self.metrics)
        for path, handler in (("/start_profile", self.start_profile), ("/stop_profile", self.stop_profile)):
            app.router.add_post(path, handler)
        app.router.add_get("/harness/info", self.info_handler)
        app.router.add_get("/harness/emit_log", self.emit_log)

        async def _start(_app: web.Application) -> None:
            self.engine.start()

        async def _stop(_app: web.Application) -> None:
            await self.engine.stop()

        app.on_startup.append(_start)
        app.on_cleanup.append(_stop)
        return app
