"""The isolated stage requests the twin of llama-server is corrected from: one record per request (client against
engine) and the protocol that names them.

The CPU loop (harness.loop.stages) sends these requests to the engine; the twin's corrections (harness.target.
corrections) read them back by phase: "prefill" (a prompt of the prefill length, then PREFILL_DECODE_TOKENS tokens
alone), "decode@B" (B concurrent decodes in consecutive slots), "longdecode@B" (the same after long prompts),
"prompt" (a prompt alone at another length), the mixed-prompt phases ("mixedalone@P/B", "mixeddecode@P/B",
"mixed@P/B": a P-token prompt alone, then B decodes with the same prompt beside them in MIXED_PROMPT_SLOT) and the
prompt-cache copy phases (COPY_PHASES).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from harness.errors import HarnessError

PREFILL_DECODE_TOKENS = 32  # tokens each isolated prefill then decodes alone: the batch-1 step at the long prompt's context
MIXED_PROMPT_SLOT = 1  # the prompt's slot; the decodes take slot 0 and then 2, 3, ...: slot 0 and 1 are consecutive, so
# llama_decode's equal split puts the first decode token and the prompt's first token in one micro-batch
MIXED_KINDS = ("mixed", "mixeddecode", "mixedalone")  # the prompt beside decodes, its decodes, the same prompt alone just before
SAVE_PROBE_TOKENS = 16  # the small requests around a prompt-cache copy: their own slot states copy in ~0.1 ms
COPY_PHASES = ("savewarm", "savebase", "save@", "case@")  # the phases of the prompt-cache copy measurement


@dataclass(frozen=True)
class StageShape:
    """The lengths of the isolated requests: the prefill's prompt, the decodes' prompt and output."""

    prompt_tokens: int
    decode_prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class RequestCheck:
    """One request: what the client saw next to what the engine reported (the per-run cross-check)."""

    phase: str  # "prefill" | "decode@B"
    rep: int
    client_ttft_s: float | None
    engine_prompt_s: float | None  # timings.prompt_ms
    ttft_minus_engine_prompt_s: float | None  # client overhead + first sampling + HTTP
    engine_prompt_tokens: int | None  # timings.prompt_n
    usage_prompt_tokens: int | None
    client_chunks: int
    usage_completion_tokens: int | None
    engine_predicted_tokens: int | None  # timings.predicted_n
    chunks_minus_usage: int | None
    engine_decode_s: float | None  # timings.predicted_ms
    client_decode_s: float | None  # first to last chunk
    e2e_s: float
    error: str | None
    window: int = 0  # the stage window it was measured in (harness.loop.windows; 0: before the served points)
    sent_after_s: float | None = None  # mixed prompts: sent this long after the decode request it joined was sent
    max_tokens: int | None = None  # the output tokens asked for (recorded where a request may be stopped before them)
    stopped: bool = False  # the client closed the stream before its end (a mixed prompt's decodes once the prompt is
    # done): no usage; the engine's timings are those of its last streamed token

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def client_step_s(self) -> float | None:
        """The client's mean decode step: first to last content event over the events between; or, when the stream
        carried fewer content events than tokens, (E2E − TTFT) over tokens − 1. llama-server holds back a token whose
        text is empty (e.g. part of an incomplete UTF-8 character), so the events then no longer mark each token:
        a random-weight model's stream of 20 events for 64 tokens read as a step 3.3x too long (2026-12-01)."""
        tokens = self.usage_completion_tokens or self.engine_predicted_tokens or self.client_chunks
        if self.client_chunks >= tokens:
            return self.client_decode_s / (self.client_chunks - 1) if self.client_decode_s and self.client_chunks >= 2 else None
        if tokens < 2 or self.client_ttft_s is None or self.e2e_s <= self.client_ttft_s:
            return None
        return (self.e2e_s - self.client_ttft_s) / (tokens - 1)



    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "request check") -> "RequestCheck":
        try:
            return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
        except TypeError as exc:
            raise HarnessError(f"{source}: {exc}; the run is damaged, rerun it.") from None


def mixed_decode_slots(batch: int) -> tuple[int, ...]:
    """The slots of `batch` decoding requests beside a prompt in MIXED_PROMPT_SLOT."""
    return tuple(i for i in range(batch + 1) if i != MIXED_PROMPT_SLOT)


def mixed_phase(prompt_tokens: int, batch: int, kind: str = "mixed") -> str:
    """The phase of a mixed-prompt measurement's prompt ("mixed@P/B"), of its decodes ("mixeddecode@P/B") or of the
    same-length prompt sent alone just before them ("mixedalone@P/B")."""
    if kind not in MIXED_KINDS:
        raise ValueError(f"mixed-prompt phase kind {kind!r}: one of {', '.join(MIXED_KINDS)}")
    return f"{kind}@{int(prompt_tokens)}/{int(batch)}"


def parse_mixed_phase(phase: str) -> tuple[str, int, int] | None:
    """(kind, P, B) of a mixed-prompt phase (kind one of MIXED_KINDS); None for any other phase."""
    kind, _, rest = phase.partition("@")
    if kind not in MIXED_KINDS or "/" not in rest:
        return None
    p, b = rest.split("/", 1)
    return kind, int(p), int(b)


def mixed_alone_prompt_s(checks: Sequence[RequestCheck]) -> dict[tuple[int, int, int, int], float]:
    """(window, rep, P, B) -> the engine's prompt time of the P-token prompt sent alone just before that rep's decodes
    (phase "mixedalone@P/B", without error): what each prompt beside decodes is paired with."""
    out: dict[tuple[int, int, int, int], float] = {}
    for c in checks:
        ph = parse_mixed_phase(c.phase)
        if ph and ph[0] == "mixedalone" and not c.error and c.engine_prompt_s is not None:
            out[(c.window, c.rep, ph[1], ph[2])] = float(c.engine_prompt_s)
    return out


def window_checks(checks: Sequence[RequestCheck], index: int) -> list[RequestCheck]:
    """The request checks one stage window's correction uses: its own, and for a later window also window 0's
    prompt-cache copy measurement (measured there only)."""
    own = [c for c in checks if c.window == index]
    if index == 0:
        return own
    return own + [c for c in checks if c.window == 0 and c.phase.startswith(COPY_PHASES)]


__all__ = ["COPY_PHASES", "MIXED_KINDS", "MIXED_PROMPT_SLOT", "PREFILL_DECODE_TOKENS", "SAVE_PROBE_TOKENS", "RequestCheck",
           "StageShape", "mixed_alone_prompt_s", "mixed_decode_slots", "mixed_phase", "parse_mixed_phase", "window_checks"]
