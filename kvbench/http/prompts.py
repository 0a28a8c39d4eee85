"""Deterministic prompt text from hash_ids: one seeded word stream per block id, so equal ids give equal prefixes."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from kvbench.records import Request

# Common short English words: most tokenizers give each about one token, and none of them is a special token.
WORDS = tuple(
    """
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
""".split()
)
VOCAB = WORDS[:256]  # one digest byte picks one word
_shake = hashlib.shake_256
CACHE_BLOCKS = 8192  # block texts kept; a prefix shared by many requests is built once


class PromptBuilder:
    """Text for a request: its blocks' texts in order, the last block cut to the request's remaining length.

    A block is `round(block_tokens / word_tokens)` words, word i = VOCAB[byte i of SHAKE-256(f"{salt}/{id}")]:
    the same text in every process and Python version, and an extendable output, so the last, partial block
    (the first words of the same stream) is a prefix of the full block. ~3x faster than drawing the words with
    random.choices, which matters: a Mooncake prompt is ~20 blocks of 512 words. Requests without hash_ids get
    blocks private to their req_id.
    """

    __slots__ = ("salt", "word_tokens", "_cache")

    def __init__(self, salt: str = "", word_tokens: float = 1.0):
        if word_tokens <= 0:
            raise ValueError(f"word_tokens must be > 0, got {word_tokens}")
        self.salt, self.word_tokens = salt, word_tokens
        self._cache: OrderedDict[tuple[str, int], str] = OrderedDict()

    def words_for(self, tokens: int) -> int:
        return max(1, round(tokens / self.word_tokens))

    def block(self, key: str, n_words: int, shared: bool = True) -> str:
        """`n_words` words of block `key`'s stream, one line ending in LF (so blocks tokenize independently).
        Only `shared` blocks (trace hash ids) are cached: a private block is never asked for again."""
        ck = (key, n_words)
        text = self._cache.get(ck)
        if text is None:
            text = " ".join([VOCAB[i] for i in _shake(f"{self.salt}/{key}".encode()).digest(n_words)]) + "\n"
            if shared:
                cache = self._cache
                if len(cache) >= CACHE_BLOCKS:
                    cache.popitem(last=False)  # the oldest; O(1), unlike deleting next(iter(dict))
                cache[ck] = text
        return text

    def text(self, req: Request) -> str:
        if req.prompt is not None:
            return req.prompt
        bt, n_in, ids, block = req.block_tokens, req.input_tokens, req.hash_ids, self.block
        n_blocks = -(-n_in // bt) if n_in > bt else 1
        last = n_in - bt * (n_blocks - 1)  # tokens of the last block, which may be partial
        last_words = self.words_for(last)
        if n_blocks == 1:  # the common short prompt: no list of parts
            return block(str(ids[0]), last_words) if ids else block(f"r{req.req_id}.0", last_words, False)
        full = self.words_for(bt)
        parts = [block(str(h), full) for h in ids[: n_blocks - 1]]  # shared blocks (trace hash ids)
        parts += [block(f"r{req.req_id}.{i}", full, False) for i in range(len(parts), n_blocks - 1)]
        k = n_blocks - 1
        parts.append(block(str(ids[k]), last_words) if k < len(ids) else block(f"r{req.req_id}.{k}", last_words, False))
        return "".join(parts)

    def messages(self, req: Request) -> list[dict[str, str]]:
        """The chat form: one user message with the same text (no system prompt, so no hidden extra tokens)."""
        return [{"role": "user", "content": self.text(req)}]


def calibration_texts(n_small: int = 200, n_large: int = 1200) -> tuple[tuple[int, str], tuple[int, str]]:
    """Two probe texts built like prompts, (words, text) each; word_tokens = Δtokens / Δwords cancels BOS and
    chat-template overhead."""
    b = PromptBuilder("calibrate", 1.0)
    return (n_small, b.block("probe", n_small)), (n_large, b.block("probe", n_large))
