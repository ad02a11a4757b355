"""A fake dcgm-exporter for tests: the /metrics page in the exporter's own layout (NVIDIA/dcgm-exporter
internal/pkg/rendermetrics/render_metrics.go: `# HELP`, `# TYPE`, then one line per GPU with the labels gpu, UUID,
pci_bus_id, device, modelName, Hostname), with the metric names and help texts of its etc/default-counters.csv, plus
DCGM_FI_DEV_CLOCKS_EVENT_REASONS (added to a counters file to export the clock-event bitmask)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# name, type, help (etc/default-counters.csv), value for GPU i
COUNTERS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda i, s: 1980 - 200 * s["throttle"] * (i == 1)),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", lambda i, s: 2619),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", lambda i, s: 40 + i),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda i, s: 55 + i),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda i, s: 412.5 + 10 * i),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", lambda i, s: 123456789),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda i, s: s["util"]),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", lambda i, s: 30),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", lambda i, s: 20000),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda i, s: 60000 + i),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", lambda i, s: 559),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda i, s: 0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", lambda i, s: 0.8),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Clock event reasons.", lambda i, s: 0x20 if s["throttle"] and i == 1 else 0),
]


def exposition(n_gpus: int = 2, *, util: float = 87, throttle: bool = False, host: str = "node-7",
               model: str = "NVIDIA H100 80GB HBM3", hostname_label: str = "Hostname") -> str:
    state = {"util": util, "throttle": throttle}
    lines = []
    for name, typ, help_, value in COUNTERS:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {typ}"]
        for i in range(n_gpus):
            lines.append(f'{name}{{gpu="{i}",UUID="GPU-{i:08x}-aaaa-bbbb-cccc-000000000000",pci_bus_id="00000000:{0x18 + i:02X}:00.0",'
                         f'device="nvidia{i}",modelName="{model}",{hostname_label}="{host}",DCGM_FI_DRIVER_VERSION="570.86.15"}} '
                         f"{value(i, state)}")
    return "\n".join(lines) + "\n"


class FakeExporter:
    """Serves `exposition(**kw)` at http://127.0.0.1:PORT/metrics on a thread; `kw` may be changed while it runs."""

    def __init__(self, **kw):
        self.kw = dict(kw)
        self.hits = 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                outer.hits += 1
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = exposition(**outer.kw).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (a port just released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"
