"""Endpoint profile: the `kind = "openai"` TOML (after --set overrides) validated into a frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kvbench.config import ConfigError, check_keys, where

APIS = ("completions", "chat")
CALIBRATE = ("auto", "tokenize", "usage", "off")
DEFAULT_METRIC_PREFIXES = ("vllm:", "sglang:", "llamacpp:")


@dataclass(frozen=True)
class EndpointProfile:
    """Every key of an endpoint profile. The defaults are the generic profile (adapters/openai.toml)."""

    base_url: str = "http://127.0.0.1:8000/v1"  # ends in /v1; /completions or /chat/completions is appended
    api: str = "completions"  # completions | chat
    model: str = ""  # "" = the first id of GET /models
    api_key_env: str = ""  # name of the env var holding the key, sent as "Authorization: Bearer ..."
    ignore_eos: bool = True  # send "ignore_eos": true so the output runs to max_tokens
    min_tokens: bool = False  # also send "min_tokens" = max_tokens (vLLM, SGLang; llama.cpp has none)
    include_usage: bool = True  # send stream_options.include_usage (usage incl. cached_tokens in the last chunk)
    extra_body: dict = field(default_factory=dict)  # merged into every request body
    headers: dict = field(default_factory=dict)  # extra HTTP headers
    connect_timeout_s: float = 10.0  # TCP connect limit -> "connect" error
    read_timeout_s: float = 60.0  # longest silence: before response headers -> "timeout", mid-stream -> "stall"
    request_timeout_s: float = 0.0  # whole attempt limit from its send, 0 = derived (http/watchdog.py) -> "timeout"
    retries: int = 0  # explicit retries of a failed attempt that received no token yet; 0 = never retry
    max_connections: int = 0  # connector pool size, 0 = unlimited (the replayer bounds what is in flight)
    salt: bool = True  # mix a per-run salt into the prompt text so an earlier run's warm cache cannot hit
    calibrate: str = "auto"  # auto (tokenize, else usage) | tokenize | usage | off
    word_tokens: float = 0.0  # > 0 skips calibration; the synthesised words' tokens per word for this tokenizer
    tokenize_path: str = "/tokenize"  # on the server root (llama.cpp, vLLM), not under /v1
    lag_warn_ms: float = 10.0  # warn when client lag (send - intended arrival) p99 exceeds this
    scrape_interval_s: float = 0.0  # scrape Prometheus metrics every this many seconds, 0 = off
    metrics_path: str = "/metrics"  # on the server root
    metric_prefixes: tuple = DEFAULT_METRIC_PREFIXES  # metric families kept ("" keeps all)
    max_event_bytes: int = 64 << 20  # an SSE event larger than this is a protocol error

    @property
    def root_url(self) -> str:
        """The server root: base_url without a trailing /v1."""
        return self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url

    @property
    def endpoint_url(self) -> str:
        return self.base_url + ("/chat/completions" if self.api == "chat" else "/completions")


_KEYS = ("kind",) + tuple(f.name for f in fields(EndpointProfile))
_NUMBER_MIN = {
    "connect_timeout_s": 0.001,
    "read_timeout_s": 0.001,
    "request_timeout_s": 0.0,
    "retries": 0,
    "max_connections": 0,
    "word_tokens": 0.0,
    "lag_warn_ms": 0.0,
    "scrape_interval_s": 0.0,
    "max_event_bytes": 1024,
}
_INTS = ("retries", "max_connections", "max_event_bytes")


def _source_text(source: str) -> str:
    p = Path(source)
    return p.read_text(encoding="utf-8") if source.endswith(".toml") and p.is_file() else ""


def _check_value(key: str, value: Any, default: Any, loc: str) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{loc}: key {key!r} must be true or false, got {value!r}")
        return value
    if key in _NUMBER_MIN:
        ok = isinstance(value, int if key in _INTS else (int, float)) and not isinstance(value, bool)
        if not ok or value < _NUMBER_MIN[key]:
            kind = "an integer" if key in _INTS else "a number"
            raise ConfigError(f"{loc}: key {key!r} must be {kind} >= {_NUMBER_MIN[key]}, got {value!r}")
        return value
    if isinstance(default, dict):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{loc}: key {key!r} must be a table, got {value!r}")
        if key == "headers" and not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{loc}: key 'headers' must map names to strings, got {value!r}")
        return dict(value)
    if isinstance(default, tuple):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{loc}: key {key!r} must be a list of strings, got {value!r}")
        return tuple(value)
    if not isinstance(value, str):
        raise ConfigError(f"{loc}: key {key!r} must be a string, got {value!r}")
    return value


def load_profile(params: dict[str, Any], source: str = "") -> EndpointProfile:
    """Validate a target spec's params (TOML + --set) into a profile; errors name file, line and key."""
    text = _source_text(source)
    check_keys(params, _KEYS, source or "--target", text)
    defaults = EndpointProfile()
    values = {}
    for key, value in params.items():
        if key != "kind":
            values[key] = _check_value(key, value, getattr(defaults, key), where(source or "--target", text, key))
    prof = EndpointProfile(**values)
    loc = source or "--target"
    if prof.api not in APIS:
        raise ConfigError(f"{where(loc, text, 'api')}: key 'api' must be one of {', '.join(APIS)}, got {prof.api!r}")
    if prof.calibrate not in CALIBRATE:
        raise ConfigError(
            f"{where(loc, text, 'calibrate')}: key 'calibrate' must be one of "
            f"{', '.join(CALIBRATE)}, got {prof.calibrate!r}"
        )
    if not prof.base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"{where(loc, text, 'base_url')}: key 'base_url' must start with http:// or https://, got {prof.base_url!r}"
        )
    return EndpointProfile(**{**values, "base_url": prof.base_url.rstrip("/")})
