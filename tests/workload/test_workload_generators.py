"""Generators: arrival processes, length distributions, shared-prefix groups, sessions, mixtures, --rate."""

from __future__ import annotations

import numpy as np
import pytest

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.workload import load
from kvbench.workload.arrivals import ArrivalSpec, arrival_times_ns, iter_arrivals_ns
from kvbench.workload.dists import LengthSpec, sample_lengths
from kvbench.workload.synth import PrefixSpec, SessionSpec, SynthSpec, draw, generate, group_weights, requests


def _rng(seed=0):
    return np.random.default_rng(seed)


def test_constant_arrivals_exact():
    t = arrival_times_ns(ArrivalSpec("constant", 4.0), _rng(), 5)
    assert t.tolist() == [0, 250_000_000, 500_000_000, 750_000_000, 1_000_000_000]  # 1/4 s apart


def test_poisson_rate_and_cv():
    t = arrival_times_ns(ArrivalSpec("poisson", 10.0), _rng(1), 20_000)
    gaps = np.diff(t) / 1e9
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)  # 1/rate
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.04)


@pytest.mark.parametrize("k", [0.25, 4.0])
def test_gamma_burstiness_is_vllm_shape(k):
    # vLLM: shape = burstiness, scale = 1/(rate*burstiness) -> mean gap 1/rate, CV = 1/sqrt(k): 2.0 and 0.5.
    t = arrival_times_ns(ArrivalSpec("gamma", 5.0, k), _rng(2), 40_000)
    gaps = np.diff(t) / 1e9
    assert gaps.mean() == pytest.approx(0.2, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(k), rel=0.06)


def test_piecewise_counts_follow_the_rates():
    spec = ArrivalSpec("piecewise", pieces=((0.0, 10.0), (100.0, 0.0), (200.0, 50.0)))
    t = arrival_times_ns(spec, _rng(3), duration_s=300.0) / 1e9
    # Expected 10*100 = 1,000 in [0,100), none in [100,200), 50*100 = 5,000 in [200,300).
    assert abs(((t >= 0) & (t < 100)).sum() - 1000) < 4 * 1000**0.5
    assert ((t >= 100) & (t < 200)).sum() == 0
    assert abs((t >= 200).sum() - 5000) < 4 * 5000**0.5


def test_duration_bounds_and_determinism():
    spec = ArrivalSpec("poisson", 3.0)
    a = arrival_times_ns(spec, _rng(7), duration_s=60.0)
    assert a.max() < 60e9 and np.all(np.diff(a) >= 0)
    assert np.array_equal(a, arrival_times_ns(spec, _rng(7), duration_s=60.0))
    s = iter_arrivals_ns(spec, 7, chunk=10)
    first = [next(s) for _ in range(25)]  # across chunk boundaries: still increasing
    assert first[0] == 0 and first == sorted(first)


def test_bad_arrival_specs():
    with pytest.raises(ConfigError, match="arrivals.rate"):
        ArrivalSpec("poisson", 0.0).validate("w.toml:3")
    with pytest.raises(ConfigError, match="arrivals.pieces"):
        ArrivalSpec("piecewise", pieces=((5.0, 1.0),)).validate("w.toml:3")
    with pytest.raises(ConfigError, match="arrivals.process"):
        ArrivalSpec("zigzag").validate("w.toml:3")


def test_lognormal_fitted_to_p50_p99():
    x, reason = sample_lengths(
        LengthSpec("lognormal", p50=792, p99=12607, max=10**6, reason_ratio=0.7), _rng(4), 200_000, "output"
    )
    p50, p99 = np.percentile(x, [50, 99])
    assert p50 == pytest.approx(792, rel=0.02) and p99 == pytest.approx(12607, rel=0.05)
    assert np.array_equal(reason, np.minimum(x, np.round(x * 0.7).astype(np.int64)))


def test_uniform_fixed_and_clipping():
    x, _ = sample_lengths(LengthSpec("uniform", min=3, max=5), _rng(), 1000, "input")
    assert set(x.tolist()) == {3, 4, 5}
    x, _ = sample_lengths(LengthSpec("lognormal", p50=100, p99=10_000, min=50, max=200), _rng(), 1000, "input")
    assert x.min() >= 50 and x.max() <= 200
    x, r = sample_lengths(LengthSpec("fixed", tokens=9), _rng(), 3, "output")
    assert x.tolist() == [9, 9, 9] and r.tolist() == [0, 0, 0]


def _spec(**kw):
    base = dict(
        arrivals=ArrivalSpec("poisson", 2.0),
        input=LengthSpec("fixed", tokens=700),
        output=LengthSpec("fixed", tokens=100),
        requests=400,
    )
    base.update(kw)
    return SynthSpec(**base)


def test_zipf_weights_by_hand():
    # s = 1, 3 groups: 1, 1/2, 1/3 normalised by 11/6 -> 6/11, 3/11, 2/11.
    assert group_weights(PrefixSpec(3, popularity="zipf", zipf_s=1.0)).tolist() == pytest.approx(
        [6 / 11, 3 / 11, 2 / 11]
    )
    assert group_weights(PrefixSpec(4, popularity="uniform")).tolist() == [0.25] * 4


