"""The one engine loop shared by the simulator and the live service (DESIGN.md "One brain, two bodies").

    snapshot → policy.schedule → placer fills open placements → invariants.check → diff → actions
             → reclaim: servers returned (the policy's choice, else THE fallback) and vacated

and around the rounds a job's life: `submitted` → rounds → `ended` (finished, failed or cancelled), the one
place that calls the policy's `on_submit` / `on_finish` hooks for both bodies (contracts: `policies.base`).

The engine owns no clock and performs no side effects: the caller (simulated or real backend) builds the
snapshot from its own state (`engine.jobstate.JobState` per job) and applies the returned actions; the rules
around a round (reclaim fallback, vacating, admin resizes) live in `engine.reclaim`, so the two bodies cannot
disagree on them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from elastisched.core.events import Action, ActionKind
from elastisched.core.frozen import quick_init
from elastisched.core.types import (
    NO_ALLOCATION,
    Allocation,
    ClusterSnapshot,
    Decision,
    JobId,
    JobSpec,
    PendingReason,
)
from elastisched.engine.invariants import check
from elastisched.engine.overrides import Reclaim, choose_returned, vacate
from elastisched.engine.placer import Changes, place_changes
from elastisched.policies.base import Policy, PolicyContext


@quick_init
@dataclass(frozen=True, slots=True)
class RoundResult:
    decision: Decision
    allocations: Mapping[JobId, Allocation]  # placed; absent = not running
    actions: tuple[Action, ...]
    latency_s: float  # time spent inside policy.schedule
    reclaim: Reclaim | None = None  # servers returned this round (None when nothing was reclaimed)


def same_allocation(a: Allocation, b: Allocation) -> bool:
    if a is b:
        return True
    return (a.same_gpus(b) and a.batch_size == b.batch_size
            and a.local_batch == b.local_batch and a.accumulation == b.accumulation)


def leaves_queue_blocked(policy: Policy, decision: Decision, actions: Sequence[Action]) -> bool:
    """Whether a round lets a body skip the rounds after it until GPUs are freed (`Policy.idle_while_blocked`,
    the simulator's `sim.idle`; `elastisched policies check` tests the promise): the policy made it, reads no
    progress, left a job waiting for RESOURCES, and changed nothing but launches (freed no GPU)."""
    return (policy.idle_while_blocked and not policy.needs_progress
            and PendingReason.RESOURCES in decision.reasons.values()
            and all(a.kind is ActionKind.LAUNCH for a in actions))


def diff(snap: ClusterSnapshot, allocs: Mapping[JobId, Allocation], changes: Changes | None = None
         ) -> tuple[Action, ...]:
    """Actions that turn the current allocations of `snap` into `allocs` (`changes`: the placer's account of
    which jobs changed, so that only those are looked at)."""
    if changes is not None and not changes.changed and not changes.released:
        return ()  # every job keeps what it holds
    actions: list[Action] = []
    jobs = snap.jobs
    ch = changes.changed if changes is not None else ()
    for jid, a in allocs.items() if changes is None else zip(ch, map(allocs.__getitem__, ch), strict=True):
        cur = jobs[jid].allocation
        if a is cur:
            continue
        if not cur.placement:
            actions.append(Action(ActionKind.LAUNCH, jid, a, cur))
        elif not same_allocation(cur, a):
            actions.append(Action(ActionKind.RESIZE, jid, a, cur))
    running = snap.running_jobs()
    for jid in running if changes is None else changes.released:
        job = running[jid]
        if job.allocation.placement and jid not in allocs:
            actions.append(Action(ActionKind.SUSPEND, jid, NO_ALLOCATION, job.allocation))
    return tuple(actions)


class Engine:
    def __init__(self, policy: Policy, ctx: PolicyContext, check_invariants: bool = True) -> None:
        self.policy = policy
        self.ctx = ctx
        self.check_invariants = check_invariants
        self.active: set[JobId] = set()  # jobs announced by `submitted` and not `ended` since
        self.life_events = 0  # submissions and ends passed to the policy (the service saves its state on change)

    def submitted(self, spec: JobSpec, now: float) -> None:
        """A job entered the system (the simulator: its arrival; the service: the first time the daemon sees it,
        and every active job again after a restart). Calls `policy.on_submit` once per job and engine: a
        repeated announcement is dropped here; one repeated across a restart is the policy's to ignore."""
        if spec.job_id in self.active:
            return
        self.active.add(spec.job_id)
        self.life_events += 1
        self.policy.on_submit(spec, now)

    def ended(self, job_id: JobId, now: float) -> None:
        """A job left the system for good: finished, failed (no retry left) or cancelled. Calls
        `policy.on_finish` (idempotent by contract, so a restarted service may repeat it for a job whose end
        its saved policy state predates)."""
        self.active.discard(job_id)
        self.life_events += 1
        self.policy.on_finish(job_id, now)

    def round(self, snap: ClusterSnapshot) -> RoundResult:
        t0 = time.perf_counter()
        decision = self.policy.schedule(snap, self.ctx)
        latency = time.perf_counter() - t0
        placed, free, changes = place_changes(decision.allocations, snap)
        if self.check_invariants and (free is not None or changes is None):  # (None: nothing changed to check)
            if changes is None:
                check(placed, snap, self.policy.elastic, free)
            else:
                check(placed, snap, self.policy.elastic, free, changes.changed, changes.filled)
        actions = diff(snap, placed, changes)
        if snap.reclaim_demand <= 0:
            return RoundResult(decision, placed, actions, latency)
        actions, rec = vacate(snap, actions, choose_returned(snap, decision.reclaim))
        return RoundResult(decision, placed, actions, latency, rec)
