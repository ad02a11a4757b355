"""Kernel tables (harness.model.kernel_tables) as a compact JSON-able dict: how a calibration database entry carries them.

An entry of calibration/gpus/ holds the measured kernel grids the step model interpolates (GEMM by dtype over
(M, N, K), decode and prefill attention per shape over (batch, length), all-reduce per card count over bytes, fused MoE
per layer shape over tokens, MLA per heads), so the default `--calibration auto` predicts with the same tables as
`--calibration aic` without aiconfigurator installed. Every measured grid point is kept (no subsampling: a GEMM's
latency jumps where the kernel's tile choice changes, and a dropped point would move the interpolation there).

Layout (GRID_FORMAT): `blocks`, one per operator and shared axes, each with the operator (`op`), the fields of its
keys (`key_fields`) and one row per key (`keys`), the grid's `axes` and `extrapolate` flags, and `log_latency`: the
natural log of each latency in seconds rounded to LOG_STEP (at most 0.05 % off a measured latency — far below the
run-to-run noise of a kernel timing), as little-endian int32 differenced along the grid's first axis, its bytes
shuffled (all first bytes, then all second ...), xz-compressed (lzma) and base64-encoded. Decoding is the exact
inverse of that rounding: the tables read back are the tables written, to LOG_STEP.

Errors are ValueError naming the block and field (the calibration file's reader adds the path and the fix).
"""

from __future__ import annotations

import base64
import binascii
import lzma
from dataclasses import astuple, fields
from typing import Any

import numpy as np

from harness.model.kernel_tables import AttentionKey, GridTable, KernelTables, MoeKey

GRID_FORMAT = "kernel-grids/1"
LOG_STEP = 1e-3
ENCODING = ("round(ln(latency_s) / log_step) as little-endian int32, differenced along the grid's first axis, bytes "
            "shuffled, xz-compressed, base64")

# op -> (KernelTables field, key fields, key maker); the order blocks are written in
_ATTN_FIELDS = tuple(f.name for f in fields(AttentionKey))
_MOE_FIELDS = tuple(f.name for f in fields(MoeKey))
OPS: dict[str, tuple[tuple[str, ...], Any]] = {
    "gemm": (("kernel",), lambda row: str(row[0])),
    "decode_attention": (_ATTN_FIELDS, lambda row: AttentionKey(int(row[0]), int(row[1]), int(row[2]), str(row[3]), int(row[4]))),
    "prefill_attention": (_ATTN_FIELDS, lambda row: AttentionKey(int(row[0]), int(row[1]), int(row[2]), str(row[3]), int(row[4]))),
    "allreduce": (("cards",), lambda row: int(row[0])),
    "moe": (_MOE_FIELDS, lambda row: MoeKey(str(row[0]), *(int(x) for x in row[1:]))),
    "mla_decode": (("heads",), lambda row: int(row[0])),
    "mla_prefill": (("heads",), lambda row: int(row[0])),
}


def _key_row(key: Any) -> list[Any]:
    return list(astuple(key)) if isinstance(key, (AttentionKey, MoeKey)) else [key]


def _encode(stack: np.ndarray) -> str:
    q = np.round(stack / LOG_STEP).astype(np.int64)
    d = np.diff(q, axis=1, prepend=0) if q.ndim > 1 else q
    if np.abs(d).max(initial=0) >= 2**31:
        raise ValueError("a latency is outside what a kernel grid can hold")
    raw = d.astype("<i4").tobytes()
    shuffled = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 4).T.tobytes()
    return base64.b64encode(lzma.compress(shuffled, preset=9 | lzma.PRESET_EXTREME)).decode("ascii")


def _decode(text: Any, shape: tuple[int, ...]) -> np.ndarray:
    if not isinstance(text, str):
        raise ValueError(f"log_latency must be a base64 string, got {type(text).__name__}")
    try:
        raw = lzma.decompress(base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, lzma.LZMAError, UnicodeEncodeError, ValueError) as exc:
        raise ValueError(f"log_latency is not {ENCODING} ({type(exc).__name__}: {exc})") from None
    n = int(np.prod(shape))
    if len(raw) != 4 * n:
        raise ValueError(f"log_latency holds {len(raw) // 4} values; its keys and axes need {n}")
    d = np.frombuffer(raw, dtype=np.uint8).reshape(4, n).T.copy().view("<i4").reshape(shape).astype(np.int64)
    q = np.cumsum(d, axis=1) if d.ndim > 1 else d
    return q.astype(float) * LOG_STEP


_ENCODED = "codec:encoded"  # KernelTables._memo key of the dict the tables were read from (encoded once)


