"""test-backend-ops: the matrix multiplications of the model's own graph, timed per weight type and shape.

1. `test-export-graph-ops -m MODEL -c CTX -b T -ub T -np 1 -t THREADS -o FILE` writes the unique ops of
   the model's prefill graph at T tokens and of its one-token decode graph (op, output type and
   shape, op params, each source's type, shape and strides: tests/test-export-graph-ops.cpp), for
   each token count T of the sweep; the files are concatenated.
2. `test-backend-ops perf -b CPU -o MUL_MAT --test-file FILE --output sql` builds each MUL_MAT as a
   graph, repeats it until ≥ 1 s has passed and reports the mean time per run (`time_us`, `n_runs`)
   as one SQL INSERT per op; the SQL is read with sqlite3. The CPU backend runs with
   max(1, hardware threads / 2) threads (test-backend-ops.cpp sets it; there is no flag), recorded
   in every case's params as `threads`.

A MUL_MAT multiplies src0 [K, N] (the weight, in its GGUF type — Q4_K, Q6_K, Q8_0 … — or the f16
KV cache for attention) by src1 [K, M] (f32 activations, quantized to the kernel's dot type inside
the op, so that cost is in the time) into [N, M]. Counted work: useful_flops = 2·K·N·M (·batch
dims), useful_bytes = bytes of src0 + src1 + output; the weights are reused across the repeated
runs (warm cache), as a decode step re-reads them on a host whose LLC holds the model.

Cases (suite "llama_cpp_ops"): `<node name>-<type>-k<K>-n<N>-m<M>`, dtype = src0's ggml type, family
ggml-<type>-cpu.
"""

from __future__ import annotations

import os
import re
import sqlite3
from typing import Any, Sequence

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from harness.calibration.family import ggml_family
from harness.errors import HarnessError
from microbench.llama_cpp._cases import case

TOOL = "test-backend-ops"
EXPORT_TOOL = "test-export-graph-ops"
SUITE = "llama_cpp_ops"
_SRC = re.compile(r"([A-Za-z0-9_]+)\[(-?\d+),(-?\d+),(-?\d+),(-?\d+)\](?:nb\[[\d,]+\])?")


def export_args(model: str, tokens: int, threads: int, out_file: str, ctx: int | None = None) -> list[str]:
    c = max(ctx or 0, tokens, 256)
    return ["-m", model, "-c", str(c), "-b", str(tokens), "-ub", str(tokens), "-np", "1", "-t", str(threads), "-o", out_file]


def prefill_logits_line(line: str, max_tokens: int = 8) -> bool:
    """An exported op computing logits for more than `max_tokens` tokens: the graph reserve's prefill computes
    every token's logits, the engine only the last one's, so that op is not one the engine runs (and it is the
    slowest of all: 2·V·H·T FLOPs)."""
    f = line.split()
    try:
        return len(f) > 4 and f[-1].startswith("result_output") and int(f[3]) > max_tokens
    except ValueError:
        return False


def perf_args(test_file: str, op: str = "MUL_MAT", backend: str = "CPU") -> list[str]:
    return ["perf", "-b", backend, "-o", op, "--test-file", test_file, "--output", "sql"]


