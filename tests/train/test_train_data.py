"""The sample partition: every index of a step exactly once, shares proportional to capacity."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from elastisched.train.data import apportion, partition_step


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=6), st.integers(1, 16), st.data())
def test_partition_covers_step_exactly(accum: list[int], local_batch: int, data: st.DataObject) -> None:
    cap = local_batch * sum(accum)
    n = data.draw(st.integers(0, cap))
    idx = list(range(1000, 1000 + n))
    parts = partition_step(idx, accum, local_batch)
    assert len(parts) == len(accum)
    flat = [i for rank in parts for micro in rank for i in micro]
    assert flat == idx  # contiguous shares in rank order, nothing lost or repeated
    for a, rank in zip(accum, parts, strict=True):
        assert len(rank) <= a and all(0 < len(m) <= local_batch for m in rank)
    if n == cap:  # a full step: exactly accum_r full micro-batches per rank (IIDP)
        assert [len(r) for r in parts] == accum
        assert all(len(m) == local_batch for r in parts for m in r)


@given(st.integers(0, 500), st.lists(st.integers(1, 9), min_size=1, max_size=8))
def test_apportion_sums_and_is_proportional(total: int, weights: list[int]) -> None:
    out = apportion(total, weights)
    assert sum(out) == total
    for o, w in zip(out, weights, strict=True):
        assert abs(o - total * w / sum(weights)) < 1 + 1e-9


def test_apportion_minimum_one() -> None:
    assert apportion(5, [1, 3], minimum=1) == [1, 4]
    assert apportion(2, [1, 30], minimum=1) == [1, 1]
