"""A stand-in for guidellm in the tool_compare tests: takes guidellm's `run` flags, streams the requests with urllib
(concurrency threads), counts the " tok" events of each and writes guidellm's JSON report shape."""

from __future__ import annotations

import json
import sys
import threading
import urllib.request


def main(argv: list[str]) -> int:
    opts = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}
    kv = lambda flag: dict(x.split("=", 1) for x in opts[flag].split(","))  # noqa: E731
    backend, profile, data = kv("--backend"), kv("--profile"), kv("--data")
    count, out_path = int(kv("--constraint")["count"]), kv("--output")["path"]
    n_out = int(data["output_tokens"])
    done: list[int] = []
    lock = threading.Lock()
    todo = list(range(count))

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            body = json.dumps({"model": backend["model"], "prompt": "a b c", "max_tokens": n_out, "stream": True}).encode()
            req = urllib.request.Request(backend["target"] + backend["request_format"], data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                n = r.read().count(b'"text":" tok"')
            with lock:
                done.append(n)

    threads = [threading.Thread(target=worker) for _ in range(int(profile["streams"]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(out_path, "w") as fh:
        json.dump({"benchmarks": [{"requests": {"successful": [{"output_tokens": n} for n in done]}}]}, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
