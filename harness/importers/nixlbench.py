"""nixlbench (ai-dynamo/nixl benchmark/nixlbench) stdout -> transfer cases for the α–β fit of a NIXL link.

Format, as the tool prints it (src/utils/utils.cpp): the configuration block (printConfig: a line of 160
'*', "NIXLBench Configuration", then `printOption` lines `std::setw(60) << desc << ": " << value`, e.g.
"Backend (--backend=[UCX,...])" and "Op type (--op_type=[READ,WRITE])"), then the table of
printStatsHeader / printStats: "Block Size (B)", "Batch Size", "B/W (GB/Sec)", ["Aggregate B/W (GB/Sec)",
"Network Util (%)" with pairwise SG on more than 2 ranks], "Avg Lat. (us)", "Avg Prep (us)", "P99 Prep (us)",
"Avg Post (us)", "P99 Post (us)", "Avg Tx (us)", "P99 Tx (us)", one row per block and batch size.

B/W is decimal GB/s: bytes / 1e9 over the total duration. The time of one block is taken as
block_size / B/W (equal to the tool's Avg Lat. for one thread and one device), so a batch of blocks is a
pipelined stream; each batch size is its own link key (method "nixlbench-batchN"), and the link is named
by the backend ("nixl-ucx"), the direction by the op type and the memory by the segment types
("vram->vram").
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.errors import HarnessError
from harness.importers import Imported, external_measurement

TOOL = "nixlbench"
_OPTION = re.compile(r"^(.*?\(--[^)]*\))\s*: (.*)$")
_NUM = re.compile(r"^-?\d+(\.\d+)?$")


def parse(path: str | Path) -> Imported:
    from microbench.case import CaseResult, Peak, Work
    from microbench.params import TransferParams

    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"{TOOL} import: file {str(p)!r} does not exist; give nixlbench's saved stdout.")
    lines = p.read_text(errors="replace").splitlines()
    opts: dict[str, str] = {}
    header: list[str] | None = None
    rows: list[list[str]] = []
    for line in lines:
        m = _OPTION.match(line)
        if m and "(--" in m.group(1):
            opts[m.group(1).split("(--")[1].split("=")[0].strip(") ")] = m.group(2).strip()
            continue
        if line.startswith("Block Size (B)"):
            header = [h for h in re.split(r"\s{2,}", line.strip()) if h]
            continue
        parts = line.split()
        if header is not None and parts and all(_NUM.match(x) for x in parts) and len(parts) == len(header):
            rows.append(parts)
    if header is None:
        raise HarnessError(f"{TOOL} import: {p} has no result table (a line starting \"Block Size (B)\"); it is not "
                           "nixlbench's stdout.")
    if not rows:
        raise HarnessError(f"{TOOL} import: {p} has a result header but no rows; the run did not finish.")
    col = {h: i for i, h in enumerate(header)}
    for need in ("Block Size (B)", "Batch Size", "B/W (GB/Sec)", "Avg Lat. (us)"):
        if need not in col:
            raise HarnessError(f"{TOOL} import: column {need!r} missing from the header {header}; unsupported nixlbench "
                               "version.")
    backend = opts.get("backend", "unknown")
    op = opts.get("op_type", "WRITE").lower()
    memory = f"{opts.get('initiator_seg_type', '?').lower()}->{opts.get('target_seg_type', '?').lower()}"
    imp = Imported(TOOL, facts={"options": opts, "columns": header})
    peak = Peak(None, None, "nixlbench import: no link spec applied")
    for r in rows:
        block, batch = int(r[col["Block Size (B)"]]), int(r[col["Batch Size"]])
        gbps = float(r[col["B/W (GB/Sec)"]])
        extra = {"tool": TOOL, "backend": backend, "batch_size": batch, "bw_bytes_per_s": gbps * 1e9,
                 "scheme": opts.get("scheme"), "mode": opts.get("mode"), "threads": opts.get("num_threads"),
                 "num_iter": opts.get("num_iter")}
        for h, i in col.items():
            if h.endswith("(us)"):
                extra[h.replace(" (us)", "").replace(".", "").replace(" ", "_").lower() + "_s"] = float(r[i]) * 1e-6
        if "Aggregate B/W (GB/Sec)" in col:
            extra["aggregate_bw_bytes_per_s"] = float(r[col["Aggregate B/W (GB/Sec)"]]) * 1e9
        case = f"{backend.lower()}-{op}-{memory.replace('->', '-')}-b{block}-batch{batch}"
        if gbps <= 0:
            from microbench.case import Skip

            imp.skips.append(Skip("transfer", case, f"nixlbench reported B/W {gbps} GB/s: no time can be derived"))
            continue
        params = TransferParams(link=f"nixl-{backend.lower()}", direction=op, size_bytes=block, bytes_counted="once",
                                memory=memory, method=f"nixlbench-batch{batch}", extra=extra).to_params()
        imp.cases.append(CaseResult(
            "transfer", case, TOOL, f"nixl-{backend.lower()}", "uint8", params, Work(useful_bytes=float(block)),
            external_measurement(TOOL, block / (gbps * 1e9)), peak,
            notes=("time = block size / B/W (decimal GB/s): per block in a batch of "
                   f"{batch}; nixlbench's Avg Lat. {float(r[col['Avg Lat. (us)']]):g} µs kept in params",), source=TOOL))
    return imp
