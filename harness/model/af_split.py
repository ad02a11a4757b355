"""Attention/FFN (AF) split: per-layer activation round trips against one PD state transfer.

Chapter 9, §9.3.4 and example 9.4. With the FFN (or the experts) of every layer on the other side,
each layer sends the hidden vector there and gets a same-size result back: 2·n_layers transfers of
h·b bytes per token per decode step (Qwen3-8B BF16: 72 transfers, 576 KiB, ≈0.384 ms at 25 GB/s
and 5 µs each). Setting one PD transfer V_KV/B + α equal to one AF step V_AF/B + N·α gives the
critical startup latency α* = (V_KV - V_AF)/((N-1)·B); over a whole request AF pays every step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness.errors import HarnessError
from harness.model.kv import transfer_time_s
from harness.specs._validate import non_negative, positive, positive_int
from harness.specs.models import ModelSpec


@dataclass(frozen=True, slots=True)
class AfTransfer:
    """AF traffic of one forward step for `tokens` tokens (one decode step of one request: tokens=1)."""

    tokens: int
    transfers: int  # N = 2·n_layers (there and back per layer)
    bytes_per_transfer: float  # tokens·h·b
    payload_bytes: float  # V_AF = N·tokens·h·b
    payload_s: float  # V_AF / B
    startup_s: float  # N·α
    total_s: float  # serial: V_AF/B + N·α

    def to_dict(self) -> dict:
        return asdict(self)


def af_transfer(
    model: ModelSpec, activation_bytes_per_elem: float, bandwidth_bytes_per_s: float,
    startup_latency_s: float, tokens: int = 1,
) -> AfTransfer:
    """Serial AF transfer time of one step: 2·n_layers launches, each carrying tokens·h·b bytes.

    Example 9.4: Qwen3-8B, BF16, 25 GB/s, 5 µs -> 72 transfers, 576 KiB, 23.6 µs + 360 µs ≈ 0.384 ms;
    an 8192-token prefill through AF moves 4.5 GiB, ≈193 ms of payload alone.
    """
    positive("AF transfer", "activation_bytes_per_elem", activation_bytes_per_elem)
    positive("AF transfer", "bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    non_negative("AF transfer", "startup_latency_s", startup_latency_s)
    positive_int("AF transfer", "tokens", tokens)
    n = 2 * model.n_layers
    per = tokens * model.hidden_size * activation_bytes_per_elem
    payload = n * per
    return AfTransfer(
        tokens=tokens,
        transfers=n,
        bytes_per_transfer=per,
        payload_bytes=payload,
        payload_s=payload / bandwidth_bytes_per_s,
        startup_s=n * startup_latency_s,
        total_s=transfer_time_s(payload, bandwidth_bytes_per_s, startup_latency_s, n),
    )


def critical_startup_latency_s(state_bytes: float, af_payload_bytes: float, af_transfers: int, bandwidth_bytes_per_s: float) -> float:
    """α* = (V_KV - V_AF)/((N-1)·B): below it one AF step is faster than one PD transfer (§9.3.4).

    Qwen3-8B GQA 1.125 GiB: ≈680 µs at 25 GB/s, 340 µs at 50 GB/s; DeepSeek-V3 compact MLA 549 MiB:
    324 and 162 µs. A negative value means the AF step is slower for every α ≥ 0.
    """
    positive("critical startup", "state_bytes", state_bytes)
    non_negative("critical startup", "af_payload_bytes", af_payload_bytes)
    positive("critical startup", "bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    if isinstance(af_transfers, bool) or not isinstance(af_transfers, int) or af_transfers < 2:
        raise HarnessError(f"critical startup: af_transfers must be an integer >= 2, got {af_transfers!r}.")
    return (state_bytes - af_payload_bytes) / ((af_transfers - 1) * bandwidth_bytes_per_s)


@dataclass(frozen=True, slots=True)
class RequestTransfer:
    """One request: AF pays a step's transfer at every decode step, PD moves the state once."""

    state: str
    state_bytes: float
    decode_steps: int
    pd_s: float  # V_KV/B + α
    af_s: float  # decode_steps · (V_AF/B + N·α)
    af_over_pd: float
    critical_startup_latency_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def request_transfer(
    state: str, state_bytes: float, af_step: AfTransfer, decode_steps: int,
    bandwidth_bytes_per_s: float, startup_latency_s: float,
) -> RequestTransfer:
    """§9.3.4: 1024 AF steps ≈393 ms, 8.1× a GQA PD transfer (48.3 ms) and 17× a compact MLA one (23.0 ms)."""
    positive("request transfer", "state_bytes", state_bytes)
    positive_int("request transfer", "decode_steps", decode_steps)
    if af_step.tokens != 1:
        raise HarnessError(f"request transfer: af_step must be one decode step of one request (tokens=1), got tokens={af_step.tokens}.")
    pd = transfer_time_s(state_bytes, bandwidth_bytes_per_s, startup_latency_s)
    af = decode_steps * af_step.total_s
    return RequestTransfer(
        state=state,
        state_bytes=state_bytes,
        decode_steps=decode_steps,
        pd_s=pd,
        af_s=af,
        af_over_pd=af / pd,
        critical_startup_latency_s=critical_startup_latency_s(state_bytes, af_step.payload_bytes, af_step.transfers, bandwidth_bytes_per_s),
    )
