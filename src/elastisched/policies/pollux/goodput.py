"""Pollux goodput: a fitted step-time model × statistical efficiency, with the batch size chosen per allocation.

What a goodput-adaptive scheduler believes about a job (Pollux OSDI'21 §3; artifact petuum/adaptdl
`osdi21-artifact`, `simulator/goodput.py` and `speedup.py`, read, not copied):

    T_accum   = α_c + β_c · b                                      (one forward/backward of atomic batch b)
    T_net     = α + β · max(R − 2, 1e-8),  (α, β) = (α_n, β_n) if nodes > 1, (α_r, β_r) if R > 1, else 1e-8
    T_optim   = (T_accum^γ + T_net^γ)^(1/γ)          (``models.throughput.PolluxParams``, the "artifact" rule)
    T_step    = a · T_accum + T_optim                              (a extra accumulation steps)
    THROUGHPUT = R · b · (a + 1) / T_step
    EFFICIENCY = gain / s,  gain = (var + sqr) / (var / s + sqr),  s = M / M₀     (M = R · b · (a + 1))
    GOODPUT    = THROUGHPUT × EFFICIENCY

`optimize` picks, for every (nodes, replicas), the best of 50 global batch sizes spaced geometrically from
max(M₀, b_min · R) to the largest batch, split into atomic batch and accumulation steps exactly as the
artifact does (at least one accumulation step on a single replica above M₀, because the gradient statistics
need two micro-batches). `fit_perf_params` fits (α_c … γ) to observed (nodes, replicas, b) → (accum time,
step time) with the artifact's objective (RMS log error of both, a pull of γ towards 1, a penalty on
β/α) and its priors: parameters that the observations cannot identify are pinned (α_c to half the mean
accum time when only one atomic batch was seen; α_n, β_n when no multi-node run; α_r, β_r when no
single-node multi-replica run; both β when no run had more than two replicas), and without multi-node
observations α_n, β_n are raised to at least 1.1 × α_r, β_r. The gradient is analytic (the artifact uses
autograd); L-BFGS-B from the artifact's starting point.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from elastisched.models.lbfgsb import minimize_bounded
from elastisched.models.throughput import PolluxParams, artifact_fit_start

EPS = 1e-8
NUM_BATCH_CANDIDATES = 50  # np.geomspace default, as in the artifact


class GoodputFunction:
    """Goodput of one job for given (nodes, replicas, atomic batch, accumulation), vectorised over arrays."""

    def __init__(self, perf: PolluxParams, grad_sqr: float, grad_var: float, init_batch_size: int) -> None:
        self.perf = perf
        self.grad_sqr = float(grad_sqr)
        self.grad_var = float(grad_var)
        self.init_batch_size = int(init_batch_size)

    def throughput(self, num_nodes: np.ndarray, num_replicas: np.ndarray, atomic_bsz: np.ndarray,
                   accum_steps: np.ndarray) -> np.ndarray:
        """Samples per second."""
        ta = self.perf.compute_time(np.asarray(atomic_bsz, dtype=float))
        to = self.perf.step_time(ta, self.perf.network_time(num_nodes, num_replicas, "artifact"), "artifact")
        batch = np.asarray(num_replicas) * np.asarray(atomic_bsz) * (np.asarray(accum_steps) + 1)
        return batch / (np.asarray(accum_steps) * ta + to)

    def efficiency(self, batch_size: np.ndarray) -> np.ndarray:
        """(φ + M₀) / (φ + M), φ the gradient noise scale, written through the gain as in the artifact."""
        scale = np.asarray(batch_size, dtype=float) / self.init_batch_size
        denom = self.grad_var / scale + self.grad_sqr
        gain = np.where(denom > 0, (self.grad_var + self.grad_sqr) / np.where(denom > 0, denom, 1.0), 1.0)
        return gain / scale

    def __call__(self, num_nodes: np.ndarray, num_replicas: np.ndarray, atomic_bsz: np.ndarray,
                 accum_steps: np.ndarray) -> np.ndarray:
        batch = np.asarray(num_replicas) * np.asarray(atomic_bsz) * (np.asarray(accum_steps) + 1)
        return self.throughput(num_nodes, num_replicas, atomic_bsz, accum_steps) * self.efficiency(batch)

    def optimize(self, num_nodes: np.ndarray | int, num_replicas: np.ndarray | int, max_batch_size: int,
                 atomic_bsz_range: tuple[int, int], accumulation: bool = True,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Best (goodput, atomic batch, accumulation steps) per (nodes, replicas); goodput 0 when infeasible."""
        nodes = np.atleast_1d(np.asarray(num_nodes))
        reps = np.atleast_1d(np.asarray(num_replicas))
        nodes, reps = np.broadcast_arrays(nodes, reps)
        lo, hi = atomic_bsz_range
        min_batch = np.maximum(self.init_batch_size, lo * reps)
        batch = np.geomspace(min_batch, max_batch_size, NUM_BATCH_CANDIDATES)  # (50, K)
        local = batch / reps
        if accumulation:
            accum = np.ceil(local / hi - EPS) - 1
            accum = np.where((reps == 1) & (local > self.init_batch_size + EPS), np.maximum(accum, 1), accum)
        else:
            accum = np.zeros_like(local)
        accum = accum.astype(int)
        atomic = np.ceil(local / (accum + 1) - EPS).astype(int)
        good = self(nodes, reps, atomic, accum)
        good = np.where((lo <= atomic) & (atomic <= hi), good, 0.0)
        best = np.argmax(good, axis=0)
        cols = np.arange(good.shape[1])
        return good[best, cols], atomic[best, cols], accum[best, cols]


