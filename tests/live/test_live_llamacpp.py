"""Live tier, part 1: the tiny GGUF model on a real llama-server (tokenizer, exact lengths, cache, template, metrics)."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.request

import pytest

from kvbench.devservers.tinymodel import SPECIALS, vocabulary, write_tiny_model
from kvbench.http.prompts import WORDS

pytestmark = pytest.mark.live


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def post_stream(url: str, body: dict) -> list[dict]:
    """The parsed `data:` events of a streamed response, up to [DONE]."""
    req = urllib.request.Request(
        url, json.dumps({**body, "stream": True}).encode(), {"Content-Type": "application/json"}
    )
    events = []
    with urllib.request.urlopen(req, timeout=60) as r:
        for raw in r:
            line = raw.strip()
            if line == b"data: [DONE]":
                return events
            if line.startswith(b"data: "):
                events.append(json.loads(line[6:]))
    raise AssertionError("no [DONE]")


def test_tiny_model_small_fast_deterministic(tmp_path):
    t0 = time.process_time()  # this process's CPU time: other load on the machine does not count
    a = write_tiny_model(tmp_path / "a.gguf", seed=3)
    cpu_s = time.process_time() - t0
    b = write_tiny_model(tmp_path / "b.gguf", seed=3)
    c = write_tiny_model(tmp_path / "c.gguf", seed=4)
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b, c)]
    assert digest[0] == digest[1] != digest[2]  # same seed, same bytes; another seed, other weights
    assert a.stat().st_size < 1_000_000
    assert cpu_s < 5.0  # typically ~0.2 s; a generous bound, it only guards against a pathological writer
    tokens, first_sampled = vocabulary()
    # 3 specials + 256 bytes + each prompt word bare and with a leading space.
    assert len(tokens) == 3 + 256 + 2 * len(set(WORDS)) and first_sampled == 3 + 256 + len(set(WORDS))


def test_tokenizer_one_token_per_word(llama_url):
    tokens, _ = vocabulary()
    index = {t: i for i, t in enumerate(tokens)}
    got = post(llama_url + "/tokenize", {"content": "the of and\nthe zq"})["tokens"]
    # Greedy longest match: "the", " of", " and", LF (byte 0x0a), "the", " " (byte), "z", "q" (not words: bytes).
    expected = [
        index["the"],
        index[" of"],
        index[" and"],
        index["\\x0a"],
        index["the"],
        index[" "],
        index["z"],
        index["q"],
    ]
    assert got == expected
    text = post(llama_url + "/detokenize", {"tokens": got})["content"]
    assert text == "the of and\nthe zq"


def test_exact_length_without_ignore_eos_and_words_only(llama_url):
    # No ignore_eos: the model itself never samples an end-of-generation token, so it runs to max_tokens.
    events = post_stream(llama_url + "/v1/completions", {"prompt": "the of and", "max_tokens": 40})
    pieces = [e["choices"][0]["text"] for e in events if e.get("choices") and e["choices"][0]["text"]]
    assert len(pieces) == 40  # one chunk per token
    assert all(p.startswith(" ") and p[1:] in WORDS for p in pieces)  # only " word" tokens are ever sampled
    assert events[-1]["usage"]["completion_tokens"] == 40
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"][0].get("finish_reason")] == ["length"]


def test_prefix_cache_reports_cached_tokens(llama_url):
    body = " ".join(WORDS[i % len(WORDS)] for i in range(0, 3000, 7)[:300]) + "\n"  # 300 words + LF = 301 tokens
    first = post(llama_url + "/v1/completions", {"prompt": body, "max_tokens": 2, "cache_prompt": True})
    second = post(llama_url + "/v1/completions", {"prompt": body + "of the", "max_tokens": 2, "cache_prompt": True})
    assert first["usage"]["prompt_tokens"] == 301
    assert second["usage"]["prompt_tokens"] == 303  # + "of", " the"
    # Token-granular prefix cache: the 301 tokens of the first prompt are reused.
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 301


def test_chat_template_and_usage(llama_url):
    events = post_stream(
        llama_url + "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "the of and"}],
            "max_tokens": 5,
            "stream_options": {"include_usage": True},
        },
    )
    content = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    assert len(content.split()) == 5
    usage = events[-1]["usage"]
    # <|im_start|> "user" LF "the" " of" " and" <|im_end|> LF <|im_start|> "assistant" LF. "user" and "assistant"
    # are not prompt words; greedy longest match gives "use" "r" (2) and "as" "s" "is" "t" "a" "n" "t" (7):
    # 1 + 2 + 1 + 3 + 1 + 1 + 1 + 7 + 1 = 18.
    assert usage["prompt_tokens"] == 18 and usage["completion_tokens"] == 5
    assert SPECIALS[1] == "<|im_start|>"


def test_metrics_exposed(llama_url):
    post(llama_url + "/v1/completions", {"prompt": "the", "max_tokens": 3})
    with urllib.request.urlopen(llama_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    names = {ln.split()[0] for ln in text.splitlines() if ln and not ln.startswith("#")}
    assert {"llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"} <= names


def test_build_says_what_is_missing(tmp_path):
    # A fresh cache (nothing built) and a PATH without cmake: `build` stops with the reason, exit 1, no traceback.
    import os
    import subprocess
    import sys

    env = {**os.environ, "KVBENCH_CACHE": str(tmp_path), "PATH": str(tmp_path)}
    env.pop("KVBENCH_LLAMA_SERVER", None)
    run = [sys.executable, "-m", "kvbench.devservers.llamacpp"]
    r = subprocess.run(run + ["build"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "building llama-server needs cmake, make" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "llama-server-0.3.36" / "llama-server").exists()
    r = subprocess.run(run + ["path"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "not built" in r.stderr
