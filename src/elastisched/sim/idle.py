"""When a simulated round need not consult its policy: the policy promised that it decides nothing then
(`Policy.idle_without_pending`, `Policy.idle_while_blocked`). The simulator still counts such a round and
records its timeline row; every output is what a consulted round would have given (tests/sim/test_idle_rounds.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from elastisched.core.types import JobId
from elastisched.engine.jobstate import JobState
from elastisched.engine.loop import RoundResult, leaves_queue_blocked
from elastisched.policies.base import Policy
from elastisched.sim.config import SimConfig


def idle_round(policy: Policy, cfg: SimConfig, reclaim_demand: int, blocked: bool, arrived: Collection[JobId],
               jobs: Mapping[JobId, JobState], waiting: tuple[Collection[JobId], Collection[JobId]]) -> bool:
    """Whether this round decides nothing, by the policy's promise: no server is to be returned, no callback
    wants the round's snapshot, the policy reads no progress (a snapshot would advance the running jobs), and
    either only jobs arrived since a round that left one `blocked` (`left_blocked`), or no job waits for GPUs:
    none `arrived`, and each of the `waiting` (the pending views, which hold the jobs launched since the last
    snapshot too, and the jobs changed since) holds GPUs."""
    if policy.needs_progress or reclaim_demand > 0 or cfg.on_round is not None:
        return False
    if blocked:
        return True
    if not policy.idle_without_pending or arrived:
        return False
    pending, stale = waiting
    return all(jobs[j].allocation.gpus for j in pending) and all(jobs[j].allocation.gpus for j in stale)


def left_blocked(policy: Policy, cfg: SimConfig, res: RoundResult) -> bool:
    """Whether a consulted round left the queue blocked (`engine.loop.leaves_queue_blocked`) for a run whose
    rounds `idle_round` may skip at all (with no server to return: checked when the round comes)."""
    return cfg.on_round is None and leaves_queue_blocked(policy, res.decision, res.actions)
