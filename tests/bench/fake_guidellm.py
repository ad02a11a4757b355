"""A stand-in for guidellm in the tool_compare tests: takes guidellm's `run` flags, streams the requests with urllib
(`kind=concurrent`: that many threads; `kind=constant,rate=R`: one thread per request, started 1/R apart), counts the
" tok" events of each, times its first one and writes guidellm's JSON report shape (output_tokens, response_id,
time_to_first_token_ms)."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request


def main(argv: list[str]) -> int:
    opts = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}
    kv = lambda flag: dict(x.split("=", 1) for x in opts[flag].split(","))  # noqa: E731
    backend, profile, data = kv("--backend"), kv("--profile"), kv("--data")
    count, out_path = int(kv("--constraint")["count"]), kv("--output")["path"]
    n_out = int(data["output_tokens"])
    done: list[dict] = []
    lock = threading.Lock()
    todo = list(range(count))

    def one() -> None:
        body = json.dumps({"model": backend["model"], "prompt": "a b c", "max_tokens": n_out, "stream": True}).encode()
        req = urllib.request.Request(backend["target"] + backend["request_format"], data=body,
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        n, rid, ttft = 0, None, None
        with urllib.request.urlopen(req, timeout=60) as r:
            for line in r:
                if b'"text":" tok"' in line:
                    n += 1
                    if ttft is None:
                        ttft = (time.perf_counter() - t0) * 1e3
                        rid = json.loads(line[6:])["id"]
        with lock:
            done.append({"output_tokens": n, "response_id": rid, "time_to_first_token_ms": ttft})

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            one()

    if profile["kind"] == "constant":
        threads = [threading.Thread(target=one) for _ in range(count)]
        for t in threads:
            t.start()
            time.sleep(1.0 / float(profile["rate"]))
    else:
        threads = [threading.Thread(target=worker) for _ in range(int(profile["streams"]))]
        for t in threads:
            t.start()
    for t in threads:
        t.join()
    with open(out_path, "w") as fh:
        json.dump({"benchmarks": [{"requests": {"successful": done}}]}, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
