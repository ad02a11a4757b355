"""Per-request records of a load run: times relative to the run's t0, derived latencies, token counts.

Definitions (docs/loadgen.md maps them to vLLM, SGLang, guidellm and AIPerf names):
  ttft_s   first content event arrival − actual send (ttft_from_intended_s: − intended send; ttft_from_written_s:
           − the instant the request's last byte was handed to the kernel, written_ns)
  e2e_s    last body byte − actual send (e2e_from_intended_s: − intended send); for a failed request,
           the instant the failure was seen (a timeout's e2e is the timeout)
  itl      gaps between consecutive content events (kept whole in chunk_ns; itl_mean_s per request)
  tpot_s   (last content event − first content event) / (output tokens − 1), output tokens from
           server usage when present, else the content-event count
  schedule_lag_s  actual send − intended send (how far the client ran behind its schedule)
Token counts from usage and from content events are both kept; token_count_mismatch flags a
difference (a server that packs several tokens per event, or a usage bug).
Multi-turn sessions record reused_prefix_tokens (the prompt's prefix the session already sent or received) and
cached_tokens_usage (the engine's usage.prompt_tokens_details.cached_tokens), workloads.conversation.
Engines that stream their own timing (llama.cpp's "timings") are cross-checked per request:
  engine_prompt_ms / engine_prompt_n / engine_predicted_ms / engine_predicted_n  as the engine reported them
  ttft_minus_engine_prompt_s  client TTFT − engine prompt time: queueing, network and client overhead
  engine_output_tokens_diff   content events − engine predicted_n (0 when both agree)
"""

from __future__ import annotations

from typing import Any

from harness.table_schemas import REQUESTS

ERROR_DETAIL_MAX_CHARS = 300  # stored error details are cut to this, after any secret in them was masked

# the columns in order; their types are declared with the stored table (harness.table_schemas.REQUESTS)
RECORD_COLUMNS = tuple(REQUESTS)


def _num(d: dict | None, key: str) -> float | None:
    v = d.get(key) if d else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def mask_then_cut(text: str | None, secret: str | None, limit: int = ERROR_DETAIL_MAX_CHARS) -> str | None:
    """Mask every occurrence of `secret` first, then cut to `limit` characters: cutting first could leave part
    of a key that straddles the cut, which no later masking would recognise."""
    if not text:
        return text
    if secret:
        text = text.replace(secret, "***")
    return text[:limit]


