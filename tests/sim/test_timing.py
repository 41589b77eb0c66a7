"""`sim.timing.EventQueue` pops events in the order of a heap of (time, sequence number, ...) tuples."""

from __future__ import annotations

import heapq
import math
import random

import pytest

from elastisched.sim.timing import EventQueue


def test_the_order_of_a_heap_of_tuples_ties_included() -> None:
    rng = random.Random(7)
    queue, heap, seq = EventQueue(), [], 0
    popped, expected = [], []
    for step in range(20_000):
        if heap and rng.random() < 0.45:
            t, _, kind, payload = heapq.heappop(heap)
            expected.append((t, kind, payload))
            popped.append(queue.pop())
            assert not queue.times or queue.times[0] == heap[0][0]
            continue
        # few distinct times (many ties), -0.0 beside 0.0, and times before ones already popped
        t = rng.choice([0.0, -0.0, 1.5, 2.0, rng.uniform(0, 100), float(rng.randrange(50))])
        seq += 1
        heapq.heappush(heap, (t, seq, step % 5, step))
        queue.push(t, step % 5, step)
    while heap:
        t, _, kind, payload = heapq.heappop(heap)
        expected.append((t, kind, payload))
        popped.append(queue.pop())
    assert popped == expected
    assert [math.copysign(1, t) for t, _, _ in popped] == [math.copysign(1, t) for t, _, _ in expected]
    assert not queue.times


@pytest.mark.parametrize("t", [math.nan, math.inf, -math.inf])
def test_a_time_that_is_not_finite_is_refused(t: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        EventQueue().push(t, 1, None)