def test_shared_prefix_groups_as_hash_ids():
    reqs = generate(_spec(prefix=PrefixSpec(groups=3, tokens=1100, share=1.0)), seed=5)
    # 1,100 system tokens -> floor(1100/512) = 2 shared blocks; + 700 user tokens = 1,800 -> ceil = 4 blocks.
    heads = {r.hash_ids[:2] for r in reqs}
    assert heads <= {(0, 1), (2, 3), (4, 5)} and len(heads) == 3
    assert all(r.input_tokens == 1800 and len(r.hash_ids) == 4 for r in reqs)
    tails = [h for r in reqs for h in r.hash_ids[2:]]
    assert len(tails) == len(set(tails))  # the rest of every prompt is its own
    counts = np.bincount([r.hash_ids[0] // 2 for r in reqs], minlength=3)
    assert counts[0] > counts[1] > counts[2]  # Zipf: group 0 most popular


def test_sessions_grow_history_and_reuse_blocks():
    ss = SessionSpec(turns_min=3, turns_max=3, think_s=2.0)
    reqs = generate(_spec(sessions=ss, requests=30), seed=6)
    by_session: dict[int, list[Request]] = {}
    for r in reqs:
        by_session.setdefault(r.session_id, []).append(r)
    s = next(v for v in by_session.values() if len(v) == 3)
    t0, t1, t2 = s
    assert [t.turn for t in s] == [0, 1, 2]
    # Turn 1 prompt = 700 + 100 (answer) + 700 = 1,500; turn 2 = 1,500 + 100 + 700 = 2,300.
    assert (t0.input_tokens, t1.input_tokens, t2.input_tokens) == (700, 1500, 2300)
    assert t1.hash_ids[:1] == t0.hash_ids[:1] and t1.hash_ids[1] != t0.hash_ids[1]  # 700 -> 1 full block kept
    assert t2.hash_ids[:2] == t1.hash_ids[:2]  # 1,500 -> 2 full blocks kept
    assert t1.think_ns == 2_000_000_000 and t1.arrival_ns == t0.arrival_ns + 2_000_000_000


def test_ids_dense_sorted_and_deterministic():
    spec = _spec(sessions=SessionSpec(1, 5, 3.0, "exponential"), prefix=PrefixSpec(4, 2048))
    a, b = generate(spec, 11), generate(spec, 11)
    assert a == b and a != generate(spec, 12)
    assert [r.req_id for r in a] == list(range(len(a))) and len(a) == 400
    assert all(x.arrival_ns <= y.arrival_ns for x, y in zip(a, a[1:]))


def test_stream_ties_keep_generation_order():
    # Constant arrivals 0.5 s apart, 3 turns, no think time: a session's turns all arrive at its start, so the
    # stable order is session 0's turns 0, 1, 2, then session 1's, ... (as a stable sort by arrival gives).
    spec = _spec(arrivals=ArrivalSpec("constant", 2.0), sessions=SessionSpec(3, 3, 0.0), requests=7)
    reqs = list(requests(spec, draw(spec, 3)))
    assert [(r.session_id, r.turn) for r in reqs] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0)]
    assert [r.arrival_ns for r in reqs] == [0] * 3 + [500_000_000] * 3 + [1_000_000_000]
    assert [r.req_id for r in reqs] == list(range(7))


def test_stream_builds_requests_as_taken():
    # The first request of a 100,000-request spec comes without the rest being built: the whole list holds
    # ~43 MB (Python 3.11); past the vectorised draws, the stream holds a session or two.
    import tracemalloc

    spec = _spec(sessions=SessionSpec(1, 4, 1.0), prefix=PrefixSpec(8, 2048), requests=100_000)
    d = draw(spec, 0)
    tracemalloc.start()
    try:
        it = requests(spec, d)
        first = next(it)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 1_000_000
    assert first == generate(spec, 0)[0]


def test_max_context_ends_sessions():
    ss = SessionSpec(turns_min=10, turns_max=10, max_context=2000)
    reqs = generate(_spec(sessions=ss, requests=50), seed=1)
    assert max(r.input_tokens for r in reqs) <= 2000 and max(r.turn for r in reqs) == 1  # 700, 1500, (2300 > 2000)


def test_retime_poisson_keeps_order_and_lengths(conversation_trace):
    w = load.from_trace(conversation_trace)
    r = load.retime_poisson(w, 10.0, seed=1)
    orig, new = list(w.make()), list(r.make())
    assert [x.input_tokens for x in orig] == [x.input_tokens for x in new]
    gaps = np.diff([x.arrival_ns for x in new]) / 1e9
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert r.shaping["rate_per_s"] == 10.0
    with pytest.raises(ConfigError):
        load.retime_poisson(w, 0.0, 1)
