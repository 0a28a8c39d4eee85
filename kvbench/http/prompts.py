"""Deterministic prompt text from hash_ids: one seeded word stream per block id, so equal ids give equal prefixes."""

from __future__ import annotations

import random

from kvbench.records import Request

# Common short English words: most tokenizers give each about one token, and none of them is a special token.
WORDS = tuple("""
the of and to in is was for on that with as by at from his her they this had not are but which have one were
all their there been has when who will more if out so said what up its about into than them can only other new
some could time these two may then do first any my now such like our over man me even most made after also did
many before must through back years where much your way well down should because each just those people how too
little state good very make world still own see men work long get here between both life being under never day
same another know while last might us great old year off come since against go came right used take three states
himself few house use during without again place around however home small found thought went say part once
general high upon school every does got united left number course war until always away something fact though
water less public put think almost hand enough far took head yet government system better set told nothing night
end why called didn eyes find going look asked later knew point next program city business give group toward young
let days room president side social given present several order national second possible rather per face among
form important often things looking early white case john become large big need four within felt along children
saw best church ever least power development light thing seemed family interest want members mind country area
""".split())
CACHE_BLOCKS = 8192  # block texts kept; a prefix shared by many requests is built once


class PromptBuilder:
    """Text for a request: its blocks' texts in order, the last block cut to the request's remaining length.

    A block is `round(block_tokens / word_tokens)` words drawn from `random.Random(f"{salt}/{id}")` (string
    seeds are hashed with SHA-512, so the text is the same in every process and Python version); the last,
    partial block is the first words of the same stream, so it is a prefix of the full block. Requests without
    hash_ids get blocks private to their req_id.
    """

    __slots__ = ("salt", "word_tokens", "_cache")

    def __init__(self, salt: str = "", word_tokens: float = 1.0):
        if word_tokens <= 0:
            raise ValueError(f"word_tokens must be > 0, got {word_tokens}")
        self.salt, self.word_tokens = salt, word_tokens
        self._cache: dict[tuple[str, int], str] = {}

    def words_for(self, tokens: int) -> int:
        return max(1, round(tokens / self.word_tokens))

    def block(self, key: str, n_words: int) -> str:
        """`n_words` words of block `key`'s stream, one line ending in LF (so blocks tokenize independently)."""
        ck = (key, n_words)
        text = self._cache.get(ck)
        if text is None:
            rng = random.Random(f"{self.salt}/{key}")
            text = " ".join(rng.choices(WORDS, k=n_words)) + "\n"
            if len(self._cache) >= CACHE_BLOCKS:
                del self._cache[next(iter(self._cache))]
            self._cache[ck] = text
        return text

    def text(self, req: Request) -> str:
        if req.prompt is not None:
            return req.prompt
        bt = req.block_tokens
        n_blocks = max(1, -(-req.input_tokens // bt))
        keys = [str(h) for h in req.hash_ids[:n_blocks]]
        keys += [f"r{req.req_id}.{i}" for i in range(len(keys), n_blocks)]
        full = self.words_for(bt)
        parts = [self.block(k, full) for k in keys[:-1]]
        last = req.input_tokens - bt * (n_blocks - 1)
        parts.append(self.block(keys[-1], full) if last == bt else self.block(keys[-1], self.words_for(last)))
        return "".join(parts)

    def messages(self, req: Request) -> list[dict[str, str]]:
        """The chat form: one user message with the same text (no system prompt, so no hidden extra tokens)."""
        return [{"role": "user", "content": self.text(req)}]


def calibration_texts(n_small: int = 200, n_large: int = 1200) -> tuple[tuple[int, str], tuple[int, str]]:
    """Two probe texts built like prompts, (words, text) each; word_tokens = Δtokens / Δwords cancels BOS and
    chat-template overhead."""
    b = PromptBuilder("calibrate", 1.0)
    return (n_small, b.block("probe", n_small)), (n_large, b.block("probe", n_large))
