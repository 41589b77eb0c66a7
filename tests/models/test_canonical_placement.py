"""canonical_placement compares only rotations that start a run of the smallest element: same answer as
comparing every rotation (the artifact's key), checked exhaustively on small shapes and on random long ones."""

from __future__ import annotations

import itertools
import random

from elastisched.models.throughput import canonical_placement


def _every_rotation(placement: tuple[int, ...]) -> tuple[int, ...]:
    p = tuple(x for x in placement if x)
    return min(p[i:] + p[:i] for i in range(len(p))) if p else p


def test_same_as_every_rotation() -> None:
    for n in range(7):
        for t in itertools.product(range(4), repeat=n):
            assert canonical_placement(t) == _every_rotation(t), t
    rng = random.Random(0)
    for _ in range(3000):
        t = tuple(rng.choice((0, 1, 2, 3, 4, 8)) for _ in range(rng.randint(1, 60)))
        assert canonical_placement(t) == _every_rotation(t), t


def test_balanced_shape_over_many_nodes() -> None:
    assert canonical_placement((3, 3, 2, 2, 2)) == (2, 2, 2, 3, 3)
    assert canonical_placement((2, 1, 1, 2, 1)) == (1, 1, 2, 1, 2)
    assert canonical_placement((0, 4, 0, 4)) == (4, 4)
