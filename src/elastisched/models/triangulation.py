"""Piecewise-linear interpolation over a Delaunay triangulation without importing scipy on a warm start.

`scipy.interpolate.LinearNDInterpolator` costs ~0.4 s of imports, more than a whole simulated Pollux workload.
The triangulation depends only on the points, so it is computed once with scipy (`scipy.spatial.Delaunay`,
the triangulation LinearNDInterpolator builds) and cached on disk by the digest of the points; a query then
runs scipy's own point location, transcribed here in plain Python (scipy `spatial/_qhull.pyx`:
`_find_simplex` — lift the point onto the paraboloid, walk to the facet whose plane distance is largest, then
`_find_simplex_directed`, falling back to `_find_simplex_bruteforce` — with eps = 100·DBL_EPSILON and
eps_broad = √eps as `LinearNDInterpolator._do_evaluate` passes them), and the same barycentric sums in the
same order. The same simplex is found and the same arithmetic done, so the values are the ones scipy gives
(checked bit for bit against LinearNDInterpolator in tests/models/test_triangulation.py). Where a point was
found (simplex, barycentric coordinates) depends on nothing else, so it is kept on disk too: a warm run of
the same workload locates no point again.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import sys
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import cached_property
from itertools import product
from pathlib import Path

import numpy as np

EPS = 100 * sys.float_info.epsilon
EPS_BROAD = float(np.sqrt(EPS))
TRI_VERSION = 3  # bump when the cached fields change


def box_index(points: np.ndarray, simplices: np.ndarray, neighbors: np.ndarray, transform: np.ndarray,
              grid: int = 16, max_span: int = 512) -> dict[str, np.ndarray]:
    """Which simplices may hold a point, as arrays (cached with the triangulation): a grid of `grid` cells per
    dimension, cut at quantiles of the vertices, each cell listing in index order the simplices whose box,
    widened by a margin far above every tolerance of the tests, overlaps it (a degenerate simplex is tested
    through its neighbours: their boxes). Simplices spanning more than `max_span` cells go to `always`."""
    corners = points[simplices]
    lo, hi = corners.min(axis=1), corners.max(axis=1)
    for s in np.flatnonzero(np.isnan(transform[:, 0, 0])):
        ns = neighbors[s][neighbors[s] >= 0]
        lo[s], hi[s] = (lo[ns].min(axis=0), hi[ns].max(axis=0)) if len(ns) else (np.inf, -np.inf)
    ok = np.all(lo <= hi, axis=1)
    margin = 1e-6 * (1.0 + np.abs(lo) + np.abs(hi))
    lo, hi = np.where(ok[:, None], lo - margin, np.inf), np.where(ok[:, None], hi + margin, -np.inf)
    nd = points.shape[1]
    cuts = np.full((nd, grid - 1), np.inf)
    for d in range(nd):
        c = np.unique(np.quantile(points[:, d], np.linspace(0, 1, grid + 1)[1:-1]))
        cuts[d, : len(c)] = c
    a = np.stack([np.searchsorted(cuts[d], lo[:, d], side="right") for d in range(nd)], axis=1)
    b = np.stack([np.searchsorted(cuts[d], hi[:, d], side="right") for d in range(nd)], axis=1)
    span = np.prod(b - a + 1, axis=1)
    always = np.flatnonzero(ok & (span > max_span))
    cell_of: list[int] = []
    sim_of: list[int] = []
    for s in np.flatnonzero(ok & (span <= max_span)).tolist():
        for cell in product(*(range(a[s, d], b[s, d] + 1) for d in range(nd))):
            cid = 0
            for v in cell:
                cid = cid * grid + int(v)
            cell_of.append(cid)
            sim_of.append(s)
    order = np.lexsort((np.array(sim_of, dtype=np.int64), np.array(cell_of, dtype=np.int64)))
    cells = np.array(cell_of, dtype=np.int64)[order]
    ptr = np.searchsorted(cells, np.arange(grid**nd + 1))
    return {"box_lo": lo, "box_hi": hi, "box_cuts": cuts, "box_ptr": ptr.astype(np.int64),
            "box_ids": np.array(sim_of, dtype=np.int64)[order], "box_always": always.astype(np.int64),
            "box_grid": np.array(grid)}


class BoxIndex:
    """Candidate simplices for a point (`box_index`), with an exact box test, in index order."""

    def __init__(self, a: dict[str, np.ndarray]) -> None:
        self._grid = int(a["box_grid"])
        self._cuts = [[c for c in row if c != np.inf] for row in a["box_cuts"].tolist()]
        self._ptr: list[int] = a["box_ptr"].tolist()
        self._ids = a["box_ids"]
        self._always = a["box_always"]
        self._lo, self._hi = a["box_lo"], a["box_hi"]

    def candidates(self, x: list[float]) -> list[int]:
        cid = 0
        for c, v in zip(self._cuts, x, strict=True):
            cid = cid * self._grid + bisect_right(c, v)
        ids = self._ids[self._ptr[cid]:self._ptr[cid + 1]]
        if len(self._always):
            ids = np.concatenate([ids, self._always])
        xa = np.array(x)
        ids = ids[np.all(self._lo[ids] <= xa, axis=1) & np.all(self._hi[ids] >= xa, axis=1)]
        return sorted(ids.tolist()) if len(self._always) else ids.tolist()


@dataclass(frozen=True)
class Triangulation:
    """What point location needs of a `scipy.spatial.Delaunay` (flattened to Python lists: queries are
    one point at a time, where list indexing beats numpy)."""

    ndim: int
    simplices: list[list[int]]
    neighbors: list[list[int]]
    transform: list[list[float]]  # per simplex: ndim×ndim inverse (row-major), then the ndim offset r
    equations: list[list[float]]  # per simplex: ndim+2 coefficients of its lifted facet
    paraboloid_scale: float
    paraboloid_shift: float
    min_bound: list[float]
    max_bound: list[float]
    _index: BoxIndex
    # point -> (simplex, barycentric coordinates) found for it: a pure function of the triangulation, kept
    # on disk beside it (`triangulate`), so a warm run locates no point twice
    located: dict[tuple[float, ...], tuple[int, tuple[float, ...]]] = field(default_factory=dict, compare=False)
    fresh: list[tuple[float, ...]] = field(default_factory=list, compare=False)

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> Triangulation:
        nd = int(a["ndim"])
        return cls(nd, a["simplices"].tolist(), a["neighbors"].tolist(),
                   a["transform"].reshape(len(a["transform"]), -1).tolist(), a["equations"].tolist(),
                   float(a["paraboloid"][0]), float(a["paraboloid"][1]), a["min_bound"].tolist(),
                   a["max_bound"].tolist(), BoxIndex(a))

    def _outside(self, x: list[float], eps: float) -> bool:
        return any(x[i] < self.min_bound[i] - eps or x[i] > self.max_bound[i] + eps for i in range(self.ndim))

    def _bary(self, s: int, x: list[float], c: list[float]) -> None:
        """Barycentric coordinates of `x` in simplex `s` into `c`, in scipy's order of operations."""
        nd, t = self.ndim, self.transform[s]
        r = nd * nd
        d = [x[j] - t[r + j] for j in range(nd)]
        last = 1.0
        for i in range(nd):
            ci = 0.0
            for j in range(nd):
                ci += t[nd * i + j] * d[j]
            c[i] = ci
        for i in range(nd):
            last -= c[i]
        c[nd] = last

    @cached_property
    def _valid(self) -> list[bool]:
        return [t[0] == t[0] for t in self.transform]  # NaN transform: a degenerate simplex

    def _bruteforce(self, x: list[float], c: list[float]) -> int:
        """scipy's `_find_simplex_bruteforce`: the first simplex, in index order, that holds `x` (a degenerate
        one, whose transform is NaN, through a neighbour that holds it with leeway towards it). Only the
        simplices whose box (`_index`) holds `x` are tried: the others cannot pass the test."""
        nd = self.ndim
        if self._outside(x, EPS):
            return -1
        valid, lo, hi = self._valid, -EPS, 1 + EPS
        for s in self._index.candidates(x):
            if valid[s]:
                self._bary(s, x, c)
                if all(lo <= v <= hi for v in c):
                    return s
                continue
            for k in range(nd + 1):  # degenerate simplex (NaN transform): look at its neighbours
                n = self.neighbors[s][k]
                if n == -1 or not valid[n]:
                    continue
                self._bary(n, x, c)
                if all((-EPS_BROAD if self.neighbors[n][m] == s else -EPS) <= c[m] <= 1 + EPS
                       for m in range(nd + 1)):
                    return n
        return -1

    def _directed(self, s: int, x: list[float], c: list[float]) -> int:
        nd = self.ndim
        for _ in range(1 + len(self.simplices) // 4):
            if s == -1:
                return -1
            inside = 1
            self._bary(s, x, c)
            for k in range(nd + 1):
                if c[k] < -EPS:
                    m = self.neighbors[s][k]
                    if m == -1:
                        return -1
                    s, inside = m, -1
                    break
                if not c[k] <= 1 + EPS:
                    inside = 0
            if inside == -1:
                continue
            return s if inside == 1 else self._bruteforce(x, c)
        return self._bruteforce(x, c)

    def find(self, x: list[float], c: list[float]) -> int:
        """The simplex holding `x` (barycentric coordinates left in `c`), or -1 outside the hull."""
        nd = self.ndim
        if self._outside(x, EPS) or not self.simplices:
            return -1
        z = [*x, 0.0]
        for i in range(nd):
            z[nd] += x[i] ** 2
        z[nd] *= self.paraboloid_scale
        z[nd] += self.paraboloid_shift
        s, best = 0, self._distplane(0, z)
        changed = True
        while changed:
            if best > 0:
                break
            changed = False
            for k in range(nd + 1):
                n = self.neighbors[s][k]
                if n == -1:
                    continue
                dist = self._distplane(n, z)
                if dist > best + EPS * (1 + abs(best)):
                    s, best, changed = n, dist, True
        return self._directed(s, x, c)

    def _distplane(self, s: int, z: list[float]) -> float:
        eq = self.equations[s]
        dist = eq[self.ndim + 1]
        for k in range(self.ndim + 1):
            dist += eq[k] * z[k]
        return dist

    def __call__(self, x: list[float], values: list[list[float]]) -> list[float] | None:
        """Linear interpolation of `values` (one row per input point) at `x`; None outside the hull."""
        key = tuple(x)
        hit = self.located.get(key)
        if hit is None:
            c = [0.0] * (self.ndim + 1)
            s = self.find(x, c)
            hit = self.located[key] = (s, tuple(c))
            self.fresh.append(key)
        s, c = hit[0], list(hit[1])
        if s == -1:
            return None
        out = [0.0] * len(values[0])
        for j, m in enumerate(self.simplices[s]):
            for k in range(len(out)):
                out[k] = out[k] + c[j] * values[m][k]
        return out


def _compute(points: np.ndarray) -> dict[str, np.ndarray] | None:
    from scipy.spatial import Delaunay, QhullError
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # small problems: threads only cost (module docstring)
        try:
            tri = Delaunay(points)
        except QhullError:
            return None
        out = {"ndim": np.array(tri.ndim), "simplices": tri.simplices.astype(np.int64),
               "neighbors": tri.neighbors.astype(np.int64), "transform": np.array(tri.transform),
               "equations": np.array(tri.equations),
               "paraboloid": np.array([tri.paraboloid_scale, tri.paraboloid_shift], dtype=float),
               "min_bound": np.array(tri.min_bound), "max_bound": np.array(tri.max_bound)}
    return out | box_index(np.array(tri.points), out["simplices"], out["neighbors"], out["transform"])


_MEMO: dict[str, Triangulation | None] = {}


def triangulate(points: np.ndarray, cache: Path | None) -> Triangulation | None:
    """The Delaunay triangulation of `points` (None when qhull finds none, e.g. a flat point set), from the
    in-process memo, the on-disk cache under `cache` (None: no disk cache), or scipy."""
    points = np.ascontiguousarray(points, dtype=np.float64)
    digest = hashlib.sha256(b"tri|%d|%r|" % (TRI_VERSION, points.shape) + points.tobytes()).hexdigest()[:32]
    if digest in _MEMO:
        return _MEMO[digest]
    path = cache / "triangulations" / f"{digest}.npz" if cache is not None else None
    arrays: dict[str, np.ndarray] | None = None
    loaded = False
    if path is not None:
        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files} if "ndim" in z.files else None
            loaded = True
        except (OSError, ValueError, KeyError):
            loaded = False
    if not loaded:
        arrays = _compute(points)
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f"{digest}.{os.getpid()}.tmp.npz")
                np.savez(tmp, **(arrays or {"none": np.zeros(0)}))
                os.replace(tmp, path)
            except OSError:
                pass
    tri = Triangulation.from_arrays(arrays) if arrays is not None else None
    if tri is not None and path is not None:
        located = path.with_name(f"{digest}.located.npz")
        tri.located.update(_read_located(located))
        atexit.register(_save_located, tri, located)
    _MEMO[digest] = tri
    return tri


MAX_LOCATED = 50_000  # points kept per triangulation on disk (loading them must stay cheaper than locating)


def _read_located(path: Path) -> dict[tuple[float, ...], tuple[int, tuple[float, ...]]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            xs, ss, cs = z["x"].tolist(), z["s"].tolist(), z["c"].tolist()
    except (OSError, ValueError, KeyError):
        return {}
    return {tuple(x): (s, tuple(c)) for x, s, c in zip(xs, ss, cs, strict=True)}


def _save_located(tri: Triangulation, path: Path) -> None:
    """At exit: add this process's newly located points to the file (merged with what is there now)."""
    if not tri.fresh:
        return
    merged = _read_located(path)
    merged.update({k: tri.located[k] for k in tri.fresh})
    if len(merged) > MAX_LOCATED:
        return
    try:
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        keys = list(merged)
        np.savez(tmp, x=np.array(keys, dtype=float), s=np.array([merged[k][0] for k in keys], dtype=np.int64),
                 c=np.array([merged[k][1] for k in keys], dtype=float))
        os.replace(tmp, path)
    except OSError:
        pass
