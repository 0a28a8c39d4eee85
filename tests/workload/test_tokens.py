"""Token counts of text workloads: the chars/4 estimate (the ids it always gave) and a real tokenizer.json."""

from __future__ import annotations

import hashlib
import json

import duckdb
import pytest
from support.cli import kvbench
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from kvbench.config import ConfigError
from kvbench.eventlog import table_glob
from kvbench.workload.sharegpt import block_ids, conversation_turns
from kvbench.workload.tokens import ESTIMATE_SOURCE, TokenCounter, token_counter

ESTIMATE = TokenCounter()


def _chain(parts: list[str]) -> tuple[int, ...]:
    ids, prev = [], b""
    for part in parts:
        prev = hashlib.blake2b(prev + part.encode(), digest_size=8).digest()
        ids.append(int.from_bytes(prev, "big") >> 1)
    return tuple(ids)


@pytest.fixture
def word_tokenizer(tmp_path):
    """A real tokenizer.json: whitespace and punctuation split, one token per word (unknown words too)."""
    tok = Tokenizer(WordLevel({"[UNK]": 0, "User": 1, ":": 2, "w": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_the_estimate_keeps_2048_character_blocks():
    text = "x" * 5000
    assert ESTIMATE.count(text) == 1250 and ESTIMATE.block_ends(text) == [2048, 4096, 5000]
    assert block_ids(text) == _chain([text[:2048], text[2048:4096], text[4096:]])
    assert ESTIMATE.block_ends("x" * 4096) == [2048, 4096] and ESTIMATE.block_ends("") == []


def test_a_tokenizer_counts_and_cuts_blocks_at_token_512(word_tokenizer):
    counter = token_counter(word_tokenizer)
    text = "User: " + " ".join(["w"] * 600) + "\n\n"
    # tokens: 'User' [0, 4), ':' [4, 5), then the k-th 'w' at [6 + 2(k - 1), 7 + 2(k - 1)): 602 in all;
    # token 512 is the 510th 'w', ending at 7 + 2 x 509 = 1025
    assert counter.count(text) == 602
    assert counter.block_ends(text) == [1025, len(text)]
    assert block_ids(text, counter) == _chain([text[:1025], text[1025:]])
    (turn,) = conversation_turns([("human", " ".join(["w"] * 600)), ("gpt", "w w w")], counter)
    assert (turn.input_tokens, turn.output_tokens) == (602, 3)
    assert counter.source == f"tokenizer.json: {word_tokenizer.resolve()}"


def test_tokenizer_errors_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        token_counter(tmp_path / "missing.json")
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match="not a tokenizer.json"):
        token_counter(tmp_path)  # a folder holding one
    assert token_counter(None) == TokenCounter()


def test_replay_counts_sharegpt_tokens_with_the_tokenizer(tmp_path, word_tokenizer):
    data = tmp_path / "chat.json"
    convs = [{"id": str(i), "conversations": [{"from": "human", "value": " ".join(["w"] * (i + 1))}]} for i in range(3)]
    data.write_text(json.dumps(convs))
    runs = {}
    for name, extra in (("tok", ["--tokenizer", str(word_tokenizer)]), ("est", [])):
        out = tmp_path / name
        r = kvbench("replay", "--trace", str(data), "--target", "fixed", "-o", str(out), "-q", *extra)
        assert r.returncode == 0, r.stderr
        q = f"SELECT input_tokens FROM read_parquet('{table_glob(out, 'requests')}') ORDER BY req_id"
        runs[name] = (
            [n for (n,) in duckdb.connect().execute(q).fetchall()],
            json.loads((out / "run.json").read_text()),
        )
    # "User: w ... w\n\n" with i + 1 words: 'User', ':' and the words
    assert runs["tok"][0] == [3, 4, 5]
    assert runs["tok"][1]["workload"]["tokens"] == f"tokenizer.json: {word_tokenizer.resolve()}"
    assert runs["est"][0] == [3, 3, 4]  # ceil(len / 4) of 9, 11, 13 characters
    assert runs["est"][1]["workload"]["tokens"] == ESTIMATE_SOURCE
    assert runs["tok"][1]["workload"]["digest"] != runs["est"][1]["workload"]["digest"]
