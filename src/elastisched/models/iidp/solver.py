"""Exact IIDP configuration solver: LBS from the profiled grid and (m, a) per GPU unit, max throughput.

Problem [digest §2(b); code: IIDP ``iidp/config/configurator.py`` ``DynamicProgrammingSolver``, JABAS
``jabas/config/configurator.py`` ``solve_placement``]: servers are cut into allocation units of
``unit_gpus`` GPUs (2 for JABAS: both GPUs of a unit run the same (m, a), so the even/odd-rank halves that
the similarity statistic compares hold the same number of decoupled workers).  Each unit u picks
``w_u = m_u(a_u+1) ≥ 1`` with ``m_u ≤ maxVSW(type, b)`` and ``a_u ≤ 1000``; ``Σ_u unit_gpus·w_u = W``.
Throughput ``b·W / max_u t_u(m_u, a_u)`` for fixed (b, W) is maximal when the bottleneck is minimal.

Algorithm (exact; the release's table DP is a heuristic that can miss solutions):

1. per unit, ``τ_u(w) = min_{m | w, m ≤ M, w/m−1 ≤ 1000} t_u(m, w/m − 1)`` for every w (vectorised);
2. the min-bottleneck curve ``f(S) = min max_u τ_u(w_u)`` over ``Σ w_u = S`` is a (min, max)-convolution
   of the unit curves; units of one server are identical so a server with k units contributes
   ``τ^{⊗k}`` by repeated squaring.  One pass gives ``f`` for **every** S ≤ S_max, which the auto-scaler
   reuses for all points of a batch-size trajectory;
3. for one S the assignment is rebuilt at the threshold ``T* = f(S)``: a bitset subset-sum over units of
   the options with ``τ_u ≤ T*`` and a backtrack that prefers each unit's fastest feasible option.

Readings (``docs/jabas.md``): units of one server may get different (m, a) (the release allows it too);
ties in (m, a) for the same w go to fewer VSWs (less memory); among LBS the highest throughput wins
(as the release).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from elastisched.models.iidp.config import IIDPConfig, UnitAssignment, choose_config, directional_workers
from elastisched.models.iidp.profiles import ServerSpec
from elastisched.models.iidp.release import IIDPModel

__all__ = [
    "MAX_GA_STEPS",
    "IIDPConfig",
    "ProfileIIDP",
    "UnitAssignment",
    "bottleneck_curve",
    "directional_workers",
    "minmax_convolve",
    "solve_batch",
    "solve_placement",
    "solve_workers",
    "unit_time_table",
]

#: Largest GA step count the release's table considers [code: ``create_table`` ``MAX_GA_STEPS``].
MAX_GA_STEPS = 1000


# ------------------------------------------------------------------------------------------ primitives
def _cluster_scope(cluster: Sequence[ServerSpec]) -> tuple[int, bool]:
    return sum(s.num_gpus for s in cluster), len({s.name for s in cluster}) > 1


def unit_time_table(
    model: IIDPModel,
    server: ServerSpec,
    lbs: int,
    s_max: int,
    *,
    total_gpus: int,
    multi_server: bool,
    max_ga: int = MAX_GA_STEPS,
) -> tuple[np.ndarray, np.ndarray]:
    """``(τ, m*)`` over w = 0..s_max: fastest time of ``w`` decoupled workers per GPU and its VSW count.

    ``τ[0] = inf`` (every GPU runs at least one worker); infeasible w (prime w > maxVSW with
    w−1 > max_ga, ...) are ``inf`` with ``m* = 0``.
    """
    base, step = model.unit_coeffs(
        server.gpu_type,
        lbs,
        total_gpus=total_gpus,
        multi_server=multi_server,
        bandwidth=server.inter_bandwidth if multi_server else server.intra_bandwidth,
    )
    w = np.arange(s_max + 1)
    m = np.arange(1, len(base) + 1)[:, None]
    ok = (w[None, :] % m == 0) & (w[None, :] > 0)
    a = np.where(ok, w[None, :] // m - 1, 0)
    ok &= a <= max_ga
    t = np.where(ok, base[:, None] + a * step[:, None], np.inf)
    best = np.argmin(t, axis=0)  # first minimum = fewest VSWs on ties
    tau = t[best, w]
    return tau, np.where(np.isfinite(tau), best + 1, 0)


@lru_cache(maxsize=32)
def _shift_index(n: int) -> np.ndarray:
    """``idx[s, w] = s − w``, or ``n`` (a padded +inf slot) where ``w > s``."""
    s = np.arange(n)[:, None]
    w = np.arange(n)[None, :]
    return np.where(w > s, n, s - w)


def minmax_convolve(f: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``h[s] = min_{w ≤ s} max(f[s−w], g[w])`` (same length); the bottleneck of two unit groups."""
    n = len(f)
    lim = np.nonzero(np.isfinite(g))[0]
    if len(lim) == 0:
        return np.full(n, np.inf)
    hi = int(lim[-1]) + 1  # options beyond the last finite g[w] never win
    f_pad = np.append(f, np.inf)
    m = np.maximum(f_pad[_shift_index(n)[:, :hi]], g[None, :hi])
    return m.min(axis=1)


