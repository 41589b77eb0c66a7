"""Step time of one application on one GPU type, from measured profiles.

Inside the measured range we interpolate exactly as the Pollux artifact does
(`simulator/applications.py::get_throughput`): a placement that was measured is interpolated linearly in the
local batch; an unmeasured placement is interpolated in (num_nodes, num_replicas, local_bsz) over the
per-shape means of the placement traces plus the scalability traces (nodes capped at 16). Outside the
measured range (the artifact asserts) we use the Pollux performance model fitted to the same data:

    T_compute = α_c + β_c · b,   T_net = α_{n|r} + β_{n|r} · max(R − 2, 0),
    T_step    = (T_compute^γ + T_net^γ)^(1/γ)                                   (Pollux OSDI'21 §3.2)

fitted by least squares on log times (`fit_pollux`). Results are memoised per (placement, local batch):
simulations ask the same few shapes millions of times. A fit and an interpolated answer depend only on the
profile's numbers, so both are cached on disk by their digest (`cached_fit`, `interp_cache.interpolator`):
a warm start imports neither scipy nor pandas (the per-shape means are computed here as pandas' group-by
mean computes them, Kahan-compensated, so the points and their digests are the same as before). Fitting
and interpolating run with one BLAS thread: on a busy machine multi-threaded BLAS in these small problems
is orders of magnitude slower and gives the same numbers.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal, TypeAlias

import numpy as np

from elastisched.models.interp_cache import CachedInterpolator, interpolator
from elastisched.models.profiles import ThroughputProfile

ArrayOrFloat: TypeAlias = "np.ndarray | float"
ArrayOrInt: TypeAlias = "np.ndarray | int"


#: How the step-time formula reads a job on ONE replica (no all-reduce), by who asks:
#:
#: * ``"measured"`` — the simulator's and the service's model (:class:`ThroughputModel`, scalar): no network
#:   term, so step = compute and sync = 0 exactly, as the artifact's traces record a single replica
#:   (``simulator/traces/*/placements.csv``: sync_time 0); the root is taken as a power.
#: * ``"artifact"`` — what a goodput-fitting policy believes (Pollux, Sia; vectorised over configurations):
#:   the artifact's ``simulator/goodput.py`` (``_predict_network_time``, ``_predict_log_optim_time``) keeps a
#:   floor network term α = β = 1e-8 and retrogression ``max(R − 2, 1e-8)`` at every R, and takes the root
#:   in log space (its fit predicts log step time).
#:
#: The two differ only in the last bits at R = 1 and in how the root is computed; each keeps the arithmetic
#: of the code its consumer was checked against, so both sets of decisions are unchanged.
OneReplica = Literal["measured", "artifact"]
ARTIFACT_FLOOR = 1e-8


@dataclass(frozen=True, slots=True)
class PolluxParams:
    """The Pollux step-time model's parameters (OSDI'21 §3.2) and the one formula over them.

    ``T_compute = α_c + β_c·b``; ``T_net = α + β·max(R − 2, floor)`` with (α, β) the inter-node pair on
    more than one node, else the intra-node pair; ``T_step = (T_compute^γ + T_net^γ)^(1/γ)``.  The edge at
    one replica follows :data:`OneReplica`.
    """

    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def compute_time(self, local_bsz: ArrayOrFloat) -> ArrayOrFloat:
        """One forward/backward pass of ``local_bsz`` samples (scalar or array)."""
        return self.alpha_c + self.beta_c * local_bsz

    def network_time(self, num_nodes: ArrayOrInt, num_replicas: ArrayOrInt,
                     one_replica: OneReplica = "measured") -> ArrayOrFloat:
        """All-reduce time of a placement: scalar for ``"measured"``, vectorised for ``"artifact"``."""
        if one_replica == "artifact":
            nodes, reps = np.asarray(num_nodes), np.asarray(num_replicas)
            conds = [nodes > 1, reps > 1]
            alpha = np.select(conds, [self.alpha_n, self.alpha_r], ARTIFACT_FLOOR)
            beta = np.select(conds, [self.beta_n, self.beta_r], ARTIFACT_FLOOR)
            return alpha + beta * np.maximum(reps - 2, ARTIFACT_FLOOR)
        if num_replicas <= 1:
            return 0.0
        retro = max(num_replicas - 2, 0)
        if num_nodes > 1:
            return self.alpha_n + self.beta_n * retro
        return self.alpha_r + self.beta_r * retro

    def step_time(self, compute: ArrayOrFloat, network: ArrayOrFloat,
                  one_replica: OneReplica = "measured") -> ArrayOrFloat:
        """Synchronous step time from its compute and network parts (overlapped by γ)."""
        g = self.gamma
        if one_replica == "artifact":
            return np.exp(np.log(compute**g + network**g) / g)
        return (compute**g + network**g) ** (1.0 / g) if network > 0 else compute

    def step_sync(self, num_nodes: int, num_replicas: int, local_bsz: float) -> tuple[float, float]:
        """(step, sync) seconds of one placement, the ``"measured"`` reading (the simulator's)."""
        c = self.compute_time(local_bsz)
        step = self.step_time(c, self.network_time(num_nodes, num_replicas))
        return step, step - c


def _model_log_step(p: np.ndarray, nodes: np.ndarray, reps: np.ndarray, bsz: np.ndarray) -> np.ndarray:
    ac, bc, an, bn, ar, br, g = p
    c = ac + bc * bsz
    retro = np.maximum(reps - 2, 0)
    n = np.where(nodes > 1, an + bn * retro, ar + br * retro)
    n = np.where(reps > 1, n, 1e-8)
    return np.log(c**g + n**g) / g


def fit_pollux(nodes: np.ndarray, reps: np.ndarray, bsz: np.ndarray, step: np.ndarray,
               sync: np.ndarray) -> PolluxParams:
    """Fit the Pollux step-time model: RMS log error on compute and step time, as in Pollux's goodput.py."""
    from scipy.optimize import minimize
    from threadpoolctl import threadpool_limits

    compute = np.maximum(step - sync, 1e-6)

    def loss(p: np.ndarray) -> float:
        c = p[0] + p[1] * bsz
        e1 = np.sqrt(np.mean((np.log(c) - np.log(compute)) ** 2))
        e2 = np.sqrt(np.mean((_model_log_step(p, nodes, reps, bsz) - np.log(step)) ** 2))
        reg = 1e-3 * (p[6] - 1) ** 2 + 1e-2 * ((p[3] / p[2]) ** 2 + (p[5] / p[4]) ** 2)
        return float(e1 + e2 + reg)

    x0 = np.array([1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3])
    bounds = [(1e-8, None)] * 6 + [(1.0, 10.0)]
    with threadpool_limits(limits=1, user_api="blas"):
        res = minimize(loss, x0, method="L-BFGS-B", bounds=bounds)
    return PolluxParams(*map(float, res.x))


def artifact_fit_start(nodes: np.ndarray, reps: np.ndarray, bsz: np.ndarray, accum: np.ndarray
                       ) -> tuple[list[float], list[float], list[float]]:
    """(start, lower, upper) of (α_c, β_c, α_n, β_n, α_r, β_r, γ) for a fit to observations (Pollux artifact
    `fit_perf_params`; Pollux's and Sia's fits): what the observations cannot identify is pinned to its lower
    bound, α_c to half the mean `accum` time when one atomic batch `bsz` was seen; the network terms without a
    multi-node run, the intra-node terms without a single-node multi-replica run, both β without a run of more
    than two replicas."""
    x0 = [1e-1, 1e-2] * 3 + [1.0 + 1e-3]
    lower = [ARTIFACT_FLOOR] * 6 + [1.0]
    upper = [np.inf] * 6 + [10.0]
    if len(np.unique(bsz)) == 1:
        x0[0] = lower[0] = upper[0] = float(np.mean(accum)) / 2
    pinned = ((2, 3) if not np.any(nodes > 1) else ()) + ((4, 5) if not np.any((nodes == 1) & (reps > 1)) else ()) \
        + ((3, 5) if not np.any(reps > 2) else ())
    for i in pinned:
        x0[i] = upper[i] = lower[i]
    return x0, lower, upper


FIT_VERSION = 1  # bump when fit_pollux changes: old cache entries are then ignored


def cache_dir() -> Path | None:
    """Where fits are cached: $ELASTISCHED_CACHE_DIR, else ~/.cache/elastisched; "" or "off" disables."""
    env = os.environ.get("ELASTISCHED_CACHE_DIR")
    if env is not None:
        return None if env in ("", "off") else Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "elastisched"


def cached_fit(pts: np.ndarray, vals: np.ndarray) -> PolluxParams:
    """`fit_pollux` on (nodes, replicas, local batch) → (step, sync) points, cached on disk by the digest of
    the points (float64 bytes) and FIT_VERSION; an unreadable or unwritable cache only costs the fit."""
    pts, vals = np.ascontiguousarray(pts, dtype=np.float64), np.ascontiguousarray(vals, dtype=np.float64)
    digest = hashlib.sha256(b"%d|%r|%r|" % (FIT_VERSION, pts.shape, vals.shape) + pts.tobytes()
                            + vals.tobytes()).hexdigest()[:32]
    root = cache_dir()
    path = root / "fits" / f"{digest}.json" if root is not None else None
    if path is not None:
        try:
            return PolluxParams(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            pass
    params = fit_pollux(pts[:, 0], pts[:, 1], pts[:, 2], vals[:, 0], vals[:, 1])
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(asdict(params)))
            os.replace(tmp, path)
        except OSError:
            pass
    return params


def group_means(keys: list[np.ndarray], values: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique key rows, per-group means of the values), computed as pandas' `groupby(keys).mean()`
    does (Kahan-compensated sums in row order, then sum / count), so the numbers are bit-identical. The
    compensated sums run for all groups at once, one step per row rank within a group (elementwise float64
    arithmetic: the same operations in the same order as row by row)."""
    rows = list(zip(*(c.tolist() for c in keys), strict=True))
    ids: dict[tuple[float, ...], int] = {}
    gid = np.array([ids.setdefault(k, len(ids)) for k in rows], dtype=np.intp)
    order = sorted(ids)
    if not rows:
        return np.zeros((0, len(keys))), np.zeros((0, len(values)))
    counts = np.bincount(gid, minlength=len(ids))
    by_group = np.argsort(gid, kind="stable")  # rows of group 0 in row order, then group 1, ...
    rank = np.arange(len(rows)) - np.concatenate([[0], np.cumsum(counts)[:-1]])[gid[by_group]]
    means = np.empty((len(ids), len(values)))
    for j, col in enumerate(values):
        grid = np.zeros((len(ids), int(counts.max())))
        grid[gid[by_group], rank] = np.asarray(col, dtype=float)[by_group]
        total, comp = np.zeros(len(ids)), np.zeros(len(ids))
        for r in range(grid.shape[1]):
            live = counts > r
            y = grid[:, r] - comp
            t = total + y
            comp = np.where(live, t - total - y, comp)
            total = np.where(live, t, total)
        means[:, j] = total / counts
    perm = [ids[k] for k in order]
    return np.array(order, dtype=float).reshape(len(order), len(keys)), means[perm].reshape(len(order), len(values))


def canonical_placement(placement: tuple[int, ...]) -> tuple[int, ...]:
    """Drop empty nodes and rotate to the lexicographically smallest rotation (the artifact's key)."""
    p = tuple(x for x in placement if x)
    if not p:
        return p
    # the smallest rotation starts where a run of the smallest element starts (a rotation starting inside
    # a run is larger than the one starting a step earlier), so only those starts are compared: one for a
    # balanced shape instead of len(p) (the JCT decomposition asks for shapes over hundreds of nodes)
    m = min(p)
    starts = [i for i, x in enumerate(p) if x == m and p[i - 1] != m] or [0]
    return min(p[i:] + p[:i] for i in starts)


@lru_cache(maxsize=65536)
def _placement_key(placement: tuple[int, ...]) -> tuple[tuple[int, ...], str | None]:
    """(canonical placement, its key among the measured placements, None for a count ≥ 10 on a node), once per
    placement: the step-time memo is per (placement, batch), and a placement is asked at many batches."""
    p = canonical_placement(placement)
    return p, "".join(map(str, p)) if all(x < 10 for x in p) else None


class ProfileInterpolator:
    """Piecewise-linear interpolation of measured (step, sync) times over (nodes, replicas, local batch).

    Only the coordinates that vary in the profile are triangulated: a profile measured on one machine
    (every point at one node count, as `elastisched profile` writes it) has no 3-D triangulation (qhull
    QH6013), and points on a flat 2-D set would fail the same way. A query that differs from the profile
    in a constant coordinate, lies outside the hull, or meets a degenerate point set gives NaN, so the
    caller falls back to the fitted model.
    """

    def __init__(self, pts: np.ndarray, vals: np.ndarray) -> None:
        varying = np.ptp(pts, axis=0) > 0
        self._varying = varying
        self._fixed = pts[0, ~varying].tolist()
        self._vals = vals
        self._nd: CachedInterpolator | None = None
        self._x1: np.ndarray | None = None
        #: every coordinate varies: a query goes to the N-d interpolant as it is
        self._nd_only = bool(varying.all())
        if varying.sum() >= 2:
            self._nd = interpolator(pts[:, varying], vals, cache_dir())
        elif varying.sum() == 1:
            x = pts[:, varying][:, 0]
            order = np.argsort(x, kind="stable")
            self._x1, self._vals = x[order], vals[order]

    def values(self, query: list[float]) -> tuple[float, ...] | None:
        """The interpolated values as floats; None where `__call__` gives any NaN (the caller then falls back)."""
        if self._nd is not None and self._nd_only:
            out = self._nd([float(v) for v in query])
            return None if out is None or any(v != v for v in out) else tuple(out)
        arr = self(query)
        return None if bool(np.isnan(arr).any()) else tuple(float(v) for v in arr)

    def __call__(self, query: list[float]) -> np.ndarray:
        q = [float(v) for v in query]
        nan = np.full(self._vals.shape[1], np.nan)
        if [v for v, var in zip(q, self._varying, strict=True) if not var] != self._fixed:
            return nan
        free = [v for v, var in zip(q, self._varying, strict=True) if var]
        if self._nd is not None:
            out = self._nd(free)
            return nan if out is None else np.array(out, dtype=float)
        if self._x1 is not None:
            x = free[0]
            if not self._x1[0] <= x <= self._x1[-1]:
                return nan
            return np.array([np.interp(x, self._x1, self._vals[:, j]) for j in range(self._vals.shape[1])])
        return self._vals[0].copy() if len(self._vals) and not self._varying.any() else nan


class ThroughputModel:
    """(placement, local batch) → (step_time, sync_time) seconds for one app on one GPU type."""

    def __init__(self, profile: ThroughputProfile, max_nodes_interp: int = 16) -> None:
        pl, sc = profile.placement_columns, profile.scalability_columns
        self._by_placement: dict[str, tuple[list[float], list[float], list[float]]] = {}  # bsz, step, sync
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(pl["placement"]):
            groups.setdefault(str(key), []).append(i)
        for key in sorted(groups):  # pandas' groupby("placement").sort_values("local_bsz"), same order
            rows = np.array(groups[key])
            rows = rows[np.argsort(pl["local_bsz"][rows], kind="quicksort")]
            self._by_placement[key] = (pl["local_bsz"][rows].tolist(), pl["step_time"][rows].tolist(),
                                       pl["sync_time"][rows].tolist())
        xs, ys = ("num_nodes", "num_replicas", "local_bsz"), ("step_time", "sync_time")
        keys, means = group_means([pl[c] for c in xs], [pl[c] for c in ys])
        pts = np.vstack([keys, np.c_[tuple(sc[c] for c in xs)]])
        vals = np.vstack([means, np.c_[tuple(sc[c] for c in ys)]])
        self._interp = ProfileInterpolator(pts, vals)
        self._max_nodes = max_nodes_interp
        self.min_local_bsz = int(pl["local_bsz"].min())
        self.max_local_bsz = int(pl["local_bsz"].max())
        self.params = cached_fit(pts, vals)
        self.step_sync = lru_cache(maxsize=65536)(self._step_sync)

    def _step_sync(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        p, key = _placement_key(placement)
        measured = self._measured(p, key, local_bsz)
        if measured is not None:
            return measured
        reps = sum(p)
        out = self._interpolated(min(len(p), self._max_nodes), reps, local_bsz)
        return out if out is not None else self.params.step_sync(len(p), reps, local_bsz)

    def step_syncs(self, placements: Iterable[tuple[int, ...]], local_bsz: float) -> Iterator[tuple[float, float]]:
        """`step_sync` of each placement in turn, by the same arithmetic; an interpolation query is put once:
        the JCT decomposition (`sim/decompose.py`) prices every balanced spread of a GPU count, and every
        spread over more than `max_nodes_interp` nodes that no measured placement answers asks the same. A model
        with a `_step_sync` of its own (the live service's `OneNodeModel`) answers each placement with that."""
        if type(self)._step_sync is not ThroughputModel._step_sync:
            yield from (self.step_sync(p, local_bsz) for p in placements)
            return
        asked: dict[tuple[int, int], tuple[float, float] | None] = {}
        for placement in placements:
            p, key = _placement_key(placement)
            measured = self._measured(p, key, local_bsz)
            if measured is not None:
                yield measured
                continue
            q = (min(len(p), self._max_nodes), sum(p))
            if q not in asked:
                asked[q] = self._interpolated(q[0], q[1], local_bsz)
            out = asked[q]
            yield out if out is not None else self.params.step_sync(len(p), q[1], local_bsz)

    def _measured(self, p: tuple[int, ...], key: str | None, local_bsz: float) -> tuple[float, float] | None:
        """A measured placement's times interpolated in the local batch; None when it was not measured there."""
        if not p:
            raise ValueError("empty placement")
        if key is not None and key in self._by_placement:
            bs, step, sync = self._by_placement[key]
            if bs[0] <= local_bsz <= bs[-1]:
                return interp1(local_bsz, bs, step), interp1(local_bsz, bs, sync)
        return None

    def _interpolated(self, nodes: int, reps: int, local_bsz: float) -> tuple[float, float] | None:
        """The times interpolated over (nodes, replicas, local batch); None outside the measured hull."""
        out = self._interp.values([nodes, reps, local_bsz])
        if out is not None and math.isfinite(out[0]) and math.isfinite(out[1]):
            return out[0], out[1]
        return None


def interp1(x: float, xp: list[float], fp: list[float]) -> float:
    """`float(np.interp(x, xp, fp))` for `xp[0] <= x <= xp[-1]`, in plain floats (numpy's scalar call costs more
    than the arithmetic): the same interval (the last j with xp[j] <= x), the same formula and NaN handling as
    numpy's `compiled_interp`, so the same bits (tests/models/test_throughput_fast.py)."""
    if x == xp[-1]:
        return fp[-1]
    j = bisect_right(xp, x) - 1
    if xp[j] == x:
        return fp[j]
    slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])
    r = slope * (x - xp[j]) + fp[j]
    if r != r:
        r = slope * (x - xp[j + 1]) + fp[j + 1]
        if r != r and fp[j] == fp[j + 1]:
            r = fp[j]
    return r
