"""The declared column types of every stored table, so all parts of a table share one schema.

A table is written in parts (a part per batch of records); were each part's types inferred from its own rows, a
part whose `first_byte_ns` holds a null would store it as double and the next as int64, and a part whose
`finish_reason` is all null would store a null column: pandas, pyarrow.dataset, DuckDB and Polars then refuse to
read the parts as one table. `harness.store.write_part` writes every part of a declared table with its declared
types: nanosecond stamps and counts as nullable int64, text as string, even in a part where they are all null.

Types: "int64", "float64", "bool", "string", "list<int64>". `schema_version` and `run_id` are the store's own.
A column a writer adds to a declared table must be declared here first (the store refuses it otherwise), except in
the microbenchmark tables, whose declaration is their required columns (OPEN_TABLES).
"""

from __future__ import annotations

from typing import Any

from harness.errors import HarnessError
from harness.records import TABLE_COLUMNS

I, F, B, S, LI = "int64", "float64", "bool", "string", "list<int64>"

# per-request records of a load run (workloads/records.py builds them; its RECORD_COLUMNS is this table's order)
REQUESTS: dict[str, str] = {
    "request_index": I, "session_id": I, "turn": I, "worker_index": I, "api": S,
    "intended_ns": I, "sent_ns": I, "written_ns": I, "first_byte_ns": I, "first_token_ns": I, "last_byte_ns": I,
    "chunk_ns": LI, "status": I, "error_class": S, "error_detail": S, "prompt_tokens_target": I,
    "max_tokens": I, "prompt_tokens_usage": I, "output_tokens_usage": I, "output_tokens_chunks": I,
    "token_count_mismatch": B, "usage_missing": B, "finish_reason": S, "response_id": S,
    "ttft_s": F, "ttft_from_intended_s": F, "e2e_s": F, "e2e_from_intended_s": F, "tpot_s": F, "itl_mean_s": F,
    "schedule_lag_s": F, "body_bytes": I, "body_reads": I, "ttft_from_written_s": F,
    "engine_prompt_ms": F, "engine_prompt_n": I, "engine_predicted_ms": F, "engine_predicted_n": I,
    "ttft_minus_engine_prompt_s": F, "engine_output_tokens_diff": I,
    "reused_prefix_tokens": I, "cached_tokens_usage": I,
}

_MICRO_KINDS = {"f": F, "i": I, "O": S, "b": B}

TABLE_SCHEMAS: dict[str, dict[str, str]] = {
    "requests": REQUESTS,
    # the workload artifact's rows without the prompt text (workloads/artifact.py COLUMNS)
    "workload": {"request_index": I, "session_id": I, "turn": I, "intended_s": F, "pause_before_s": F, "api": S,
                 "prompt_tokens_target": I, "max_tokens": I, "prefix_group": I, "prefix_tokens": I},
    # Prometheus samples scraped during a load run (one row per sample, or one per failed scrape with `error`)
    "server_metrics": {"t_s": F, "role": S, "url": S, "metric": S, "value": F, "error": S},
    # the simulated target's own token emit times (same host clock as the records)
    "target_emits": {"response_id": S, "token_index": I, "emit_ns": I, "scheduled_ns": I},
    # an engine's /metrics at each phase of a session, and its time-to-ready
    "engine_metrics": {"t_s": F, "phase": S, "name": S, "labels_json": S, "value": F, "type": S, "role": S},
    "engine_startup": {"config": S, "engine": S, "mode": S, "engine_version": S, "healthy_s": F, "first_request_s": F,
                       "ready_s": F, "healthy_to_first_request_s": F, "probe_latency_s": F, "probe_prompt_tokens": I,
                       "probe_completion_tokens": I},
    **{name: {c: _MICRO_KINDS[k] for c, k in cols.items()} for name, cols in TABLE_COLUMNS.items()},
}

STORE_COLUMNS = {"schema_version": I, "run_id": S}
# tables whose declaration is their required columns (harness.records.TABLE_COLUMNS, checked by validate_table): a
# microbenchmark may add its own columns (clocks, kernel names), which keep the types inferred from their values
OPEN_TABLES = frozenset(TABLE_COLUMNS)


def _arrow_type(name: str) -> Any:
    # lazy: pyarrow adds ~25 ms to every verb's start-up; only a table write uses it
    import pyarrow as pa

    return {I: pa.int64(), F: pa.float64(), B: pa.bool_(), S: pa.string(), LI: pa.list_(pa.int64())}[name]


def arrow_schema(table: str) -> Any:
    """The pyarrow schema of a declared table (its columns, then schema_version and run_id), or None."""
    # lazy: pyarrow adds ~25 ms to every verb's start-up; only a table write uses it
    import pyarrow as pa

    cols = TABLE_SCHEMAS.get(table)
    if cols is None:
        return None
    return pa.schema([pa.field(c, _arrow_type(t), nullable=True) for c, t in {**cols, **STORE_COLUMNS}.items()])


def to_arrow(table: str, df: Any, source: str) -> Any:
    """The DataFrame as a pyarrow Table with `table`'s declared schema (a declared column it lacks is all null); an
    undeclared table keeps its inferred types. A column not declared, or a value that does not fit its type (a
    fractional count), is a HarnessError naming the column."""
    # lazy: pyarrow adds ~25 ms to every verb's start-up; only a table write uses it
    import pyarrow as pa

    schema = arrow_schema(table)
    if schema is None:
        return pa.Table.from_pandas(df, preserve_index=False)
    extra = [c for c in df.columns if c not in schema.names]
    if extra and table in OPEN_TABLES:
        fixed = to_arrow(table, df.drop(columns=extra), source)
        rest = pa.Table.from_pandas(df[extra], preserve_index=False)
        return pa.Table.from_arrays([*fixed.columns, *rest.columns], names=[*fixed.column_names, *rest.column_names])
    if extra:
        raise HarnessError(f"{source}: column(s) {extra} are not in table {table!r}'s declared schema; declare them in "
                           "harness/table_schemas.py so every part of the table has the same types.")
    arrays = []
    for field in schema:
        if field.name not in df.columns:
            arrays.append(pa.nulls(len(df), type=field.type))
            continue
        try:
            arrays.append(pa.array(df[field.name], type=field.type, from_pandas=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise HarnessError(f"{source}: column {field.name!r} does not fit its declared type {field.type} "
                               f"({str(exc).splitlines()[0][:160]}); fix the writer or the declaration.") from None
    return pa.Table.from_arrays(arrays, schema=schema)
