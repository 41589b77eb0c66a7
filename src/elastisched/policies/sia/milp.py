"""Sia's allocation MILP (SOSP'23 §4.2; artifact siasosp23/artifacts `sia-simulator/sia.py::__solve_mip_rescaled`,
read, not copied): binary X[j, k] over each job's configurations (GPU type, nodes, GPUs), minimise
Σ X·round(S^p, 2) + λ_n · (#jobs − Σ X), at most one configuration per job, GPUs per type within capacity,
a job still paying its restart forced to keep its configuration.

At cluster scale (issue 22) the round's columns are built for all jobs at once, and HiGHS runs only when it
must: a problem posed again (the same columns and capacities; common while nothing changes) takes its last
answer, and one where every job's cheapest configuration is strictly cheapest and they all fit is its own
unique optimum (`separable`). Both give exactly the solution HiGHS gives; `budget_s` (ours, default None)
is HiGHS's time limit, after which it returns the best solution found so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from elastisched.core.types import ClusterSnapshot
from elastisched.policies.sia.goodput import sia_configs

ZERO_ALLOC_GAIN = 1e-4
GOODPUT_CLIP = 3000.0
SOLVED_KEPT = 64  # MILP solutions kept by their exact inputs


@dataclass(frozen=True, slots=True)
class Layout:
    types: tuple[str, ...]  # cluster order (first appearance among nodes)
    per_node: dict[str, int]
    capacity: dict[str, int]
    configs: tuple[tuple[str, int, int], ...]  # (type, nodes, GPUs), grouped by type
    blocks: tuple[tuple[int, int], ...]  # [start, end) of each type's configurations
    type_index: np.ndarray  # per configuration
    gpus: np.ndarray  # per configuration
    first: dict[tuple[str, int], int]  # (type, GPUs) → its first configuration
    sig: tuple[Any, ...]  # what a job's goodput row depends on in the layout (a cache key)

    @classmethod
    def of(cls, types: tuple[str, ...], per_node: dict[str, int], capacity: dict[str, int],
           configs: tuple[tuple[str, int, int], ...]) -> Layout:
        """The layout of these configurations (grouped by type, in `types` order)."""
        tix = np.array([types.index(c[0]) for c in configs], dtype=np.int64)
        blocks = tuple((int(np.searchsorted(tix, k)), int(np.searchsorted(tix, k, side="right")))
                       for k in range(len(types)))
        first: dict[tuple[str, int], int] = {}
        for i, (t, _, g) in enumerate(configs):
            first.setdefault((t, g), i)
        return cls(types, per_node, capacity, configs, blocks, tix, np.array([c[2] for c in configs], dtype=np.int64),
                   first, (types, tuple(sorted(per_node.items())), configs))


def layout(snap: ClusterSnapshot, max_gpus: int) -> Layout:
    types: list[str] = []
    per_node: dict[str, int] = {}
    count: dict[str, int] = {}
    for n in snap.nodes:
        if n.gpu_type not in per_node:
            types.append(n.gpu_type)
        per_node[n.gpu_type] = max(per_node.get(n.gpu_type, 0), n.num_gpus)
        count[n.gpu_type] = count.get(n.gpu_type, 0) + 1
    configs = tuple((t, k, g) for t in types for k, g in sia_configs(per_node[t], count[t], max_gpus))
    return Layout.of(tuple(types), per_node, snap.capacity_by_type(), configs)


Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # job, type index, GPUs, cost, lb


def columns(rows: list[np.ndarray], extra: list[tuple[int, str, int, float]], forced: dict[int, int], lay: Layout,
            p: float, lambda_n: float) -> Columns | None:
    """The MILP's columns (job row, type index, GPUs, cost, lower bound): jobs in order, each job's
    configurations in order, then the rigid jobs' columns. A configuration no cheaper than a smaller one of
    the same type is never needed (dominated) and is dropped, unless forced; so is one of cost ≥ 0."""
    parts: list[tuple[np.ndarray, ...]] = []
    if rows:
        r = np.array(rows)
        with np.errstate(divide="ignore"):  # a restart factor of 0 gives 0^p = inf: clipped, as there
            s = np.minimum(np.round(np.power(r, p), 2), GOODPUT_CLIP) if p < 0 else r**p
        cost = s - lambda_n if p < 0 else -(s - lambda_n)
        valid = r > ZERO_ALLOC_GAIN
        best = np.zeros_like(cost)  # min(0, the cheapest valid smaller configuration of the same type)
        cv = np.where(valid, cost, np.inf)
        for a, b in lay.blocks:
            best[:, a + 1: b] = np.minimum(np.minimum.accumulate(cv[:, a:b], axis=1)[:, :-1], 0.0)
        is_forced = np.zeros_like(valid)
        for row, i in forced.items():
            is_forced[row, i] = True
        rr, ii = np.nonzero((valid & (cost < best)) | is_forced)
        parts.append((rr, lay.type_index[ii], lay.gpus[ii], cost[rr, ii], is_forced[rr, ii].astype(float)))
    tix_of = {t: k for k, t in enumerate(lay.types)}
    ex = []
    for row, t, g, v in extra:
        sv = round(v**p, 2) if p < 0 else v**p
        c = sv - lambda_n if p < 0 else -(sv - lambda_n)
        if c < 0:
            ex.append((row, tix_of[t], g, c))
    if ex:
        parts.append((*(np.array([e[k] for e in ex]) for k in range(4)), np.zeros(len(ex))))
    if sum(len(x[0]) for x in parts) == 0:
        return None
    job, tix, gpus, cost_, lb = (np.concatenate([x[k] for x in parts]) for k in range(5))
    return job.astype(np.int64), tix.astype(np.int64), gpus.astype(np.int64), cost_.astype(float), lb


def solve(cols: Columns | None, lay: Layout, n_rows: int, gap: float, budget_s: float | None,
          memo: dict[bytes, tuple[int, ...]]) -> dict[int, tuple[str, int]]:
    """Job row → (type, GPUs) of the optimal columns (memoised by the exact problem, `memo`)."""
    if cols is None:
        return {}
    job, tix, gpus, cost, lb = cols
    cap = np.array([lay.capacity[t] for t in lay.types], dtype=float)
    key = b"".join(a.tobytes() for a in (job, tix, gpus, cost, lb, cap)) + str(n_rows).encode()
    x = memo.get(key)
    if x is None:
        x = separable(job, tix, gpus, cost, lb, cap)
        if x is None:
            x = _highs(cols, cap, n_rows, len(lay.types), gap, budget_s)
        if len(memo) >= SOLVED_KEPT:
            memo.clear()
        memo[key] = x
    return {int(job[k]): (lay.types[int(tix[k])], int(gpus[k])) for k in x}


def _highs(cols: Columns, cap: np.ndarray, n_rows: int, n_types: int, gap: float, budget_s: float | None
           ) -> tuple[int, ...]:
    """HiGHS (relative gap `gap`; `budget_s`: its time limit, the best solution found by then)."""
    from scipy.optimize import Bounds, LinearConstraint, milp  # here: scipy costs ~0.3 s to import
    from scipy.sparse import csr_matrix

    job, tix, gpus, cost, lb = cols
    n = len(cost)
    a_job = csr_matrix((np.ones(n), (job, np.arange(n))), shape=(n_rows, n))
    a_gpu = csr_matrix((gpus.astype(float), (tix, np.arange(n))), shape=(n_types, n))
    options: dict[str, Any] = {"mip_rel_gap": gap}
    if budget_s is not None:
        options["time_limit"] = budget_s
    res = milp(cost, integrality=np.ones(n), bounds=Bounds(lb, np.ones(n)),
               constraints=[LinearConstraint(a_job, 0, 1), LinearConstraint(a_gpu, 0, cap)], options=options)
    if res.x is None and budget_s is not None:  # out of time before any solution: a feasible one, greedily
        return greedy(job, tix, gpus, cost, lb, cap)
    if res.x is None:
        raise RuntimeError(f"sia: MILP failed ({res.message})")
    return tuple(np.flatnonzero(res.x > 0.5).tolist())


def greedy(job: np.ndarray, tix: np.ndarray, gpus: np.ndarray, cost: np.ndarray, lb: np.ndarray,
           cap: np.ndarray) -> tuple[int, ...]:
    """A feasible solution without a solver: the forced columns, then each job's cheapest column that still
    fits, jobs in order."""
    used = np.bincount(tix[lb > 0.5], weights=gpus[lb > 0.5], minlength=len(cap))
    chosen = [int(k) for k in np.flatnonzero(lb > 0.5)]
    done = set(job[lb > 0.5].tolist())
    for k in np.lexsort((cost, job)).tolist():
        j, t = int(job[k]), int(tix[k])
        if j not in done and used[t] + gpus[k] <= cap[t]:
            used[t] += gpus[k]
            chosen.append(k)
            done.add(j)
    return tuple(sorted(chosen))


def separable(job: np.ndarray, tix: np.ndarray, gpus: np.ndarray, cost: np.ndarray, lb: np.ndarray,
              cap: np.ndarray) -> tuple[int, ...] | None:
    """The solution when the MILP needs no solver: every job takes its cheapest column (a forced job: its
    forced one), each cheapest strictly (no tie the solver would break), and together they fit every type.
    That is then the unique optimum, which HiGHS returns too. None when this does not apply."""
    order = np.lexsort((cost, -lb, job))  # per job: its forced column first, else its cheapest
    j = job[order]
    first = np.ones(len(j), dtype=bool)
    first[1:] = j[1:] != j[:-1]
    starts = np.flatnonzero(first)
    head = order[starts]
    nxt = starts + 1
    has = (nxt < len(j)) & (lb[head] == 0)
    has[has] = j[nxt[has]] == j[starts[has]]
    if (cost[order[nxt[has]]] == cost[head[has]]).any():
        return None
    used = np.bincount(tix[head], weights=gpus[head], minlength=len(cap))
    if (used > cap).any():
        return None
    return tuple(np.sort(head).tolist())
