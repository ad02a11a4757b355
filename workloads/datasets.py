"""Prompt sets kept on disk: ShareGPT JSON, JSONL (prompt or messages field), parquet/CSV columns, and Hugging Face
datasets saved with `save_to_disk`, read without any download.

Formats, chosen by what PATH is:
  *.json       ShareGPT: a list of {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}
               (the first human turn is the prompt, the first reply after it gives the output length), or a
               list of objects with a prompt/messages field
  *.jsonl      one object a line with "prompt" (text), "messages" ([{role, content}], the first user message),
               or "conversations" (ShareGPT)
  *.parquet, *.csv  a column (--dataset-field, default the first of prompt, text, question, instruction)
  a directory  a Hugging Face dataset saved with `Dataset.save_to_disk` (state.json + *.arrow files, read
               with pyarrow; a DatasetDict's splits are subdirectories: name one, e.g. DIR/train)
A hub name (`org/name`) is refused: nothing is downloaded at run time; save the dataset to disk first.
Sampling is seeded; prompts outside [min_tokens, max_tokens] (counted by the tokenizer when one is given,
otherwise in words) are dropped before sampling.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError

TEXT_FIELDS = ("prompt", "text", "question", "instruction", "input")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class DatasetPrompt:
    text: str
    output_tokens: int | None = None  # the reference reply's length, when the dataset has one (ShareGPT)


def _read_text(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise HarnessError(f"dataset {p} is not UTF-8 text ({exc.reason} at byte {exc.start}); give a UTF-8 JSON/JSONL file.") from None


def _from_messages(msgs: Any) -> str | None:
    if not isinstance(msgs, list):
        return None
    for m in msgs:
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return None


def _from_conversations(conv: Any, count_words: bool = True) -> DatasetPrompt | None:
    if not isinstance(conv, list):
        return None
    for k, turn in enumerate(conv):
        if isinstance(turn, dict) and turn.get("from") in ("human", "user") and isinstance(turn.get("value"), str):
            reply = conv[k + 1] if k + 1 < len(conv) else None
            out = None
            if isinstance(reply, dict) and isinstance(reply.get("value"), str):
                out = max(1, len(reply["value"].split()))
            return DatasetPrompt(turn["value"], out)
    return None


def _from_object(obj: Any, field: str | None) -> DatasetPrompt | None:
    if not isinstance(obj, dict):
        return None
    if field is not None:
        v = obj.get(field)
        if isinstance(v, str):
            return DatasetPrompt(v)
        if isinstance(v, list):
            t = _from_messages(v)
            return DatasetPrompt(t) if t is not None else _from_conversations(v)
        return None
    if "conversations" in obj:
        return _from_conversations(obj["conversations"])
    if "messages" in obj:
        t = _from_messages(obj["messages"])
        return DatasetPrompt(t) if t is not None else None
    for f in TEXT_FIELDS:
        if isinstance(obj.get(f), str):
            return DatasetPrompt(obj[f])
    return None


def _from_column(values: list[Any], where: str) -> list[DatasetPrompt]:
    out = []
    for v in values:
        if isinstance(v, str):
            out.append(DatasetPrompt(v))
        elif isinstance(v, list):
            t = _from_messages(v)
            p = DatasetPrompt(t) if t is not None else _from_conversations(v)
            if p is not None:
                out.append(p)
    if not out and values:
        raise HarnessError(f"{where}: the column holds no text (nor messages/conversations); name a text column with --dataset-field.")
    return out


def _pick_column(names: list[str], field: str | None, where: str) -> str:
    if field is not None:
        if field not in names:
            raise HarnessError(f"{where} has no column {field!r}; its columns: {', '.join(names)}.")
        return field
    for f in (*TEXT_FIELDS, "messages", "conversations"):
        if f in names:
            return f
    raise HarnessError(f"{where} has none of the columns {', '.join((*TEXT_FIELDS, 'messages', 'conversations'))}; "
                       f"its columns: {', '.join(names)}; name one with --dataset-field.")


def _read_table(table: Any, field: str | None, where: str) -> list[DatasetPrompt]:
    col = _pick_column(list(table.column_names), field, where)
    return _from_column(table.column(col).to_pylist(), f"{where} column {col!r}")


def _read_hf_dir(d: Path, field: str | None) -> list[DatasetPrompt]:
    # lazy: pyarrow.parquet/csv add ~50 ms to bench-pd's and engine's start-up; only a dataset file uses them
    import pyarrow as pa

    state = d / "state.json"
    if not state.is_file():
        splits = sorted(p.name for p in d.iterdir() if (p / "state.json").is_file())
        if splits:
            raise HarnessError(f"{d} is a saved DatasetDict with splits {', '.join(splits)}; give one, e.g. {d / splits[0]}.")
        raise HarnessError(f"{d} is a directory but not a dataset saved with save_to_disk (no state.json); give a file or such a directory.")
    try:
        files = [f["filename"] for f in json.loads(state.read_text())["_data_files"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise HarnessError(f"{state} is not a datasets state file ({exc}).") from None
    tables = []
    for name in files:
        try:
            with pa.memory_map(str(d / name)) as src:
                tables.append(pa.ipc.open_stream(src).read_all())
        except (OSError, pa.ArrowInvalid) as exc:
            raise HarnessError(f"{d / name} could not be read as an Arrow stream ({exc}).") from None
    if not tables:
        raise HarnessError(f"{d} lists no data files.")
    return _read_table(pa.concat_tables(tables), field, str(d))


def read_prompts(path: str | Path, field: str | None = None) -> list[DatasetPrompt]:
    """Every usable prompt of the dataset at `path` (see the module docstring for the formats)."""
    p = Path(path)
    if not p.exists():
        if isinstance(path, str) and _HUB_NAME.match(path):
            raise HarnessError(f"dataset {path!r} is not a path on this machine; it looks like a Hugging Face hub name, and "
                               "nothing is downloaded at run time. Save it first where there is network: "
                               f"`datasets.load_dataset({path!r}, split='train').save_to_disk('DIR')`, then give --dataset DIR.")
        raise HarnessError(f"dataset {str(p)!r} does not exist; give a ShareGPT .json, a .jsonl, a .parquet/.csv, or a "
                           "directory written by save_to_disk.")
    where = str(p)
    if p.is_dir():
        out = _read_hf_dir(p, field)
    elif p.suffix == ".json":
        try:
            data = json.loads(_read_text(p))
        except json.JSONDecodeError as exc:
            raise HarnessError(f"{p}: not valid JSON ({exc}); a ShareGPT file is one JSON list.") from None
        if not isinstance(data, list):
            raise HarnessError(f"{p}: expected a JSON list of conversations (ShareGPT), got {type(data).__name__}.")
        out = [q for q in (_from_object(o, field) for o in data) if q is not None]
    elif p.suffix == ".jsonl":
        out = []
        for n, line in enumerate(_read_text(p).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise HarnessError(f"{p}:{n}: not valid JSON ({exc}); each line must be one JSON object.") from None
            q = _from_object(obj, field)
            if q is None:
                raise HarnessError(f"{p}:{n}: no {field or 'prompt/messages/conversations'} text in this line.")
            out.append(q)
    elif p.suffix in (".parquet", ".csv"):
        try:
            if p.suffix == ".parquet":
                # lazy: pyarrow.parquet/csv add ~50 ms to bench-pd's and engine's start-up; only a dataset file uses them
                import pyarrow.parquet as pq

                table = pq.read_table(p)
            else:
                # lazy: pyarrow.parquet/csv add ~50 ms to bench-pd's and engine's start-up; only a dataset file uses them
                import pyarrow.csv as pcsv

                table = pcsv.read_csv(p)
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise HarnessError(f"{p} could not be read as {p.suffix[1:]} ({exc}).") from None
        out = _read_table(table, field, where)
    else:
        raise HarnessError(f"dataset {p}: unknown format {p.suffix!r}; give .json (ShareGPT), .jsonl, .parquet, .csv or a "
                           "save_to_disk directory.")
    out = [q for q in out if q.text.strip()]
    if not out:
        raise HarnessError(f"dataset {p} has no non-empty prompts.")
    return out


def sample_prompts(prompts: list[DatasetPrompt], n: int, seed: int, *, count: Any, min_tokens: int | None = None,
                   max_tokens: int | None = None) -> tuple[list[DatasetPrompt], list[int], dict[str, Any]]:
    """`n` prompts drawn with a seeded permutation of those whose length (by `count`) lies in the bounds; reused in
    the same order when fewer remain than requested. Returns (prompts, their token counts, a note for the artifact)."""
    lengths = [count(q.text) for q in prompts]
    keep = [i for i, k in enumerate(lengths) if (min_tokens is None or k >= min_tokens) and (max_tokens is None or k <= max_tokens)]
    if not keep:
        raise HarnessError(f"no dataset prompt has a length in [{min_tokens}, {max_tokens}] tokens "
                           f"(lengths range {min(lengths)}..{max(lengths)}); widen --dataset-min-tokens/--dataset-max-tokens.")
    order = np.random.default_rng(seed).permutation(len(keep))
    picked = [keep[int(order[k % len(keep)])] for k in range(n)]
    info = {"prompts_read": len(prompts), "prompts_in_bounds": len(keep), "reused": n > len(keep), "seed": seed,
            "min_tokens": min_tokens, "max_tokens": max_tokens}
    return [prompts[i] for i in picked], [lengths[i] for i in picked], info
