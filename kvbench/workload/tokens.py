"""Token counts of prompt text: a local tokenizer.json (the optional `tokenizers` package) or ceil(chars / 4).

A counter also says where each 512-token block of a text ends (character offsets), so prefix block ids cut the
text where the tokens say. The estimate's blocks are 2,048 characters, the ids the ShareGPT reader always gave.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.config import ConfigError
from kvbench.units import MOONCAKE_BLOCK_TOKENS

CHARS_PER_TOKEN = 4
ESTIMATE_SOURCE = "estimate: ceil(characters / 4)"


@dataclass(frozen=True)
class TokenCounter:
    """`source`: how counts are made (run.json's workload.tokens); `tokenizer`: a tokenizers.Tokenizer or None."""

    source: str = ESTIMATE_SOURCE
    tokenizer: Any = None

    def count(self, text: str) -> int:
        """Tokens of `text`, at least 1."""
        if self.tokenizer is None:
            return max(1, -(-len(text) // CHARS_PER_TOKEN))
        return max(1, len(self.tokenizer.encode(text, add_special_tokens=False).ids))

    def block_ends(self, text: str, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[int]:
        """Character offsets where each block of `block_tokens` tokens ends; the last is len(text)."""
        if not text:
            return []
        if self.tokenizer is None:
            step = block_tokens * CHARS_PER_TOKEN
            return [*range(step, len(text), step), len(text)]
        offsets = self.tokenizer.encode(text, add_special_tokens=False).offsets
        ends = [offsets[k - 1][1] for k in range(block_tokens, len(offsets), block_tokens)]
        return [*ends, len(text)]


def tokenizer_file(path: str | Path) -> Path:
    """The tokenizer.json a --tokenizer path names (the file, or a folder holding one)."""
    p = Path(path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise ConfigError(f"--tokenizer {path}: no such file (a tokenizer.json, or a folder holding one)")
    return file.resolve()


def counts_source(path: str | Path | None) -> str:
    """How tokens are counted with this --tokenizer (run.json's workload.tokens)."""
    return f"tokenizer.json: {tokenizer_file(path)}" if path else ESTIMATE_SOURCE


def token_counter(path: str | Path | None) -> TokenCounter:
    """The counter of a tokenizer.json (or a folder holding one); the estimate without a path."""
    if not path:
        return TokenCounter()
    file = tokenizer_file(path)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError(
            "--tokenizer needs the `tokenizers` package: pip install 'kvbench[tokens]' (or pip install tokenizers)"
        ) from None
    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as e:  # the library raises its own Exception subclass for a malformed file
        raise ConfigError(f"{file}: not a tokenizer.json ({str(e)[:200]})") from None
    return TokenCounter(counts_source(file), tok)