class Candidates(NamedTuple):
    """The 50 batch candidates of K queries (arrays (50, K)) and what goodput reads of them that does not depend
    on gradient statistics: a job's fit lasts many rounds while its statistics move with every epoch, so these
    are kept per job (`beliefs.PolluxBeliefs.speedups`) and only `best_candidates` is redone."""

    total: np.ndarray  # global batch R · b · (a + 1)
    thr: np.ndarray  # THROUGHPUT, samples per second
    atomic: np.ndarray  # b
    accum: np.ndarray  # a
    valid: np.ndarray  # b within the application's limits
    init: np.ndarray  # (K,) M₀

    def columns(self, a: int, b: int) -> Candidates:
        """Queries a..b−1 (views)."""
        return Candidates(*(x[:, a:b] for x in self[:5]), self.init[a:b])

    @staticmethod
    def join(parts: list[Candidates]) -> Candidates:
        """The queries of `parts`, one after another."""
        return Candidates(*(np.concatenate([p[i] for p in parts], axis=1) for i in range(5)),
                          np.concatenate([p.init for p in parts]))


def candidates(fns: list[GoodputFunction], apps: list[Any], which: np.ndarray, num_nodes: np.ndarray,
               num_replicas: np.ndarray) -> Candidates:
    """The batch candidates of `optimize_many`'s queries and their throughput (only the fit and the limits)."""
    which = np.asarray(which, dtype=np.intp)
    cols = np.array([[f.perf.alpha_c, f.perf.beta_c, f.perf.alpha_n, f.perf.beta_n, f.perf.alpha_r, f.perf.beta_r,
                      f.perf.gamma, f.init_batch_size, a.max_batch_size, a.min_local_bsz, a.max_local_bsz]
                     for f, a in zip(fns, apps, strict=True)], dtype=float)[which].T
    perf = PolluxParams(*cols[:7])  # array-valued fields: the one formula, broadcast over the queries
    init, max_batch, lo, hi = cols[7:]
    nodes, reps = np.asarray(num_nodes, dtype=float), np.asarray(num_replicas, dtype=float)
    batch = np.geomspace(np.maximum(init, lo * reps), max_batch, NUM_BATCH_CANDIDATES)  # (50, K)
    local = batch / reps
    accum = np.ceil(local / hi - EPS) - 1
    accum = np.where((reps == 1) & (local > init + EPS), np.maximum(accum, 1), accum).astype(int)
    atomic = np.ceil(local / (accum + 1) - EPS).astype(int)
    ta = perf.compute_time(atomic.astype(float))
    to = perf.step_time(ta, perf.network_time(nodes, reps, "artifact"), "artifact")  # type: ignore[arg-type]
    total = reps * atomic * (accum + 1)
    return Candidates(total, total / (accum * ta + to), atomic, accum, (lo <= atomic) & (atomic <= hi), init)


def best_candidates(c: Candidates, sqr: np.ndarray, var: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The best (goodput, atomic batch, accumulation steps) per query of `c`, given each query's gradient
    statistics: THROUGHPUT × EFFICIENCY, the artifact's arithmetic in its order."""
    scale = c.total / c.init
    denom = var / scale + sqr
    gain = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)
    good = np.where(c.valid, c.thr * (gain / scale), 0.0)
    best = np.argmax(good, axis=0)
    k = np.arange(good.shape[1])
    return good[best, k], c.atomic[best, k], c.accum[best, k]


