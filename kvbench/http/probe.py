"""Blocking set-up probes before a run: the served model name, the tokenizer's tokens per synthesised word and
the /tokenize that --tokenizer server counts a text workload with."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import replace

from kvbench.config import ConfigError
from kvbench.http.profile import EndpointProfile, load_profile
from kvbench.http.prompts import calibration_texts
from kvbench.workload.servertokens import TokenizeEndpoint
from kvbench.workload.servertokens import probe as probe_tokenize

PROBE_TIMEOUT_S = 30.0


def auth_headers(prof: EndpointProfile) -> dict[str, str]:
    """Profile headers plus the bearer key read from the named env var (never stored in the profile or logs)."""
    headers = {"Content-Type": "application/json", **prof.headers}
    if prof.api_key_env:
        key = os.environ.get(prof.api_key_env)
        if not key:
            raise ConfigError(f"target profile: api_key_env names {prof.api_key_env!r}, which is not set")
        headers["Authorization"] = f"Bearer {key}"
    return headers


def _call(prof: EndpointProfile, url: str, body: dict | None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=auth_headers(prof), method="GET" if data is None else "POST")
    with urllib.request.urlopen(req, timeout=PROBE_TIMEOUT_S) as resp:
        return json.loads(resp.read())


def served_model(prof: EndpointProfile) -> str:
    """The profile's model, else the first id listed by GET /models (llama.cpp and vLLM list the served name)."""
    if prof.model:
        return prof.model
    try:
        ids = [m["id"] for m in _call(prof, prof.base_url + "/models", None).get("data", [])]
    except urllib.error.HTTPError as e:
        hint = " (the URL should end in /v1, e.g. http://HOST:PORT/v1)" if not prof.base_url.endswith("/v1") else ""
        raise ConfigError(f"{prof.base_url}/models: HTTP {e.code} {e.reason}{hint}") from None
    except OSError as e:  # refused, unknown host, timed out: nothing answers there, a model name would not help
        why = getattr(e, "reason", None) or e
        raise ConfigError(
            f"{prof.base_url}/models: cannot reach the server ({why}); is it running at that address?"
        ) from None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            f"{prof.base_url}/models: not an OpenAI model list ({type(e).__name__}: {e}); "
            f"name the model with --model NAME (or --set model=NAME)"
        ) from None
    if not ids:
        raise ConfigError(f"{prof.base_url}/models lists no model; set --set model=NAME")
    return ids[0]


def count_tokenize(prof: EndpointProfile, model: str, text: str) -> int:
    """Token count from the server's /tokenize (llama.cpp reads `content`, vLLM `prompt` and answers `count`)."""
    out = _call(prof, prof.root_url + prof.tokenize_path, {"model": model, "content": text, "prompt": text})
    return int(out["count"]) if "count" in out else len(out["tokens"])


def count_usage(prof: EndpointProfile, model: str, text: str) -> int:
    """Prompt tokens the server reports for a one-token, non-streamed request."""
    body: dict = {"model": model, "max_tokens": 1, **prof.extra_body, "stream": False}
    if prof.api == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return int(_call(prof, prof.endpoint_url, body)["usage"]["prompt_tokens"])


def calibrate_word_tokens(prof: EndpointProfile, model: str) -> float:
    """Calibrate: Δtokens / Δwords of two probe texts (cancels BOS and template overhead); 1.0 when off."""
    if prof.word_tokens > 0:
        return prof.word_tokens
    if prof.calibrate == "off":
        return 1.0
    counters = {"auto": (count_tokenize, count_usage), "tokenize": (count_tokenize,), "usage": (count_usage,)}
    (w1, t1), (w2, t2) = calibration_texts()
    errors = []
    for count in counters[prof.calibrate]:
        try:
            n1, n2 = count(prof, model, t1), count(prof, model, t2)
        except (OSError, ValueError, KeyError, TypeError, urllib.error.HTTPError) as e:
            errors.append(f"{count.__name__}: {type(e).__name__}: {e}")
            continue
        if n2 > n1:
            return (n2 - n1) / (w2 - w1)
        errors.append(f"{count.__name__}: counts {n1}, {n2} do not grow with the text")
    raise ConfigError(
        f"{prof.base_url}: cannot calibrate prompt length ({'; '.join(errors)}); "
        f"set word_tokens in the profile or --set calibrate=off"
    )


def prepare(prof: EndpointProfile) -> EndpointProfile:
    """The profile with `model` and `word_tokens` filled in (done once; workers inherit the result)."""
    model = served_model(prof)
    return replace(prof, model=model, word_tokens=calibrate_word_tokens(replace(prof, model=model), model))


def tokenize_endpoint(params: dict, source: str = "") -> TokenizeEndpoint | str:
    """--tokenizer server: the target's /tokenize probed for its body shape, or why it cannot count (the caller
    warns and falls back to the estimate)."""
    prof = load_profile(params, source)
    return probe_tokenize(prof.root_url + prof.tokenize_path, auth_headers(prof), prof.model)
