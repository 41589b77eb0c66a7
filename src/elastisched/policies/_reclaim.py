"""Which loaned servers to give back when the inference side reclaims r of them (lyra.md §2.1, §7 row 3).

Shared by the lyra and elastisched wings (a wing imports no other wing: what two share lives here).

A job *is preempted* by returning the set R when the GPUs it loses on R leave it below what it can run on:
an inelastic job may lose nothing; an elastic job may keep running down to `min_gpus` (it *scales in*, which
is not a preemption — lyra.md §2.1 "elastic jobs that only lose extra workers should cost 0").

Methods (`choose(method, ...)`):

- `greedy` (Lyra): pick servers one at a time, each time the server with the lowest *server preemption
  cost* given the servers already chosen. Cost = the number of jobs not yet doomed that this server would
  preempt (count cost (B), what the issue asks for); ties by the fractional cost (A) `Σ g_js / G_j` of those
  jobs, then by the GPUs of elastic jobs it scales in, then by its busy GPUs, then by the server's position
  (idle servers therefore go first). Jobs already doomed stop counting, so a job spanning several loaned
  servers makes its other servers free once one of them is chosen (lyra.md §2.1 [P]).
- `greedy-swap` (ours [P]): `greedy`, then first-improvement 1-swap local search (swap one chosen server
  for an unchosen one while that lowers (preempted jobs, scale-in GPUs)); at most 20 improving swaps.
- `deepboot`: DeepBoot's ARYL rule — servers holding the fewest training GPUs first (ties: position).
- `random`: r servers uniformly at random (seeded).
- `milp`: the exact minimum number of preempted jobs, `scipy.optimize.milp` (HiGHS): binary x_s (return s),
  y_j (j preempted); Σ x_s = r; for each job Σ_s g_js·x_s − M_j·y_j ≤ slack_j, slack_j = G_j − keep_j,
  M_j = Σ_s g_js − slack_j. A 1e-3 weight on scale-in GPUs breaks ties towards fewer scale-ins. Meant for
  instances up to ~64 loaned servers; `time_limit` bounds it (the incumbent is returned on timeout).

Readings: only GPUs on loaned servers count (training servers are never reclaimed); a job's `keep` is
`min_gpus` when elastic and its whole allocation otherwise; jobs with no GPU on a loaned server are ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import cast

import numpy as np

from elastisched.core.errors import ConfigError
from elastisched.core.nodes import NodeSet, node_set
from elastisched.core.types import ClusterSnapshot, JobView, NodeId, NodeView, Pool

METHODS = ("greedy", "greedy-swap", "deepboot", "random", "milp")


@dataclass(frozen=True, slots=True)
class Holding:
    """One running job's GPUs on loaned servers; `keep` = the fewest GPUs it can run on."""

    job_id: str
    gpus: Mapping[NodeId, int]
    total: int
    keep: int

    @property
    def slack(self) -> int:
        """GPUs the job can lose and still run (0 for an inelastic job)."""
        return max(0, self.total - self.keep)


@dataclass(frozen=True, slots=True)
class ReclaimChoice:
    servers: tuple[NodeId, ...]
    preempted: frozenset[str]
    scaled_in: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))  # job -> GPUs lost


def lyra_keep(job: JobView, total: int) -> int:
    """Lyra's reading of the fewest GPUs a running job can keep: `min_gpus` when elastic, all of them otherwise."""
    return min(job.spec.min_gpus, total) if job.spec.elastic else total


def holdings_from_snapshot(snap: ClusterSnapshot, keep: Callable[[JobView, int], int] = lyra_keep
                           ) -> tuple[tuple[NodeId, ...], tuple[Holding, ...]]:
    """Loaned servers (in node order) and the running jobs' holdings on them; `keep(job, GPUs held)` = the
    fewest GPUs the job can run on (a policy's own reading of who scales)."""
    loaned = tuple(n.node_id for n in snap.nodes if n.pool is Pool.LOANABLE)
    lset = set(loaned)
    out: list[Holding] = []
    for jid, job in snap.jobs.items():
        a = job.allocation
        on = {n: g for n, g in a.placement if n in lset}
        if on:
            out.append(Holding(jid, MappingProxyType(on), a.gpus, keep(job, a.gpus)))
    return loaned, tuple(out)


