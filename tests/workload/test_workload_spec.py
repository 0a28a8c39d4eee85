"""Workload specs: TOML -> frozen dataclasses, errors naming file:line:key, name lookup, mixtures, SLOs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvbench.config import ConfigError
from kvbench.workload import load
from kvbench.workload.build import build
from kvbench.workload.spec import load_spec

REPO_WORKLOADS = Path(__file__).resolve().parents[2] / "kvbench" / "presets" / "workloads"


def _spec(tmp_path, text, name="w.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_every_shipped_spec_parses_and_is_frozen(traces_dir):
    names = sorted(p.stem for p in REPO_WORKLOADS.glob("*.toml"))
    assert {"mooncake-conversation", "sharegpt-chat", "longcot-r1", "shared-prefix-stress", "kimi-sample"} <= set(names)
    for name in names:
        spec = load_spec(load.find_workload(name))
        assert spec.name == name
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.name = "x"  # type: ignore[misc]
        if spec.path:
            assert Path(spec.path).exists(), (name, spec.path)  # ../../../../shared/traces from the spec


def test_unknown_key_names_file_line_key(tmp_path):
    p = _spec(tmp_path, 'kind = "synthetic"\nrequests = 5\n\n[arrivals]\nprocess = "poisson"\nrat = 2.0\n')
    with pytest.raises(ConfigError, match=rf"^{p}:6: unknown key 'arrivals.rat'; allowed: burstiness, pieces"):
        load_spec(p)
    p = _spec(tmp_path, 'kind = "synthetic"\nrequest = 5\n')
    with pytest.raises(ConfigError, match=rf"^{p}:2: unknown key 'request'"):
        load_spec(p)


@pytest.mark.parametrize(
    "body, expect",
    [
        ('kind = "synthetic"\nrequests = "many"\n', ":2: requests must be a whole number >= 1, got 'many'"),
        ('kind = "synthetic"\nrequests = 5\n[output]\ndist = "lognormal"\np50 = 100\np99 = 50\n', "output.p50/p99"),
        (
            'kind = "synthetic"\nrequests = 5\n[input]\ntokens = "x"\n',
            ":4: input.tokens must be a whole number, got 'x'",
        ),
        ('kind = "sideways"\n', ":1: kind must be one of trace, synthetic, servegen, mix, got 'sideways'"),
        ('kind = "trace"\n', ": missing key 'path' (required for kind = 'trace')"),
        (
            'kind = "synthetic"\nrequests = 5\n[slo]\nttft_ms = -1\n',
            ":4: slo.ttft_ms must be a number > 0 and <= 1e+09, got -1",
        ),
        ('kind = "synthetic"\nrequests = 5\n[prefix]\npopularity = "pareto"\n', "prefix.popularity"),
        ('kind = "mix"\nrequests = 5\n', "needs [[components]]"),
        (
            'kind = "synthetic"\nrequests = 5\n[arrivals]\nprocess = "piecewise"\npieces = [1, 2]\n',
            ":5: arrivals.pieces must be a list of [number, number] pairs, got [1, 2]",
        ),
        (
            'kind = "synthetic"\nrequests = 5\n[input]\ndist = "servegen"\npath = "."\nclients = [1.5]\n',
            ":6: input.clients must be a list of whole numbers, got [1.5]",
        ),
        ('kind = "synthetic"\nrequests = 5\n[input]\ndist = "csv"\npath = "nope.csv"\n', ":5: input.path:"),
        ('kind = "trace"\npath = "nope.jsonl"\n', ":2: path:"),
        ('kind = "synthetic"\nduration_s = inf\n', ":2: duration_s must be a number >= 0, got inf"),
    ],
)
def test_bad_values(tmp_path, body, expect):
    p = _spec(tmp_path, body)
    with pytest.raises(ConfigError) as e:
        load_spec(p)
    assert str(p) in str(e.value) and expect in str(e.value) and "\n" not in str(e.value)


def test_slo_and_relative_paths(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "l.csv").write_text("num_prefill_tokens,num_decode_tokens\n10,3\n20,4\n")
    sub = tmp_path / "specs"
    sub.mkdir()
    p = _spec(
        sub,
        'kind = "trace"\npath = "../data/l.csv"\n[arrivals]\nprocess = "constant"\nrate = 2\n'
        "[slo]\nttft_ms = 200\ntpot_ms = 20.5\n",
    )
    w = build(load_spec(p), seed=0)
    assert w.slo_ms == {"ttft_ms": 200.0, "tpot_ms": 20.5}
    reqs = list(w.make())
    assert [(r.arrival_ns, r.input_tokens, r.output_tokens) for r in reqs] == [(0, 10, 3), (500_000_000, 20, 4)]
    assert reqs[0].workload == "w"


def test_select_by_name_and_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "workloads").mkdir()
    _spec(tmp_path / "workloads", 'kind = "synthetic"\nrequests = 7\n', "tiny.toml")
    w = load.select(None, "tiny", seed=1)  # ./workloads first
    assert w.name == "tiny" and len(list(w.make())) == 7
    assert load.select(None, "workloads/tiny.toml", seed=1).name == "tiny"
    assert load.select(None, "kimi-sample", seed=0).name == "kimi-sample"  # falls back to the shipped specs
    with pytest.raises(ConfigError, match="unknown workload 'nope'; known: .*tiny"):
        load.select(None, "nope")
    with pytest.raises(ConfigError, match="exactly one"):
        load.select("a.jsonl", "tiny")


def test_make_returns_fresh_iterators_and_same_seed_same_stream():
    a = load.select(None, "kimi-sample", seed=4)
    assert list(a.make()) == list(a.make())
    assert list(a.make()) == list(load.select(None, "kimi-sample", seed=4).make())
    assert list(a.make()) != list(load.select(None, "kimi-sample", seed=5).make())


def _two_part_mix(tmp_path, arrivals: str) -> Path:
    _spec(
        tmp_path,
        'kind = "synthetic"\nrequests = 400\n[input]\ndist = "fixed"\ntokens = 600\n'
        "[prefix]\ngroups = 1\ntokens = 512\n",
        "a.toml",
    )
    _spec(
        tmp_path,
        'kind = "synthetic"\nrequests = 400\n[input]\ndist = "fixed"\ntokens = 100\n'
        "[prefix]\ngroups = 1\ntokens = 512\n[sessions]\nturns_min = 2\nturns_max = 2\n",
        "b.toml",
    )
    return _spec(
        tmp_path,
        f'kind = "mix"\nrequests = 300\n{arrivals}\n[[components]]\nworkload = "a"\nweight = 3\n'
        '[[components]]\nworkload = "b.toml"\nweight = 1\nname = "bee"\n',
        "m.toml",
    )


def test_weighted_mixture(tmp_path):
    w = build(load_spec(_two_part_mix(tmp_path, '[arrivals]\nprocess = "poisson"\nrate = 5.0')), seed=2)
    reqs = list(w.make())
    assert len(reqs) == 300 and [r.req_id for r in reqs] == list(range(300))
    names = [r.workload for r in reqs]
    assert set(names) == {"a", "bee"} and 0.65 < names.count("a") / 300 < 0.85  # weight 3:1 -> 0.75
    # Both components start their block ids at 0; the mixture keeps them apart (b's are XORed with 1 << 52).
    a_ids = {h for r in reqs if r.workload == "a" for h in r.hash_ids}
    b_ids = {h for r in reqs if r.workload == "bee" for h in r.hash_ids}
    assert not a_ids & b_ids
    sess = [r.session_id for r in reqs if r.workload == "bee"]
    assert all(s % 2 == 1 for s in sess)  # component 1 of 2: session ids s*2 + 1 stay unique
    assert reqs == list(w.make())


def test_overlay_mixture_keeps_own_timelines(tmp_path):
    w = build(load_spec(_two_part_mix(tmp_path, "")), seed=2)
    reqs = list(w.make())
    assert len(reqs) == 300 and all(x.arrival_ns <= y.arrival_ns for x, y in zip(reqs, reqs[1:]))


def test_mixture_cycle_is_an_error(tmp_path):
    p = _spec(tmp_path, 'kind = "mix"\n[[components]]\nworkload = "loop.toml"\n', "loop.toml")
    with pytest.raises(ConfigError, match="refers to itself"):
        load_spec(p)
