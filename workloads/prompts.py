"""Prompt text of a given token length: exact with a tokenizer file, otherwise synthetic words.

Synthetic text is drawn from common English words that most BPE vocabularies encode as one token
each (with the leading space); the embedded target counts one token per word, so its length is
exact there, and against a real server the server-reported prompt length is what the records keep.
With a tokenizer file (Hugging Face tokenizer.json, read by the `tokenizers` package) the text is
cut to exactly N tokens of that tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.errors import HarnessError

WORDS = tuple(
    """the of and to in is was for on that with as by at from it his an are were which be this has had not or
    but their one its also first new after who they have her two been other she when there all time during into
    would more school people only most world some can made out up about many state year may over years these
    then city where such later well used him both known part between three under while each through any team
    back best same under being since game use area could before high work found around life west north south
    east group since long large small local early much family public name general home last what during season
    four several film line own well began based since five member series side line great day war music order
    will system held album included set way end point did take place another head case down end five six
    seven eight nine ten order power book water road land air light form house left right city center party""".split()
)


def synthetic_words(n_tokens: int, seed: int) -> str:
    """`n_tokens` space-separated words, deterministic in `seed`."""
    if n_tokens < 0:
        raise HarnessError(f"prompt length must be >= 0 tokens, got {n_tokens!r}.")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(WORDS), size=n_tokens)
    return " ".join(WORDS[i] for i in idx)


class TokenizerText:
    """Exact-length text for one tokenizer file (needs `pip install tokenizers`)."""

    def __init__(self, path: str | Path):
        p = Path(path)
        if not p.is_file():
            raise HarnessError(f"tokenizer file {str(p)!r} does not exist; give the model's tokenizer.json.")
        try:
            # lazy: only a --tokenizer file needs it; the guard names the fix when it is missing
            from tokenizers import Tokenizer  # type: ignore[import-not-found]
        except ImportError:
            raise HarnessError("a tokenizer file was given but the `tokenizers` package is missing; run: .venv/bin/pip install tokenizers") from None
        try:
            self.tok = Tokenizer.from_file(str(p))
        except Exception as exc:  # noqa: BLE001 - the library raises plain Exception on bad files
            raise HarnessError(f"tokenizer file {p} could not be read ({exc}); give a Hugging Face tokenizer.json.") from None
        self.path = str(p)

    def count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    def text(self, n_tokens: int, seed: int) -> str:
        """Text that this tokenizer encodes to exactly `n_tokens` tokens."""
        if n_tokens == 0:
            return ""
        text = synthetic_words(n_tokens + 16, seed)
        for _ in range(8):
            ids = self.tok.encode(text, add_special_tokens=False).ids
            if len(ids) < n_tokens:
                text = text + " " + synthetic_words(n_tokens - len(ids) + 8, seed + len(ids))
                continue
            text = self.tok.decode(ids[:n_tokens])
            if self.count(text) == n_tokens:
                return text
        raise HarnessError(f"could not make text of exactly {n_tokens} tokens with {self.path}; the tokenizer does not round-trip.")


def prompt_text(n_tokens: int, seed: int, tokenizer: TokenizerText | None = None) -> str:
    return tokenizer.text(n_tokens, seed) if tokenizer else synthetic_words(n_tokens, seed)