def tables_to_dict(t: KernelTables) -> dict[str, Any]:
    """`t` as the dict a database entry stores (see the module docstring)."""
    done = t._memo.get(_ENCODED)
    if done is not None:
        return done
    blocks = []
    for op, (key_fields, _) in OPS.items():
        groups: dict[tuple, list[tuple[Any, GridTable]]] = {}
        for key, grid in getattr(t, op).items():
            groups.setdefault((grid.axes, tuple(grid.extrapolate)), []).append((key, grid))
        for (axes, extrapolate), items in groups.items():
            items.sort(key=lambda kg: [str(x) for x in _key_row(kg[0])])
            blocks.append({
                "op": op, "key_fields": list(key_fields), "keys": [_key_row(k) for k, _ in items],
                "axes": [[int(x) if float(x).is_integer() else float(x) for x in a] for a in axes],
                "extrapolate": list(extrapolate),
                "log_latency": _encode(np.stack([g.log_latency for _, g in items])),
            })
    out = {"format": GRID_FORMAT, "gpu": t.gpu, "source": t.source, "smallest_kernel_s": t.smallest_kernel_s,
           "notes": list(t.notes), "log_step": LOG_STEP, "encoding": ENCODING, "blocks": blocks}
    t._memo[_ENCODED] = out
    return out


def tables_from_dict(d: Any) -> KernelTables:
    """The tables `tables_to_dict` wrote; a malformed dict is a ValueError naming the block and the field."""
    if not isinstance(d, dict):
        raise ValueError(f"must be an object {{format, blocks, ...}}, got {type(d).__name__}")
    if d.get("format") != GRID_FORMAT:
        raise ValueError(f"format {d.get('format')!r} is not {GRID_FORMAT!r} (written by a newer harness? upgrade it)")
    if d.get("log_step") != LOG_STEP:
        raise ValueError(f"log_step {d.get('log_step')!r}: this harness reads grids of log_step {LOG_STEP}")
    if not isinstance(d.get("gpu"), str) or not isinstance(d.get("source"), str):
        raise ValueError("gpu and source must be strings")
    small = d.get("smallest_kernel_s")
    if small is not None and (isinstance(small, bool) or not isinstance(small, (int, float)) or not small > 0):
        raise ValueError(f"smallest_kernel_s must be a positive number of seconds or null, got {small!r}")
    blocks = d.get("blocks")
    if not isinstance(blocks, list):
        raise ValueError("blocks must be a list")
    out: dict[str, dict[Any, GridTable]] = {op: {} for op in OPS}
    for i, b in enumerate(blocks):
        try:
            _read_block(b, out)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            what = f"({b.get('op')})" if isinstance(b, dict) else ""
            msg = f"field {exc.args[0]!r} is missing" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"blocks[{i}] {what}: {msg}".replace(" :", ":")) from None
    t = KernelTables(d["gpu"], d["source"], out["gemm"], out["decode_attention"], out["prefill_attention"],
                     out["allreduce"], out["moe"], out["mla_decode"], out["mla_prefill"],
                     None if small is None else float(small), tuple(str(n) for n in d.get("notes") or ()))
    t._memo[_ENCODED] = tables_to_dict(t) if d.get("encoding") != ENCODING else d
    return t


def _read_block(b: Any, out: dict[str, dict[Any, GridTable]]) -> None:
    if not isinstance(b, dict):
        raise ValueError("must be an object")
    op = b["op"]
    if op not in OPS:
        raise ValueError(f"op {op!r} is not one of {', '.join(OPS)}")
    key_fields, make = OPS[op]
    if list(b["key_fields"]) != list(key_fields):
        raise ValueError(f"key_fields {b['key_fields']!r}: {op} keys are {list(key_fields)}")
    axes = tuple(tuple(float(x) for x in a) for a in b["axes"])
    if not axes or any(len(a) == 0 or any(not (x > 0 and np.isfinite(x)) for x in a) or list(a) != sorted(set(a))
                       for a in axes):
        raise ValueError("axes must be non-empty lists of increasing positive numbers")
    keys = [make(row) for row in b["keys"]]
    if not keys:
        raise ValueError("keys is empty")
    grids = _decode(b["log_latency"], (len(keys), *(len(a) for a in axes)))
    if not np.all(np.isfinite(grids)):
        raise ValueError("log_latency holds a value that is not finite")
    extrapolate = tuple(bool(x) for x in b.get("extrapolate") or ())
    for k, g in zip(keys, grids):
        if k in out[op]:
            raise ValueError(f"key {_key_row(k)} appears twice")
        out[op][k] = GridTable(axes, np.ascontiguousarray(g), extrapolate)
