"""Endpoint profiles: the shipped adapters load, the generic one equals the defaults, bad input is one line."""

from __future__ import annotations

import pytest

from kvbench.config import ConfigError
from kvbench.http.profile import EndpointProfile, load_profile
from kvbench.targets import resolve


@pytest.mark.parametrize("name", ["openai", "llamacpp-local", "vllm-local", "sglang-local"])
def test_shipped_profiles_load(name):
    spec = resolve(name)
    assert spec.kind == "openai"
    prof = load_profile(spec.params, spec.source)
    assert prof.endpoint_url.endswith("/v1/completions")


def test_generic_profile_is_the_url_default():
    spec = resolve("openai")
    assert load_profile(spec.params, spec.source) == EndpointProfile()
    url = resolve("http://10.0.0.1:9000/v1/", ["api=chat"])
    prof = load_profile(url.params, url.source)
    assert prof.endpoint_url == "http://10.0.0.1:9000/v1/chat/completions" and prof.root_url == "http://10.0.0.1:9000"


def test_exact_length_per_server():
    llama = load_profile(resolve("llamacpp-local").params)
    vllm = load_profile(resolve("vllm-local").params)
    assert (llama.ignore_eos, llama.min_tokens) == (True, False)  # llama.cpp has no min_tokens
    assert (vllm.ignore_eos, vllm.min_tokens) == (True, True)


def test_errors_name_file_line_and_key(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('kind = "openai"\nbase_url = "http://x/v1"\napi = "chatty"\n')
    with pytest.raises(ConfigError, match=r"bad.toml:3: api must be one of completions, chat, got 'chatty'"):
        load_profile(resolve(str(p)).params, str(p))
    p.write_text('kind = "openai"\nretries = -1\n')
    with pytest.raises(ConfigError, match=r"bad.toml:2: retries must be a whole number >= 0, got -1"):
        load_profile(resolve(str(p)).params, str(p))
    p.write_text('kind = "openai"\nmodel = "m"\nignore_eoss = true\n')
    with pytest.raises(ConfigError, match=r"bad.toml:3: unknown key 'ignore_eoss'"):
        load_profile(resolve(str(p)).params, str(p))
    p.write_text('kind = "openai"\n\n[headers]\nx-trace = 5\n')  # header values are strings
    with pytest.raises(ConfigError, match=r"bad.toml:4: headers.x-trace must be a string, got 5"):
        load_profile(resolve(str(p)).params, str(p))
    with pytest.raises(
        ConfigError, match=r"^--target: base_url must be a URL starting with http:// or https://, got 'localhost:8000'"
    ):
        load_profile({"base_url": "localhost:8000"})
