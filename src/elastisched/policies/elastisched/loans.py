"""Loaned inference servers (Lyra, lyra.md §2.1): which to give back, and which to stop filling ahead of a reclaim.

- **On a reclaim** of r servers: the r loaned servers whose return stops the fewest jobs (`policies._reclaim`,
  Lyra's greedy), with this policy's reading of who can shrink (a job keeps running down to its fewest GPUs).
  The round then re-plans every job on what is left, so a job that lost GPUs shrinks, or moves to free GPUs
  elsewhere, before any waits.
- **Ahead of a reclaim** (ours; GFS, ASPLOS'26, forecasts inference demand to cut loan evictions): the policy
  records how many servers it is lent each round (`loaning.forecast.SeasonalForecast`: the same hour of earlier
  days) and expects `lowest(now, horizon)` of them to stay lent over the next `horizon` seconds. The others are
  *at risk*: the ones its own reclaim rule would return first. An at-risk server takes no new GPUs (no job
  starts or grows there), while what already runs there keeps running — so when the reclaim comes the servers
  returned hold little, and a forecast that was wrong costs nothing but idle GPUs for a while.
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from elastisched.core.nodes import NodeSet
from elastisched.core.types import ClusterSnapshot, JobView, NodeId, NodeView, Pool
from elastisched.loaning.forecast import SeasonalForecast
from elastisched.policies._reclaim import ReclaimChoice, choose, holdings_from_snapshot
from elastisched.policies.elastisched.candidates import bounds


def keep_gpus(job: JobView, total: int) -> int:
    """The fewest GPUs a running job can be left with by a reclaim and still run (this policy's reading)."""
    return min(bounds(job, None)[0], total)


class LoanWatch:
    """The loan side of one policy instance (module docstring); its forecast is saved with the policy's state."""

    def __init__(self, horizon: float) -> None:
        self.horizon = horizon
        self.forecast = SeasonalForecast()

    def observe(self, snap: ClusterSnapshot) -> int:
        """Record how many servers stay lent after this round's reclaim; returns that number."""
        lent = snap.node_set.derived("elastisched.loaned", _loaned) - max(snap.reclaim_demand, 0)
        if lent > 0 or self.forecast.last is not None:
            self.forecast.observe(max(snap.now, self.forecast.last_t), max(lent, 0))
        return lent

    def reclaim(self, snap: ClusterSnapshot, rng: np.random.Generator) -> ReclaimChoice:
        servers, holdings = holdings_from_snapshot(snap, keep_gpus)
        return choose("greedy", servers, holdings, snap.reclaim_demand, rng)

    def at_risk(self, snap: ClusterSnapshot, gone: frozenset[NodeId], lent: int, rng: np.random.Generator
                ) -> frozenset[NodeId]:
        """Loaned servers expected back within the horizon (module docstring); empty without a forecast."""
        expected = self.forecast.lowest(snap.now, self.horizon)
        n = lent - math.floor(expected) if expected is not None else 0
        if n <= 0:
            return frozenset()
        servers, holdings = holdings_from_snapshot(snap, keep_gpus)
        left = tuple(s for s in servers if s not in gone)
        if not left:
            return frozenset()
        return frozenset(choose("greedy", left, holdings, min(n, len(left)), rng).servers)

    def state_dict(self) -> dict[str, Any]:
        return self.forecast.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.forecast.load_state_dict(state)


def _loaned(ns: NodeSet) -> int:
    """Loaned servers in a node set (counted once per set)."""
    return sum(1 for n in cast("tuple[NodeView, ...]", ns.nodes) if n.pool is Pool.LOANABLE)
