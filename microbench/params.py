"""The typed contract between microbenchmark suites and calibration: one params record per kind of case.

A suite builds a case's params as one of these frozen records and stores `record.to_params()`
(a flat JSON-able dict tagged `params_record: "<name>/<version>"`); calibration reads a stored
dict back with `parse_params`, which returns the same record or raises naming the case, the field,
its value and the fix. Calibration reads no other key of a case's params, so there are no guessed
aliases: a name is defined once, here, with its type and unit (`describe()` lists them, as pyperf's
_metadata.py registry does). Fields a suite records for people (notes, model comparisons) travel in
`extra` and are never read by calibration.

Format history (the version after the slash): 1 — first typed version. Params written before it
carry no `params_record` tag; calibration leaves such cases out with a warning to rerun the suite.
Fields added later with a default, so older records of the same version still read: decode/1 `ops`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Mapping

from harness.errors import HarnessError

TAG = "params_record"


def _unit(unit: str, doc: str, default: Any = dataclasses.MISSING) -> Any:
    meta = {"unit": unit, "doc": doc}
    if default is dataclasses.MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def _extra() -> Any:
    return field(default_factory=dict, metadata={"unit": "", "doc": "recorded for people; never read by calibration"})


class _Record:
    """Shared behaviour of the params records (each is a frozen dataclass with RECORD = 'name/version')."""

    RECORD: ClassVar[str]

    def __post_init__(self) -> None:
        _check_fields(self, f"{self.RECORD} params")

    @classmethod
    def of(cls, **kw: Any) -> Any:
        """The record from keyword values; keys that are no field of it go to `extra`."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}  # type: ignore[arg-type]
        extra = {**dict(kw.pop("extra", None) or {}), **{k: v for k, v in kw.items() if k not in names}}
        return cls(**{k: v for k, v in kw.items() if k in names}, extra=extra)  # type: ignore[call-arg]

    def to_params(self) -> dict[str, Any]:
        """The flat dict a case stores as params_json: the tag, every field, then `extra`."""
        out: dict[str, Any] = {TAG: self.RECORD}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.name != "extra":
                out[f.name] = getattr(self, f.name)
        extra = dict(getattr(self, "extra", {}) or {})
        clash = sorted(set(extra) & set(out))
        if clash:
            raise HarnessError(f"{self.RECORD} params: extra key(s) {clash} repeat a typed field; set the field instead.")
        out.update(extra)
        return out


_HINTS: dict[type, dict[str, Any]] = {}


def _check_fields(rec: Any, owner: str) -> None:
    cls = type(rec)
    hints = _HINTS.get(cls)
    if hints is None:  # resolving the annotations is most of a record's construction time: once per class
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    for f in dataclasses.fields(rec):
        if f.name == "extra":
            continue
        v = getattr(rec, f.name)
        why = _type_error(v, hints[f.name])
        if why:
            unit = f.metadata.get("unit", "")
            raise HarnessError(f"{owner}: field {f.name!r} {why}, got {v!r}" + (f" (unit: {unit})" if unit else "")
                               + "; the suite must build its params with microbench.params.")


