"""Model specs from a GGUF file's metadata and tensor table (the format llama.cpp serves).

Shape fields come from the `<arch>.*` keys llama.cpp's converter writes (block_count,
embedding_length, feed_forward_length, attention.head_count[_kv], attention.key_length,
expert_*; vocabulary from `<arch>.vocab_size` or the tokenizer's token list). Bytes per
parameter come from the tensor table, not from the file type's name: a "Q4_K_M" file mixes
Q4_K, Q6_K and F32 tensors, so

    weight_bytes_per_param          = Σ tensor bytes / Σ tensor elements          (the whole file)
    streamed_weight_bytes_per_param = bytes / elements of the tensors one forward pass reads
                                      (every tensor except the token-embedding lookup, which
                                      reads one row per token; the LM head is `output.weight`,
                                      or the token embedding itself when the two are tied)

The second is the one to put into the decode roofline's weight term (Chapter 9, §9.2.3: a
decode step streams all weights once).
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.specs.model_spec import ModelSpec

INSTALL_HINT = "pip install gguf (it is in the project's dependencies: pip install -e .)"

# tensors one token's forward pass does not stream in full
_LOOKUP_TENSORS = ("token_embd.weight",)
_HEAD_TENSOR = "output.weight"


@dataclass(frozen=True, slots=True)
class TensorTypeTotals:
    n_tensors: int
    params: int
    bytes: int

    @property
    def bytes_per_param(self) -> float:
        return self.bytes / self.params if self.params else 0.0


@dataclass(frozen=True)
class GgufModel:
    """A GGUF file read as a ModelSpec plus the storage facts the ModelSpec does not carry."""

    spec: ModelSpec
    path: str
    architecture: str
    file_type: str | None  # e.g. "MOSTLY_Q4_K_M" (general.file_type)
    file_bytes: int
    weight_params: int
    weight_bytes: int
    weight_bytes_per_param: float
    streamed_weight_params: int  # per forward pass (see module docstring)
    streamed_weight_bytes: int
    streamed_weight_bytes_per_param: float
    tied_embeddings: bool
    tensor_types: dict[str, TensorTypeTotals]
    context_length: int | None
    sliding_window: int | None
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = asdict(self.spec)
        d["tensor_types"] = {k: {**asdict(v), "bytes_per_param": v.bytes_per_param} for k, v in self.tensor_types.items()}
        d["notes"] = list(self.notes)
        return d


# GGUF value types (the gguf package's GGUFValueType): size in bytes of each scalar type
_SCALAR = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
           7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
_STRING, _ARRAY = 8, 9
_SMALL_ARRAY = 4096  # arrays longer than this (token lists, scores) are counted, not decoded


@dataclass(frozen=True, slots=True)
class _Tensor:
    name: str
    type_id: int
    n_elements: int


class _Header:
    """A GGUF file's metadata and tensor table, read directly (the gguf package's GGUFReader decodes every
    vocabulary string into numpy views, ~12 s for a 262k-token vocabulary; this skips long arrays)."""

    def __init__(self, path: Path):
        self.path = path
        self.fields: dict[str, Any] = {}
        self.array_len: dict[str, int] = {}
        self.tensors: list[_Tensor] = []
        with open(path, "rb") as fh:
            self._fh = fh
            if fh.read(4) != b"GGUF":
                raise ValueError("no GGUF magic at the start of the file")
            (version,) = self._u("<I")
            if version not in (2, 3):
                raise ValueError(f"GGUF version {version} (this reader knows 2 and 3; a big-endian file reads as a huge version)")
            (n_tensors,) = self._u("<Q")
            (n_kv,) = self._u("<Q")
            for _ in range(n_kv):
                key = self._str()
                (vtype,) = self._u("<I")
                self.fields[key] = self._value(key, vtype)
            for _ in range(n_tensors):
                name = self._str()
                (n_dims,) = self._u("<I")
                dims = self._u("<" + "Q" * n_dims) if n_dims else ()
                (type_id,) = self._u("<I")
                self._u("<Q")  # data offset
                n_el = 1
                for d in dims:
                    n_el *= d
                self.tensors.append(_Tensor(name, type_id, n_el))

    def _u(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        data = self._fh.read(size)
        if len(data) != size:
            raise ValueError("the file ends inside its header (truncated download?)")
        return struct.unpack(fmt, data)

    def _str(self) -> str:
        (n,) = self._u("<Q")
        if n > 1 << 30:
            raise ValueError(f"a string of {n} bytes in the header; the file is damaged")
        return self._fh.read(n).decode("utf-8", "replace")

    def _value(self, key: str, vtype: int) -> Any:
        if vtype in _SCALAR:
            return self._u(_SCALAR[vtype][0])[0]
        if vtype == _STRING:
            return self._str()
        if vtype != _ARRAY:
            raise ValueError(f"metadata {key} has unknown value type {vtype}")
        (etype,) = self._u("<I")
        (count,) = self._u("<Q")
        self.array_len[key] = count
        if etype in _SCALAR:
            fmt, size = _SCALAR[etype]
            if count <= _SMALL_ARRAY:
                return list(self._u("<" + fmt[1] * count)) if count else []
            self._fh.seek(size * count, 1)
            return None
        if etype == _STRING:
            keep = count <= _SMALL_ARRAY
            out = []
            for _ in range(count):
                (n,) = self._u("<Q")
                if keep:
                    out.append(self._fh.read(n).decode("utf-8", "replace"))
                else:
                    self._fh.seek(n, 1)
            return out if keep else None
        raise ValueError(f"metadata {key} is an array of unsupported type {etype}")


def _reader(path: Path) -> _Header:
    try:
        return _Header(path)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        raise HarnessError(f"{path} is not a readable GGUF file ({exc}); check the path or re-download it.") from None


def _value(reader: _Header, key: str) -> Any:
    return reader.fields.get(key)


def _tensor_type(type_id: int) -> tuple[str, int, int]:
    """(name, elements per block, bytes per block) of a ggml tensor type, from the gguf package's tables."""
    try:
        # lazy: gguf adds ~35 ms to nearly every verb's start-up; only a .gguf file needs it
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    except ImportError:
        raise HarnessError(f"reading GGUF tensor types needs the gguf package; run {INSTALL_HINT}.") from None
    try:
        t = GGMLQuantizationType(type_id)
    except ValueError:
        raise HarnessError(f"tensor type id {type_id} is unknown to the installed gguf package; upgrade it (pip install -U gguf).") from None
    block, size = GGML_QUANT_SIZES[t]
    return t.name, block, size


