"""Endpoint profile: the `kind = "openai"` TOML (after --set overrides) validated into a frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from kvbench.config import Range, Source, read

DEFAULT_METRIC_PREFIXES = ("vllm:", "sglang:", "llamacpp:")


@dataclass(frozen=True)
class EndpointProfile:
    """Every key of an endpoint profile. The defaults are the generic profile (kvbench/presets/adapters/openai.toml)."""

    base_url: str = "http://127.0.0.1:8000/v1"  # ends in /v1; /completions or /chat/completions is appended
    api: Literal["completions", "chat"] = "completions"
    model: str = ""  # "" = the first id of GET /models
    api_key_env: str = ""  # name of the env var holding the key, sent as "Authorization: Bearer ..."
    ignore_eos: bool = True  # send "ignore_eos": true so the output runs to max_tokens
    min_tokens: bool = False  # also send "min_tokens" = max_tokens (vLLM, SGLang; llama.cpp has none)
    include_usage: bool = True  # send stream_options.include_usage (usage incl. cached_tokens in the last chunk)
    extra_body: dict[str, Any] = field(default_factory=dict)  # merged into every request body
    headers: dict[str, str] = field(default_factory=dict)  # extra HTTP headers
    connect_timeout_s: Annotated[float, Range(0.001)] = 10.0  # TCP connect limit -> "connect" error
    # longest silence: before response headers -> "timeout", mid-stream -> "stall"
    read_timeout_s: Annotated[float, Range(0.001)] = 60.0
    # whole attempt limit from its send, 0 = derived from the output length (http/watchdog.py) -> "timeout"
    request_timeout_s: Annotated[float, Range(0)] = 0.0
    retries: Annotated[int, Range(0)] = 0  # explicit retries of a failed attempt that received no token yet
    max_connections: Annotated[int, Range(0)] = 0  # pool size, 0 = unlimited (the replayer bounds what is in flight)
    salt: bool = True  # mix a per-run salt into the prompt text so an earlier run's warm cache cannot hit
    calibrate: Literal["auto", "tokenize", "usage", "off"] = "auto"  # auto: tokenize, else usage
    # > 0 skips calibration: the synthesised words' tokens per word for this tokenizer
    word_tokens: Annotated[float, Range(0)] = 0.0
    tokenize_path: str = "/tokenize"  # on the server root (llama.cpp, vLLM), not under /v1
    lag_warn_ms: Annotated[float, Range(0)] = 10.0  # warn when client lag (send - intended arrival) p99 exceeds this
    scrape_interval_s: Annotated[float, Range(0)] = 0.0  # scrape Prometheus metrics every this many seconds, 0 = off
    metrics_path: str = "/metrics"  # on the server root
    metric_prefixes: tuple[str, ...] = DEFAULT_METRIC_PREFIXES  # metric families kept ("" keeps all)
    max_event_bytes: Annotated[int, Range(1024)] = 64 << 20  # an SSE event larger than this is a protocol error

    @property
    def root_url(self) -> str:
        """The server root: base_url without a trailing /v1."""
        return self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url

    @property
    def endpoint_url(self) -> str:
        return self.base_url + ("/chat/completions" if self.api == "chat" else "/completions")


def load_profile(params: dict[str, Any], source: str = "") -> EndpointProfile:
    """Validate a target spec's params (TOML + --set) into a profile; errors name file, line and key."""
    src = Source.of(source or "--target")
    prof = read(EndpointProfile, params, src, ignore=("kind",))
    if not prof.base_url.startswith(("http://", "https://")):
        raise src.bad(("base_url",), "a URL starting with http:// or https://", prof.base_url)
    return replace(prof, base_url=prof.base_url.rstrip("/"))
