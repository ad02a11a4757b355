"""nvbandwidth `-j` JSON -> micro_cases: one case per (test, row, column) cell of each bandwidth matrix.

Format (NVIDIA/nvbandwidth json_output.cpp): {"nvbandwidth": {"CUDA Runtime Version", "Driver
Version", "git_version", "version", "testcases": [{"name", "status", "bandwidth_description",
"bandwidth_matrix": [[str GB/s | "N/A"]], "sum"}]}}. The tool reports bandwidth only; the case's
time is derived as buffer_bytes / bandwidth (buffer 512 MiB, the tool's default `-b`, unless the
file says otherwise) and the case says so. Waived or failed tests become skips with their status.
"""

from __future__ import annotations

from pathlib import Path

from harness.importers import Imported, external_measurement, load_json, require

TOOL = "nvbandwidth"
DEFAULT_BUFFER_BYTES = 512 * 2**20


def parse(path: str | Path, buffer_bytes: int | None = None) -> Imported:
    from microbench.case import CaseResult, Peak, Skip, Work

    root = require(load_json(path, TOOL), "nvbandwidth", "top level", TOOL)
    tests = require(root, "testcases", "nvbandwidth", TOOL)
    size = buffer_bytes or int(root.get("bufferSize", 0)) * 2**20 or DEFAULT_BUFFER_BYTES
    imp = Imported(TOOL, facts={"cuda_version": str(root.get("CUDA Runtime Version")), "driver": root.get("Driver Version"),
                                "tool_version": root.get("version") or root.get("git_version"), "buffer_bytes": size})
    peak = Peak(None, None, "nvbandwidth import: no link spec applied")
    for t in tests:
        name = require(t, "name", "a testcase", TOOL)
        if t.get("status") != "Passed":
            imp.skips.append(Skip("transfer", name, f"nvbandwidth status {t.get('status')!r}{': ' + t['error'] if t.get('error') else ''}"))
            continue
        matrix = require(t, "bandwidth_matrix", f"testcase {name!r}", TOOL)
        for i, row in enumerate(matrix):
            for j, cell in enumerate(row):
                if cell in ("N/A", None, ""):
                    continue
                gbps = float(cell)
                if gbps <= 0:
                    continue
                m = external_measurement(TOOL, size / (gbps * 1e9))
                imp.cases.append(CaseResult(
                    "transfer", f"{name}-{i}-{j}", TOOL, f"row{i}-col{j}", "uint8",
                    {"test": name, "row": i, "column": j, "description": t.get("bandwidth_description", ""),
                     "reported_bandwidth_bytes_per_s": gbps * 1e9, "buffer_bytes": size},
                    Work(useful_bytes=float(size)), m, peak, notes=("time derived as buffer_bytes / reported bandwidth",), source=TOOL))
    return imp