def _scalar_int(path: Path, key: str, v: Any, notes: list[str]) -> int | None:
    """An integer field; per-layer arrays (some models vary KV heads by layer) give their maximum, with a note."""
    if v is None:
        return None
    if isinstance(v, list):
        vals = [int(x) for x in v]
        if not vals:
            return None
        if len(set(vals)) > 1:
            notes.append(f"{key} varies by layer ({min(vals)}..{max(vals)}); the spec uses the maximum")
        return max(vals)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise HarnessError(f"{path}: metadata {key} should be an integer, got {v!r}; the file may be damaged.")
    return int(v)


def read_gguf(path: str | Path) -> GgufModel:
    """Read a GGUF file's shape metadata and tensor table; errors name the missing key and the file."""
    p = Path(path)
    if not p.is_file():
        raise HarnessError(f"GGUF file {str(p)!r} does not exist; give the path to a .gguf file.")
    r = _reader(p)
    notes: list[str] = []
    arch = _value(r, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise HarnessError(f"{p}: metadata general.architecture is missing; this is not a model GGUF written by llama.cpp's converter.")

    def get(key: str, required: bool = True) -> int | None:
        v = _scalar_int(p, f"{arch}.{key}", _value(r, f"{arch}.{key}"), notes)
        if v is None and required:
            raise HarnessError(
                f"{p}: metadata {arch}.{key} is missing; the reader needs it for a {arch!r} model "
                "(re-convert the model with a current llama.cpp convert_hf_to_gguf.py)."
            )
        return v

    n_layers = get("block_count")
    hidden = get("embedding_length")
    n_heads = get("attention.head_count")
    n_kv = get("attention.head_count_kv", required=False) or n_heads
    head_dim = get("attention.key_length", required=False) or (hidden // n_heads if n_heads else 0)
    vocab = get("vocab_size", required=False)
    if vocab is None:
        if "tokenizer.ggml.tokens" not in r.array_len:
            raise HarnessError(f"{p}: neither {arch}.vocab_size nor tokenizer.ggml.tokens is present; cannot size the vocabulary.")
        vocab = r.array_len["tokenizer.ggml.tokens"]
    n_experts = get("expert_count", required=False) or 0
    ffn = get("feed_forward_length", required=False) or 0
    kv_lora = get("attention.kv_lora_rank", required=False) or 0

    # tensor table: bytes per parameter as stored, and what one forward pass streams
    totals: dict[str, list[int]] = {}
    names = set()
    w_params = w_bytes = s_params = s_bytes = 0
    embd_params = embd_bytes = 0
    for t in r.tensors:
        tname, block, size = _tensor_type(t.type_id)
        n_el = int(t.n_elements)
        n_b = n_el // block * size
        acc = totals.setdefault(tname, [0, 0, 0])
        acc[0] += 1
        acc[1] += n_el
        acc[2] += n_b
        names.add(t.name)
        w_params += n_el
        w_bytes += n_b
        if t.name in _LOOKUP_TENSORS:
            embd_params, embd_bytes = n_el, n_b
            continue
        s_params += n_el
        s_bytes += n_b
    if not w_params:
        raise HarnessError(f"{p}: the file has no tensors; it is a vocabulary-only or damaged GGUF.")
    tied = _HEAD_TENSOR not in names and embd_params > 0
    if tied:  # the LM head reads the token embedding in full
        s_params += embd_params
        s_bytes += embd_bytes

    ft = _value(r, "general.file_type")
    file_type = None
    if isinstance(ft, int):
        try:
            # lazy: gguf adds ~35 ms to nearly every verb's start-up; only a .gguf file needs it
            from gguf import LlamaFileType

            file_type = LlamaFileType(ft).name
        except ValueError:
            file_type = f"file_type {ft}"
    name = _value(r, "general.name")
    spec_kw: dict[str, Any] = {}
    if kv_lora:
        rope = get("rope.dimension_count", required=False) or 0
        v_dim = get("attention.value_length", required=False) or 0
        spec_kw.update(attention="mla", kv_lora_rank=kv_lora, qk_rope_head_dim=rope,
                       qk_nope_head_dim=max(head_dim - rope, 0), v_head_dim=v_dim,
                       q_lora_rank=get("attention.q_lora_rank", required=False) or 0)
        n_kv = n_heads
    if n_experts:
        spec_kw.update(
            n_routed_experts=n_experts,
            n_experts_per_token=get("expert_used_count", required=False) or 0,
            moe_intermediate_size=get("expert_feed_forward_length", required=False) or ffn,
            n_shared_experts=get("expert_shared_count", required=False) or 0,
            n_dense_layers=get("leading_dense_block_count", required=False) or 0,
        )
        if spec_kw["n_shared_experts"]:
            spec_kw["shared_expert_intermediate_size"] = (
                get("expert_shared_feed_forward_length", required=False) or spec_kw["moe_intermediate_size"]
            )
    spec = ModelSpec(
        name=str(name) if isinstance(name, str) and name else p.stem,
        n_layers=n_layers, hidden_size=hidden, n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
        intermediate_size=ffn, vocab_size=vocab, tie_word_embeddings=tied,
        source=f"GGUF metadata of {p.name} ({arch}, {file_type or 'unknown file type'})",
        **spec_kw,
    )
    return GgufModel(
        spec=spec, path=str(p), architecture=arch, file_type=file_type, file_bytes=p.stat().st_size,
        weight_params=w_params, weight_bytes=w_bytes, weight_bytes_per_param=w_bytes / w_params,
        streamed_weight_params=s_params, streamed_weight_bytes=s_bytes,
        streamed_weight_bytes_per_param=s_bytes / s_params if s_params else 0.0,
        tied_embeddings=tied,
        tensor_types={k: TensorTypeTotals(*v) for k, v in sorted(totals.items())},
        context_length=get("context_length", required=False),
        sliding_window=get("attention.sliding_window", required=False),
        notes=tuple(notes),
    )


def model_spec_from_gguf(path: str | Path) -> ModelSpec:
    """The ModelSpec of a GGUF file (shape only; storage facts are in read_gguf())."""
    return read_gguf(path).spec
