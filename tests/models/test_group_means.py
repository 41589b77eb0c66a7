"""`group_means` (all groups' compensated sums at once) gives the bits of the row-by-row Kahan sums it
replaced, and of pandas' `groupby().mean()`, on every bundled profile and on random data with repeated keys."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from elastisched.models.profiles import load_pollux_bundled
from elastisched.models.throughput import group_means

XS, YS = ("num_nodes", "num_replicas", "local_bsz"), ("step_time", "sync_time")


def _row_by_row(keys: list[np.ndarray], values: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The previous implementation: one Kahan step per row, in a dict per group."""
    groups: dict[tuple[float, ...], list[list[float]]] = {}
    for i, k in enumerate(zip(*(c.tolist() for c in keys), strict=True)):
        acc = groups.setdefault(k, [[0.0, 0.0, 0] for _ in values])
        for a, col in zip(acc, values, strict=True):
            y = float(col[i]) - a[1]
            t = a[0] + y
            a[1] = t - a[0] - y
            a[0] = t
            a[2] += 1
    order = sorted(groups)
    return (np.array(order, dtype=float).reshape(len(order), len(keys)),
            np.array([[a[0] / a[2] for a in groups[k]] for k in order], dtype=float).reshape(len(order), len(values)))


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("app", sorted(load_pollux_bundled()))
def test_bundled_profiles(app: str) -> None:
    pl = load_pollux_bundled()[app].throughput["t4"].placement_columns
    keys, values = [pl[c] for c in XS], [pl[c] for c in YS]
    got, want = group_means(keys, values), _row_by_row(keys, values)
    assert _same_bits(got[0], want[0]) and _same_bits(got[1], want[1])
    frame = pd.DataFrame({c: pl[c] for c in (*XS, *YS)}).groupby(list(XS)).mean().reset_index()
    assert _same_bits(got[1], frame[list(YS)].to_numpy(float))


@pytest.mark.parametrize("seed", range(10))
def test_random_groups(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    keys = [rng.integers(1, 4, n).astype(float), rng.choice([8.0, 16.5, 32.0], n)]
    values = [rng.lognormal(0, 3, n), rng.uniform(-1e6, 1e6, n) * rng.uniform(0, 1e-9, n)]
    got, want = group_means(keys, values), _row_by_row(keys, values)
    assert _same_bits(got[0], want[0]) and _same_bits(got[1], want[1])


def test_empty() -> None:
    keys, means = group_means([np.array([]), np.array([])], [np.array([])])
    assert keys.shape == (0, 2) and means.shape == (0, 1)
