"""What Pollux believes about each job, learnt online and kept across rounds (issue 22: at cluster scale a
round may not redo per-job work for jobs that did not change).

- Observations (artifact `Job.update_params`): a running job past its restart reports the step time at its
  configuration; a job whose view is the very object of last round has nothing new to report once it has.
- Fits (`fit_perf_params`) are memoised by (application, observations): jobs of one application that ran the
  same configurations share one fit. With a deadline (the policy's time budget), a round fits in job order
  until the deadline; a job left unfitted keeps its previous fit (or, never fitted, the linear-scaling belief
  of a job that has not run) and is fitted in a later round.
- Goodput tables and batch sizes are computed for all jobs that need them in one vectorised call
  (`goodput.optimize_many`), and kept per job while their inputs are unchanged. A table's batch candidates and
  their throughput (`goodput.Candidates`) depend on the fit alone, so they are kept while the job's fit and
  table size are: a new epoch's gradient statistics redo only the efficiency part (the same arithmetic).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from elastisched.core.types import JobView
from elastisched.models.application import Application
from elastisched.models.throughput import PolluxParams
from elastisched.policies.pollux.goodput import (
    Candidates,
    GoodputFunction,
    best_candidates,
    candidates,
    fit_perf_params,
    optimize_many,
)

Obs = dict[tuple[int, int, int], tuple[float, float]]
MAX_FITS_KEPT = 20_000  # the fit memo is cleared when it grows past this


class FitKey(tuple):  # type: ignore[type-arg]
    """(application, observations): the fit memo's key, hashed once. A job's observations number up to ~180 on
    a long trace, and a fit a budget deferred is looked up again every round until it is made."""

    _hash: int

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            self._hash = h = tuple.__hash__(self)
            return h


@dataclass
class JobBelief:
    """One job's learnt state and the per-round values derived from it (kept while their inputs hold)."""

    view: JobView | None = None  # the view whose inputs (`sig`) were last taken in
    sig: tuple[Any, ...] | None = None  # those inputs (an unchanged job is skipped)
    observed: bool = False  # the configuration of those inputs has been measured
    app: Application | None = None  # the job's performance model
    n_obs: int = 0  # observations `want_key` and `seen` reflect
    want_key: tuple[Any, ...] | None = None  # (application, observations) now
    seen: int = 0  # most replicas observed
    params: PolluxParams | None = None  # its step-time fit
    fit_key: tuple[Any, ...] | None = None  # (application, observations) `params` was fitted to
    fn: GoodputFunction | None = None  # goodput of (params, grad), kept while both are the same objects
    fn_of: tuple[Any, ...] = (None, None)
    raw_key: tuple[Any, ...] | None = None  # (params, grad, max replicas) of `raw`
    raw: np.ndarray | None = None  # (2, max replicas + 1) goodput on r replicas (1 node, more)
    cand_key: tuple[Any, ...] | None = None  # (params, max replicas, application) of `cand`
    cand: Candidates | None = None  # the batch candidates of `raw`'s queries (they outlive a change of statistics)
    base_key: tuple[Any, ...] | None = None
    base: float = 1.0  # goodput at the fair share
    stale_since: int | None = None  # round since which its fit lags its observations (a budget deferred it)
    batches: dict[tuple[int, int], int] = field(default_factory=dict)  # (nodes, replicas) → batch, for batch_fn
    batch_fn: GoodputFunction | None = None