def evaluate(servers: Iterable[NodeId], holdings: Sequence[Holding]) -> ReclaimChoice:
    """Which jobs returning `servers` preempts and which it only scales in."""
    chosen = tuple(servers)
    cset = set(chosen)
    pre: set[str] = set()
    scaled: dict[str, int] = {}
    for h in holdings:
        lost = sum(g for n, g in h.gpus.items() if n in cset)
        if lost > h.slack:
            pre.add(h.job_id)
        elif lost:
            scaled[h.job_id] = lost
    return ReclaimChoice(chosen, frozenset(pre), MappingProxyType(scaled))


def _index(servers: Sequence[NodeId], holdings: Sequence[Holding]
           ) -> tuple[dict[NodeId, int], list[list[tuple[int, int]]]]:
    pos = {s: i for i, s in enumerate(servers)}
    on: list[list[tuple[int, int]]] = [[] for _ in servers]  # server -> [(holding index, gpus)]
    for j, h in enumerate(holdings):
        for n, g in h.gpus.items():
            if n in pos and g > 0:
                on[pos[n]].append((j, g))
    return pos, on


def greedy(servers: Sequence[NodeId], holdings: Sequence[Holding], r: int, refine: bool = False
           ) -> tuple[NodeId, ...]:
    """Lyra's greedy on server preemption cost (module docstring); `refine` adds 1-swap local search."""
    _, on = _index(servers, holdings)
    lost = [0] * len(holdings)
    doomed = [False] * len(holdings)
    left = list(range(len(servers)))
    picked: list[int] = []
    for _ in range(min(r, len(servers))):
        best_key: tuple[float, ...] | None = None
        best_pos = -1
        for k, s in enumerate(left):
            count, frac, scale, used = 0, 0.0, 0, 0
            for j, g in on[s]:
                used += g
                if doomed[j]:
                    continue
                h = holdings[j]
                if lost[j] + g > h.slack:
                    count += 1
                    frac += g / h.total
                else:
                    scale += g
            key = (count, round(frac, 12), scale, used, s)
            if best_key is None or key < best_key:
                best_key, best_pos = key, k
        s = left.pop(best_pos)
        picked.append(s)
        for j, g in on[s]:
            lost[j] += g
            if lost[j] > holdings[j].slack:
                doomed[j] = True
    if refine:
        picked = _swap(picked, on, holdings, len(servers))
    return tuple(servers[i] for i in picked)


def _swap(picked: list[int], on: list[list[tuple[int, int]]], holdings: Sequence[Holding], n: int,
          max_rounds: int = 20) -> list[int]:
    """First-improvement 1-swap search on (preempted jobs, scale-in GPUs); stops at a local optimum."""
    slack = np.array([h.slack for h in holdings], dtype=np.int64)
    g = np.zeros((n, len(holdings)), dtype=np.int64)
    for s, lst in enumerate(on):
        for j, k in lst:
            g[s, j] += k

    def cost(sel: np.ndarray) -> tuple[int, int]:
        lost = g[sel].sum(axis=0)
        pre = lost > slack
        return int(pre.sum()), int(lost[~pre].sum())

    cur = list(picked)
    best = cost(np.array(cur, dtype=np.int64))
    for _ in range(max_rounds):
        improved = False
        out = [t for t in range(n) if t not in set(cur)]
        for a in range(len(cur)):
            for t in out:
                trial = cur.copy()
                trial[a] = t
                c = cost(np.array(trial, dtype=np.int64))
                if c < best:
                    cur, best, improved = trial, c, True
                    break
            if improved:
                break
        if not improved:
            break
    return cur


def deepboot(servers: Sequence[NodeId], holdings: Sequence[Holding], r: int) -> tuple[NodeId, ...]:
    """DeepBoot's rule: the servers with the fewest training GPUs."""
    _, on = _index(servers, holdings)
    order = sorted(range(len(servers)), key=lambda i: (sum(g for _, g in on[i]), i))
    return tuple(servers[i] for i in order[:r])


