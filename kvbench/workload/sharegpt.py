"""ShareGPT-style JSON conversations -> multi-turn sessions with real prompt text and content-derived block ids.

Each human message opens a turn whose prompt is the whole conversation so far (rendered as "User: ...\\n\\n" and
"Assistant: ...\\n\\n" paragraphs) plus that message, so a turn's prompt starts with the previous turn's prompt.
Token counts come from a local tokenizer.json when one is given, else they are an offline estimate,
ceil(characters / 4) (OpenAI's rule of thumb for English; see docs/workloads.md for its error), and a block of 512
tokens is then 2,048 characters (kvbench/workload/tokens.py). Block ids are a hash chain over the text of each
512-token block (blake2b of the previous id and the block's text, 63 bits), so equal ids mean an equal prefix,
in any process. A turn's output length is the estimate of the assistant's reply when the file has one, else drawn
from the workload's output distribution.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.units import MOONCAKE_BLOCK_TOKENS
from kvbench.workload.synth import finalize
from kvbench.workload.tokens import (
    ESTIMATE,
    Counter,
    TextCollector,
    TokenizeEndpoint,
    Tokenizer,
    server_counter,
    token_counter,
)

MAX_CHARS = 40_000_000  # 10 M tokens: the readers' bound on a single length
USER_ROLES = frozenset({"human", "user"})
ASSISTANT_ROLES = frozenset({"gpt", "chatgpt", "assistant", "bard", "bing", "model"})
SYSTEM_ROLES = frozenset({"system"})


def estimate_tokens(text: str) -> int:
    """Offline token estimate: ceil(len(text) / 4), at least 1."""
    return ESTIMATE.count(text)


def block_ids(text: str, counter: Counter = ESTIMATE) -> tuple[int, ...]:
    """Prefix hash chain over the text of each 512-token block (the last may be partial): stable across
    processes. With the estimate, blocks of 2,048 characters."""
    ids = []
    prev, start = b"", 0
    for end in counter.block_ends(text, MOONCAKE_BLOCK_TOKENS):
        digest = hashlib.blake2b(prev + text[start:end].encode("utf-8", "surrogatepass"), digest_size=8)
        prev, start = digest.digest(), end
        ids.append(int.from_bytes(prev, "big") >> 1)
    return tuple(ids)


@dataclass(frozen=True)
class Turn:
    prompt: str
    input_tokens: int
    hash_ids: tuple[int, ...]
    output_tokens: int | None  # estimated from the recorded reply, None when the file has none


def _load(path: Path) -> list:
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, expected a ShareGPT JSON file")
    raw = path.read_bytes()
    if not raw.strip():
        raise ConfigError(f"{path}: empty file, expected a JSON list of conversations")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        line = raw[: getattr(e, "pos", 0) or 0].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: invalid JSON ({e})") from None
    if not isinstance(data, list):
        raise ConfigError(f"{path}: expected a JSON list of {{id, conversations}} objects, got {type(data).__name__}")
    return data


def _messages(conv: object, where: str) -> list[tuple[str, str]]:
    if not isinstance(conv, dict):
        raise ConfigError(f"{where}: expected an object with 'conversations', got {type(conv).__name__}")
    msgs = conv.get("conversations")
    if not isinstance(msgs, list):
        raise ConfigError(f"{where}: field 'conversations': expected a list of {{from, value}} messages")
    out = []
    for j, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("from"), str) or not isinstance(m.get("value"), str):
            raise ConfigError(f'{where}: field \'conversations[{j}]\': expected {{"from": str, "value": str}}')
        role = m["from"].lower()
        if role not in USER_ROLES | ASSISTANT_ROLES | SYSTEM_ROLES:
            raise ConfigError(f"{where}: field 'conversations[{j}].from': unknown role {m['from']!r}")
        if len(m["value"]) > MAX_CHARS:
            raise ConfigError(
                f"{where}: field 'conversations[{j}].value': {len(m['value']):,} characters, more than {MAX_CHARS:,}"
            )
        out.append((role, m["value"]))
    return out


def _render(role: str, text: str) -> str:
    label = "User" if role in USER_ROLES else "Assistant" if role in ASSISTANT_ROLES else "System"
    return f"{label}: {text}\n\n"


def conversation_turns(msgs: list[tuple[str, str]], counter: Counter = ESTIMATE) -> list[Turn]:
    """One Turn per user message: prompt = history + message; output = the reply that follows, if any."""
    turns = []
    history = ""
    for j, (role, text) in enumerate(msgs):
        history += _render(role, text)
        if role not in USER_ROLES:
            continue
        reply = msgs[j + 1] if j + 1 < len(msgs) and msgs[j + 1][0] in ASSISTANT_ROLES else None
        out = counter.count(reply[1]) if reply else None
        turns.append(Turn(history, counter.count(history), block_ids(history, counter), out))
    return turns


def read_sharegpt(path: str | Path, counter: Counter = ESTIMATE) -> list[list[Turn]]:
    """Conversations with at least one user message, in file order (others are skipped: nothing to send)."""
    p = Path(path)
    sessions = []
    for i, conv in enumerate(_load(p)):
        turns = conversation_turns(_messages(conv, f"{p}: record {i}"), counter)
        if turns:
            sessions.append(turns)
    if not sessions:
        raise ConfigError(f"{p}: no conversation with a user message")
    return sessions


def read_counted(path: str | Path, tokenizer: Tokenizer) -> list[list[Turn]]:
    """read_sharegpt with the --tokenizer's counts. A server's /tokenize is asked about every distinct text the
    reader counts (found by a first pass with the estimate), all before the run."""
    if not isinstance(tokenizer, TokenizeEndpoint):
        return read_sharegpt(path, token_counter(tokenizer))
    texts = TextCollector()
    read_sharegpt(path, texts)
    return read_sharegpt(path, server_counter(tokenizer, texts.texts))


def to_requests(
    sessions: list[list[Turn]],
    starts_ns: np.ndarray,
    out_tokens: np.ndarray,
    out_reason: np.ndarray,
    think_ns: np.ndarray,
    name: str,
    limit: int | None = None,
) -> list[Request]:
    """Sessions started at `starts_ns` (one per session, ascending); turn k > 0 follows after `think_ns[k]`.

    `out_tokens`, `out_reason`, `think_ns` (one per turn, in session order) fill what the file does not record.
    Single-turn conversations are plain requests (session -1); ids are dense in arrival order.
    """
    reqs = []
    k = 0
    for sid, (turns, t0) in enumerate(zip(sessions, starts_ns)):
        t = int(t0)
        session_id = sid if len(turns) > 1 else -1
        for turn, tr in enumerate(turns):
            think = int(think_ns[k]) if turn else 0
            t += think
            n_out = tr.output_tokens if tr.output_tokens is not None else int(out_tokens[k])
            reason = 0 if tr.output_tokens is not None else min(n_out, int(out_reason[k]))
            reqs.append(
                Request(
                    0,
                    t,
                    tr.input_tokens,
                    n_out,
                    tr.hash_ids,
                    MOONCAKE_BLOCK_TOKENS,
                    session_id,
                    turn,
                    think,
                    reason,
                    tr.prompt,
                    name,
                )
            )
            k += 1
    return finalize(reqs, limit)