def backend_threads() -> int:
    """The thread count test-backend-ops gives the CPU backend: max(1, hardware_concurrency / 2)."""
    return max(1, (os.cpu_count() or 1) // 2)


def parse_sql(text: str) -> list[dict[str, Any]]:
    """The INSERT rows of `--output sql`, read into an in-memory sqlite database; perf rows only."""
    stmts = "\n".join(ln for ln in text.splitlines() if ln.startswith(("CREATE TABLE", "  ", ");", "INSERT INTO")))
    if "INSERT INTO test_backend_ops" not in stmts:
        raise HarnessError(f"{TOOL}: no result rows in the output; run it with `--output sql` (and `perf -b CPU`, "
                           "which the default skips).")
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(stmts)
        cur = db.execute("SELECT * FROM test_backend_ops")
        cols = [c[0] for c in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    except sqlite3.Error as exc:
        raise HarnessError(f"{TOOL}: the SQL output could not be read ({exc}); unsupported llama.cpp version?") from None
    finally:
        db.close()
    return [r for r in rows if r.get("test_mode") == "perf"]


def parse_op_params(s: str) -> dict[str, Any]:
    """`name=Qcur-0,type=f32,ne=[1536,512,1,1],op_params=[…],sources=[q4_K[640,1536,1,1],f32[640,512,1,1]]`."""
    out: dict[str, Any] = {}
    m = re.search(r"(?:^|,)name=([^,]+)", s)
    out["name"] = m.group(1) if m else ""
    m = re.search(r"(?:^|,)ne=\[(-?\d+),(-?\d+),(-?\d+),(-?\d+)\]", s)
    if not m:
        raise HarnessError(f"{TOOL}: op params without an output shape: {s[:160]!r}")
    out["ne"] = [int(x) for x in m.groups()]
    i = s.find("sources=")
    if i < 0:
        raise HarnessError(f"{TOOL}: op params without sources: {s[:160]!r}")
    out["sources"] = [{"type": t, "ne": [int(a), int(b), int(c), int(d)]} for t, a, b, c, d in _SRC.findall(s[i + len("sources="):])]
    if len(out["sources"]) < 2:
        raise HarnessError(f"{TOOL}: a MUL_MAT with fewer than two sources: {s[:160]!r}")
    return out


def type_bytes(ggml_type: str, n_elements: int) -> float:
    try:
        t = GGMLQuantizationType[ggml_type.upper()]
    except KeyError:
        return 4.0 * n_elements if ggml_type == "f32" else float("nan")
    block, size = GGML_QUANT_SIZES[t]
    return n_elements / block * size


def cases(outputs: Sequence[str], *, threads: int, command_lines: Sequence[str] = (), backend: str = "cpu") -> list:
    """One case per MUL_MAT shape; repeated tool runs of the same shape are its samples. `backend`: the ggml backend
    the rows were timed on ("cpu", or "cuda" for `-b CUDA0`), which names the cases' family and device."""
    groups: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for text in outputs:
        for r in parse_sql(text):
            if r.get("op_name") != "MUL_MAT" or not r.get("supported"):
                continue
            p = parse_op_params(str(r["op_params"]))
            s0, s1 = p["sources"][0], p["sources"][1]
            k, n, m = s0["ne"][0], s0["ne"][1], s1["ne"][1]
            bat = s1["ne"][2] * s1["ne"][3]
            key = f"{p['name'] or 'mul_mat'}-{s0['type']}-k{k}-n{n}-m{m}" + (f"x{bat}" if bat > 1 else "")
            groups.setdefault(key, []).append((r, p))
    out = []
    for key, items in sorted(groups.items()):
        r0, p = items[0]
        s0, s1 = p["sources"][0], p["sources"][1]
        k, n, m = s0["ne"][0], s0["ne"][1], s1["ne"][1]
        batch0, batch1 = s0["ne"][2] * s0["ne"][3], s1["ne"][2] * s1["ne"][3]  # src0 broadcast over src1's batch dims
        flops = 2.0 * k * n * m * batch1
        nel0 = k * n * batch0
        out_el = 1
        for x in p["ne"]:
            out_el *= x
        nbytes = type_bytes(s0["type"], nel0) + 4.0 * k * m * batch1 + 4.0 * out_el
        role = "weights" if batch0 == 1 and s0["type"] not in ("f32",) and not p["name"].startswith(("kq", "kqv")) else "attention"
        params = {"tool": TOOL, "family": ggml_family(s0["type"], backend), "op": "MUL_MAT", "node": p["name"],
                  "weight_type": s0["type"], "k": k, "n": n, "tokens": m, "src0_ne": s0["ne"], "src1_ne": s1["ne"],
                  "out_ne": p["ne"], "role": role, "threads": threads, "backend": backend,
                  "n_runs": [int(r["n_runs"]) for r, _ in items], "backend_name": r0.get("backend_name"),
                  "device_description": r0.get("device_description"), "build_commit": r0.get("build_commit"),
                  "command_lines": list(command_lines), "time_is": "mean over the tool's n_runs (>= 1 s of runs)"}
        out.append(case(SUITE, key, TOOL, s0["type"], params, [float(r["time_us"]) * 1e-6 for r, _ in items],
                        flops, nbytes if nbytes == nbytes else 0.0))
    return out
