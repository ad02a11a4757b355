"""Prompt text: synthetic words are exact in the embedded target's count; a tokenizer file is checked."""

import pytest

from harness.errors import HarnessError
from harness.target.server import count_prompt_tokens
from workloads.prompts import TokenizerText, synthetic_words


@pytest.mark.parametrize("n", [1, 129, 8192])
def test_synthetic_text_has_exactly_n_words(n):
    text = synthetic_words(n, seed=3)
    assert len(text.split()) == n
    assert count_prompt_tokens(text)[0] == n
    assert synthetic_words(n, seed=3) == text


def test_missing_tokenizer_file_is_named(tmp_path):
    with pytest.raises(HarnessError, match="does not exist"):
        TokenizerText(tmp_path / "nope.json")


def test_exact_length_with_a_tokenizer_file(tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="the optional `tokenizers` package is not installed")
    from tokenizers import Tokenizer, models, pre_tokenizers

    from workloads.prompts import WORDS

    vocab = {"[UNK]": 0}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    tt = TokenizerText(path)
    for n in (1, 100, 1000):
        assert tt.count(tt.text(n, seed=1)) == n
    assert tokenizers is not None
