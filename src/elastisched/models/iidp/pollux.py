"""IIDP on Pollux/Sia throughput profiles: the rate rule of a mixed-type IIDP allocation and its exact solver.

Rate rule (:func:`iidp_iteration_time`, used by :class:`PolluxIIDP` *and* the event simulator): every GPU
runs the same local batch ``b``; a GPU of type t on node n runs ``a_n + 1`` micro-batches per optimizer step
(``m = 1``: VSW multi-streaming is not profiled in these traces), taking
``t_t(a) = step_t + (step_t − sync_t)·a`` where ``(step_t, sync_t) = Application.model(t).step_sync(shape, b)``
at the shape of the whole job (all its nodes), so communication grows with the job — the Pollux iteration
rule (one synchronised pass plus ``a`` local passes, ``Application.iteration_time``) per GPU type.  The
cluster's iteration time is the slowest GPU's (synchronous all-reduce, digest §2(d)); GBS = ``b·Σ(a_g+1)``.

Solver (:meth:`PolluxIIDP.solve`, digest §2(b)): for fixed (b, W) maximal throughput = minimal bottleneck.
``t_t(w−1)`` is linear in the worker count w, so the optimum is the least breakpoint ``T = s_t + k·c_t`` with
``Σ_t n_t·cap_t(T) ≥ W``; only breakpoints between the continuous relaxation's bound and that bound plus the
largest slope are tried (checked against brute force in the tests).  Units are single GPUs (1-GPU nodes
exist), so the release's even/odd halves may differ by one worker — a relaxation of its 2-GPU unit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from elastisched.models.application import Application
from elastisched.models.iidp.config import IIDPConfig, ServerSpec, UnitAssignment, choose_config

__all__ = ["PolluxIIDP", "iidp_iteration_time", "job_shape"]

TypeKey = tuple[tuple[str, int], ...]  # sorted (GPU type, GPUs) of every server of a job


def job_shape(gpus_per_node: Sequence[int]) -> tuple[int, ...]:
    """GPUs per node of a whole job, largest first (the key of ``ThroughputModel.step_sync``)."""
    return tuple(sorted((g for g in gpus_per_node if g > 0), reverse=True))


def iidp_iteration_time(app: Application, node_types: Mapping[str, str], placement: Sequence[tuple[str, int]],
                        local_batch: float, accumulation: Mapping[str, int]) -> float:
    """Seconds per optimizer step of an IIDP allocation: the slowest node's ``step + (step − sync)·a_n``."""
    shape = job_shape([g for _, g in placement])
    worst = 0.0
    for node, _ in placement:
        step, sync = app.model(node_types[node]).step_sync(shape, float(local_batch))
        worst = max(worst, step + max(step - sync, 1e-9) * accumulation.get(node, 0))
    return worst


