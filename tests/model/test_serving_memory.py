"""KV room of a serving instance (§9.7.2's check per card): weights, activations, reserve, and the refusal with its fix."""

import pytest

from harness.errors import HarnessError
from harness.model.parallel import Parallel
from harness.model.precision import get_precision
from harness.model.serving_memory import serving_memory
from harness.specs.gpus import get_gpu
from harness.specs.models import get_model

GiB = 2**30


def _mem(model, tp, prec="fp8", gpu="h200-sxm", kv=2.0, frac=0.9, of="card"):
    return serving_memory(get_model(model), get_gpu(gpu), Parallel(tp=tp), get_precision(prec), kv, usable_fraction=frac,
                          fraction_of=of, step_tokens=8192, max_batch=256, runtime_bytes_per_card=1 * GiB)


def test_kv_tokens_grow_with_cards_and_halve_with_bf16_kv_bytes():
    one, eight = _mem("llama-3.1-70b", 1), _mem("llama-3.1-70b", 8)
    assert eight.kv_tokens > 8 * one.kv_tokens  # the weights leave more room per card as they are split
    assert _mem("llama-3.1-70b", 8, kv=1.0).kv_tokens == pytest.approx(2 * eight.kv_tokens)
    # per card: 320 KiB of BF16 KV a token over 8 cards (one KV head each)
    assert eight.kv_bytes_per_token_card == pytest.approx(2 * 80 * 8 * 128 * 2 / 8)


def test_free_memory_fraction_is_of_what_the_weights_leave():
    card, free = _mem("llama-3.1-8b", 1, frac=0.9), _mem("llama-3.1-8b", 1, frac=0.9, of="free after weights")
    assert free.kv_bytes_per_card == pytest.approx(0.9 * (card.hbm_bytes_per_card - card.weight_bytes_per_card
                                                          - card.activation_bytes_per_card - 1 * GiB))


def test_a_model_that_leaves_no_room_names_the_fix():
    with pytest.raises(HarnessError, match=r"does not fit h100-sxm at tp = 1: .* give a larger tp \(e.g. 2\)"):
        _mem("llama-3.1-70b", 1, prec="bf16", gpu="h100-sxm")
