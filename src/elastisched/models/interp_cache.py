"""Piecewise-linear interpolation of a profile with its answers cached on disk, so a warm start needs no scipy.

`scipy.interpolate.LinearNDInterpolator` costs ~0.4 s of imports, more than a whole simulated Pollux workload,
while a simulation asks the same few shapes over and over. The interpolant is a pure function of the
profile's points and values, so every answer scipy gives is kept, keyed by the digest of both, in the
on-disk cache (`throughput.cache_dir`): a query seen before in any earlier run is answered from the cache
without importing scipy; a new one is asked of scipy itself (built once per process), so the values are the
ones scipy gives, by construction. A point set qhull cannot triangulate (e.g. flat) is remembered too. New
answers are saved at exit, or earlier by `save_all` (at the end of every `sim.simulate`).
"""

from __future__ import annotations

import atexit
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

CACHE_VERSION = 1  # bump when what is stored changes
MAX_STORED = 50_000  # answers kept per profile on disk (loading them must stay cheaper than asking scipy)


class CachedInterpolator:
    """`LinearNDInterpolator(points, values)` one point at a time, answers remembered in process and on disk."""

    def __init__(self, points: np.ndarray, values: np.ndarray, path: Path | None) -> None:
        self._points, self._values, self._path = points, values, path
        self._scipy: Any = None
        self.degenerate = False  # qhull found no triangulation: every query is outside
        self.known: dict[tuple[float, ...], tuple[float, ...]] = {}
        self.fresh: list[tuple[float, ...]] = []
        if path is not None:
            self.degenerate, self.known = _read(path)
            atexit.register(_save, self, path)

    def __call__(self, x: list[float]) -> list[float] | None:
        """The interpolated values at `x`; None outside the hull (or for a point set with no triangulation)."""
        if self.degenerate:
            return None
        key = tuple(x)
        out = self.known.get(key)
        if out is None:
            out = self._ask_scipy(x)
            if out is None:
                return None
            self.known[key] = out
            self.fresh.append(key)
        return None if all(v != v for v in out) else list(out)  # scipy's NaN fill: outside the hull

    def _ask_scipy(self, x: list[float]) -> tuple[float, ...] | None:
        if self._scipy is None:
            from scipy.interpolate import LinearNDInterpolator
            from scipy.spatial import QhullError
            from threadpoolctl import threadpool_limits

            with threadpool_limits(limits=1, user_api="blas"):  # small problems: threads only cost
                try:
                    self._scipy = LinearNDInterpolator(self._points, self._values)
                except QhullError:
                    self.degenerate = True
                    self.fresh.append(())  # so the flag is saved
                    return None
        return tuple(float(v) for v in self._scipy(np.asarray(x, dtype=float))[0])


_MEMO: dict[str, CachedInterpolator] = {}


def interpolator(points: np.ndarray, values: np.ndarray, cache: Path | None) -> CachedInterpolator:
    """The cached interpolator of `values` over `points` (one per profile and process; `cache` None: no disk)."""
    points = np.ascontiguousarray(points, dtype=np.float64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    h = hashlib.sha256(b"interp|%d|%r|%r|" % (CACHE_VERSION, points.shape, values.shape))
    h.update(points.tobytes())
    h.update(values.tobytes())
    digest = h.hexdigest()[:32]
    if digest not in _MEMO:
        path = cache / "interpolations" / f"{digest}.npz" if cache is not None else None
        _MEMO[digest] = CachedInterpolator(points, values, path)
    return _MEMO[digest]


def save_all() -> int:
    """Save every interpolator's new answers now, not at exit; how many there were. For processes that end
    without running `atexit` (a `multiprocessing.Pool` worker is terminated, a Ray worker killed): the next
    process then starts warm."""
    saved = 0
    for interp in _MEMO.values():
        if interp.fresh and interp._path is not None:
            saved += sum(1 for k in interp.fresh if k)
            _save(interp, interp._path)
            interp.fresh = []
    return saved


def _read(path: Path) -> tuple[bool, dict[tuple[float, ...], tuple[float, ...]]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            if bool(z["degenerate"]):
                return True, {}
            xs, ys = z["x"].tolist(), z["y"].tolist()
    except (OSError, ValueError, KeyError):
        return False, {}  # missing or broken: it only costs asking scipy again
    return False, {tuple(x): tuple(y) for x, y in zip(xs, ys, strict=True)}


def _save(interp: CachedInterpolator, path: Path) -> None:
    """At exit: add this process's new answers to the file (merged with what is there now)."""
    if not interp.fresh:
        return
    degenerate, merged = _read(path)
    merged.update({k: interp.known[k] for k in interp.fresh if k in interp.known})
    if len(merged) > MAX_STORED:
        return
    keys = list(merged)
    width = len(keys[0]) if keys else 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, degenerate=np.array(degenerate or interp.degenerate),
                 x=np.array(keys, dtype=float).reshape(len(keys), width),
                 y=np.array([merged[k] for k in keys], dtype=float).reshape(len(keys), -1 if keys else 0))
        os.replace(tmp, path)
    except OSError:
        pass
