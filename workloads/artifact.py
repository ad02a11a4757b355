"""Workload artifacts: a request list with its intended send times, stored as parquet with a content hash.

One row per request: request_index, session_id, turn, intended_s (turn 0; later turns follow the
previous turn's end plus pause_before_s), pause_before_s, api, prompt, prompt_tokens_target,
max_tokens, prefix_group, prefix_tokens. The file's metadata holds the format version, the mix and
schedule that built it and the sha256 of the content; loading recomputes the hash and refuses a file
that does not match, so a replay is the same requests at the same instants against any target.
Format history (harness.versioning; newer files are refused): 1 — first version, the version stored as
`format_version`; 2 — the version field is `schema_version`, as in every harness file (nothing else changed;
the content hash is computed the same way, so a file keeps its name).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.versioning import load_versioned, stamp_version

ARTIFACT_FORMAT_VERSION = 2
ARTIFACT_UPGRADES = {1: lambda info: info}  # 1 -> 2: the version field renamed only
_HASH_SCHEME = 1  # the content-hash encoding; independent of the file's schema_version
COLUMNS = ("request_index", "session_id", "turn", "intended_s", "pause_before_s", "api", "prompt",
           "prompt_tokens_target", "max_tokens", "prefix_group", "prefix_tokens")
APIS = ("chat", "completions")


@dataclass(frozen=True)
class WorkloadArtifact:
    name: str
    rows: list[dict[str, Any]] = field(repr=False)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, r in enumerate(self.rows):
            missing = [c for c in COLUMNS if c not in r]
            if missing:
                raise HarnessError(f"workload {self.name!r} row {i}: missing {', '.join(missing)}.")
            if r["api"] not in APIS:
                raise HarnessError(f"workload {self.name!r} row {i}: api must be one of {APIS}, got {r['api']!r}.")
            if not isinstance(r["max_tokens"], int) or r["max_tokens"] < 1:
                raise HarnessError(f"workload {self.name!r} row {i}: max_tokens must be an integer >= 1, got {r['max_tokens']!r}.")

    @property
    def count(self) -> int:
        return len(self.rows)

    @property
    def content_hash(self) -> str:
        return content_hash(self.rows)

    @property
    def closed_loop(self) -> bool:
        """Built for a closed loop (each user sends when its previous request ended): no intended send times."""
        return (self.meta.get("schedule") or {}).get("kind") == "closed-loop"

    @property
    def span_s(self) -> float:
        """The schedule's length in seconds, as the load generator defines its measurement window: the schedule's
        `span_s`, else the last intended send of a first turn."""
        sched = self.meta.get("schedule") or {}
        return float(sched.get("span_s") or max((r["intended_s"] for r in self.rows if r["turn"] == 0), default=0.0))

    def sessions(self) -> list[list[dict[str, Any]]]:
        """Requests grouped by session, turns in order; sessions ordered by their first intended time."""
        by: dict[int, list[dict[str, Any]]] = {}
        for r in self.rows:
            by.setdefault(int(r["session_id"]), []).append(r)
        out = [sorted(v, key=lambda r: r["turn"]) for v in by.values()]
        return sorted(out, key=lambda s: (s[0]["intended_s"], s[0]["request_index"]))

    def summary(self) -> dict[str, Any]:
        """Light description (no prompt text) for manifests and reports."""
        n_in = [r["prompt_tokens_target"] for r in self.rows]
        n_out = [r["max_tokens"] for r in self.rows]
        return {"name": self.name, "requests": self.count, "sessions": len({r["session_id"] for r in self.rows}),
                "content_hash": self.content_hash, "schema_version": ARTIFACT_FORMAT_VERSION,
                "prompt_tokens_mean": sum(n_in) / len(n_in) if n_in else 0.0,
                "max_tokens_mean": sum(n_out) / len(n_out) if n_out else 0.0, **self.meta}

    def table_rows(self) -> list[dict[str, Any]]:
        """Rows without the prompt text (stored with each run)."""
        return [{k: v for k, v in r.items() if k != "prompt"} for r in self.rows]


def content_hash(rows: list[dict[str, Any]]) -> str:
    """sha256 over every column of every row in a canonical encoding (floats as repr, text as UTF-8)."""
    h = hashlib.sha256()
    h.update(f"workload-artifact-v{_HASH_SCHEME}\n".encode())
    for r in rows:
        for c in COLUMNS:
            v = r[c]
            if isinstance(v, float):
                v = "nan" if math.isnan(v) else repr(float(v))
            h.update(c.encode() + b"=" + str(v).encode("utf-8") + b"\x00")
        h.update(b"\x01")
    return h.hexdigest()


def save_artifact(art: WorkloadArtifact, directory: str | Path) -> Path:
    """Write `<name>-<hash12>.parquet` into `directory` (temporary name, then rename); returns the path."""
    # lazy: pyarrow.parquet adds ~50 ms to the start-up of bench-pd, engine, loop, sweep; only an artifact file uses it
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    digest = art.content_hash
    out = d / f"{art.name}-{digest[:12]}.parquet"
    if out.exists():
        return out  # same content, same name: already saved
    table = pa.Table.from_pylist([{c: r[c] for c in COLUMNS} for r in art.rows])
    meta = {"harness.workload": json.dumps(stamp_version({"name": art.name, "content_hash": digest, "meta": art.meta},
                                                        ARTIFACT_FORMAT_VERSION), default=str)}
    table = table.replace_schema_metadata(meta)
    tmp = d / f".{out.name}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, out)
    return out


def load_artifact(path: str | Path) -> WorkloadArtifact:
    """Read an artifact and check its content hash; a changed or newer file is refused."""
    # lazy: pyarrow.parquet adds ~50 ms to the start-up of bench-pd, engine, loop, sweep; only an artifact file uses it
    import pyarrow.parquet as pq

    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"workload artifact {str(p)!r} does not exist; build one with `harness bench-pd --mix ...` or workloads.mixes.")
    try:
        table = pq.read_table(p)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise HarnessError(f"{p} is not a readable parquet file ({exc}).") from None
    raw = (table.schema.metadata or {}).get(b"harness.workload")
    if raw is None:
        raise HarnessError(f"{p} has no harness.workload metadata; it is not a workload artifact.")
    try:
        info = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HarnessError(f"{p}: its harness.workload metadata is not valid JSON ({exc}); rebuild the artifact.") from None
    info = load_versioned(info, ARTIFACT_FORMAT_VERSION, ARTIFACT_UPGRADES, str(p), legacy_fields=("format_version",),
                          fix="rebuild the artifact", what="workload artifact's metadata")
    rows = table.to_pylist()
    if not isinstance(info.get("name"), str):
        raise HarnessError(f"{p}: its harness.workload metadata has no name; rebuild the artifact.")
    art = WorkloadArtifact(info["name"], rows, info.get("meta", {}))
    if art.content_hash != info.get("content_hash"):
        raise HarnessError(f"{p}: content hash {art.content_hash[:12]} does not match the recorded {str(info.get('content_hash'))[:12]}; "
                           "the file was changed after it was built. Rebuild it instead of editing it.")
    return art
