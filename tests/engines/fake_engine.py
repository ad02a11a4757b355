"""A stand-in engine for launcher tests: /health answers 503 for `--loading-s`, then 200; /v1/completions
answers like an OpenAI server; it forks one child (to check that stop reaches the process group) and
exits by itself after `--lifetime-s`. Listens on 127.0.0.1 only."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--loading-s", type=float, default=0.3)
    ap.add_argument("--lifetime-s", type=float, default=60.0)
    ap.add_argument("--child-pid-file", default=None)
    ap.add_argument("--fail-completions", action="store_true")
    ap.add_argument("--exit-at-once", type=int, default=None)
    ap.add_argument("--ignore-sigterm", action="store_true")
    a = ap.parse_args()
    if a.exit_at_once is not None:
        print("fake engine: failing on purpose", flush=True)
        sys.exit(a.exit_at_once)
    if a.ignore_sigterm:
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({a.lifetime_s})"])
    if a.child_pid_file:
        with open(a.child_pid_file, "w") as fh:
            fh.write(str(child.pid))
    t0 = time.monotonic()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep the log small
            pass

        def _send(self, code: int, obj) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                if time.monotonic() - t0 < a.loading_s:
                    self._send(503, {"error": {"message": "Loading model"}})
                else:
                    self._send(200, {"status": "ok"})
            elif self.path == "/metrics":
                body = b"# TYPE fake:requests_total counter\nfake:requests_total 1\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(n) or b"{}")
            if a.fail_completions:
                self._send(500, {"error": {"message": "boom"}})
                return
            self._send(200, {"choices": [{"text": "x", "finish_reason": "length"}], "model": req.get("model"),
                             "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}})

    srv = ThreadingHTTPServer(("127.0.0.1", a.port), H)
    threading.Timer(a.lifetime_s, srv.shutdown).start()
    print(f"fake engine pid {os.getpid()} on {a.port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
