"""Work-conserving admission after ONES's deployment (`backfill`, docs/ones.md D12; tuned preset).

Why: the GA gives GPUs to the growth of running jobs, and only afterwards the restart-aware hold
(`ones.deploy.hold`) keeps a growth that does not pay, or the δ throttle defers a move. The GPUs meant for
that growth then stay idle while the jobs the best individual left out (or placed on slots still held by a
deferred job) wait: on Pollux workload-1 (seed 0) nearly all of the queueing time was spent with at least the
waiting job's start size idle after the decision. This pass starts waiting jobs on the slots the deployed
array leaves empty, least attained service first (Tiresias's signal, NSDI'19 §3.1; arrival order breaks ties),
each at its start or resume size or what is left, packed onto as few nodes as possible. Only a waiting job
without a progress log is admitted here (the ONES trace, where every job has one, is left unchanged).
"""

from __future__ import annotations

import numpy as np

from elastisched.core.types import JobView
from elastisched.policies.ones.jobstate import OnesJobState
from elastisched.policies.ones.ops import EMPTY


def place(out: np.ndarray, node_of: np.ndarray, n: int) -> np.ndarray:
    """Empty slots of `out` for a job of n GPUs on as few nodes as possible: the node that fits it best (fewest
    spare empty slots), else whole nodes with the most empty slots first. Fewer than n if fewer are empty."""
    empty = out == EMPTY
    avail = np.bincount(node_of[empty], minlength=int(node_of.max()) + 1)
    fit = np.flatnonzero(avail >= n)
    nodes = [int(fit[np.argmin(avail[fit] - n)])] if fit.size else np.argsort(-avail, kind="stable").tolist()
    take: list[int] = []
    for nd in nodes:
        if len(take) >= n or avail[nd] == 0:
            break
        take += np.flatnonzero(empty & (node_of == nd))[:n - len(take)].tolist()
    return np.array(take, dtype=np.int64)


def backfill(out: np.ndarray, node_of: np.ndarray, waiting: np.ndarray, size: np.ndarray,
             attained: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start the `waiting` jobs (bool per job) absent from `out` on its empty slots, ascending `attained`
    GPU-seconds (stable: job order breaks ties), each at `size` GPUs or what is left. Returns the new array
    and the jobs started here."""
    out = out.copy()
    j = waiting.shape[0]
    have = np.bincount(out[out >= 0], minlength=j)[:j]
    started = np.zeros(j, dtype=bool)
    for i in np.flatnonzero(waiting & (have == 0))[np.argsort(attained[waiting & (have == 0)], kind="stable")]:
        if not (out == EMPTY).any():
            break
        sl = place(out, node_of, max(1, int(size[i])))
        out[sl] = i
        started[i] = True
    return out, started


def seed_rows(pop: np.ndarray, out: np.ndarray, started: np.ndarray) -> np.ndarray:
    """Write each backfilled job's slots into every population row where they are empty and the job is absent,
    so the next generation's parents keep it running (a running young job is neither padded nor mutated)."""
    pop = pop.copy()
    for i in np.flatnonzero(started):
        sl = out == i
        ok = ~(pop == i).any(axis=1) & (pop[:, sl] == EMPTY).all(axis=1)
        rows = np.flatnonzero(ok)
        pop[np.ix_(rows, np.flatnonzero(sl))] = i
    return pop


def admit(out: np.ndarray, node_of: np.ndarray, jobs: list[JobView], sts: list[OnesJobState],
          pop: np.ndarray | None, without_log: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """`backfill` for the waiting jobs without a progress log (`without_log`, per job: `ones.limits.no_log`), at
    their resume size (a preempted job) or their start size (`max_size` of a new job). Returns the array to
    deploy and the population with them seeded."""
    waiting = np.array([not j.gpus for j in jobs], dtype=bool) & without_log
    if not waiting.any() or not (out == EMPTY).any():
        return out, pop
    size = np.array([st.resume or st.max_size for st in sts], dtype=np.int64)
    attained = np.array([j.attained_service for j in jobs], dtype=float)
    new, started = backfill(out, node_of, waiting, size, attained)
    return new, (seed_rows(pop, new, started) if pop is not None and started.any() else pop)
