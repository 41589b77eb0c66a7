"""Tiresias's O(changes) decision (`KeptAllocations` with released jobs, demotions found by the walk itself)
against a plain reference: the artifact's rules written the simple way (demote every running job of queue 0
whose service reached the threshold, in running order; then walk both queues into a plain dict). The two run
in lockstep on real simulations with many preemptions, demotions and loans, round by round."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, KeptAllocations, PendingReason
from elastisched.engine.loop import RoundResult
from elastisched.loaning import LoanPlan
from elastisched.models import PerfModels
from elastisched.policies._common import can_ever_fit, fits
from elastisched.policies.tiresias.policy import TiresiasPolicy
from elastisched.sim import SimConfig, simulate
from elastisched.workloads import load_workload


class ReferenceTiresias:
    """The rules of `policies/tiresias.py`'s docstring, O(queue) and without caches."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.q0: dict[str, None] = {}
        self.q1: dict[str, None] = {}
        self.demotions = 0

    def schedule(self, snap: ClusterSnapshot) -> Decision:
        for jid in snap.jobs:  # new jobs join queue 0 in submission order; finished ones leave
            if jid not in self.q0 and jid not in self.q1:
                self.q0[jid] = None
        for q in (self.q0, self.q1):
            for jid in [j for j in q if j not in snap.jobs]:
                del q[jid]
        for jid, v in snap.running_jobs().items():
            if jid in self.q0 and v.attained_service + max(0.0, snap.now - v.updated_at) * v.gpus >= self.threshold:
                del self.q0[jid]
                self.q1[jid] = None
                self.demotions += 1
        capacity = snap.capacity_by_type()
        free = dict(capacity)
        allocs: dict[str, Allocation] = {}
        reasons: dict[str, PendingReason] = {}
        types = {n.node_id: n.gpu_type for n in snap.nodes}
        for jid in [*self.q0, *self.q1]:
            if sum(free.values()) <= 0:
                break
            job = snap.jobs[jid]
            need = job.spec.num_gpus
            if not can_ever_fit(capacity, job.spec.gpu_types, need):
                reasons[jid] = PendingReason.INFEASIBLE
                continue
            cur = job.allocation
            if cur.gpus and free[types[cur.placement[0][0]]] >= need:
                allocs[jid] = cur
                for n, g in cur.placement:
                    free[types[n]] -= g
                continue
            t = fits(free, job.spec.gpu_types, need)
            if t is None:
                reasons[jid] = PendingReason.RESOURCES
            else:
                allocs[jid] = Allocation(num_gpus=need, gpu_type=t)
                free[t] -= need
        return Decision(allocs, reasons)


class CountingTiresias(TiresiasPolicy):
    """Counts the groups its rounds added up as a whole (`index.py`) and the jobs in what they added up."""

    skipped_groups = 0
    skipped_jobs = 0

    def _skipped_wake(self, rnd: Any) -> float:
        from elastisched.policies.tiresias.index import Group

        self.skipped_groups += sum(isinstance(s, Group) for s in rnd.skipped)
        self.skipped_jobs += sum(s.count for s in rnd.skipped)
        return super()._skipped_wake(rnd)


def _lockstep(workload: str, cluster: str, threshold: float, loans: LoanPlan | None = None) -> dict[str, int]:
    models = PerfModels.load()
    ref = ReferenceTiresias(threshold)
    seen = {"rounds": 0, "released": 0, "demoted": 0, "skipped_jobs": 0, "skipped_groups": 0}
    policy = CountingTiresias(threshold)

    def check(snap: ClusterSnapshot, res: RoundResult) -> None:
        want = ref.schedule(snap)
        got = res.decision
        assert isinstance(got.allocations, KeptAllocations)
        assert dict(got.allocations) == want.allocations, f"round at t={snap.now}"
        assert list(got.allocations.added) == [j for j in want.allocations if not snap.jobs[j].allocation.gpus
                                               or want.allocations[j] is not snap.jobs[j].allocation]
        assert dict(got.reasons) == want.reasons
        assert list(policy._q0) == list(ref.q0) and list(policy._q1) == list(ref.q1)
        seen["rounds"] += 1
        seen["released"] += len(got.allocations.released)
        seen["demoted"] = ref.demotions
        seen["skipped_jobs"] = policy.skipped_jobs
        seen["skipped_groups"] = policy.skipped_groups

    simulate(load_workload(workload, models), policy, parse_cluster(cluster), models,
             SimConfig(loans=loans, on_round=check))
    return seen


