"""SeenBlocks: leading hits over prefix block ids, dense ids in a bitmap, sparse ids in a bounded set."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import kvbench.workload.reuse as reuse
from kvbench.workload.reuse import SeenBlocks


def test_leading_hits_stop_at_the_first_unseen_block():
    seen = SeenBlocks()
    assert seen.observe((0, 1, 2)) == 0  # nothing seen yet
    assert seen.observe((0, 1, 9)) == 2  # 0 and 1 seen, 9 is new
    assert seen.observe((0, 5, 1)) == 1  # 5 unseen: 1 after it does not count (prefix ids)
    assert seen.observe((2**40, 0)) == 0  # a sparse id, unseen
    assert seen.observe((2**40, 0, 5)) == 3


def test_sparse_ids_past_the_cap_disable_tracking(monkeypatch):
    monkeypatch.setattr(reuse, "SET_CAP", 3)
    seen = SeenBlocks()
    seen.add((2**40, 2**40 + 1, 2**40 + 2))
    assert seen.enabled
    seen.add((2**41,))
    assert not seen.enabled


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(st.integers(0, 5000), st.integers(2**28, 2**29)), max_size=8), max_size=30))
def test_matches_a_plain_set(requests):
    seen, plain = SeenBlocks(), set()
    for ids in map(tuple, requests):
        expected = 0
        for h in ids:
            if h not in plain:
                break
            expected += 1
        assert seen.observe(ids) == expected
        plain.update(ids)


def test_a_batch_counts_the_ids_of_its_earlier_chains():
    seen = SeenBlocks()
    seen.observe((0, 1))
    chains = [(0, 1, 2), (2, 0, 7), (0, 9, 1), (), (7, 7, 2)]
    assert seen.observe_many(chains, [True, True, False, True, True], numpy_from=1) == [2, 2, None, 0, 3]
    assert seen.observe((9, 1, 2, 7, 3)) == 4  # the chain only added (not counted) was still added


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.one_of(st.integers(0, 300), st.integers(2**28, 2**28 + 3)), max_size=6), st.booleans()),
        max_size=12,
    ),
    st.lists(st.lists(st.integers(0, 300), max_size=6), max_size=4),
)
def test_a_batch_matches_its_chains_one_by_one(batch, before):
    one, many = SeenBlocks(), SeenBlocks()
    for ids in map(tuple, before):
        one.observe(ids)
        many.observe(ids)
    chains, observed = [tuple(ids) for ids, _ in batch], [counted for _, counted in batch]
    expected = [one.observe(ids) if counted else one.add(ids) for ids, counted in zip(chains, observed)]
    assert many.observe_many(chains, observed, numpy_from=1) == expected
    assert many.bits.rstrip(b"\0") == one.bits.rstrip(b"\0") and many.sparse == one.sparse


def test_a_batch_of_sparse_dense_ids_takes_the_sorting_path():
    seen = SeenBlocks()
    big = 100_000  # dense (in the bitmap) but far beyond 4x the batch's size
    assert seen.observe_many([(big, 3), (big, 3, 4), (3,)], [True, True, True], numpy_from=1) == [0, 2, 1]


def test_a_batch_with_a_64_bit_hash_goes_chain_by_chain():
    seen = SeenBlocks()
    assert seen.observe_many([(2**64 - 1, 5), (2**64 - 1, 5)], [True, True], numpy_from=1) == [0, 2]
    assert seen.sparse == {2**64 - 1}


def test_chains_after_empty_ones_count_only_real_appearances():
    seen = SeenBlocks()  # found by the property test: empty chains shift the chain index past the id count
    assert seen.observe_many([(), (), (0,)], [False, False, True], numpy_from=1) == [None, None, 0]


def test_a_small_batch_goes_chain_by_chain_with_the_same_result():
    # A real-time run tops up one request at a time: below numpy_from chains, no numpy pass runs (the bitmap
    # then grows as add() grows it, to the byte the largest id needs, not by the numpy path's flag table).
    small, large = SeenBlocks(), SeenBlocks()
    chains = [(0, 1, 2), (0, 1, 5), (9,)]
    assert small.observe_many(chains, [True] * 3) == large.observe_many(chains, [True] * 3, numpy_from=1) == [0, 2, 0]
    assert small.bits.rstrip(b"\0") == large.bits.rstrip(b"\0") == bytes([0b00100111, 0b00000010])