def _power(tau: np.ndarray, k: int) -> np.ndarray:
    """``τ^{⊗k}`` by repeated squaring (k identical units)."""
    result: np.ndarray | None = None
    base = tau
    while k:
        if k & 1:
            result = base if result is None else minmax_convolve(result, base)
        k >>= 1
        if k:
            base = minmax_convolve(base, base)
    assert result is not None
    return result


def _units_of(server: ServerSpec, unit_gpus: int) -> int:
    if server.num_gpus % unit_gpus:
        raise ValueError(
            f"server {server.name!r} has {server.num_gpus} GPUs, not a multiple of the "
            f"allocation unit ({unit_gpus} GPUs)"
        )
    return server.num_gpus // unit_gpus


def bottleneck_curve(
    model: IIDPModel,
    cluster: Sequence[ServerSpec],
    lbs: int,
    s_max: int,
    *,
    unit_gpus: int = 2,
    max_ga: int = MAX_GA_STEPS,
    power_cache: dict[tuple, np.ndarray] | None = None,
) -> np.ndarray:
    """Min bottleneck time ``f[S]`` for S = 0..s_max workers per unit-GPU (``W = unit_gpus·S``); inf = none.

    All servers must support ``lbs`` (else every entry is inf).  ``power_cache`` (a dict owned by the
    caller, for one model) shares the per-class curves between candidate clusters of the same size.
    """
    total, multi = _cluster_scope(cluster)
    if not cluster or not all(model.supports(s.gpu_type, lbs) for s in cluster):
        return np.full(s_max + 1, np.inf)
    # identical servers (type, bandwidth) have identical unit curves: one power per class
    classes: dict[tuple[str, float], tuple[ServerSpec, int]] = {}
    for server in cluster:
        key = (server.gpu_type, server.inter_bandwidth if multi else server.intra_bandwidth)
        rep, k = classes.get(key, (server, 0))
        classes[key] = (rep, k + _units_of(server, unit_gpus))
    f: np.ndarray | None = None
    for (gpu_type, bw), (rep, k) in classes.items():
        key = (gpu_type, bw, total, multi, lbs, k, s_max, max_ga)
        g = None if power_cache is None else power_cache.get(key)
        if g is None:
            tau, _ = unit_time_table(model, rep, lbs, s_max, total_gpus=total, multi_server=multi, max_ga=max_ga)
            g = _power(tau, k)
            if power_cache is not None:
                power_cache[key] = g
        f = g if f is None else minmax_convolve(f, g)
    assert f is not None
    return f


