"""Prompt synthesis: deterministic per block id, shared ids share an exact prefix, lengths follow calibration."""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys

from support.faultserver import FaultServer

from kvbench.http.probe import calibrate_word_tokens, count_tokenize, count_usage, prepare
from kvbench.http.profile import load_profile
from kvbench.http.prompts import VOCAB, PromptBuilder
from kvbench.records import Request


def req(rid: int, n_in: int, ids: tuple[int, ...], bt: int = 16) -> Request:
    return Request(rid, 0, n_in, 4, ids, bt)


def test_words_per_block_follow_word_tokens():
    b = PromptBuilder("s", word_tokens=2.0)
    # 40 tokens in 16-token blocks: blocks of 16, 16, 8 tokens -> 8, 8, 4 words at 2 tokens a word
    lines = b.text(req(0, 40, (1, 2, 3))).splitlines()
    assert [len(line.split()) for line in lines] == [8, 8, 4]


def test_shared_ids_share_an_exact_prefix_and_differ_after():
    b = PromptBuilder("s", 1.0)
    a, c = b.text(req(0, 48, (1, 2, 3))), b.text(req(1, 48, (1, 2, 9)))
    la, lc = a.splitlines(keepends=True), c.splitlines(keepends=True)
    assert la[:2] == lc[:2] and la[2] != lc[2]


def test_partial_last_block_is_a_prefix_of_the_full_block():
    b = PromptBuilder("s", 1.0)
    full = b.text(req(0, 32, (1, 2))).splitlines()[1]
    part = b.text(req(1, 16 + 5, (1, 2))).splitlines()[1]
    assert full.split()[:5] == part.split() and len(part.split()) == 5


def test_no_hash_ids_gives_private_blocks_and_prompt_text_wins():
    b = PromptBuilder("s", 1.0)
    assert b.text(req(0, 16, ())) != b.text(req(1, 16, ()))
    assert b.text(Request(5, 0, 3, 1, (1,), prompt="hello there")) == "hello there"
    assert b.messages(Request(5, 0, 3, 1, prompt="hi")) == [{"role": "user", "content": "hi"}]


def test_salt_changes_every_block_and_text_is_the_same_in_another_process():
    a, b = PromptBuilder("run1", 1.0), PromptBuilder("run2", 1.0)
    r = req(0, 32, (1, 2))
    assert a.text(r).splitlines()[0] != b.text(r).splitlines()[0]
    code = (
        "from kvbench.http.prompts import PromptBuilder; from kvbench.records import Request;"
        "print(PromptBuilder('run1', 1.0).text(Request(0, 0, 32, 4, (1, 2), 16)), end='')"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert other == a.text(r)  # no per-process hash(): a new interpreter builds the same bytes


def test_calibration_against_the_server_tokenizer():
    # the fault server counts 2 tokens per word + 1 BOS: Δtokens/Δwords = 2 * 1000 / 1000 = 2.0 either way
    with FaultServer() as srv:
        prof = load_profile({"base_url": srv.base_url}, "")
        prep = prepare(prof)
        assert prep.model == "fault-model" and prep.word_tokens == 2.0
        assert count_tokenize(prep, "m", "a b c") == 7 and count_usage(prep, "m", "a b c") == 7
        usage_only = load_profile({"base_url": srv.base_url, "calibrate": "usage"}, "")
        assert calibrate_word_tokens(usage_only, "m") == 2.0
        assert calibrate_word_tokens(load_profile({"base_url": srv.base_url, "calibrate": "off"}, ""), "m") == 1.0


def test_only_shared_blocks_are_cached_and_the_cache_is_bounded(monkeypatch):
    import kvbench.http.prompts as prompts

    monkeypatch.setattr(prompts, "CACHE_BLOCKS", 3)
    b = PromptBuilder("s", 1.0)
    for rid in range(5):  # private blocks (no hash_ids) are built and never kept
        b.text(req(rid, 40, ()))
    assert len(b._cache) == 0
    b.text(req(9, 40, (1, 2, 3)))  # blocks 1 and 2 whole (16 words), block 3 partial (8 words): 3 entries
    assert list(b._cache) == [("1", 16), ("2", 16), ("3", 8)]
    b.text(req(10, 16, (4,)))  # a 4th shared block evicts the oldest, block 1
    assert list(b._cache) == [("2", 16), ("3", 8), ("4", 16)]
    assert b.text(req(11, 40, (1, 2, 3))) == b.text(req(9, 40, (1, 2, 3)))  # rebuilt from the hash: same text


def reference_text(salt: str, word_tokens: float, r: Request) -> str:
    """The docstring's definition, block by block: word i of block `key` = VOCAB[byte i of SHAKE-256(salt/key)]."""
    n_blocks = max(1, -(-r.input_tokens // r.block_tokens))
    out = []
    for b in range(n_blocks):
        key = str(r.hash_ids[b]) if b < len(r.hash_ids) else f"r{r.req_id}.{b}"
        tokens = r.block_tokens if b < n_blocks - 1 else r.input_tokens - r.block_tokens * (n_blocks - 1)
        words = max(1, round(tokens / word_tokens))
        out.append(" ".join(VOCAB[x] for x in hashlib.shake_256(f"{salt}/{key}".encode()).digest(words)) + "\n")
    return "".join(out)


def test_text_is_the_definition_for_any_length_block_size_and_ids():
    rnd = random.Random(5)
    for word_tokens in (1.0, 1.3, 0.7):
        b = PromptBuilder("s", word_tokens)
        for i in range(400):
            n_in, bt = rnd.randint(1, 1500), rnd.choice([1, 16, 64, 512])
            ids = tuple(rnd.randint(0, 30) for _ in range(rnd.randint(0, min(60, -(-n_in // bt)))))
            r = Request(i, 0, n_in, 4, ids, bt)
            assert b.text(r) == reference_text("s", word_tokens, r), r
