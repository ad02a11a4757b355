"""The word-level tokenizer guidellm and AIPerf get (nothing may be downloaded): one token per word, as the
fixed-timing target counts."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from workloads.prompts import WORDS


def write_word_tokenizer(out_dir: Path) -> Path:
    """A Hugging Face tokenizer directory (tokenizer.json + tokenizer_config.json) that counts one token per
    whitespace-separated word, as the fixed-timing target does, over the words of workloads.prompts; the
    tools need a tokenizer to build prompts and nothing may be downloaded."""

    vocab = {"[UNK]": 0, "tok": 1}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    out_dir.mkdir(parents=True, exist_ok=True)
    tk.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1_000_000}, indent=2))
    return out_dir
