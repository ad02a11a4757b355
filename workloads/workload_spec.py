"""The workload described on the command line: token-length distributions, shared prefix, turns and pauses, a prompt
dataset on disk, a tokenizer, or a request trace (Mooncake, BurstGPT, Azure), built into a workload artifact on a schedule.

The same flags serve `harness bench-pd` and `locust -f workloads/locustfile.py` (add_workload_arguments);
the spec itself is stored in the artifact's metadata (`workload_spec`), so a run is replayable from the
artifact alone. Without any of these flags the named mix (`--mix`, default the scenario's request) is used.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import HarnessError
from workloads.artifact import APIS, WorkloadArtifact
from workloads.datasets import read_prompts, sample_prompts
from workloads.lengths import LengthDist, parse_length
from workloads.mixes import trace_replay
from workloads.prompts import TokenizerText, prompt_text, synthetic_words
from workloads.schedule import Schedule
from workloads.think_time import ThinkTime, parse_think_time
from workloads.traces import TraceSelection, parse_window

MAX_TURNS = 1000
REPLIES = ("live", "synthetic")


@dataclass(frozen=True)
class WorkloadSpec:
    input_tokens: LengthDist | None = None  # None: the mix's (or scenario's) own
    output_tokens: LengthDist | None = None
    prefix_tokens: int = 0  # text shared by every session's first prompt (a prefix-cache workload)
    turns: int = 1
    pause_s: float | ThinkTime = 0.0  # before each later turn, after the previous turn ended (seconds, or a distribution)
    replies: str = "live"  # later turns carry the server's actual replies ("live") or stand-in text of their length
    dataset: str | None = None
    dataset_field: str | None = None
    dataset_min_tokens: int | None = None
    dataset_max_tokens: int | None = None
    tokenizer: str | None = None
    trace: str | None = None
    trace_time_scale: float = 1.0
    trace_format: str | None = None  # None: from the file (workloads.traces)
    trace_window_s: tuple[float, float | None] | None = None  # [START, END] s of the trace's own time
    trace_max_rate_per_s: float | None = None  # slow the replay down to this mean rate when it is faster

    def __post_init__(self) -> None:
        if isinstance(self.prefix_tokens, bool) or not isinstance(self.prefix_tokens, int) or not 0 <= self.prefix_tokens <= 10_000_000:
            raise HarnessError(f"--prefix-tokens must be an integer token count >= 0, got {self.prefix_tokens!r}.")
        if isinstance(self.turns, bool) or not isinstance(self.turns, int) or not 1 <= self.turns <= MAX_TURNS:
            raise HarnessError(f"--turns must be an integer in [1, {MAX_TURNS}], got {self.turns!r}.")
        if not isinstance(self.pause_s, ThinkTime) and (isinstance(self.pause_s, bool) or not isinstance(self.pause_s, (int, float))
                                                        or not (math.isfinite(self.pause_s) and 0 <= self.pause_s <= 3600)):
            raise HarnessError(f"--pause-s must be a number of seconds in [0, 3600] or a distribution "
                               f"(exponential:mean=2, uniform:min=1,max=5), got {self.pause_s!r}.")
        if self.replies not in REPLIES:
            raise HarnessError(f"--replies must be one of {', '.join(REPLIES)}, got {self.replies!r}.")
        if not (isinstance(self.trace_time_scale, (int, float)) and math.isfinite(self.trace_time_scale) and self.trace_time_scale > 0):
            raise HarnessError(f"--trace-time-scale must be a number > 0 (0.5 replays twice as fast), got {self.trace_time_scale!r}.")
        if not self.trace and (self.trace_format or self.trace_window_s or self.trace_max_rate_per_s is not None):
            raise HarnessError("--trace-format, --trace-window and --trace-max-rate qualify --trace PATH; give the trace too.")
        self.trace_selection()  # validates the window, scale and cap
        if self.trace and self.dataset:
            raise HarnessError("--trace and --dataset both give the prompts; use one of them.")
        if self.trace and (self.turns > 1 or self.input_tokens is not None):
            raise HarnessError("--trace gives every request's lengths and times; drop --turns/--input-tokens with it.")
        if self.dataset and self.input_tokens is not None:
            raise HarnessError("--dataset gives the prompts; --input-tokens applies to synthetic prompts only (filter the dataset "
                               "with --dataset-min-tokens/--dataset-max-tokens).")
        for f in ("dataset_min_tokens", "dataset_max_tokens"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise HarnessError(f"--{f.replace('_', '-')} must be an integer >= 0, got {v!r}.")

    def trace_selection(self) -> Any:
        return TraceSelection(time_scale=self.trace_time_scale, window_s=self.trace_window_s,
                              max_rate_per_s=self.trace_max_rate_per_s)

    @property
    def custom(self) -> bool:
        """Whether any flag describes the workload (else the named mix is used)."""
        return self != WorkloadSpec()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("input_tokens", "output_tokens", "pause_s"):
            v = getattr(self, k)
            d[k] = v.to_dict() if hasattr(v, "to_dict") else v
        return d


def add_workload_arguments(parser: Any) -> None:
    """The workload flags (argparse, or Locust's configargparse parser: the same names in both)."""
    a = parser.add_argument
    a("--input-tokens", default=None, help="prompt length: N, or uniform:min=A,max=B / normal:mean=M,stdev=S[,min,max] / "
                                           "lognormal:mean=M,stdev=S[,min,max]")
    a("--output-tokens", default=None, help="max_tokens per request, same forms as --input-tokens (sent with ignore_eos where the target allows)")
    a("--prefix-tokens", type=int, default=0, help="tokens of text shared by every session's first prompt (prefix caching)")
    a("--turns", type=int, default=1, help="turns per session; each later turn resends the history plus new text")
    a("--pause-s", default=None, help="think time before each later turn, after the previous one ended: seconds (2) or "
                                      "exponential:mean=2 / uniform:min=1,max=5 / lognormal:mean=2,stdev=1 (seeded)")
    a("--replies", default="live", choices=list(REPLIES), help="later turns carry the server's actual replies (live, as a chat "
                                                               "client sends) or stand-in text of their length (synthetic)")
    a("--dataset", default=None, help="prompts from a file on disk: ShareGPT .json, .jsonl (prompt/messages), .parquet/.csv, "
                                      "or a save_to_disk directory (never a hub name)")
    a("--dataset-field", default=None, help="the dataset's text column or field (default: prompt, text, messages, ...)")
    a("--dataset-min-tokens", type=int, default=None, help="drop dataset prompts shorter than this (tokenizer tokens, else words)")
    a("--dataset-max-tokens", type=int, default=None, help="drop dataset prompts longer than this")
    a("--tokenizer", default=None, help="a local tokenizer.json or Hugging Face tokenizer folder: exact prompt lengths, client token counts")
    a("--trace", default=None, help="replay a request trace (its times and lengths): Mooncake .jsonl, BurstGPT or Azure LLM "
                                    "inference .csv")
    a("--trace-format", default=None, choices=["mooncake", "burstgpt", "azure"], help="the trace's format (default: from the file)")
    a("--trace-window", default=None, metavar="START:END", help="replay only the requests that arrived in [START, END] seconds "
                                                               "of the trace's own time (END empty: to its end)")
    a("--trace-time-scale", type=float, default=1.0, help="multiply the trace's times by this (0.5: twice as fast)")
    a("--trace-max-rate", type=float, default=None, help="cap the replay's mean rate (requests/s): a faster selection is "
                                                        "slowed down uniformly, no request dropped")


def spec_from_args(ns: Any) -> WorkloadSpec:
    def g(name: str, default: Any = None) -> Any:
        v = getattr(ns, name, default)
        return None if v == "" else v

    i, o = g("input_tokens"), g("output_tokens")
    return WorkloadSpec(
        input_tokens=parse_length(i, "--input-tokens") if i is not None else None,
        output_tokens=parse_length(o, "--output-tokens") if o is not None else None,
        prefix_tokens=_default(g("prefix_tokens"), 0), turns=_default(g("turns"), 1), pause_s=_pause(g("pause_s")),
        replies=_default(g("replies"), "live"),
        dataset=g("dataset"), dataset_field=g("dataset_field"), dataset_min_tokens=g("dataset_min_tokens"),
        dataset_max_tokens=g("dataset_max_tokens"), tokenizer=g("tokenizer"), trace=g("trace"),
        trace_time_scale=_default(g("trace_time_scale"), 1.0), trace_format=g("trace_format"),
        trace_window_s=parse_window(g("trace_window")), trace_max_rate_per_s=g("trace_max_rate"),
    )


def _default(v: Any, default: Any) -> Any:
    return default if v is None else v


def _pause(v: Any) -> float | ThinkTime:
    """A fixed pause stays a number (as stored before distributions existed); a distribution is a ThinkTime."""
    if v is None:
        return 0.0
    t = parse_think_time(v)
    return t.mean_s if t.is_fixed else t


def load_tokenizer(path: str | None) -> TokenizerText | None:
    if not path:
        return None
    p = Path(path)
    if p.is_dir():
        if not (p / "tokenizer.json").is_file():
            raise HarnessError(f"tokenizer folder {p} has no tokenizer.json; give the model's tokenizer.json or its folder.")
        p = p / "tokenizer.json"
    return TokenizerText(p)


def build_workload(spec: WorkloadSpec, schedule: Schedule, *, name: str = "custom", seed: int = 0, api: str = "chat",
                   default_input_tokens: int = 8192, default_output_tokens: int = 1025,
                   meta: dict[str, Any] | None = None) -> WorkloadArtifact:
    """One session per schedule instant (a trace brings its own instants), built from `spec`."""
    if api not in APIS:
        raise HarnessError(f"--api must be one of {', '.join(APIS)}, got {api!r}.")
    tok = load_tokenizer(spec.tokenizer)
    counter = f"tokenizer:{tok.path}" if tok else "words (synthetic prompts: one token per word on the embedded target)"
    base_meta = {"workload_spec": spec.to_dict(), "token_counter": counter, **(meta or {})}
    if spec.trace:
        art = trace_replay(spec.trace, fmt=spec.trace_format, selection=spec.trace_selection(), api=api, seed=seed, tokenizer=tok)
        if spec.output_tokens is not None or spec.prefix_tokens:
            raise HarnessError("--trace gives every request's output length and prefix blocks; drop --output-tokens/--prefix-tokens.")
        return WorkloadArtifact(art.name, art.rows, {**art.meta, **base_meta})
    n_sessions = schedule.count
    n_req = n_sessions * spec.turns
    rng = np.random.default_rng(seed + 7_777_777)
    out_dist = spec.output_tokens or LengthDist("fixed", default_output_tokens, 0.0, 1, max(1, default_output_tokens))
    n_out = out_dist.sample(n_req, rng)
    if (n_out < 1).any():
        raise HarnessError("--output-tokens must give at least 1 token per request; raise its min.")
    count = tok.count if tok else (lambda t: len(t.split()))
    prefix = prompt_text(spec.prefix_tokens, seed * 7919 + 1, tok) if spec.prefix_tokens else ""
    dataset_info = None
    if spec.dataset:
        picked, _, dataset_info = sample_prompts(read_prompts(spec.dataset, spec.dataset_field), n_req, seed, count=count,
                                                 min_tokens=spec.dataset_min_tokens, max_tokens=spec.dataset_max_tokens)
        bodies = [q.text for q in picked]
        if spec.output_tokens is None:  # the dataset's reference reply length where it has one
            n_out = np.asarray([q.output_tokens or int(n_out[k]) for k, q in enumerate(picked)], dtype=np.int64)
        dataset_info = {"path": str(spec.dataset), **dataset_info}
    else:
        in_dist = spec.input_tokens or LengthDist("fixed", default_input_tokens, 0.0, 0, max(1, default_input_tokens))
        n_in = in_dist.sample(n_req, rng)
        first = spec.prefix_tokens if spec.prefix_tokens else 0
        if spec.prefix_tokens and (n_in[::spec.turns] < spec.prefix_tokens).any():
            raise HarnessError(f"--prefix-tokens {spec.prefix_tokens} is longer than some first prompts (--input-tokens "
                               f"{in_dist.describe()}); the prefix is part of the input, so keep it below the input length.")
        bodies = []
        for k in range(n_req):
            body_n = int(n_in[k]) - (first if k % spec.turns == 0 else 0)
            bodies.append(prompt_text(body_n, seed * 1_000_003 + k + 17, tok))
    live = spec.replies == "live" and spec.turns > 1
    think = parse_think_time(spec.pause_s)
    pauses = think.sample(n_req, np.random.default_rng(seed + 5_555_555)) if spec.turns > 1 else np.zeros(n_req)
    rows = []
    i = 0
    for s, t in enumerate(schedule.intended_s):
        history = ""
        for k in range(spec.turns):
            j = s * spec.turns + k
            body = bodies[j]
            if k == 0:
                text = f"{prefix} {body}" if prefix and body else (prefix or body)
            elif live:  # the client sends the history with the server's actual replies (workloads.conversation)
                text = body
            else:  # the earlier answer is stood in for by synthetic text of its length, then the new user text
                text = f"{history} {synthetic_words(int(n_out[j - 1]), seed * 31 + s * 101 + k)} {body}"
            history = text
            n_prompt = count(text) if (tok or spec.dataset or k or prefix) else int(n_in[j])
            rows.append({"request_index": i, "session_id": s, "turn": k, "intended_s": float(t) if k == 0 else math.nan,
                         "pause_before_s": float(pauses[j]) if k else 0.0, "api": api, "prompt": text,
                         "prompt_tokens_target": int(n_prompt), "max_tokens": int(n_out[j]),
                         "prefix_group": 0 if spec.prefix_tokens else (s if spec.turns > 1 else -1),
                         "prefix_tokens": int(spec.prefix_tokens)})
            i += 1
    m = {"mix": name, "seed": seed, "schedule": schedule.to_dict(), "tokenizer": tok.path if tok else "synthetic-words",
         "turns": spec.turns, "pause_s": think.to_dict() if not think.is_fixed else think.mean_s,
         "replies": ("live" if live else "synthetic") if spec.turns > 1 else None, **base_meta}
    if dataset_info:
        m["dataset"] = dataset_info
    return WorkloadArtifact(name, rows, m)