class PolluxBeliefs:
    def __init__(self) -> None:
        self.obs: dict[str, Obs] = {}  # job → observed configurations
        self.grad: dict[str, tuple[float, float]] = {}  # job → (grad_sqr, grad_var) last measured
        self.fits: dict[tuple[Any, ...], PolluxParams] = {}  # memo: (app, observations) → fitted params
        self.jobs: dict[str, JobBelief] = {}
        self.round = 0
        self.deferred = 0  # fits the last round's deadline put off

    def forget(self, live: set[str] | None = None, job_id: str | None = None) -> None:
        """Drop what is known of one job, or of every job not in `live`."""
        gone = [job_id] if job_id is not None else [j for j in self.jobs if live is not None and j not in live]
        gone += [j for j in self.obs if j not in self.jobs and (live is None or j not in live)]
        for j in gone:
            self.jobs.pop(j, None)
            self.obs.pop(j, None)
            self.grad.pop(j, None)

    def belief(self, job_id: str) -> JobBelief:
        b = self.jobs.get(job_id)
        if b is None:
            b = self.jobs[job_id] = JobBelief()
        return b

    # ------------------------------------------------------------------ fits
    def sync_obs(self, job_id: str, app: Application | None) -> JobBelief:
        """The job's belief with `want_key` and `seen` brought to its observations (which only grow)."""
        b = self.jobs[job_id]
        obs = self.obs.get(job_id)
        n = len(obs) if obs else 0
        if n != b.n_obs or (b.want_key is not None and app is not None and b.want_key[0] != app.name):
            b.n_obs = n
            b.want_key = FitKey((app.name, tuple(sorted(obs.items())))) if obs and app is not None else None
            b.seen = max((k[1] for k in obs), default=0) if obs else 0
        return b

    def refit(self, jobs: list[JobView], apps: dict[str, Application | None], deadline: float | None) -> None:
        """Bring every job's fit to its observations until `deadline` (thread time): memoised fits first, then
        the jobs that have waited longest (then in the given order)."""
        self.round += 1
        self.deferred = 0
        todo: list[tuple[int, int, JobBelief, tuple[Any, ...]]] = []
        for i, job in enumerate(jobs):
            b = self.sync_obs(job.job_id, apps[job.job_id])
            key = b.want_key
            if key is None or key is b.fit_key:
                b.stale_since = None
                continue
            p = self.fits.get(key)
            if p is not None:
                b.params, b.fit_key, b.stale_since = p, key, None
                continue
            if b.stale_since is None:
                b.stale_since = self.round
            todo.append((b.stale_since, i, b, key))
        for k, (_, _, b, key) in enumerate(sorted(todo, key=lambda x: x[:2])):
            if deadline is not None and time.thread_time() >= deadline:
                self.deferred = len(todo) - k  # these keep their previous fit this round
                break
            b.params, b.fit_key, b.stale_since = self.fits.get(key) or self._fit(key), key, None

    def _fit(self, key: tuple[Any, ...]) -> PolluxParams:
        if len(self.fits) > MAX_FITS_KEPT:
            self.fits.clear()
        pts = key[1]
        k = [x[0] for x in pts]
        v = [x[1] for x in pts]
        p = self.fits[key] = fit_perf_params([x[0] for x in k], [x[1] for x in k], [x[2] for x in k],
                                             [x[0] for x in v], [x[1] for x in v])
        return p

    def goodput_fn(self, job_id: str, app: Application) -> GoodputFunction | None:
        """The job's believed goodput (its latest fit and gradient statistics), None before it has any."""
        b = self.jobs.get(job_id)
        grad = self.grad.get(job_id)
        if b is None or b.params is None or grad is None:
            return None
        if b.fn is None or b.fn_of[0] is not b.params or b.fn_of[1] is not grad or b.fn.init_batch_size != \
                app.init_batch_size:
            b.fn, b.fn_of = GoodputFunction(b.params, grad[0], grad[1], app.init_batch_size), (b.params, grad)
        return b.fn

    # ------------------------------------------------------------------ tables
    def speedups(self, jobs: list[JobView], apps: dict[str, Application | None],
                 fns: dict[str, GoodputFunction | None], maxr: np.ndarray, fair_nodes: int, fair_reps: int
                 ) -> np.ndarray:
        """(jobs, 2, R + 1) speedup on 0..R replicas (1 node, more) = goodput / goodput at the fair share;
        a job without a goodput model scales linearly. Only the jobs whose inputs changed are computed."""
        rmax = int(maxr.max())
        table = np.zeros((len(jobs), 2, rmax + 1))
        raw_need: list[tuple[JobBelief, GoodputFunction, Application, int]] = []
        base_need: list[tuple[JobBelief, GoodputFunction, Application]] = []
        rows: list[tuple[int, JobBelief, int]] = []
        for i, job in enumerate(jobs):
            app, fn = apps[job.job_id], fns[job.job_id]
            if fn is None or app is None:
                table[i] = np.arange(rmax + 1) / fair_reps
                continue
            b, m = self.jobs[job.job_id], int(maxr[i])
            rows.append((i, b, m))
            rk = (fn.perf, fn.grad_sqr, fn.grad_var, m)
            if rk != b.raw_key:
                b.raw_key = rk
                raw_need.append((b, fn, app, m))
            bk = (fn.perf, fn.grad_sqr, fn.grad_var, fair_nodes, fair_reps)
            if bk != b.base_key:
                b.base_key = bk
                base_need.append((b, fn, app))
        self._compute(raw_need, base_need, fair_nodes, fair_reps)
        for i, b, m in rows:
            table[i, :, 1: m + 1] = b.raw[:, 1: m + 1] / b.base  # type: ignore[index]
        return table

    @staticmethod
    def _compute(raw_need: list[tuple[JobBelief, GoodputFunction, Application, int]],
                 base_need: list[tuple[JobBelief, GoodputFunction, Application]], fair_nodes: int,
                 fair_reps: int) -> None:
        """Fill the raw tables and fair-share goodputs asked for, in one vectorised call over their batch
        candidates (a raw table's kept while its fit and size are: `_candidates`)."""
        fns = [x[1] for x in raw_need] + [x[1] for x in base_need]
        if not fns:
            return
        _candidates([x for x in raw_need if not _candidates_hold(*x)])
        parts = [b.cand for b, _, _, _ in raw_need]
        if base_need:
            parts.append(candidates([x[1] for x in base_need], [x[2] for x in base_need], np.arange(len(base_need)),
                                    np.full(len(base_need), float(fair_nodes)),
                                    np.full(len(base_need), float(fair_reps))))
        per_query = [2 * m for _, _, _, m in raw_need] + [1] * len(base_need)
        sqr, var = np.repeat(np.array([[f.grad_sqr, f.grad_var] for f in fns], dtype=float), per_query, axis=0).T
        good, _, _ = best_candidates(Candidates.join(parts), sqr, var)  # type: ignore[arg-type]
        pos = 0
        for b, _, _, m in raw_need:
            g1, g2 = good[pos: pos + m], good[pos + m: pos + 2 * m]
            pos += 2 * m
            raw = np.zeros((2, m + 1))
            raw[0, 1:] = g1
            raw[1, 1:] = g2
            raw[1, 1] = g1[0]  # one replica is one node
            b.raw = raw
        for k, (b, _, _) in enumerate(base_need):
            b.base = float(good[pos + k])

    def batches(self, wants: list[tuple[str, Application, GoodputFunction, int, int]]) -> dict[str, int]:
        """Goodput-optimal global batch of each (job, app, fn, nodes, replicas) (artifact `update_local_bsz`),
        memoised per job while its goodput function is the same; the misses are computed together."""
        out: dict[str, int] = {}
        miss: list[tuple[str, Application, GoodputFunction, int, int]] = []
        for w in wants:
            b = self.jobs.get(w[0])
            if b is not None and b.batch_fn is not w[2]:
                b.batches, b.batch_fn = {}, w[2]
            hit = b.batches.get((w[3], w[4])) if b is not None else None
            if hit is None:
                miss.append(w)
            else:
                out[w[0]] = hit
        if miss:
            nodes_q = np.array([float(w[3]) for w in miss])
            reps_q = np.array([float(w[4]) for w in miss])
            _, atomic, accum = optimize_many([w[2] for w in miss], [w[1] for w in miss], np.arange(len(miss)),
                                             nodes_q, reps_q)
            for (jid, app, _, nodes, reps), a, c in zip(miss, atomic.tolist(), accum.tolist(), strict=True):
                steps = reps * (int(c) + 1)
                batch = max(1, min(int(a), int(app.max_batch_size / steps)) * steps)
                out[jid] = batch
                b = self.jobs.get(jid)
                if b is not None:
                    b.batches[(nodes, reps)] = batch
        return out


