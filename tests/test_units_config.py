"""units.py conversions and config.py TOML errors (file:line:key) and --set overrides."""

from __future__ import annotations

import pytest

from kvbench.config import ConfigError, apply_overrides, check_keys, load_toml, parse_override
from kvbench.units import (
    amount_at_rate,
    blocks_for,
    bytes_to_gb,
    fmt_ns,
    ms_to_ns,
    ns_at_rate,
    ns_to_ms,
    parse_bytes,
    parse_count,
    s_to_ns,
)


def test_time_conversions_are_exact_integers():
    assert ms_to_ns(3_536_999) == 3_536_999_000_000  # the last Mooncake conversation timestamp
    assert ms_to_ns(0.5) == 500_000 and s_to_ns(1.25) == 1_250_000_000
    assert ns_to_ms(2_500_000) == 2.5
    assert fmt_ns(1_500_000) == "1.50 ms" and fmt_ns(2_000_000_000) == "2.000 s"


def test_rate_conversions():
    assert ns_at_rate(50e9, 25e9) == 2e9  # 50 GB at 25 GB/s: 2 s
    assert ns_at_rate(1, 1e9) == 1.0 and amount_at_rate(1.0, 1e9) == 1.0  # 1 GB/s: one byte per ns
    assert amount_at_rate(2e9, 25e9) == 50e9
    assert bytes_to_gb(16_060_522_496) == 16.060522496


def test_blocks_and_counts():
    assert blocks_for(6758) == 14 and blocks_for(512) == 1 and blocks_for(513) == 2  # ceil(n / 512)
    assert parse_count("3M") == 3_000_000 and parse_count("10k") == 10_000 and parse_count("1.5e6") == 1_500_000
    assert parse_bytes("20MB") == 20_000_000 and parse_bytes("1GiB") == 2**30 and parse_bytes("4096") == 4096
    with pytest.raises(ValueError):
        parse_count("lots")


def test_unknown_key_names_file_line_and_allowed(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text('kind = "sim"\n\n[router]\nname = "random"\ncache_treshold = 0.5\n')
    data, text = load_toml(p)
    with pytest.raises(
        ConfigError, match=r"x\.toml:5: unknown key 'router.cache_treshold'; allowed: .*cache_threshold"
    ):
        check_keys(data["router"], {"name", "cache_threshold"}, p, text, "router")


def test_toml_syntax_error_and_directory(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("kind = \n")
    with pytest.raises(ConfigError, match="bad.toml: TOML syntax error"):
        load_toml(p)
    with pytest.raises(ConfigError, match="is a directory"):
        load_toml(tmp_path)


def test_overrides_parse_toml_values_and_never_mutate():
    base = {"router": {"name": "random"}, "pools": 2}
    out = apply_overrides(base, ["router.name=cache_aware", "pools=4", "router.threshold=0.3", "label=abc"])
    assert out == {"router": {"name": "cache_aware", "threshold": 0.3}, "pools": 4, "label": "abc"}
    assert base == {"router": {"name": "random"}, "pools": 2}
    assert parse_override("a.b=[1, 2]") == (["a", "b"], [1, 2])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_override("novalue")


def test_line_of_skips_blank_lines_to_the_key_itself():
    from kvbench.config import line_of

    assert line_of('a = 1\n\n\nname = "x"\n', "name") == 4  # not line 2 or 3 (blank lines before it)


def test_run_json_redacts_credentials_but_not_token_counts():
    from kvbench.run import _redacted

    params = {
        "api_key": "sk-1",
        "api_key_env": "OPENAI_API_KEY",
        "max_tokens": 5,
        "tokenize_path": "/tokenize",
        "word_tokens": 1.3,
        "headers": {"Authorization": "Bearer x", "x-api-key": "k", "X-Trace": "t"},
    }
    assert _redacted(params) == {
        "api_key": "<redacted>",
        "api_key_env": "OPENAI_API_KEY",
        "max_tokens": 5,
        "tokenize_path": "/tokenize",
        "word_tokens": 1.3,
        "headers": {"Authorization": "<redacted>", "x-api-key": "<redacted>", "X-Trace": "t"},
    }