def _type_error(v: Any, hint: Any) -> str | None:
    """None when `v` fits `hint` (int, float, str, bool, Literal, Optional of these); else what it must be."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(hint)
        if v is None and type(None) in args:
            return None
        errs = [_type_error(v, a) for a in args if a is not type(None)]
        return None if any(e is None for e in errs) else " or ".join(e for e in errs if e) + (
            " (or null)" if type(None) in args else "")
    if origin is Literal:
        opts = typing.get_args(hint)
        return None if v in opts else f"must be one of {list(opts)}"
    if hint is bool:
        return None if isinstance(v, bool) else "must be true or false"
    if hint is int:
        return None if isinstance(v, numbers.Integral) and not isinstance(v, bool) else "must be an integer"
    if hint is float:
        ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))
        return None if ok else "must be a finite number"
    if hint is str:
        return None if isinstance(v, str) else "must be a string"
    return None


# ---------------------------------------------------------------- the records


@dataclass(frozen=True)
class GemmParams(_Record):
    """gemm suite: one projection of a model at a token count (prefill compute efficiency, §9.2.3)."""

    RECORD: ClassVar[str] = "gemm/1"
    m: int = _unit("rows", "rows of the left operand (tokens for a projection)")
    n: int = _unit("columns", "output columns")
    k: int = _unit("elements", "reduction length")
    tokens: int | None = _unit("tokens per GPU", "token count the projection runs at; null for a square GEMM", None)
    model: str | None = _unit("", "model whose projection this is", None)
    projection: str | None = _unit("", "qkv | o | gate_up | down", None)
    square: bool = _unit("", "a square reference GEMM, not a projection (never part of the curve)", False)
    input_sets: int | None = _unit("sets", "input sets rotated so the inputs are not served from cache", None)
    extra: Mapping[str, Any] = _extra()


# DecodeParams.ops: how the step's elementwise ops run (microbench.transformer)
OPS_EAGER = "eager ops"
OPS_FUSED = "fused (torch.compile inductor)"
OPS_COMPOSED = "composed from kernel timings"  # a step summed from an imported kernel grid (harness.calibration.kernel_grid)
DecodeOps = Literal["eager ops", "fused (torch.compile inductor)", "composed from kernel timings"]


@dataclass(frozen=True)
class DecodeParams(_Record):
    """decode suite: one decode step (weights + KV) or decode attention alone at a batch and context (§9.2.3)."""

    RECORD: ClassVar[str] = "decode/1"
    model: str = _unit("", "model name of the spec catalog")
    kind: Literal["step", "attention"] = _unit("", "step: a whole decode step; attention: attention alone")
    batch: int = _unit("sequences", "decode batch")
    context_tokens: int = _unit("tokens", "keys per sequence the step attends to")
    mode: Literal["graph", "eager"] | None = _unit(
        "", "graph: CUDA-graph replays (what the curve is fitted from when present); eager: launches from Python", None)
    weight_bytes: float | None = _unit("bytes", "weight bytes one step streams", None)
    kv_bytes: float | None = _unit("bytes", "KV bytes one step reads", None)
    ops: DecodeOps | None = _unit(
        "", "steps: eager ops (one kernel per elementwise op) or fused (torch.compile inductor, what the curve is "
        "fitted from when present), or composed from kernel timings (an imported kernel grid: GEMMs and attention "
        "summed, no elementwise ops); null in runs written before the fused step existed (eager ops)", None)
    extra: Mapping[str, Any] = _extra()


BytesCounted = Literal["once", "read+write"]


@dataclass(frozen=True)
class TransferParams(_Record):
    """transfer suite: one copy of `size_bytes` over a link, a point of T(S) = α + S/β (§9.2.2).

    Byte convention: `size_bytes` is the payload, counted once, as nvbandwidth counts a copy; the
    fit's β is payload bytes per second. `bytes_counted` says what the case's useful_bytes counted
    ("read+write" for a device-to-device copy judged against HBM, whose traffic is 2× the payload).
    """

    RECORD: ClassVar[str] = "transfer/1"
    link: str = _unit("", "link name: pcie, hbm, memcpy, shm-process, nvlink, rdma, ...")
    direction: str = _unit("", "h2d | d2h | d2d | h2h | send | write | read ...")
    size_bytes: int = _unit("bytes", "payload bytes of one transfer, counted once")
    bytes_counted: BytesCounted = _unit("", "what the case's useful_bytes counted: the payload once or read+write")
    memory: str | None = _unit("", "host memory kind: pinned | pageable; null where it does not apply", None)
    method: str | None = _unit("", "how the copy was issued (copy_engine, sm_kernel, pipelined, single, a tool's test)", None)
    chunks: int = _unit("copies", "copies the payload was split into (a chunked case is no point of the fit)", 1)
    bidirectional: bool = _unit("", "both directions at once (no point of a one-way fit)", False)
    overlap: bool = _unit("", "run alongside other work (no point of the fit)", False)
    extra: Mapping[str, Any] = _extra()

    @property
    def is_link_point(self) -> bool:
        return self.chunks == 1 and not self.bidirectional and not self.overlap


@dataclass(frozen=True)
class CpuExpertParams(_Record):
    """moe suite: one routed expert on the CPU at a token count; the case with most tokens gives C_C (§9.3.2)."""

    RECORD: ClassVar[str] = "moe.cpu_expert/1"
    tokens: int = _unit("tokens", "tokens routed to the expert")
    expert_params: int = _unit("parameters", "parameters of the expert")
    expert_weight_bytes: float = _unit("bytes", "its weight bytes")
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class HostBandwidthParams(_Record):
    """moe suite: a STREAM-style kernel on the host; triad (else the largest) gives B_D (§9.3.2)."""

    RECORD: ClassVar[str] = "moe.host_bandwidth/1"
    op: Literal["copy", "scale", "add", "triad"] = _unit("", "STREAM kernel")
    array_bytes: int = _unit("bytes", "bytes of one array")
    write_allocate_counted: bool = _unit("", "whether the write-allocate read is counted in useful_bytes", False)
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class StorageParams(_Record):
    """storage suite: a sequential read or write of one file; the largest gives the storage bandwidth."""

    RECORD: ClassVar[str] = "storage/1"
    op: Literal["read", "write"] = _unit("", "read or write")
    file_bytes: int = _unit("bytes", "bytes of the file")
    block_bytes: int = _unit("bytes", "bytes of one I/O call")
    direct_io: bool = _unit("", "O_DIRECT used (page cache bypassed)", False)
    path: str | None = _unit("", "directory the file was in", None)
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class StagePrefillParams(_Record):
    """stage suite: a whole prefill of `new_tokens` (r_P = new_tokens / time, §9.2.3)."""

    RECORD: ClassVar[str] = "stage.prefill/1"
    model: str = _unit("", "model name of the spec catalog")
    new_tokens: int = _unit("tokens", "tokens the prefill computes")
    cached_tokens: int = _unit("tokens", "prefix tokens already cached", 0)
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class StageDecodeParams(_Record):
    """stage suite: one whole decode step at a batch and context (r_D = batch / time, §9.2.3)."""

    RECORD: ClassVar[str] = "stage.decode/1"
    model: str = _unit("", "model name of the spec catalog")
    batch: int = _unit("sequences", "decode batch")
    context_tokens: int = _unit("tokens", "keys per sequence")
    extra: Mapping[str, Any] = _extra()


# ---- kernel grids: one kernel at one shape, as an imported kernel database measured it (harness/importers/aic.py) ----


@dataclass(frozen=True)
class KernelGemmParams(_Record):
    """kernel suite: one GEMM [m, k] x [k, n] of a kernel grid (the dtype is the case's); no model attached."""

    RECORD: ClassVar[str] = "kernel.gemm/1"
    m: int = _unit("rows", "rows of the left operand (tokens)")
    n: int = _unit("columns", "output columns")
    k: int = _unit("elements", "reduction length")
    kernel_source: str = _unit("", "the kernel that ran, as the source database names it")
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class KernelAttentionParams(_Record):
    """kernel suite: one attention call of a kernel grid; context (prefill, causal) or generation (one new token)."""

    RECORD: ClassVar[str] = "kernel.attention/1"
    phase: Literal["context", "generation"] = _unit("", "context: causal prefill of query_tokens; generation: decode")
    batch: int = _unit("sequences", "sequences in the call")
    query_tokens: int = _unit("tokens", "new tokens per sequence (the prompt in context, 1 in generation)")
    context_tokens: int = _unit("tokens", "keys per sequence the new tokens attend (cached plus new)")
    num_heads: int = _unit("heads", "query heads")
    num_kv_heads: int = _unit("heads", "key/value heads")
    head_dim: int = _unit("elements", "elements per head")
    kv_dtype: str = _unit("", "KV cache element type: bf16 | fp8")
    window_tokens: int = _unit("tokens", "sliding window; 0 = full attention", 0)
    kernel_source: str = _unit("", "the kernel that ran, as the source database names it", "")
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class KernelMoeParams(_Record):
    """kernel suite: one MoE layer (routed experts' grouped GEMMs) of a kernel grid, on one GPU of its TP x EP group."""

    RECORD: ClassVar[str] = "kernel.moe/1"
    tokens: int = _unit("tokens", "tokens entering the layer")
    hidden: int = _unit("elements", "hidden size")
    inter: int = _unit("elements", "expert intermediate size (before the TP split)")
    topk: int = _unit("experts", "experts per token")
    num_experts: int = _unit("experts", "routed experts (before the EP split)")
    tp: int = _unit("GPUs", "tensor-parallel split of each expert")
    ep: int = _unit("GPUs", "expert-parallel split of the experts")
    distribution: str = _unit("", "token-to-expert distribution: balanced | power_law_<a>")
    kernel_source: str = _unit("", "the kernel that ran, as the source database names it", "")
    extra: Mapping[str, Any] = _extra()


@dataclass(frozen=True)
class CollectiveParams(_Record):
    """comm suite: one collective of `size_bytes` per GPU over `num_gpus` GPUs (T(S) = α + S/β per GPU count)."""

    RECORD: ClassVar[str] = "comm.collective/1"
    op: str = _unit("", "all_reduce | all_gather | reduce_scatter | alltoall")
    num_gpus: int = _unit("GPUs", "GPUs taking part")
    size_bytes: int = _unit("bytes", "payload bytes per GPU (the message), counted once")
    implementation: str = _unit("", "the collective's kernel: nccl, vllm_graph, trtllm, sglang_graph, ...")
    extra: Mapping[str, Any] = _extra()


RECORDS: dict[str, type] = {c.RECORD: c for c in (  # type: ignore[attr-defined]
    GemmParams, DecodeParams, TransferParams, CpuExpertParams, HostBandwidthParams, StorageParams,
    StagePrefillParams, StageDecodeParams, KernelGemmParams, KernelAttentionParams, KernelMoeParams,
    CollectiveParams)}

# the suite whose cases may carry each record
SUITE_OF: dict[str, str] = {r: r.split("/")[0].split(".")[0] for r in RECORDS}


def parse_params(params: Mapping[str, Any], case_id: str = "case") -> Any | None:
    """The typed record a stored params dict was built from, or None when it carries no `params_record` tag."""
    tag = params.get(TAG)
    if tag is None:
        return None
    cls = RECORDS.get(str(tag))
    if cls is None:
        name, _, ver = str(tag).partition("/")
        known = [r for r in RECORDS if r.split("/")[0] == name]
        if known and ver.isdigit() and int(ver) > int(known[0].split("/")[1]):
            raise HarnessError(f"{case_id}: params record {tag!r} is newer than this harness understands ({known[0]}); "
                               "upgrade the harness.")
        raise HarnessError(f"{case_id}: unknown params record {tag!r}; known: {', '.join(RECORDS)}.")
    names = {f.name for f in dataclasses.fields(cls) if f.name != "extra"}
    kw = {k: v for k, v in params.items() if k in names}
    extra = {k: v for k, v in params.items() if k not in names and k != TAG}
    missing = [f.name for f in dataclasses.fields(cls)
               if f.name not in kw and f.name != "extra" and f.default is dataclasses.MISSING]
    if missing:
        raise HarnessError(f"{case_id}: params record {tag} lacks field(s) {missing}; the run was written by a broken "
                           "suite — rerun it.")
    try:
        return cls(**kw, extra=extra)
    except HarnessError as exc:
        raise HarnessError(f"{case_id}: {exc}") from None


def describe() -> list[dict[str, str]]:
    """Every field of every record: record, name, type, unit, meaning (for docs and `harness micro params`)."""
    out = []
    for tag, cls in RECORDS.items():
        for f in dataclasses.fields(cls):
            if f.name == "extra":
                continue
            out.append({"record": tag, "name": f.name, "type": str(f.type),
                        "unit": f.metadata.get("unit", ""), "doc": f.metadata.get("doc", "")})
    return out