def _candidates_hold(b: JobBelief, fn: GoodputFunction, app: Application, m: int) -> bool:
    """Whether the job's kept candidates were made of this very fit and application, for `m` replicas."""
    return b.cand_key is not None and b.cand_key[0] is fn.perf and b.cand_key[1] == m and b.cand_key[2] is app


def _candidates(need: list[tuple[JobBelief, GoodputFunction, Application, int]]) -> None:
    """The batch candidates of each job's raw table (1..m replicas on one node, then on two), made in one call
    and kept on its belief with what they were made of."""
    if not need:
        return
    reps = [np.arange(1, m + 1) for _, _, _, m in need]
    q_fn = np.concatenate([np.full(2 * len(r), k) for k, r in enumerate(reps)]).astype(np.intp)
    q_nodes = np.concatenate([np.concatenate([np.ones(len(r)), np.full(len(r), 2.0)]) for r in reps])
    q_reps = np.concatenate([np.concatenate([r, r]).astype(float) for r in reps])
    c = candidates([x[1] for x in need], [x[2] for x in need], q_fn, q_nodes, q_reps)
    pos = 0
    for b, fn, app, m in need:
        b.cand, b.cand_key = c.columns(pos, pos + 2 * m), (fn.perf, m, app)
        pos += 2 * m
