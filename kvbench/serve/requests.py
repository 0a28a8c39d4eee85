"""`kvbench serve`'s request bodies: the prompt's tokens (whitespace words) and what to generate (Job)."""

from __future__ import annotations

from typing import Any, NamedTuple

DEFAULT_MAX_TOKENS = 16


def chat_text(messages: Any) -> str:
    """The text a chat prompt is tokenized from: "role: content" per message (content string or text parts)."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    lines = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object")
        content = m.get("content") or ""
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        lines.append(f"{m.get('role', 'user')}: {content}")
    return "\n".join(lines)


def completion_words(prompt: Any) -> list[str]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt.split()
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return [str(t) for t in prompt]  # token ids: one token each
    raise ValueError("'prompt' must be a string, a one-string list, or a list of token ids")


class Job(NamedTuple):
    """One parsed generation request."""

    chat: bool
    prompt_tokens: list[str]
    max_tokens: int
    out_tokens: int
    stream: bool
    include_usage: bool


def parse_job(body: Any, chat: bool, eos_tokens: int) -> Job:
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    words = chat_text(body.get("messages")).split() if chat else completion_words(body.get("prompt"))
    max_tokens = body.get("max_completion_tokens") if chat else None
    max_tokens = max_tokens if max_tokens is not None else body.get("max_tokens", DEFAULT_MAX_TOKENS)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"'max_tokens' must be a positive integer, got {max_tokens!r}")
    if body.get("n", 1) != 1:
        raise ValueError("only n=1 is supported")
    out = max_tokens
    if eos_tokens and not body.get("ignore_eos", False):
        out = min(max_tokens, max(eos_tokens, int(body.get("min_tokens") or 0)))
    opts = body.get("stream_options") or {}
    return Job(
        chat,
        words,
        max_tokens,
        out,
        bool(body.get("stream", False)),
        bool(isinstance(opts, dict) and opts.get("include_usage")),
    )