def build_record(item: dict[str, Any], raw: dict[str, Any], *, t0_ns: int, intended_abs_ns: int, worker_index: int,
                 secret: str | None = None) -> dict[str, Any]:
    """Combine a workload row and stream_request's raw result into one record (times relative to t0).
    `secret` (the API key) is masked in the error detail before it is cut."""
    p = raw["parse"]
    sent = raw["sent_ns"]
    chunks = p.content_ns if p is not None else []
    n_chunks = len(chunks)
    o_usage = p.output_tokens_usage if p is not None else None
    first_tok = chunks[0] if chunks else None
    n_out = o_usage if isinstance(o_usage, int) and o_usage > 0 else n_chunks
    tpot = (chunks[-1] - chunks[0]) / 1e9 / (n_out - 1) if n_chunks >= 2 and n_out > 1 else None
    itl_mean = (chunks[-1] - chunks[0]) / 1e9 / (n_chunks - 1) if n_chunks >= 2 else None
    fb = raw["first_byte_ns"]
    written = raw.get("written_ns")
    timings = p.engine_timings if p is not None else None
    prompt_ms = _num(timings, "prompt_ms")
    pred_n = _num(timings, "predicted_n")
    ttft = (first_tok - sent) / 1e9 if first_tok is not None else None
    return {
        "request_index": int(item["request_index"]),
        "session_id": int(item["session_id"]),
        "turn": int(item["turn"]),
        "worker_index": worker_index,
        "api": item["api"],
        "intended_ns": intended_abs_ns - t0_ns,
        "sent_ns": sent - t0_ns,
        "written_ns": (written - t0_ns) if written is not None else None,
        "first_byte_ns": (fb - t0_ns) if fb is not None else None,
        "first_token_ns": (first_tok - t0_ns) if first_tok is not None else None,
        "last_byte_ns": raw["last_byte_ns"] - t0_ns,
        "chunk_ns": [c - t0_ns for c in chunks],
        "status": raw["status"],
        "error_class": raw["error_class"],
        "error_detail": mask_then_cut(raw["error_detail"], secret),
        "prompt_tokens_target": int(item["prompt_tokens_target"]),
        "max_tokens": int(item["max_tokens"]),
        "prompt_tokens_usage": p.prompt_tokens_usage if p is not None else None,
        "output_tokens_usage": o_usage,
        "output_tokens_chunks": n_chunks,
        "token_count_mismatch": bool(isinstance(o_usage, int) and o_usage != n_chunks),
        "usage_missing": o_usage is None,
        "finish_reason": p.finish_reason if p is not None else None,
        "response_id": p.response_id if p is not None else None,
        "ttft_s": ttft,
        "ttft_from_intended_s": (first_tok - intended_abs_ns) / 1e9 if first_tok is not None else None,
        "e2e_s": (raw["ended_ns"] - sent) / 1e9,
        "e2e_from_intended_s": (raw["ended_ns"] - intended_abs_ns) / 1e9,
        "tpot_s": tpot,
        "itl_mean_s": itl_mean,
        "schedule_lag_s": (sent - intended_abs_ns) / 1e9,
        "body_bytes": raw["body_bytes"],
        "body_reads": raw.get("body_reads"),
        "ttft_from_written_s": (first_tok - written) / 1e9 if first_tok is not None and written is not None else None,
        "engine_prompt_ms": prompt_ms,
        "engine_prompt_n": _num(timings, "prompt_n"),
        "engine_predicted_ms": _num(timings, "predicted_ms"),
        "engine_predicted_n": pred_n,
        "ttft_minus_engine_prompt_s": ttft - prompt_ms / 1e3 if ttft is not None and prompt_ms is not None else None,
        "engine_output_tokens_diff": n_chunks - int(pred_n) if pred_n is not None else None,
        # multi-turn (workloads.conversation): the prompt's prefix this session sent or received before, and the engine's
        # own count of prompt tokens it served from its cache (usage.prompt_tokens_details.cached_tokens)
        "reused_prefix_tokens": item.get("reused_prefix_tokens"),
        "cached_tokens_usage": p.cached_tokens_usage if p is not None else None,
    }


def missing_record(item: dict[str, Any], error_class: str, *, worker_index: int, detail: str) -> dict[str, Any]:
    """A record for a request that never produced a result ("not_sent": its turn never came; "lost": no report)."""
    rec: dict[str, Any] = {c: None for c in RECORD_COLUMNS}
    intended = item.get("intended_s")
    rec.update({
        "request_index": int(item["request_index"]), "session_id": int(item["session_id"]), "turn": int(item["turn"]),
        "worker_index": worker_index, "api": item["api"],
        "intended_ns": int(intended * 1e9) if intended is not None and intended == intended and item["turn"] == 0 else None,
        "chunk_ns": [], "status": 0, "error_class": error_class, "error_detail": detail,
        "prompt_tokens_target": int(item["prompt_tokens_target"]), "max_tokens": int(item["max_tokens"]),
        "output_tokens_chunks": 0, "token_count_mismatch": False, "usage_missing": True, "body_bytes": 0,
    })
    return rec


def cancelled_record(item: dict[str, Any], *, t0_ns: int, intended_abs_ns: int, sent_abs_ns: int, cancelled_abs_ns: int,
                     worker_index: int, detail: str) -> dict[str, Any]:
    """A request that was in flight when the run was stopped (SIGINT/SIGTERM, Locust's stop, the run-time limit):
    its intended and send instants are kept; e2e_s is the time from its send until it was cancelled."""
    rec = missing_record(item, "cancelled", worker_index=worker_index, detail=detail)
    rec.update({"intended_ns": intended_abs_ns - t0_ns, "sent_ns": sent_abs_ns - t0_ns, "last_byte_ns": None,
                "e2e_s": (cancelled_abs_ns - sent_abs_ns) / 1e9, "e2e_from_intended_s": (cancelled_abs_ns - intended_abs_ns) / 1e9,
                "schedule_lag_s": (sent_abs_ns - intended_abs_ns) / 1e9})
    return rec