def optimize_many(fns: list[GoodputFunction], apps: list[Any], which: np.ndarray, num_nodes: np.ndarray,
                  num_replicas: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`GoodputFunction.optimize` for many jobs at once: query k asks job `which[k]` (its goodput function
    `fns[...]`, its application's batch limits `apps[...]`) about (`num_nodes[k]`, `num_replicas[k]`).
    Returns the best (goodput, atomic batch, accumulation steps) per query, by the same arithmetic."""
    which = np.asarray(which, dtype=np.intp)
    sqr, var = np.array([[f.grad_sqr, f.grad_var] for f in fns], dtype=float).reshape(-1, 2)[which].T
    return best_candidates(candidates(fns, apps, which, num_nodes, num_replicas), sqr, var)


def speedup_table(fn: GoodputFunction, max_replicas: int, max_batch_size: int, atomic_bsz_range: tuple[int, int],
                  base_goodput: float) -> np.ndarray:
    """table[m, r] = goodput on r replicas (m = 1: spread over several nodes) / `base_goodput`; r = 0 → 0.

    Goodput depends on the node count only through "more than one node" (the network term), so two rows
    cover every placement; the artifact memoises the same values per (nodes, replicas).
    """
    r = np.arange(1, max_replicas + 1)
    good1, _, _ = fn.optimize(np.ones_like(r), r, max_batch_size, atomic_bsz_range)
    good2, _, _ = fn.optimize(np.full_like(r, 2), r, max_batch_size, atomic_bsz_range)
    good2 = np.where(r >= 2, good2, good1)
    table = np.zeros((2, max_replicas + 1))
    table[0, 1:] = good1 / base_goodput
    table[1, 1:] = good2 / base_goodput
    return table


def _fit_constants(nodes: np.ndarray, reps: np.ndarray, bsz: np.ndarray, y_accum: np.ndarray,
                   y_optim: np.ndarray) -> tuple[np.ndarray, ...]:
    """What `_objective` reads of the observations, made once per fit instead of once per L-BFGS step:
    (atomic batch, the multi-node and the single-node multi-replica masks as booleans to choose with and as
    1.0 / 0.0 to multiply with (products equal to the booleans'), max(R − 2, 1e-8), the one-replica network
    time, log accum time, log step time)."""
    inter, intra = nodes > 1, (nodes <= 1) & (reps > 1)
    retro = np.maximum(reps - 2, EPS)
    return (bsz, inter, intra, inter.astype(float), intra.astype(float), retro, EPS + EPS * retro,
            np.log(y_accum), np.log(y_optim))


def _objective(x: np.ndarray, bsz: np.ndarray, inter: np.ndarray, intra: np.ndarray, inter_f: np.ndarray,
               intra_f: np.ndarray, retro: np.ndarray, single: np.ndarray, log_accum: np.ndarray,
               log_optim: np.ndarray) -> tuple[float, np.ndarray]:
    """The artifact's fit objective and its analytic gradient (constants: `_fit_constants`). Each power and log
    is taken once and the sums are numpy's own reductions without their wrappers: the very operations, in the
    same order, as the objective written out term by term (tests/models/test_goodput.py compares bits)."""
    ac, bc, an, bn, ar, br, g = x
    n = len(bsz)
    add = np.add.reduce
    pa = ac + bc * bsz
    pn = np.where(inter, an + bn * retro, np.where(intra, ar + br * retro, single))
    pa_g, pn_g = pa**g, pn**g
    s = pa_g + pn_g
    log_pa, log_s = np.log(pa), np.log(s)
    lo = log_s / g
    x1 = log_pa - log_accum
    z = lo - log_optim
    e1 = np.sqrt(add(x1**2) / n)  # (np.mean: the reduction, then / n)
    e2 = np.sqrt(add(z**2) / n)
    val = e1 + e2 + 1e-3 * (g - 1) ** 2 + 1e-2 * ((bn / an) ** 2 + (br / ar) ** 2)
    d1 = x1 / (n * e1) if e1 > 0 else np.zeros(n)  # d e1 / d log pa
    d2 = z / (n * e2) if e2 > 0 else np.zeros(n)  # d e2 / d lo
    dlo_dpa = pa ** (g - 1) / s
    dlo_dpn = pn ** (g - 1) / s
    dlo_dg = (pa_g * log_pa + pn_g * np.log(pn)) / (s * g) - log_s / g**2
    dpa = d1 / pa + d2 * dlo_dpa
    dpn = d2 * dlo_dpn
    dpn_inter, dpn_intra = dpn * inter_f, dpn * intra_f
    grad = np.array([
        add(dpa), add(dpa * bsz),
        add(dpn_inter) - 2e-2 * bn**2 / an**3, add(dpn_inter * retro) + 2e-2 * bn / an**2,
        add(dpn_intra) - 2e-2 * br**2 / ar**3, add(dpn_intra * retro) + 2e-2 * br / ar**2,
        add(d2 * dlo_dg) + 2e-3 * (g - 1)])
    return float(val), grad


def fit_perf_params(num_nodes: np.ndarray, num_replicas: np.ndarray, atomic_bsz: np.ndarray,
                    accum_step_time: np.ndarray, optim_step_time: np.ndarray) -> PolluxParams:
    """Fit the step-time model to observations (artifact `fit_perf_params`, priors included)."""
    nodes = np.asarray(num_nodes, dtype=float)
    reps = np.asarray(num_replicas, dtype=float)
    bsz = np.asarray(atomic_bsz, dtype=float)
    ya = np.asarray(accum_step_time, dtype=float)
    yo = np.asarray(optim_step_time, dtype=float)
    x0, lower, upper = artifact_fit_start(nodes, reps, bsz, ya)
    x = minimize_bounded(_objective, x0, lower, upper, _fit_constants(nodes, reps, bsz, ya, yo))
    p = [float(v) for v in x]
    if not np.any(nodes > 1):
        p[2] = max(p[2], p[4] * 1.1)
        p[3] = max(p[3], p[5] * 1.1)
    return PolluxParams(*p)