def random_choice(servers: Sequence[NodeId], r: int, rng: np.random.Generator) -> tuple[NodeId, ...]:
    idx = rng.choice(len(servers), size=min(r, len(servers)), replace=False)
    return tuple(servers[int(i)] for i in sorted(idx))


def milp(servers: Sequence[NodeId], holdings: Sequence[Holding], r: int, time_limit: float = 10.0
         ) -> tuple[NodeId, ...]:
    """Exact minimum-preemption choice by MILP (module docstring)."""
    from scipy.optimize import Bounds, LinearConstraint
    from scipy.optimize import milp as _milp

    n = len(servers)
    r = min(r, n)
    if r == 0:
        return ()
    pos, _ = _index(servers, holdings)
    rel = [j for j, h in enumerate(holdings) if sum(h.gpus.get(s, 0) for s in servers) > h.slack]
    m = len(rel)
    c = np.zeros(n + m)
    c[n:] = 1.0
    for h in holdings:  # tie-break: fewer scale-in GPUs
        for s, g in h.gpus.items():
            if s in pos:
                c[pos[s]] += 1e-3 * g / max(1, sum(x.total for x in holdings))
    rows = [np.concatenate([np.ones(n), np.zeros(m)])]
    lo, hi = [float(r)], [float(r)]
    for k, j in enumerate(rel):
        h = holdings[j]
        row = np.zeros(n + m)
        for s, g in h.gpus.items():
            if s in pos:
                row[pos[s]] = g
        big = row[:n].sum() - h.slack
        row[n + k] = -big
        rows.append(row)
        lo.append(-np.inf)
        hi.append(float(h.slack))
    res = _milp(c, constraints=LinearConstraint(np.array(rows), lo, hi), integrality=np.ones(n + m),
                bounds=Bounds(0, 1), options={"time_limit": time_limit})
    if res.x is None:
        return greedy(servers, holdings, r)
    x = res.x[:n]
    order = sorted(range(n), key=lambda i: (-x[i], i))
    return tuple(servers[i] for i in order[:r])


def choose(method: str, servers: Sequence[NodeId], holdings: Sequence[Holding], r: int,
           rng: np.random.Generator | None = None) -> ReclaimChoice:
    """Choose `r` of `servers` to return with `method` and evaluate the choice."""
    if r < 0:
        raise ConfigError("reclaim_demand", r, "must be >= 0")
    if method in ("greedy", "greedy-swap"):
        picked = greedy(servers, holdings, r, refine=method == "greedy-swap")
    elif method == "deepboot":
        picked = deepboot(servers, holdings, r)
    elif method == "random":
        picked = random_choice(servers, r, rng if rng is not None else np.random.default_rng(0))
    elif method == "milp":
        picked = milp(servers, holdings, r)
    else:
        raise ConfigError("reclaim", method, f"unknown reclaim method; known: {', '.join(METHODS)}")
    return evaluate(picked, holdings)


def capacity_without(nodes: tuple[NodeView, ...], gone: frozenset[NodeId]) -> tuple[dict[str, int], dict[str, int]]:
    """(GPUs per type, largest node per type) of the cluster without the servers a reclaim returns; fresh dicts
    the caller may change. Without a reclaim the node tuple's own (computed once per tuple) are copied, so a
    round costs O(types), not O(servers)."""
    if not gone:
        free, per_node = node_set(nodes).derived("capacity_without", _whole_capacity)
        return dict(free), dict(per_node)
    return _capacity(nodes, gone)


def _whole_capacity(ns: NodeSet) -> tuple[dict[str, int], dict[str, int]]:
    return _capacity(cast("tuple[NodeView, ...]", ns.nodes), frozenset())


def _capacity(nodes: Sequence[NodeView], gone: frozenset[NodeId]) -> tuple[dict[str, int], dict[str, int]]:
    free: dict[str, int] = {}
    per_node: dict[str, int] = {}
    for n in nodes:
        if n.node_id not in gone:
            free[n.gpu_type] = free.get(n.gpu_type, 0) + n.num_gpus
            per_node[n.gpu_type] = max(per_node.get(n.gpu_type, 0), n.num_gpus)
    return free, per_node
