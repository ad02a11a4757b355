"""The report's HTML opens in headless Chromium without console errors and every image decodes.

Driven over the WebDriver protocol (chromedriver on 127.0.0.1, plain HTTP, no extra Python
package). Needs the Debian packages chromium and chromium-driver; skipped with the reason otherwise.
"""

import json
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from harness.report.calibration import ReportOptions, render
from tests.conftest import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs chromium and chromedriver: apt-get install -y chromium chromium-driver"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(base: str, method: str, path: str, body: dict | None = None, timeout: float = 30.0) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"{}")


def test_report_opens_in_headless_chromium(tmp_path):
    render(ROOT / "tests" / "data" / "runs" / "synthetic-h200", tmp_path, ReportOptions(n_bootstrap=20))
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([DRIVER, f"--port={port}", "--allowed-ips=127.0.0.1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if _call(base, "GET", "/status", timeout=2).get("value", {}).get("ready"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("chromedriver did not become ready within 20 s")
            time.sleep(0.2)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                                                "--disable-dev-shm-usage", "--user-data-dir=" + str(tmp_path / "profile")]},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}}
        sid = _call(base, "POST", "/session", caps, timeout=60)["value"]["sessionId"]
        try:
            _call(base, "POST", f"/session/{sid}/url", {"url": (tmp_path / "index.html").as_uri()})
            script = ("return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
            images = _call(base, "POST", f"/session/{sid}/execute/sync", {"script": script, "args": []})["value"]
            title = _call(base, "GET", f"/session/{sid}/title")["value"]
            logs = _call(base, "POST", f"/session/{sid}/se/log", {"type": "browser"})["value"]
        finally:
            _call(base, "DELETE", f"/session/{sid}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert title.startswith("Calibration report")
    assert len(images) >= 8
    assert all(ok and w > 100 and h > 100 for ok, w, h in images), images
    errors = [e for e in logs if e.get("level") in ("SEVERE", "ERROR")]
    assert not errors, errors
