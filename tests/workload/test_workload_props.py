"""Property tests: every reader given random or truncated input yields valid requests or raises ConfigError."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.workload import load, servegen

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

MOONCAKE_OK = (
    b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
    b'{"timestamp": 12.5, "input_length": 10, "output_length": 0, "hash_ids": [1]}\n'
)
AZURE_OK = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
LENGTHS_OK = b"num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n74,918,992,0.08\n290,905,1195,0.32\n"
SHAREGPT_OK = (
    b'[{"id": "a", "conversations": [{"from": "human", "value": "hello"}, {"from": "gpt", "value": "hi!"},'
    b' {"from": "human", "value": "more please"}]}, {"id": "b", "conversations": [{"from": "human", "value": "x"}]}]'
)


def _check(path: Path) -> None:
    """The contract: a sorted stream of valid requests with dense ids, or one-line ConfigError."""
    try:
        w = load.from_trace(path)
        reqs = list(itertools.islice(w.make(), 10_000))
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    assert [r.req_id for r in reqs] == list(range(len(reqs)))
    for a, b in zip(reqs, reqs[1:]):
        assert a.arrival_ns <= b.arrival_ns
    for r in reqs:
        assert isinstance(r, Request) and isinstance(r.arrival_ns, int) and r.arrival_ns >= 0
        assert r.input_tokens >= 1 and r.output_tokens >= 0 and 0 <= r.reason_tokens <= r.output_tokens
        assert not r.hash_ids or len(r.hash_ids) == -(-r.input_tokens // r.block_tokens)


def _mutations(valid: bytes):
    """Truncations, byte flips and insertions of a valid file, plus arbitrary bytes."""
    cut = st.integers(0, len(valid)).map(lambda n: valid[:n])
    flip = st.tuples(st.integers(0, len(valid) - 1), st.binary(min_size=1, max_size=3)).map(
        lambda t: valid[: t[0]] + t[1] + valid[t[0] + len(t[1]) :]
    )
    insert = st.tuples(
        st.integers(0, len(valid)), st.sampled_from([b"-", b"1e9", b'"', b",", b"\n", b"\0", b"]", b"{}"])
    ).map(lambda t: valid[: t[0]] + t[1] + valid[t[0] :])
    return st.one_of(cut, flip, insert, st.binary(max_size=200))


def _run(tmp_path: Path, name: str, data: bytes) -> None:
    p = tmp_path / name
    p.write_bytes(data)
    _check(p)


@pytest.mark.parametrize(
    "name, valid", [("t.jsonl", MOONCAKE_OK), ("a.csv", AZURE_OK), ("l.csv", LENGTHS_OK), ("s.json", SHAREGPT_OK)]
)
@SETTINGS
@given(data=st.data())
def test_readers_on_random_and_truncated_inputs(tmp_path, name, valid, data):
    _run(tmp_path, name, data.draw(_mutations(valid)))


@SETTINGS
@given(
    records=st.lists(
        st.fixed_dictionaries(
            {
                "timestamp": st.one_of(
                    st.integers(-5, 10**7), st.floats(allow_nan=True), st.text(max_size=3), st.none()
                ),
                "input_length": st.one_of(st.integers(-2, 5000), st.floats(), st.booleans()),
                "output_length": st.one_of(st.integers(-2, 5000), st.just(1.0)),
                "hash_ids": st.lists(st.one_of(st.integers(), st.text(max_size=2)), max_size=12),
            }
        ),
        max_size=6,
    )
)
def test_mooncake_random_records(tmp_path, records):
    import orjson

    lines = []
    for rec in records:
        try:
            lines.append(orjson.dumps(rec))
        except TypeError:
            lines.append(b"{}")  # integers beyond 64 bits: the file then holds an empty object
    _run(tmp_path, "r.jsonl", b"\n".join(lines))


@SETTINGS
@given(
    text=st.one_of(
        st.text(max_size=60),
        st.builds(
            lambda pairs, tail: "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + tail,
            st.lists(st.tuples(st.integers(-3, 99), st.floats(-1, 2)), max_size=6),
            st.sampled_from(["}", ",}", "", "}}"]),
        ),
    )
)
def test_servegen_pmf_random_literals(text):
    try:
        pmf = servegen.parse_pmf(text, "f.json: window 0.input_tokens")
    except ConfigError as e:
        assert str(e).startswith("f.json: window 0.input_tokens: ")
        return
    if pmf is not None:
        assert pmf.cdf[-1] == 1.0 and all(pmf.values[i] <= pmf.values[i + 1] for i in range(len(pmf.values) - 1))


SG_TRACE_OK = b"0,0,0,,0,0\n600,0.05,1.2,Gamma,0.7,2.5\n1200,0.03,0.9,Weibull,1.1,20.0\n"
SG_DATASET_OK = (
    b'{"0": {"input_tokens": "{10: 0.5, 20: 0.5}", "output_tokens": "{5: 0.25, 50: 0.75}", '
    b'"reason_ratio": "{0.0: 0.5, 0.5: 0.5}"}, "21600": {"input_tokens": "{}", "output_tokens": "{}"}}'
)


@SETTINGS
@given(data=st.data())
def test_servegen_folder_on_random_and_truncated_inputs(tmp_path, data):
    trace = data.draw(st.one_of(st.just(SG_TRACE_OK), _mutations(SG_TRACE_OK)))
    dataset = data.draw(st.one_of(st.just(SG_DATASET_OK), _mutations(SG_DATASET_OK)))
    (tmp_path / "chunk-3-trace.csv").write_bytes(trace)
    (tmp_path / "chunk-3-dataset.json").write_bytes(dataset)
    try:
        reqs = servegen.generate(tmp_path, None, 0.0, 1800.0, 1.0, seed=1)
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    assert [r.req_id for r in reqs] == list(range(len(reqs)))
    assert all(
        0 <= r.arrival_ns < 1800 * 10**9 and r.input_tokens >= 1 and 0 <= r.reason_tokens <= r.output_tokens
        for r in reqs
    )
