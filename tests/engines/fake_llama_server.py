"""A stand-in llama-server for loop tests: takes llama-server's command line, serves /health, /tokenize, /detokenize,
/metrics and OpenAI completions (streamed, with llama.cpp's `timings`), one request at a time per slot, with
fixed per-token times. `--fake-die-after N` makes it exit mid-run after N completions (the engine-dies test);
`--fake-save-s-per-token S` delays each request's start by S per token of the requests finished since the last start
(prompt over 16 tokens only: llama-server's host-RAM prompt-cache copy, outside `timings.prompt_ms`);
`--fake-body-log FILE` appends each completion request's id_slot, prompt tokens and max_tokens as a JSON line;
`--fake-mixed-s S`: a prompt that starts while another request is generating takes S seconds longer (the iteration
that mixes a prompt with decode tokens, llama-server's cost the twin's mixed correction takes);
`--fake-speed-file FILE`: when FILE holds a number, each request started then takes that many times longer (a host
whose speed drifts, for the stage-window tests). `/slots` lists the slots, as many processing as requests hold one
(none with `--no-slots`, as llama-server); `timings_per_token` in a request puts the timings so far in every event.
Listens on 127.0.0.1 only; exits by itself after `--fake-lifetime-s`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from aiohttp import web

PROMPT_S_PER_TOKEN = 0.0002
DECODE_S_PER_TOKEN = 0.004


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--alias", default="fake")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--fake-die-after", type=int, default=None)
    ap.add_argument("--fake-lifetime-s", type=float, default=300.0)
    ap.add_argument("--fake-save-s-per-token", type=float, default=0.0)
    ap.add_argument("--fake-body-log", default=None)
    ap.add_argument("--fake-speed-file", default=None)
    ap.add_argument("--fake-mixed-s", type=float, default=0.0)
    ap.add_argument("--no-slots", action="store_true")
    a, _ = ap.parse_known_args()
    unsaved: list[int] = []
    slots = asyncio.Semaphore(a.parallel)
    done = [0]
    generating = [0]  # requests past their prompt, still streaming tokens
    busy = [0]  # requests holding a slot

    def tok(text: str, special: bool) -> list[int]:
        return ([1] if special else []) + [2 + (hash(w) % 997) for w in text.split()]

    async def health(_r):
        return web.json_response({"status": "ok"})

    async def tokenize(r):
        b = await r.json()
        return web.json_response({"tokens": tok(b.get("content", ""), bool(b.get("add_special", False)))})

    async def detokenize(r):
        b = await r.json()
        return web.json_response({"content": " ".join(f"w{t}" for t in b.get("tokens", []))})

    async def metrics(_r):
        return web.Response(text=f"# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n"
                                 f"# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total {done[0]}\n")

    async def slots_list(_r):
        if a.no_slots:
            return web.json_response({"error": {"code": 501, "message": "This server does not support slots endpoint."}}, status=501)
        return web.json_response([{"id": i, "is_processing": i < busy[0]} for i in range(a.parallel)])

    async def completions(r):
        b = await r.json()
        p = b.get("prompt", "")
        n_p = len(p) if isinstance(p, list) else len(tok(p, True))  # token ids: no BOS added, as llama-server
        n_out = int(b.get("max_tokens", 16))
        if a.fake_body_log:
            with open(a.fake_body_log, "a") as f:
                f.write(json.dumps({"id_slot": b.get("id_slot"), "n_prompt": n_p, "max_tokens": n_out}) + "\n")
        slow = 1.0
        if a.fake_speed_file and os.path.exists(a.fake_speed_file):
            with open(a.fake_speed_file) as f:
                slow = float(f.read().strip() or 1.0)
        async with slots:
            busy[0] += 1
            try:
                return await run(r, b, n_p, n_out, slow)
            finally:
                busy[0] -= 1

    async def run(r, b, n_p, n_out, slow):
        if a.fake_save_s_per_token and unsaved:
            cost = a.fake_save_s_per_token * sum(unsaved)
            unsaved.clear()
            await asyncio.sleep(cost)
        if n_p > 16:
            unsaved.append(n_p + n_out - 1)
        t0 = time.perf_counter()
        await asyncio.sleep(n_p * PROMPT_S_PER_TOKEN * slow + (a.fake_mixed_s if generating[0] else 0.0))
        prompt_ms = (time.perf_counter() - t0) * 1e3
        if not b.get("stream"):
            await asyncio.sleep((n_out - 1) * DECODE_S_PER_TOKEN * slow)
            out = _finish(done, a.fake_die_after)
            return web.json_response({"choices": [{"text": " x" * n_out, "finish_reason": "length"}], "model": a.alias,
                                      "usage": {"prompt_tokens": n_p, "completion_tokens": n_out, "total_tokens": n_p + n_out},
                                      "timings": {"prompt_n": n_p, "prompt_ms": prompt_ms, "predicted_n": n_out,
                                                  "predicted_ms": (n_out - 1) * DECODE_S_PER_TOKEN * slow * 1e3}}) if out else None
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(r)
        t1 = time.perf_counter()
        generating[0] += 1
        try:
            for i in range(n_out):
                if i:
                    await asyncio.sleep(DECODE_S_PER_TOKEN * slow)
                ev = {"choices": [{"index": 0, "text": " x", "finish_reason": "length" if i == n_out - 1 else None}], "model": a.alias}
                if i == n_out - 1 or b.get("timings_per_token"):
                    ev["timings"] = {"prompt_n": n_p, "prompt_ms": prompt_ms, "predicted_n": i + 1,
                                     "predicted_ms": (time.perf_counter() - t1) * 1e3}
                await resp.write(f"data: {json.dumps(ev)}\n\n".encode())
        finally:
            generating[0] -= 1
        usage = {"choices": [], "usage": {"prompt_tokens": n_p, "completion_tokens": n_out, "total_tokens": n_p + n_out}}
        await resp.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        _finish(done, a.fake_die_after)
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/slots", slots_list)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_post("/v1/completions", completions)

    async def serve():
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", a.port).start()
        print(f"fake llama-server pid {os.getpid()} on {a.port}", flush=True)
        await asyncio.sleep(a.fake_lifetime_s)

    asyncio.run(serve())


def _finish(done: list[int], die_after: int | None) -> bool:
    done[0] += 1
    if die_after is not None and done[0] >= die_after:
        print(f"fake llama-server: dying on purpose after {done[0]} completions", flush=True)
        sys.stdout.flush()
        os._exit(3)
    return True


if __name__ == "__main__":
    main()
