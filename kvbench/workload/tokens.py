"""Token counts of prompt text: a local tokenizer.json (the optional `tokenizers` package), the target server's
/tokenize (counts fetched before the run, workload/servertokens.py) or ceil(chars / 4).

A counter also says where each 512-token block of a text ends (character offsets), so prefix block ids cut the
text where the tokens say. The estimate's blocks are 2,048 characters, the ids the ShareGPT reader always gave.
A server gives counts, not offsets: its blocks are a fixed number of characters, 512 tokens at the characters
per token measured over all the texts it counted, so a shared prefix still gives shared ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kvbench.config import ConfigError
from kvbench.units import MOONCAKE_BLOCK_TOKENS
from kvbench.workload.servertokens import TokenizeEndpoint, count_all

CHARS_PER_TOKEN = 4
ESTIMATE_SOURCE = "estimate: ceil(characters / 4)"
Tokenizer = str | TokenizeEndpoint  # --tokenizer: a tokenizer.json path ("" for none) or a probed /tokenize


@dataclass(frozen=True)
class TokenCounter:
    """`source`: how counts are made (run.json's workload.tokens); `tokenizer`: a tokenizers.Tokenizer or None;
    `counts`: a server's counts of every text this counter is asked about, `chars_per_token` measured over them."""

    source: str = ESTIMATE_SOURCE
    tokenizer: Any = None
    counts: Mapping[str, int] | None = None
    chars_per_token: float = CHARS_PER_TOKEN

    def count(self, text: str) -> int:
        """Tokens of `text`, at least 1."""
        if self.counts is not None:
            return max(1, self.counts[text])
        if self.tokenizer is None:
            return max(1, -(-len(text) // CHARS_PER_TOKEN))
        return max(1, len(self.tokenizer.encode(text, add_special_tokens=False).ids))

    def block_ends(self, text: str, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[int]:
        """Character offsets where each block of `block_tokens` tokens ends; the last is len(text)."""
        if not text:
            return []
        if self.tokenizer is None:
            step = max(1, round(block_tokens * self.chars_per_token))
            return [*range(step, len(text), step), len(text)]
        offsets = self.tokenizer.encode(text, add_special_tokens=False).offsets
        ends = [offsets[k - 1][1] for k in range(block_tokens, len(offsets), block_tokens)]
        return [*ends, len(text)]


ESTIMATE = TokenCounter()


def tokenizer_file(path: str | Path) -> Path:
    """The tokenizer.json a --tokenizer path names (the file, or a folder holding one)."""
    p = Path(path)
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise ConfigError(f"--tokenizer {path}: no such file (a tokenizer.json, or a folder holding one)")
    return file.resolve()


def counts_source(path: Tokenizer | Path | None) -> str:
    """How tokens are counted with this --tokenizer (run.json's workload.tokens)."""
    if isinstance(path, TokenizeEndpoint):
        return path.describe()
    return f"tokenizer.json: {tokenizer_file(path)}" if path else ESTIMATE_SOURCE


def tokens_label(source: str | None) -> str | None:
    """How a report or summary labels a run's token counts: 'estimated (chars/4)' or 'tokenizer: ...' (None when
    the workload gives token counts itself)."""
    if not source:
        return None
    return "estimated (chars/4)" if source == ESTIMATE_SOURCE else f"tokenizer: {source}"


class Counter(Protocol):
    """What a reader asks of a token counter."""

    def count(self, text: str) -> int: ...

    def block_ends(self, text: str, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[int]: ...


class TextCollector:
    """The estimate, remembering every text it is asked to count: the first pass of a server count."""

    __slots__ = ("texts",)

    def __init__(self) -> None:
        self.texts: list[str] = []

    def count(self, text: str) -> int:
        self.texts.append(text)
        return ESTIMATE.count(text)

    def block_ends(self, text: str, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[int]:
        return ESTIMATE.block_ends(text, block_tokens)


def server_counter(ep: TokenizeEndpoint, texts: Iterable[str]) -> TokenCounter:
    """A counter answering from the server's counts of `texts` (asked for before the run, never after)."""
    counts = count_all(ep, texts)
    tokens, chars = sum(counts.values()), sum(len(t) for t in counts)
    return TokenCounter(ep.describe(), None, counts, chars / tokens if tokens else CHARS_PER_TOKEN)


def token_counter(path: str | Path | None) -> TokenCounter:  # a TokenizeEndpoint: server_counter
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