class PolluxIIDP:
    """:class:`~elastisched.models.iidp.config.IIDPSolver` on one Pollux/Sia application's profiles."""

    unit_gpus = 1

    def __init__(self, app: Application, lbs_ratio: float = 1.5, tolerance: float = 0.1) -> None:
        self.app = app
        self.tolerance = tolerance
        # the grid starts at 1 sample: the baselines' GBS/N split goes that low too, and both read the same
        # (below the profiled range: extrapolated) throughput model
        lo, hi = 1, app.max_local_bsz
        n_lbs = math.ceil(math.log(hi / lo) / math.log(lbs_ratio)) + 1 if hi > lo else 1
        grid = np.unique(np.round(np.geomspace(lo, hi, n_lbs)).astype(int))
        self.lbs_grid: tuple[int, ...] = tuple(int(b) for b in grid)
        self._coef: dict[tuple[TypeKey, float], dict[str, tuple[float, float]]] = {}
        self._split: dict[tuple[TypeKey, int, int], tuple[float, dict[str, tuple[int, int, int]]] | None] = {}
        self._best: dict[tuple, tuple[int, int] | None] = {}

    def lbs_options(self, cluster: Sequence[ServerSpec], upper: int | None) -> tuple[int, ...]:
        return self.lbs_grid

    def lbs_candidates(self, target: float, num_gpus: int, even_upto: int = 4) -> list[int]:
        """The grid plus ``round(target / (#GPUs·k))`` for k = 1..``even_upto`` (ours): the grid has no
        divisors of the target, and without these an even configuration (k workers on every GPU) would be
        missing, e.g. 8 GPUs at GBS 128 would get LBS 15 and one GPU with two micro-batches."""
        extra = {round(target / (num_gpus * k)) for k in range(1, even_upto + 1)}
        return sorted(set(self.lbs_grid) | {b for b in extra if 1 <= b <= self.app.max_local_bsz})

    def coeffs(self, key: TypeKey, lbs: float) -> dict[str, tuple[float, float]]:
        """Per type: (time of one micro-batch incl. sync, time of each extra micro-batch)."""
        hit = self._coef.get((key, float(lbs)))
        if hit is None:
            shape = job_shape([g for _, g in key])
            hit = {}
            for t, _ in key:
                if t not in hit:
                    step, sync = self.app.model(t).step_sync(shape, float(lbs))
                    hit[t] = (step, max(step - sync, 1e-9))
            self._coef[(key, float(lbs))] = hit
        return hit

    def _split_types(self, key: TypeKey, lbs: int,
                     num_workers: int) -> tuple[float, dict[str, tuple[int, int, int]]] | None:
        """Min-bottleneck split per type: ``(iter_time, {type: (gpus, w_hi, n_hi)})``, n_hi GPUs at w_hi."""
        ck = (key, lbs, num_workers)
        if ck in self._split:
            return self._split[ck]
        n: dict[str, int] = {}
        for t, g in key:
            n[t] = n.get(t, 0) + g
        if not n or num_workers < sum(n.values()):
            self._split[ck] = None
            return None
        co = self.coeffs(key, lbs)

        def caps(t_max: float) -> dict[str, int]:
            return {t: math.floor((t_max - co[t][0]) / co[t][1] + 1e-9) + 1 for t in n}

        smax, cmax = max(co[t][0] for t in n), max(co[t][1] for t in n)
        t_lb = (num_workers - sum(n.values()) + sum(n[t] * co[t][0] / co[t][1] for t in n)) / sum(
            n[t] / co[t][1] for t in n)
        t0 = max(t_lb, smax)
        points = {smax}
        for t in n:
            s_t, c_t = co[t]
            k0, k1 = max(math.ceil((t0 - s_t) / c_t - 1e-9), 0), math.floor((t0 + cmax - s_t) / c_t + 1e-9)
            points.update(s_t + k * c_t for k in range(k0, k1 + 1))
        lo = t0 + cmax
        for cand in sorted(p for p in points if p >= smax):
            if sum(n[t] * c for t, c in caps(cand).items()) >= num_workers:
                lo = cand
                break
        cap = caps(lo)
        excess = sum(n[t] * cap[t] for t in n) - num_workers
        out: dict[str, tuple[int, int, int]] = {}
        for t in sorted(n, key=lambda t: -(co[t][0] + co[t][1] * (cap[t] - 1))):  # trim the slowest first
            total = n[t] * cap[t]
            r = min(excess, total - n[t])
            excess -= r
            q, extra = divmod(total - r, n[t])
            out[t] = (n[t], q + 1, extra) if extra else (n[t], q, n[t])
        it = max(co[t][0] + co[t][1] * (w - 1) for t, (_, w, _) in out.items())
        if len(self._split) > 200_000:
            self._split.clear()
        self._split[ck] = (it, out)
        return it, out

    def solve(self, cluster: Sequence[ServerSpec], lbs: int, num_workers: int) -> IIDPConfig | None:
        """Exact min-bottleneck configuration of ``num_workers`` workers (≥ 1 per GPU); None if too few."""
        key = _type_key(cluster)
        got = self._split_types(key, lbs, num_workers)
        if got is None:
            return None
        it, split = got
        co = self.coeffs(key, lbs)
        left_hi = {t: nh for t, (_, _, nh) in split.items()}
        units: list[UnitAssignment] = []
        for s in cluster:  # the first n_hi GPUs of each type (in server order) run w_hi workers
            _, w_hi, _ = split[s.gpu_type]
            hi = min(left_hi[s.gpu_type], s.num_gpus)
            left_hi[s.gpu_type] -= hi
            for first, k, w in ((0, hi, w_hi), (hi, s.num_gpus - hi, w_hi - 1)):
                if k > 0:
                    t = co[s.gpu_type][0] + co[s.gpu_type][1] * (w - 1)
                    units.append(UnitAssignment(s.name, first, k, 1, w - 1, t))
        return IIDPConfig(lbs, num_workers, it, tuple(units))

    def best(self, cluster: Sequence[ServerSpec], target: float, current: int | None = None,
             upper: int | None = None) -> IIDPConfig | None:
        """Highest-throughput configuration for a GBS near ``target`` (``choose_config``, ±``tolerance``)."""
        hit = self._choose(_type_key(cluster), target, current, upper)
        return None if hit is None else self.solve(cluster, *hit)

    def iter_time(self, cluster: Sequence[ServerSpec], target: float, current: int | None = None,
                  upper: int | None = None) -> tuple[int, float] | None:
        """``(GBS, seconds per step)`` of :meth:`best` without per-server units (the estimator's hot path)."""
        key = _type_key(cluster)
        hit = self._choose(key, target, current, upper)
        if hit is None:
            return None
        got = self._split_types(key, *hit)
        return None if got is None else (hit[0] * hit[1], got[0])

    def _choose(self, key: TypeKey, target: float, current: int | None, upper: int | None) -> tuple[int, int] | None:
        ck = (key, target, current if current != target else None, upper)
        if ck not in self._best:
            def split(b: int, w: int) -> IIDPConfig | None:
                got = self._split_types(key, b, w)
                return None if got is None else IIDPConfig(b, w, got[0], ())

            ngpu = sum(g for _, g in key)
            cfg = choose_config(split, self.lbs_candidates(target, ngpu), ngpu, target, current, upper=upper,
                                unit_gpus=1, tolerance=self.tolerance)
            if len(self._best) > 100_000:
                self._best.clear()
            self._best[ck] = None if cfg is None else (cfg.lbs, cfg.num_workers)
        return self._best[ck]

    def uniform_time(self, cluster: Sequence[ServerSpec], gbs: float) -> float:
        """Baseline: one worker per GPU, ``gbs/N`` each (GA beyond the largest local batch); slowest type."""
        key = _type_key(cluster)
        local = gbs / sum(g for _, g in key)
        a = max(math.ceil(local / self.app.max_local_bsz - 1e-9) - 1, 0)
        micro = max(local / (a + 1), 1.0)
        return max(s + c * a for s, c in self.coeffs(key, micro).values())


def _type_key(cluster: Sequence[ServerSpec]) -> TypeKey:
    return tuple(sorted((s.gpu_type, s.num_gpus) for s in cluster))
