"""perftest (linux-rdma/perftest: ib_write_bw, ib_read_bw, ib_send_bw) -> transfer cases for the RDMA α–β fit.

Two formats, both as the tool writes them (src/perftest_parameters.c, perftest_parameters.h):

- text (stdout): a banner ("                    RDMA_Write BW Test", " Dual-port : OFF\t\tDevice : mlx5_0",
  ...), then the header RESULT_FMT " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]
  MsgRate[Mpps]" (RESULT_FMT_G with [Gb/sec] under --report_gbits) and one REPORT_FMT row per message
  size (all sizes 2 B … 8 MiB with -a);
- JSON (--out_json [--out_json_file=F]): {"test_info": {"test": "RDMA_Write_BW_Test", "Device", "Link_type",
  ...}, "results": {"MsgSize", "n_iterations", "BW_peak", "BW_average", "MsgRate"}}. perftest reopens the
  file with O_TRUNC for every size, so one file holds one size: give a directory of such files (one per
  `-s SIZE` run). The JSON does not say the unit: perftest's default is MiB/s (2^20 bytes/s, format_factor
  0x100000); pass units="Gb/s" (10^9/8 bytes/s) for runs made with --report_gbits.

A bandwidth test keeps tx_depth messages in flight, so size / BW average is the time per message in a
pipelined stream: its α is the per-message overhead of a stream, not the one-message latency of
ib_write_lat; each case says so. Each size becomes a TransferParams point (link "rdma", direction the
verb, method "perftest-bw"); bidirectional runs are recorded but are no point of the one-way fit.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.importers import Imported, external_measurement

TOOL = "perftest"
UNITS_BYTES_PER_S = {"MiB/s": float(2**20), "Gb/s": 1e9 / 8}
_VERBS = {"RDMA_Write": "write", "RDMA_Write_imm": "write", "RDMA_Read": "read", "Send": "send", "Send_imm": "send",
          "Atomic": "atomic"}
_TITLE = re.compile(r"^\s+(Send|Send_imm|RDMA_Write|RDMA_Write_imm|RDMA_Read|Atomic)\s+(.*?)\bBW\s+Test\s*$")
_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(MiB|Gb)/sec\]\s+BW average\[(MiB|Gb)/sec\]")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)")
_FIELD = re.compile(r"^\s*(Device|Link type|Transport type|Connection type|Number of qps|TX depth|Mtu)\s*:\s*([^\t]+?)\s*$")


def parse(path: str | Path, units: str | None = None) -> Imported:
    p = Path(path)
    if not p.exists():
        raise HarnessError(f"{TOOL} import: {str(p)!r} does not exist; give ib_write_bw's saved stdout, its --out_json "
                           "file, or a directory of --out_json files (one per message size).")
    if units is not None and units not in UNITS_BYTES_PER_S:
        raise HarnessError(f"{TOOL} import: units {units!r} unknown; give one of {', '.join(UNITS_BYTES_PER_S)}.")
    files = sorted(p.glob("*.json")) if p.is_dir() else [p]
    if not files:
        raise HarnessError(f"{TOOL} import: {p} holds no *.json file; give the --out_json files perftest wrote.")
    imp = Imported(TOOL, facts={"files": [str(f) for f in files]})
    for f in files:
        text = f.read_text(errors="replace")
        if text.lstrip().startswith("{"):
            _parse_json(f, text, units, imp)
        else:
            _parse_text(f, text, units, imp)
    if not imp.cases:
        raise HarnessError(f"{TOOL} import: no bandwidth rows found in {p}; give the output of ib_write_bw / ib_read_bw "
                           "(a latency test such as ib_write_lat reports no bandwidth).")
    return imp


def _parse_json(f: Path, text: str, units: str | None, imp: Imported) -> None:
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HarnessError(f"{TOOL} import: {f} is not valid JSON ({exc}); give the file --out_json wrote.") from None
    info, res = d.get("test_info"), d.get("results")
    if not isinstance(info, dict) or not isinstance(res, dict) or "BW_average" not in res or "MsgSize" not in res:
        raise HarnessError(f"{TOOL} import: {f} lacks test_info or results.BW_average/MsgSize; it is not the --out_json "
                           "of a perftest bandwidth test.")
    test = str(info.get("test", ""))
    verb = next((v for k, v in sorted(_VERBS.items(), key=lambda kv: -len(kv[0])) if test.startswith(k + "_")), None)
    if verb is None or "_BW_" not in test:
        raise HarnessError(f"{TOOL} import: {f}: test {test!r} is not a bandwidth test (ib_write_bw, ib_read_bw, ib_send_bw).")
    u = units or "MiB/s"
    facts = {"device": info.get("Device"), "link_type": info.get("Link_type"), "transport": info.get("Transport_type"),
             "connection": info.get("Connection_type"), "qps": info.get("Number_of_qps"), "tx_depth": info.get("TX_depth"),
             "mtu": info.get("Mtu"), "cuda_device": info.get("cuda_device")}
    unit_note = (f"BW unit {u}" + ("" if units else " assumed (perftest's default; the JSON does not say; import "
                                                     "--report_gbits runs with units Gb/s)"))
    _add(imp, verb, "Bidirectional" in test, int(res["MsgSize"]), int(res.get("n_iterations", 0)),
         float(res.get("BW_peak", "nan")), float(res["BW_average"]), float(res.get("MsgRate", "nan")), u, facts,
         (unit_note, f"from {f.name} (--out_json)"))


def _parse_text(f: Path, text: str, units: str | None, imp: Imported) -> None:
    verb, bidir, unit, facts = None, False, None, {}
    rows = 0
    for line in text.splitlines():
        m = _TITLE.match(line)
        if m:
            verb, bidir = _VERBS[m.group(1)], "Bidirectional" in m.group(2)
            continue
        for part in line.split("\t"):
            fm = _FIELD.match(part)
            if fm:
                facts[fm.group(1).lower().replace(" ", "_")] = fm.group(2).strip()
        h = _HEADER.search(line)
        if h:
            unit = "MiB/s" if h.group(2) == "MiB" else "Gb/s"
            continue
        r = _ROW.match(line)
        if r and unit is not None:
            if verb is None:
                raise HarnessError(f"{TOOL} import: {f}: result rows without the test banner (\"RDMA_Write BW Test\"); "
                                   "give the whole stdout of the run.")
            if units is not None and units != unit:
                raise HarnessError(f"{TOOL} import: {f} reports {unit} but units {units!r} was given; leave units out for "
                                   "text output (its header names the unit).")
            size, iters, peak, avg, rate = r.groups()
            _add(imp, verb, bidir, int(size), int(iters), float(peak), float(avg), float(rate), unit, dict(facts),
                 (f"BW unit {unit} (from the header)", f"from {f.name} (text output)"))
            rows += 1
    if unit is None and rows == 0:
        raise HarnessError(f"{TOOL} import: {f} has no result header (\" #bytes #iterations BW peak[MiB/sec] ...\"); it is "
                           "not the stdout of a perftest bandwidth test.")


def _add(imp: Imported, verb: str, bidir: bool, size: int, iters: int, peak: float, avg: float, rate: float, unit: str,
         facts: dict[str, Any], notes: tuple[str, ...]) -> None:
    from microbench.case import CaseResult, Peak, Skip, Work
    from microbench.params import TransferParams

    dev = str(facts.get("device") or "rdma")
    imp.facts.setdefault("devices", [])
    if dev not in imp.facts["devices"]:
        imp.facts["devices"].append(dev)
    case = f"ib_{verb}_bw{'-bidir' if bidir else ''}-{size}"
    bw = avg * UNITS_BYTES_PER_S[unit]
    if not bw > 0:
        imp.skips.append(Skip("transfer", case, f"perftest reported BW average {avg!r} {unit}: no time can be derived"))
        return
    params = TransferParams(
        link="rdma", direction=verb, size_bytes=size, bytes_counted="once", method="perftest-bw", bidirectional=bidir,
        extra={"tool": TOOL, "iterations": iters, "bw_average_bytes_per_s": bw,
               "bw_peak_bytes_per_s": peak * UNITS_BYTES_PER_S[unit], "msg_rate_per_s": rate * 1e6,
               "reported_unit": unit, **{k: v for k, v in facts.items() if v is not None}},
    ).to_params()
    imp.cases.append(CaseResult(
        "transfer", case, TOOL, dev, "uint8", params, Work(useful_bytes=float(size) * (2 if bidir else 1)),
        external_measurement(TOOL, size * (2 if bidir else 1) / bw, n=max(iters, 1)),  # bidirectional BW sums both ways
        Peak(None, None, "perftest import: no link spec applied"),
        notes=("time = size / BW average: per message in a pipelined stream (tx_depth in flight), not one-message "
               "latency", *notes), source=TOOL))
