"""Token counts from an inference server's POST /tokenize (llama-server and vLLM both serve it), before a run.

The two servers read different bodies: llama-server `{"content", "add_special"}` answering `{"tokens": [...]}`,
vLLM `{"prompt", "add_special_tokens", "model"}` answering `{"count", "tokens", "max_model_len"}` (and 400 to a
body without `prompt`). One probe picks the shape; then every distinct text is counted once, a bounded number
of requests at a time. No special tokens are added, as with a local tokenizer.json.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kvbench.config import ConfigError

CONCURRENCY = 8  # requests in flight while counting: a server's tokenizer is quick, its HTTP threads are few
TIMEOUT_S = 30.0
PROBE_TEXT = "Hello world, how are you?"
SHAPES = ("llama.cpp", "vllm")


@dataclass(frozen=True)
class TokenizeEndpoint:
    """A server's /tokenize URL, the headers it needs (a key: never recorded), the model and the body shape."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    model: str = ""
    shape: str = "llama.cpp"

    def describe(self) -> str:
        """run.json's workload.tokens (no headers: they may hold a key)."""
        return f"server /tokenize ({self.shape}): {self.url}"

    def body(self, text: str) -> dict[str, Any]:
        if self.shape == "llama.cpp":
            return {"content": text, "add_special": False}
        return {"prompt": text, "add_special_tokens": False, **({"model": self.model} if self.model else {})}


def count(ep: TokenizeEndpoint, text: str) -> int:
    """Tokens of `text` as the server counts them; raises urllib's errors, ValueError on a body without tokens."""
    import urllib.request  # here, not at the top: every workload reader imports this module, few count by server

    data = json.dumps(ep.body(text)).encode()
    headers = {"Content-Type": "application/json", **dict(ep.headers)}
    req = urllib.request.Request(ep.url, data=data, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
        out = json.loads(resp.read())
    if isinstance(out, dict) and isinstance(out.get("count"), int):
        return out["count"]
    if isinstance(out, dict) and isinstance(out.get("tokens"), list):
        return len(out["tokens"])
    raise ValueError("the answer holds neither 'count' nor a 'tokens' list")


def probe(url: str, headers: dict[str, str], model: str = "") -> TokenizeEndpoint | str:
    """The endpoint with the body shape the server answers, or why it cannot count (for the warning)."""
    import urllib.error

    why = []
    for shape in SHAPES:
        ep = TokenizeEndpoint(url, tuple(headers.items()), model, shape)
        try:
            if count(ep, PROBE_TEXT) > 0:  # llama-server answers a vLLM body with no tokens
                return ep
            why.append(f"{shape} body: no tokens")
        except urllib.error.HTTPError as e:
            why.append(f"{shape} body: HTTP {e.code}")
        except (OSError, ValueError) as e:
            why.append(f"{shape} body: {getattr(e, 'reason', None) or e}")
    return f"{url}: no token counts ({'; '.join(why)})"


def count_all(ep: TokenizeEndpoint, texts: Iterable[str]) -> dict[str, int]:
    """Counts of the distinct `texts`, CONCURRENCY requests at a time; any failure fails the whole set."""
    import urllib.error
    from concurrent.futures import ThreadPoolExecutor

    distinct = list(dict.fromkeys(texts))
    try:
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            counts = list(pool.map(lambda t: count(ep, t), distinct))
    except urllib.error.HTTPError as e:
        raise ConfigError(f"{ep.url}: HTTP {e.code} {e.reason} while counting {len(distinct):,} texts") from None
    except (OSError, ValueError) as e:
        why = getattr(e, "reason", None) or e
        raise ConfigError(f"{ep.url}: counting {len(distinct):,} texts failed ({why})") from None
    return dict(zip(distinct, counts))
