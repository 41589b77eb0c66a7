"""The plain-Python point location gives what scipy's LinearNDInterpolator gives, bit for bit, on the bundled
profiles' triangulations (grid points on edges and vertices, where the simplex choice matters, included),
and the triangulation is cached on disk so that a warm start needs no scipy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.interpolate import LinearNDInterpolator

from elastisched.models import triangulation
from elastisched.models.profiles import load_pollux_bundled
from elastisched.models.throughput import ThroughputModel, group_means
from elastisched.models.triangulation import triangulate


def _profile_points(app: str) -> tuple[np.ndarray, np.ndarray]:
    tp = load_pollux_bundled()[app].throughput["t4"]
    pl, sc = tp.placement_columns, tp.scalability_columns
    xs, ys = ("num_nodes", "num_replicas", "local_bsz"), ("step_time", "sync_time")
    keys, means = group_means([pl[c] for c in xs], [pl[c] for c in ys])
    return (np.vstack([keys, np.c_[tuple(sc[c] for c in xs)]]),
            np.vstack([means, np.c_[tuple(sc[c] for c in ys)]]))


def _queries(pts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    nodes = rng.integers(1, int(hi[0]) + 2, 1500)
    grid = np.c_[nodes, nodes * rng.integers(1, 5, 1500), rng.choice(np.unique(pts[:, 2]), 1500)]
    uniform = lo + (hi - lo) * rng.uniform(-0.05, 1.05, (1500, 3))
    half = len(pts) // 2
    return np.vstack([pts, grid, uniform, (pts[:half] + pts[half:2 * half]) / 2]).astype(float)


@pytest.mark.parametrize("app", ["cifar10", "ncf", "yolov3"])
def test_same_values_as_linear_nd_interpolator(app: str, tmp_path: Path) -> None:
    pts, vals = _profile_points(app)
    ref = LinearNDInterpolator(pts, vals)
    ours = triangulate(pts, tmp_path)
    assert ours is not None
    rows = vals.tolist()
    qs = _queries(pts, np.random.default_rng(7))
    inside = 0
    for q in qs:
        want = ref(q)[0]
        got = ours(q.tolist(), rows)
        if np.isnan(want).all():
            assert got is None, (q, got)
        else:
            inside += 1
            assert got is not None and np.array_equal(np.array(got), want), (q, got, want)
    assert inside > len(qs) // 3  # the check covered the inside of the hull, not only misses


def _same(a: triangulation.Triangulation | None, b: triangulation.Triangulation | None) -> bool:
    assert a is not None and b is not None
    return all(np.array_equal(np.array(getattr(a, f)), np.array(getattr(b, f)), equal_nan=True)
               for f in ("simplices", "neighbors", "transform", "equations", "min_bound", "max_bound"))


def test_triangulation_cached_on_disk_and_warm_start_imports_no_scipy(tmp_path: Path) -> None:
    pts, _ = _profile_points("bert")
    triangulation._MEMO.clear()
    first = triangulate(pts, tmp_path)
    (f,) = (tmp_path / "triangulations").glob("*.npz")
    triangulation._MEMO.clear()
    again = triangulate(pts, tmp_path)
    assert again is not first and _same(again, first)
    f.write_bytes(b"not a zip")  # a broken cache entry only costs the computation
    triangulation._MEMO.clear()
    assert _same(triangulate(pts, tmp_path), first)
    code = ("import sys; from elastisched.models.registry import PerfModels; m = PerfModels.load();"
            "[m.app(a).model('t4').step_sync((2, 3), 40.0) for a in m.apps];"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('scipy', 'pandas')))")
    env = {"ELASTISCHED_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)  # fills the cache
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_model_values_unchanged_without_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """ThroughputModel with and without the disk cache answers the same (cache only saves time)."""
    monkeypatch.setenv("ELASTISCHED_CACHE_DIR", "off")
    triangulation._MEMO.clear()
    tp = load_pollux_bundled()["imagenet"].throughput["t4"]
    a = ThroughputModel(tp)
    qs = [((4, 4), 64.0), ((3, 1), 100.0), ((2, 2, 2), 50.0), ((8,), 128.0), ((4, 4, 4, 4, 4), 200.0)]
    triangulation._MEMO.clear()
    b = ThroughputModel(tp)
    assert [a.step_sync(p, x) for p, x in qs] == [b.step_sync(p, x) for p, x in qs]
