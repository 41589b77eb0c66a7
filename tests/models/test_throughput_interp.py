"""ThroughputModel on profiles that do not span three dimensions (what one machine can measure)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from elastisched.models.profiles import ThroughputProfile
from elastisched.models.throughput import ProfileInterpolator, ThroughputModel


def _profile(rows: list[tuple[str, int, float, float]]) -> ThroughputProfile:
    pl = pd.DataFrame(rows, columns=["placement", "local_bsz", "step_time", "sync_time"])
    pl["num_nodes"] = pl["placement"].str.len()
    pl["num_replicas"] = pl["placement"].map(lambda p: sum(int(c) for c in p))
    sc = pl[["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"]].copy()
    return ThroughputProfile(placements=pl, scalability=sc)


def test_one_node_profile_builds_and_interpolates_between_replica_counts() -> None:
    """All points on one node: 3-D Delaunay has no solution (qhull QH6013); 2-D over (replicas, batch) does."""
    prof = _profile([("1", 32, 0.10, 0.00), ("1", 64, 0.18, 0.00), ("2", 32, 0.11, 0.02), ("2", 64, 0.19, 0.02),
                     ("4", 32, 0.12, 0.04), ("4", 64, 0.20, 0.04)])
    m = ThroughputModel(prof)
    assert m.step_sync((3,), 48) == pytest.approx((0.155, 0.03))  # planar between counts 2, 4 and batches
    assert m.step_sync((2,), 40) == pytest.approx((0.11 + 0.08 * 8 / 32, 0.02))  # measured placement
    st, sy = m.step_sync((2, 2), 48)  # two nodes were never measured: the fitted model answers
    assert np.isfinite(st) and np.isfinite(sy) and st > 0


def test_single_placement_profile_interpolates_in_batch_only() -> None:
    m = ThroughputModel(_profile([("1", 16, 0.05, 0.0), ("1", 32, 0.09, 0.0), ("1", 64, 0.17, 0.0)]))
    assert m.step_sync((1,), 48) == pytest.approx((0.13, 0.0))
    assert np.isfinite(m.step_sync((1,), 128)[0])  # outside the measured batches: fitted model


def test_interpolator_gives_nan_off_the_profile() -> None:
    pts = np.array([[1, 1, 16], [1, 2, 16], [1, 1, 32], [1, 2, 32]], dtype=float)
    f = ProfileInterpolator(pts, np.array([[1.0, 0.0], [2.0, 0.5], [3.0, 0.0], [4.0, 0.5]]))
    assert f([1, 1.5, 24]) == pytest.approx([2.5, 0.25])
    assert np.isnan(f([2, 1, 16])).all()  # a node count the profile never had
    assert np.isnan(f([1, 3, 16])).all()  # outside the hull
    flat = ProfileInterpolator(np.array([[1, 1, 8], [2, 2, 16], [3, 3, 24]], dtype=float), np.ones((3, 2)))
    assert np.isnan(flat([2, 2, 16])).all()  # collinear points in 3-D: no triangulation, fitted model instead
