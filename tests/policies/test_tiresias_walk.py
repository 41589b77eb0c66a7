"""Tiresias's O(changes) decision (`KeptAllocations` with released jobs, demotions found by the walk itself)
against a plain reference: the artifact's rules written the simple way (demote every running job of queue 0
whose service reached the threshold, in running order; then walk both queues into a plain dict). The two run
in lockstep on real simulations with many preemptions, demotions and loans, round by round."""

from __future__ import annotations

import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, KeptAllocations, PendingReason
from elastisched.engine.loop import RoundResult
from elastisched.loaning import LoanPlan
from elastisched.models import PerfModels
from elastisched.policies._common import can_ever_fit, fits
from elastisched.policies.tiresias import TiresiasPolicy
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


def _lockstep(workload: str, cluster: str, threshold: float, loans: LoanPlan | None = None) -> dict[str, int]:
    models = PerfModels.load()
    ref = ReferenceTiresias(threshold)
    seen = {"rounds": 0, "released": 0, "demoted": 0}
    policy = TiresiasPolicy(threshold)

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


def test_reference_is_not_trivially_equal() -> None:
    """The lockstep check can fail: a reference with another threshold disagrees within the run."""
    with pytest.raises(AssertionError):
        models = PerfModels.load()
        ref = ReferenceTiresias(900.0)

        def check(snap: ClusterSnapshot, res: RoundResult) -> None:
            assert dict(res.decision.allocations) == ref.schedule(snap).allocations

        simulate(load_workload("pollux:workload-2", models), TiresiasPolicy(1800.0), parse_cluster("6x4:t4"),
                 models, SimConfig(on_round=check))