@pytest.mark.parametrize("workload", ["pollux:workload-2", "pollux:workload-5"])
def test_same_decisions_as_the_plain_walk(workload: str) -> None:
    seen = _lockstep(workload, "6x4:t4", 1800.0)
    assert seen["rounds"] > 100 and seen["released"] > 20 and seen["demoted"] > 20, seen


def test_same_decisions_with_loans_coming_and_going() -> None:
    loans = LoanPlan(((0.0, 4), (3000.0, 1), (6000.0, 6), (12000.0, 0), (20000.0, 3)), "t4", 4)
    seen = _lockstep("pollux:workload-3", "4x4:t4", 3600.0, loans)
    assert seen["rounds"] > 100 and seen["released"] > 20, seen


def test_blocks_added_up_whole_decide_as_the_plain_walk() -> None:
    """Hundreds of jobs running at once: most rounds add whole blocks of running jobs up without walking them,
    and every decision, wake-up and queue is still the plain walk's (preemptions and demotions included)."""
    seen = _lockstep("philly:jobs=2500,seed=1,load=1.2,gpus=256", "64x4:t4", 3600.0 * 4)
    assert seen["rounds"] > 300 and seen["released"] > 20 and seen["demoted"] > 50, seen
    assert seen["skipped_jobs"] > 20 * seen["rounds"], seen


def test_groups_and_blocks_of_a_few_jobs_decide_as_the_plain_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 3 jobs in groups of 2 blocks: both levels are added up whole, split and emptied many times a
    run, and the decisions are still the plain walk's."""
    from elastisched.policies.tiresias import index

    monkeypatch.setattr(index, "BLOCK", 3)
    monkeypatch.setattr(index, "GROUP", 2)
    seen = _lockstep("philly:jobs=1500,seed=3,load=1.1,gpus=128", "32x4:t4", 3600.0 * 2)
    assert seen["rounds"] > 300 and seen["released"] > 20 and seen["demoted"] > 50, seen
    assert seen["skipped_groups"] > seen["rounds"] and seen["skipped_jobs"] > 5 * seen["rounds"], seen


def _without_changes(schedule: Any) -> Any:
    return lambda snap, ctx: schedule(dataclasses.replace(snap, changed=None), ctx)


def test_wake_up_is_the_plain_walks() -> None:
    """The round's wake-up (its next demotion) is the full walk's, to the bit, with blocks added up whole."""
    models = PerfModels.load()
    wl = load_workload("philly:jobs=1500,seed=2,load=0.9,gpus=256", models)
    hints: dict[str, list[float | None]] = {}
    for name, changes in (("blocks", True), ("plain", False)):
        policy = TiresiasPolicy(3600.0 * 4)
        got = hints[name] = []

        def record(snap: ClusterSnapshot, res: RoundResult, got: list[float | None] = got) -> None:
            got.append(res.decision.next_round_at)

        if not changes:  # a body that reports no changes: the policy walks every job, as the live service has it
            policy.schedule = _without_changes(policy.schedule)  # type: ignore[method-assign]
        simulate(wl, policy, parse_cluster("64x4:t4"), models, SimConfig(on_round=record))
    assert len(hints["blocks"]) > 300 and hints["blocks"] == hints["plain"]


def test_reference_is_not_trivially_equal() -> None:
    """The lockstep check can fail: a reference with another threshold disagrees within the run."""
    with pytest.raises(AssertionError):
        models = PerfModels.load()
        ref = ReferenceTiresias(900.0)

        def check(snap: ClusterSnapshot, res: RoundResult) -> None:
            assert dict(res.decision.allocations) == ref.schedule(snap).allocations

        simulate(load_workload("pollux:workload-2", models), TiresiasPolicy(1800.0), parse_cluster("6x4:t4"),
                 models, SimConfig(on_round=check))
