"""The cached interpolator answers exactly what scipy's LinearNDInterpolator answers, from disk on a warm start
(no scipy imported then), and a broken or missing cache only costs asking scipy again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.interpolate import LinearNDInterpolator

from elastisched.models import interp_cache
from elastisched.models.interp_cache import interpolator
from elastisched.models.profiles import load_pollux_bundled
from elastisched.models.throughput import ThroughputModel, group_means


def _profile_points(app: str) -> tuple[np.ndarray, np.ndarray]:
    tp = load_pollux_bundled()[app].throughput["t4"]
    pl, sc = tp.placement_columns, tp.scalability_columns
    xs, ys = ("num_nodes", "num_replicas", "local_bsz"), ("step_time", "sync_time")
    keys, means = group_means([pl[c] for c in xs], [pl[c] for c in ys])
    return (np.vstack([keys, np.c_[tuple(sc[c] for c in xs)]]),
            np.vstack([means, np.c_[tuple(sc[c] for c in ys)]]))


def _queries(pts: np.ndarray, n: int = 300) -> np.ndarray:
    rng = np.random.default_rng(7)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    return np.vstack([pts[:50], lo + (hi - lo) * rng.uniform(-0.05, 1.05, (n, 3))])


@pytest.mark.parametrize("app", ["cifar10", "yolov3"])
def test_same_values_as_scipy_cold_and_from_disk(app: str, tmp_path: Path) -> None:
    pts, vals = _profile_points(app)
    ref = LinearNDInterpolator(pts, vals)
    qs = _queries(pts)
    interp_cache._MEMO.clear()
    cold = interpolator(pts, vals, tmp_path)
    first = [cold(q.tolist()) for q in qs]
    interp_cache._save(cold, cold._path)  # what atexit does
    interp_cache._MEMO.clear()
    warm = interpolator(pts, vals, tmp_path)
    assert warm is not cold and len(warm.known) == len({tuple(q) for q in qs.tolist()})
    warm._ask_scipy = None  # type: ignore[assignment,method-assign]  # a warm answer must come from disk
    inside = 0
    for q, a in zip(qs, first, strict=True):
        want, got = ref(q)[0], warm(q.tolist())
        assert got == a
        if np.isnan(want).all():
            assert got is None
        else:
            inside += 1
            assert got is not None and np.array_equal(np.array(got), want)
    assert 0 < inside < len(qs)  # both the inside of the hull and misses were checked


def test_broken_cache_file_and_flat_point_set(tmp_path: Path) -> None:
    pts, vals = _profile_points("bert")
    interp_cache._MEMO.clear()
    a = interpolator(pts, vals, tmp_path)
    q = pts[3].tolist()
    want = a(q)
    interp_cache._save(a, a._path)
    (f,) = (tmp_path / "interpolations").glob("*.npz")
    f.write_bytes(b"not a zip")
    interp_cache._MEMO.clear()
    assert interpolator(pts, vals, tmp_path)(q) == want
    flat = np.c_[np.arange(5.0), 2 * np.arange(5.0), np.ones(5)]  # collinear: qhull finds no triangulation
    interp_cache._MEMO.clear()
    d = interpolator(flat, np.ones((5, 2)), tmp_path)
    assert d([1.0, 2.0, 1.0]) is None and d.degenerate
    interp_cache._save(d, d._path)
    interp_cache._MEMO.clear()
    assert interpolator(flat, np.ones((5, 2)), tmp_path).degenerate  # remembered without asking qhull


def test_warm_start_imports_no_scipy_or_pandas(tmp_path: Path) -> None:
    code = ("import sys; from elastisched.models.registry import PerfModels; m = PerfModels.load();"
            "[m.app(a).model('t4').step_sync((2, 3), 40.0) for a in m.apps];"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('scipy', 'pandas')))")
    env = {"ELASTISCHED_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    cold = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    assert "scipy" in cold.stdout  # the first run asked scipy (and filled the cache)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_model_values_unchanged_without_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """ThroughputModel with and without the disk cache answers the same (the cache only saves time)."""
    tp = load_pollux_bundled()["imagenet"].throughput["t4"]
    qs = [((4, 4), 64.0), ((3, 1), 100.0), ((2, 2, 2), 50.0), ((8,), 128.0), ((4, 4, 4, 4, 4), 200.0)]
    interp_cache._MEMO.clear()
    a = [ThroughputModel(tp).step_sync(p, x) for p, x in qs]
    monkeypatch.setenv("ELASTISCHED_CACHE_DIR", "off")
    interp_cache._MEMO.clear()
    assert a == [ThroughputModel(tp).step_sync(p, x) for p, x in qs]


_IN_A_POOL = """
import multiprocessing as mp
from elastisched.models.interp_cache import save_all

def ask(save):
    from elastisched.models.registry import PerfModels
    m = PerfModels.load()
    [m.app(a).model('t4').step_sync((2, 3), 40.0) for a in m.apps]
    return save_all() if save else -1

with mp.get_context('fork').Pool(1) as pool:  # leaving `with` terminates the worker: no atexit
    print(pool.apply(ask, (SAVE,)))
"""


@pytest.mark.parametrize("save", [True, False])
def test_a_pool_worker_keeps_its_answers_only_through_save_all(tmp_path: Path, save: bool) -> None:
    """A `multiprocessing.Pool` worker is terminated without running atexit: what it asked scipy reaches the
    disk cache only through `save_all`, and then the next process starts warm (no scipy)."""
    env = {"ELASTISCHED_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", _IN_A_POOL.replace("SAVE", str(save))], env=env, check=True,
                         capture_output=True, text=True)
    assert int(run.stdout.strip()) > 0 if save else int(run.stdout.strip()) == -1
    code = ("import sys; from elastisched.models.registry import PerfModels; m = PerfModels.load();"
            "[m.app(a).model('t4').step_sync((2, 3), 40.0) for a in m.apps];"
            "print('scipy' in sys.modules)")
    after = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    assert after.stdout.strip() == ("False" if save else "True")
