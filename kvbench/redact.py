"""Keeping credentials out of run.json, reports and messages: secret keys by exact name, URLs by shape, known values."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"
# Exact names (case and -/_ folded) of keys, headers and query parameters that carry credentials. Names are matched
# whole, never by substring: token_budget, max_tokens or api_key_env are settings, not secrets.
SECRET_NAMES = frozenset(
    {
        "authorization", "proxy_authorization", "api_key", "apikey", "x_api_key", "api_token", "access_token",
        "auth_token", "bearer", "password", "passwd", "secret", "client_secret", "cookie", "set_cookie", "key",
        "token", "sig", "signature", "x_goog_api_key", "ocp_apim_subscription_key",
    }
)  # fmt: skip
_URL = re.compile(r"\bhttps?://[^\s'\"<>]+")
MIN_SECRET_CHARS = 4  # shorter values would blank out ordinary words


def is_secret_name(name: str) -> bool:
    return re.sub(r"[-\s]", "_", name.strip().lower()) in SECRET_NAMES


def redact_url(url: str) -> str:
    """The URL without its userinfo password and with credential query parameters blanked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{REDACTED}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if is_secret_name(k) else v) for k, v in pairs], safe="<>")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Text with every URL redacted and every known secret value replaced (e.g. a key echoed in an error body)."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    for value in sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def scrub(text: str | None, secrets: Iterable[str]) -> str | None:
    """`text` itself when it holds no URL and none of `secrets` (the common case, checked cheaply), else
    redact_text's copy: for free text from outside, such as an error body a server echoed the key in."""
    if text is None or ("://" not in text and not any(s in text for s in secrets)):
        return text
    return redact_text(text, secrets)


def redact_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of nested settings with credential values replaced and URLs redacted."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if is_secret_name(str(key)):
            out[key] = REDACTED
        elif isinstance(value, Mapping):
            out[key] = redact_params(value)
        elif isinstance(value, str):
            out[key] = redact_text(value)
        else:
            out[key] = value
    return out


def redact_argv(argv: Iterable[str], secrets: Iterable[str] = ()) -> list[str]:
    """A command line with `--set KEY=VALUE` credentials, URLs and known secret values redacted."""
    known = list(secrets)
    out = []
    for arg in argv:
        key, eq, _ = arg.partition("=")
        if eq and is_secret_name(key.rsplit(".", 1)[-1]):
            out.append(f"{key}={REDACTED}")
        else:
            out.append(redact_text(arg, known))
    return out


def secret_values(params: Mapping[str, Any]) -> list[str]:
    """Every credential value in nested settings and URL userinfo, to scrub from free text."""
    found: list[str] = []
    for key, value in params.items():
        if isinstance(value, Mapping):
            found += secret_values(value)
        elif isinstance(value, str) and is_secret_name(str(key)):
            found += [value, value.removeprefix("Bearer ").strip()]
        elif isinstance(value, str):
            found += [m.group(1) for m in re.finditer(r"https?://[^/\s@]*:([^/\s@]+)@", value)]
    return [v for v in found if len(v) >= MIN_SECRET_CHARS]
