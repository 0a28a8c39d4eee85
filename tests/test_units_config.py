"""units.py conversions and config.py TOML errors (file:line:key) and --set overrides."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import pytest

from kvbench.config import (
    ConfigError,
    Range,
    Source,
    apply_overrides,
    load_toml,
    parse_override,
    read,
    reject_unknown,
)
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
        reject_unknown(data["router"], {"name", "cache_threshold"}, Source(str(p), text), ("router",))


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


def test_lines_skip_blank_lines_to_the_key_itself():
    assert Source("x.toml", 'a = 1\n\n\nname = "x"\n').line(("name",)) == 4  # not line 2 or 3 (blank lines before it)


def test_run_json_redacts_credentials_but_not_token_counts():
    from kvbench.run import RunOptions, manifest_for
    from kvbench.target import TargetSpec
    from kvbench.workload.load import Workload

    params = {
        "api_key": "sk-1",
        "api_key_env": "OPENAI_API_KEY",
        "max_tokens": 5,
        "token_budget": 8192,
        "tokenize_path": "/tokenize",
        "word_tokens": 1.3,
        "headers": {"Authorization": "Bearer x", "x-api-key": "k", "X-Trace": "t"},
    }
    spec = TargetSpec("openai", "ep", params)
    manifest = manifest_for(Workload("w", "mem", "0", lambda: iter(())), spec, RunOptions(), "r")
    assert manifest["target"]["params"] == {
        "api_key": "<redacted>",
        "api_key_env": "OPENAI_API_KEY",
        "max_tokens": 5,
        "token_budget": 8192,
        "tokenize_path": "/tokenize",
        "word_tokens": 1.3,
        "headers": {"Authorization": "<redacted>", "x-api-key": "<redacted>", "X-Trace": "t"},
    }


@dataclass(frozen=True)
class _Limits:
    max_ms: Annotated[float, Range(0, open_lo=True)] | None = None


@dataclass(frozen=True)
class _Rule:
    metric: str
    mode: Literal["lower", "higher"] = "lower"
    samples: Annotated[int, Range(1, 100)] = 10
    tags: tuple[str, ...] = ()
    pairs: tuple[tuple[float, float], ...] = ()
    limits: _Limits = field(default_factory=_Limits)
    strict: bool = False


@dataclass(frozen=True)
class _File:
    title: str = ""
    rule: tuple[_Rule, ...] = ()


GOOD = """title = "t"

[[rule]]
metric = "ttft"
tags = [
  "a",
  "[b]",
]
pairs = [[0, 1], [2.5, 3]]

[[rule]]
metric = "tpot"
mode = "higher"
samples = 50

[rule.limits]
max_ms = 200
"""


def _read(tmp_path, text: str) -> _File:
    p = tmp_path / "f.toml"
    p.write_text(text)
    data, text = load_toml(p)
    return read(_File, data, Source(str(p), text))


def test_read_builds_frozen_dataclasses_from_toml(tmp_path):
    f = _read(tmp_path, GOOD)
    assert f == _File(
        "t",
        (
            _Rule("ttft", tags=("a", "[b]"), pairs=((0.0, 1.0), (2.5, 3.0))),
            _Rule("tpot", "higher", 50, limits=_Limits(200.0)),
        ),
    )
    assert isinstance(f.rule[1].limits.max_ms, float)  # an integer where a number is expected becomes a float


@pytest.mark.parametrize(
    "edit, message",
    [
        ("samples = 50", ":14: rule.samples must be a whole number >= 1 and <= 100, got 0"),
        ('mode = "higher"', ":13: rule.mode must be one of lower, higher, got 'down'"),
        ("max_ms = 200", ":17: rule.limits.max_ms must be a number > 0, got inf"),
        ("max_ms = 200", ":17: unknown key 'rule.limits.max_s'; allowed: max_ms"),
        ('metric = "tpot"', ":11: missing key 'rule.metric'"),
        ("pairs = [[0, 1], [2.5, 3]]", ":9: rule.pairs must be a list of [number, number] pairs, got [1, 2]"),
        ('"[b]",', ":5: rule.tags must be a list of strings, got ['a', 3]"),
        ('title = "t"', ":1: title must be a string, got True"),
    ],
)
def test_read_errors_name_file_line_and_key(tmp_path, edit, message):
    # each case breaks one line of GOOD; the line number is that of the key (or table) at fault, in the right
    # [[rule]] and past the multi-line list, whose "[b]" is not a table header
    new = {
        "samples = 50": "samples = 0",
        'mode = "higher"': 'mode = "down"',
        'metric = "tpot"': "",
        "pairs = [[0, 1], [2.5, 3]]": "pairs = [1, 2]",
        '"[b]",': "3,",
        'title = "t"': "title = true",
    }.get(edit, {"max_ms = 200": "max_ms = inf" if "inf" in message else "max_s = 1"}.get(edit))
    with pytest.raises(ConfigError) as e:
        _read(tmp_path, GOOD.replace(edit, new))
    assert str(e.value) == f"{tmp_path / 'f.toml'}{message}"


def test_source_lines_fall_back_to_the_enclosing_table_and_labels_have_none():
    src = Source("p.toml", "[tiers.dram]\nlink = { alpha_ns = 1, bytes_per_s = 0 }\n")
    assert src.at(("tiers", "dram", "link", "bytes_per_s")) == "p.toml:2"  # inside an inline table
    assert src.at(("tiers", "ssd")) == "p.toml" and Source("--target").at(("api",)) == "--target"
