"""nvbandwidth `-j` JSON -> micro_cases: one case per (test, row, column) cell of each bandwidth matrix.

Format (NVIDIA/nvbandwidth json_output.cpp): {"nvbandwidth": {"CUDA Runtime Version", "Driver
Version", "git_version", "version", "testcases": [{"name", "status", "bandwidth_description",
"bandwidth_matrix": [[str GB/s | "N/A"]], "sum"}]}}. The tool reports bandwidth only; the case's
time is derived as buffer_bytes / bandwidth (buffer 512 MiB, the tool's default `-b`, unless the
file says otherwise) and the case says so. Waived or failed tests become skips with their status.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import HarnessError
from harness.importers import Imported, array, external_measurement, integer, load_json, number, require, table

TOOL = "nvbandwidth"
DEFAULT_BUFFER_BYTES = 512 * 2**20


def parse(path: str | Path, buffer_bytes: int | None = None) -> Imported:
    from microbench.case import CaseResult, Peak, Skip, Work

    root = table(require(load_json(path, TOOL), "nvbandwidth", "top level", TOOL), "nvbandwidth", "top level", TOOL)
    tests = array(require(root, "testcases", "nvbandwidth", TOOL), "testcases", "nvbandwidth", TOOL)
    file_mib = integer(root.get("bufferSize") or 0, "bufferSize", "nvbandwidth", TOOL)
    size = buffer_bytes or file_mib * 2**20 or DEFAULT_BUFFER_BYTES
    imp = Imported(TOOL, facts={"cuda_version": str(root.get("CUDA Runtime Version")), "driver": root.get("Driver Version"),
                                "tool_version": root.get("version") or root.get("git_version"), "buffer_bytes": size})
    peak = Peak(None, None, "nvbandwidth import: no link spec applied")
    for k, t0 in enumerate(tests):
        t = table(t0, f"testcases[{k}]", "nvbandwidth", TOOL)
        name = require(t, "name", "a testcase", TOOL)
        if not isinstance(name, str) or not name:
            raise HarnessError(f"{TOOL} import: testcases[{k}].name must be a non-empty string, got {name!r}.")
        if t.get("status") != "Passed":
            err = t.get("error")
            imp.skips.append(Skip("transfer", name, f"nvbandwidth status {t.get('status')!r}{': ' + str(err) if err else ''}"))
            continue
        matrix = array(require(t, "bandwidth_matrix", f"testcase {name!r}", TOOL), "bandwidth_matrix", f"testcase {name!r}", TOOL)
        for i, row in enumerate(matrix):
            for j, cell in enumerate(array(row, f"bandwidth_matrix[{i}]", f"testcase {name!r}", TOOL)):
                if cell in ("N/A", None, ""):
                    continue
                gbps = number(cell, f"bandwidth_matrix[{i}][{j}]", f"testcase {name!r}", TOOL)
                if gbps <= 0:
                    imp.skips.append(Skip("transfer", f"{name}-{i}-{j}", f"nvbandwidth reported {gbps:g} GB/s: no time to derive"))
                    continue
                m = external_measurement(TOOL, size / (gbps * 1e9))
                imp.cases.append(CaseResult(
                    "transfer", f"{name}-{i}-{j}", TOOL, f"row{i}-col{j}", "uint8",
                    {"test": name, "row": i, "column": j, "description": str(t.get("bandwidth_description", "")),
                     "reported_bandwidth_bytes_per_s": gbps * 1e9, "buffer_bytes": size},
                    Work(useful_bytes=float(size)), m, peak, notes=("time derived as buffer_bytes / reported bandwidth",), source=TOOL))
    return imp