# ------------------------------------------------------------------------------------------ solve
def solve_workers(
    model: IIDPModel,
    cluster: Sequence[ServerSpec],
    lbs: int,
    num_workers: int,
    *,
    unit_gpus: int = 2,
    max_ga: int = MAX_GA_STEPS,
    curve: np.ndarray | None = None,
) -> IIDPConfig | None:
    """Exact min-bottleneck configuration for a fixed (LBS, W); ``None`` if infeasible.

    ``curve`` may pass a precomputed :func:`bottleneck_curve` (long enough) to skip step 2.
    """
    if num_workers <= 0 or num_workers % unit_gpus:
        return None
    s = num_workers // unit_gpus
    if not cluster or not all(model.supports(x.gpu_type, lbs) for x in cluster):
        return None
    units = [(srv, k) for srv in cluster for k in range(_units_of(srv, unit_gpus))]
    if s < len(units):
        return None
    if curve is None or len(curve) <= s:
        curve = bottleneck_curve(model, cluster, lbs, s, unit_gpus=unit_gpus, max_ga=max_ga)
    t_star = float(curve[s])
    if not np.isfinite(t_star):
        return None
    total, multi = _cluster_scope(cluster)
    tables: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for srv in cluster:
        if srv.name not in tables:
            tables[srv.name] = unit_time_table(model, srv, lbs, s, total_gpus=total, multi_server=multi, max_ga=max_ga)
    # subset-sum over units with options τ_u(w) ≤ T*: reach[i][x] = first i units can sum to x
    feas = [tables[srv.name][0] <= t_star for srv, _ in units]
    reach = np.zeros((len(units) + 1, s + 1), dtype=bool)
    reach[0, 0] = True
    for i, fz in enumerate(feas):
        reach[i + 1] = np.convolve(reach[i].astype(np.int64), fz.astype(np.int64))[: s + 1] > 0
    if not reach[-1, s]:  # cannot happen when the curve is right; defensive
        raise AssertionError(f"bottleneck curve says {t_star} is feasible for S={s} but subset-sum disagrees")
    choice: list[int] = [0] * len(units)
    rem = s
    for i in range(len(units) - 1, -1, -1):
        tau = tables[units[i][0].name][0]
        ws = np.nonzero(feas[i][: rem + 1])[0]
        ws = ws[reach[i, rem - ws]]
        w = int(ws[np.argmin(tau[ws])])  # fastest feasible option for this unit
        choice[i] = w
        rem -= w
    out: list[UnitAssignment] = []
    for (srv, k), w in zip(units, choice, strict=True):
        tau, mstar = tables[srv.name]
        m = int(mstar[w])
        out.append(UnitAssignment(srv.name, k * unit_gpus, unit_gpus, m, w // m - 1, float(tau[w])))
    return IIDPConfig(lbs=lbs, num_workers=num_workers, iter_time=max(u.iter_time for u in out), units=tuple(out))


def _candidate_lbs(model: IIDPModel, cluster: Sequence[ServerSpec], upper_bound: int | None) -> list[int]:
    """LBS of the grid that every server supports and with ``upper_bound // b ≥ #GPUs`` (release rule)."""
    total = sum(s.num_gpus for s in cluster)
    grid = model.lbs_grid()
    return [
        b
        for b in grid
        if all(model.supports(s.gpu_type, b) for s in cluster) and (upper_bound is None or upper_bound // b >= total)
    ]


def solve_placement(
    model: IIDPModel,
    cluster: Sequence[ServerSpec],
    target_gbs: float,
    current_gbs: int,
    *,
    upper_bound: int | None = None,
    unit_gpus: int = 2,
) -> IIDPConfig | None:
    """JABAS adaptive-batching re-solve [code: ``AdaptiveBatchingConfigurator.solve_placement``].

    For each supported LBS: ``W = round(target/b)`` rounded to even toward the move, skipped unless
    ``b·W`` strictly moves away from ``current_gbs`` in that direction and ``W ≥ #GPUs``; the
    highest-throughput solution wins.  ``None`` = no feasible move (keep the current configuration).
    """
    total = sum(s.num_gpus for s in cluster)
    best: IIDPConfig | None = None
    for b in _candidate_lbs(model, cluster, upper_bound):
        w = directional_workers(target_gbs, b, current_gbs, unit_gpus=unit_gpus)
        if w is None or w < total:
            continue
        cfg = solve_workers(model, cluster, b, w, unit_gpus=unit_gpus)
        if cfg is not None and (best is None or cfg.throughput > best.throughput):
            best = cfg
    return best


def solve_batch(
    model: IIDPModel,
    cluster: Sequence[ServerSpec],
    target_gbs: float,
    *,
    upper_bound: int | None = None,
    unit_gpus: int = 2,
    lbs: int | None = None,
) -> IIDPConfig | None:
    """Best configuration for a GBS near ``target_gbs`` (no direction; for placing a job).

    Per LBS, W is the multiple of ``unit_gpus`` nearest ``target/b`` (ties down), at least #GPUs; the
    highest throughput over LBS wins (as the release).  ``lbs`` pins the local batch.
    """
    total = sum(s.num_gpus for s in cluster)
    grid = [lbs] if lbs is not None else _candidate_lbs(model, cluster, upper_bound)
    best: IIDPConfig | None = None
    for b in grid:
        if not all(model.supports(s.gpu_type, b) for s in cluster):
            continue
        q = target_gbs / (b * unit_gpus)
        lo = int(np.floor(q)) * unit_gpus
        w = lo if (q - np.floor(q)) <= 0.5 else lo + unit_gpus
        w = max(w, total + (-total) % unit_gpus)
        cfg = solve_workers(model, cluster, b, w, unit_gpus=unit_gpus)
        if cfg is not None and (best is None or cfg.throughput > best.throughput):
            best = cfg
    return best


class ProfileIIDP:
    """:class:`~elastisched.models.iidp.config.IIDPSolver` on the release's profile format (VSWs + GA)."""

    def __init__(self, model: IIDPModel, *, unit_gpus: int = 2, tolerance: float | None = None) -> None:
        self.model = model
        self.unit_gpus = unit_gpus
        self.tolerance = tolerance

    def lbs_options(self, cluster: Sequence[ServerSpec], upper: int | None) -> list[int]:
        return _candidate_lbs(self.model, cluster, upper)

    def solve(self, cluster: Sequence[ServerSpec], lbs: int, num_workers: int) -> IIDPConfig | None:
        return solve_workers(self.model, cluster, lbs, num_workers, unit_gpus=self.unit_gpus)

    def best(self, cluster: Sequence[ServerSpec], target: float, current: int | None = None,
             upper: int | None = None) -> IIDPConfig | None:
        return choose_config(lambda b, w: self.solve(cluster, b, w), self.lbs_options(cluster, upper),
                             sum(s.num_gpus for s in cluster), target, current, upper=upper,
                             unit_gpus=self.unit_gpus, tolerance=self.tolerance)
