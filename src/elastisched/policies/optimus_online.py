"""Optimus (Peng et al., EuroSys'18) with its own online models, not the profile oracle of `optimus`.

What differs from `optimus` (which predicts step times from measured profiles and remaining steps from
validation logs, as the Pollux artifact does) is where the predictions come from — both are fitted online from
what the job reports, as the Optimus paper does:
- **Convergence (§4.1).** The training loss after k epochs is fitted to l(k) = 1/(β0·k + β1) + β2 with
  β ≥ 0: for each β2 on a grid below the smallest observed loss, 1/(l − β2) = β0·k + β1 is a non-negative
  least-squares line; the β2 with the smallest residual wins. Reading (the paper stops at a loss-decrease
  threshold that it does not give per model): a job converges when (l(k) − β2) ≤ ε·(l(1) − β2), ε = 0.05,
  i.e. 95 % of the reducible loss is gone. Losses come from the job's per-epoch log (`attrs["loss_curve"]`,
  the ONES trace); a job with fewer than 3 epochs of loss, or no log, is assumed half done (remaining =
  epochs done, at least one).
- **Speed (§4.2).** The paper's parameter-server model f(p, w) has no servers here (all-reduce); reading:
  the step time at n GPUs and the job's own global batch B is T(n) = θ0·B/n + θ1 + θ2·(n − 1), θ ≥ 0,
  fitted by NNLS to the observed per-epoch samples/s (`JobView.observed_throughput`); with one observed
  count only θ0 (linear scaling), with two θ0 and θ1. A job with no reading yet stays at one GPU.
- **Allocation (§5.1).** Every job gets one GPU in arrival order while GPUs last; the rest go one at a time to
  the largest marginal reduction of predicted remaining time, remaining samples × (T(n) − T(n+1)) / B, up to
  4× the request (the cap ONES uses too) and the global batch. The batch stays the job's own.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobView, PendingReason
from elastisched.policies._common import node_types, start_type, wait_reason
from elastisched.policies.base import Policy, PolicyContext, register

EPS_CONVERGED = 0.05  # fraction of the reducible loss left at convergence (reading, module docstring)


def fit_loss(k: np.ndarray, loss: np.ndarray) -> tuple[float, float, float] | None:
    """(β0, β1, β2) of l(k) = 1/(β0·k + β1) + β2 by a β2 grid and NNLS per β2; None if it cannot be fitted."""
    from scipy.optimize import nnls  # here: scipy costs ~0.3 s to import

    if k.size < 3 or not np.all(np.isfinite(loss)) or loss.min() <= 0:
        return None
    a = np.stack([k, np.ones_like(k)], axis=1)
    best: tuple[float, float, float, float] | None = None
    for b2 in np.linspace(0.0, 0.99 * float(loss.min()), 24):
        y = 1.0 / (loss - b2)
        (b0, b1), _ = nnls(a, y)
        if b0 <= 0:
            continue
        err = float(np.sum((1.0 / (b0 * k + b1) + b2 - loss) ** 2)) if b0 * k.min() + b1 > 0 else np.inf
        if best is None or err < best[0]:
            best = (err, float(b0), float(b1), float(b2))
    return None if best is None else best[1:]


def epochs_to_converge(b0: float, b1: float) -> float:
    """Epoch k at which (l(k) − β2) ≤ ε·(l(1) − β2), i.e. (β0 + β1)/(β0·k + β1) ≤ ε."""
    return ((b0 + b1) / EPS_CONVERGED - b1) / b0


def fit_speed(n: np.ndarray, step: np.ndarray, batch: float) -> np.ndarray:
    """θ of T(n) = θ0·B/n + θ1 + θ2·(n − 1) by NNLS on observed step times; fewer terms with fewer counts."""
    from scipy.optimize import nnls

    cols = [batch / n, np.ones_like(n), n - 1.0][: min(3, n.size)]
    theta, _ = nnls(np.stack(cols, axis=1), step)
    return np.concatenate([theta, np.zeros(3 - theta.size)])


def step_time(theta: np.ndarray, n: float, batch: float) -> float:
    return float(theta[0] * batch / n + theta[1] + theta[2] * (n - 1.0))


@register
class OptimusOnlinePolicy(Policy):
    name = "optimus-online"
    description = "Optimus with its online-fitted convergence (loss curve) and speed models (EuroSys'18)."
    interval = 60.0
    elastic = True

    def _remaining_samples(self, job: JobView) -> float:
        a = job.spec.attrs
        ew = float(a.get("epoch_work", 0.0))
        e = job.progress / ew if ew > 0 else float(job.epoch)
        size = float(a.get("epoch_size") or job.spec.batch_size)
        done = int(e + 1e-9)
        curve = a.get("loss_curve")
        fit = None
        if curve and done >= 3:
            k = np.arange(1, done + 1, dtype=float)
            fit = fit_loss(k, np.array([float(curve[min(i, len(curve)) - 1]) for i in range(1, done + 1)]))
        left = max(epochs_to_converge(fit[0], fit[1]) - e, 0.5) if fit else max(e, 1.0)
        return left * size

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        free = snap.capacity_by_type()
        capacity = snap.capacity_by_type()
        types = node_types(snap)
        reasons: dict[str, PendingReason] = {}
        n: dict[str, int] = {}
        gtype: dict[str, str] = {}
        info: dict[str, tuple[np.ndarray, float, float, int]] = {}
        order = {jid: i for i, jid in enumerate(snap.jobs)}
        for jid, job in snap.jobs.items():
            spec = job.spec
            first, t = start_type(job, types, free)
            if t is None:
                reasons[jid] = wait_reason(capacity, spec.gpu_types, first)
                continue
            n[jid], gtype[jid] = first, t
            free[t] -= first
            obs = {g: x for g, x in job.observed_throughput.items() if g > 0 and x > 0}
            if not obs:
                continue  # no reading yet: one GPU (or its minimum) until its first epoch is measured
            batch = float(spec.batch_size)
            ns = np.array(sorted(obs), dtype=float)
            theta = fit_speed(ns, batch / np.array([obs[int(g)] for g in ns]), batch)
            cap = max(first, min(4 * spec.num_gpus, spec.batch_size, spec.gpu_cap if spec.elastic else 1 << 30))
            info[jid] = (theta, batch, self._remaining_samples(job), cap)
        heap: list[tuple[float, int, str]] = []
        for jid in info:
            g = self._gain(info[jid], n[jid])
            if g > 0:
                heapq.heappush(heap, (-g, order[jid], jid))
        while heap and any(v > 0 for v in free.values()):
            _, _, jid = heapq.heappop(heap)
            if free[gtype[jid]] < 1:
                continue
            n[jid] += 1
            free[gtype[jid]] -= 1
            g = self._gain(info[jid], n[jid])
            if g > 0:
                heapq.heappush(heap, (-g, order[jid], jid))
        allocs: dict[str, Allocation] = {}
        for jid in sorted(n, key=lambda j: (n[j], order[j])):
            job = snap.jobs[jid]
            cur = job.allocation.placement
            # keep the placement only if the count AND the type it was counted on are the ones it holds
            same = cur and job.allocation.gpus == n[jid] and types[cur[0][0]] == gtype[jid]
            allocs[jid] = job.allocation if same else Allocation(num_gpus=n[jid], gpu_type=gtype[jid])
        return Decision(allocs, reasons)

    @staticmethod
    def _gain(info: tuple[np.ndarray, float, float, int], k: int) -> float:
        theta, batch, remaining, cap = info
        if k + 1 > cap:
            return 0.0
        return remaining * (step_time(theta, k, batch) - step_time(theta, k + 1, batch)) / batch

    def state_dict(self) -> dict[str, Any]:
        return {}  # stateless: every round refits from the views
