"""`Policy.idle_without_pending` (issue 22): the simulator skips consulting a policy that promised a round with
no job pending decides nothing, and every output is what the consulted rounds gave."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from elastisched.core.cluster import parse_cluster
from elastisched.engine.conformance import run as conformance
from elastisched.models import PerfModels
from elastisched.policies.base import PolicyContext
from elastisched.policies.fifo import FifoPolicy
from elastisched.sim import SimConfig, Simulator
from elastisched.workloads import load_workload
from elastisched.workloads.schema import Workload


class _AlwaysAsked(FifoPolicy):
    idle_without_pending: ClassVar[bool] = False


class _Counting(FifoPolicy):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def schedule(self, snap, ctx: PolicyContext):  # type: ignore[no-untyped-def]
        self.asked += 1
        return super().schedule(snap, ctx)


def test_skipped_rounds_change_no_output(models: PerfModels) -> None:
    wl = load_workload("philly:sample=300,seed=2", models)
    runs = {}
    for name, pol in (("asked", _AlwaysAsked()), ("skipping", _Counting())):
        sim = Simulator(wl, pol, parse_cluster("8x4:t4"), models, SimConfig(seed=2))
        runs[name] = (sim, sim.run())
    (asked, r1), (skipping, r2) = runs["asked"], runs["skipping"]
    assert r1.job_rows.to_csv() == r2.job_rows.to_csv()
    assert r1.timeline_rows.to_csv() == r2.timeline_rows.to_csv()
    assert r1.summary["rounds"] == r2.summary["rounds"] == len(asked.latencies)
    assert asked.rounds_skipped == 0 and skipping.rounds_skipped > 0
    assert skipping.policy.asked == len(skipping.latencies) == r2.summary["rounds"] - skipping.rounds_skipped


def test_conformance_catches_a_broken_promise(models: PerfModels) -> None:
    """A policy that promises idle rounds but preempts a running job in one fails the conformance check."""

    class _Liar(FifoPolicy):
        def schedule(self, snap, ctx: PolicyContext):  # type: ignore[no-untyped-def]
            from elastisched.core.types import Decision

            running = snap.running_jobs()
            return Decision({j: v.allocation for j, v in list(running.items())[1:]})

    assert not conformance(FifoPolicy, models)
    failures = conformance(_Liar, models)
    assert any(f.invariant.startswith("idle_without_pending") for f in failures)


class _NeverBlocked(FifoPolicy):
    idle_while_blocked: ClassVar[bool] = False


def test_rounds_skipped_behind_a_blocked_head_change_no_output(models: PerfModels) -> None:
    """`Policy.idle_while_blocked`: behind a job waiting for GPUs, FIFO is not asked again until GPUs are freed;
    Philly arrivals packed 20x closer on a small cluster keep a queue, with jobs of many sizes, failures (a
    pending and a running job end) and an admin resize among them: the same jobs, timeline and round count as a
    run that asks it every time, with many rounds skipped for the promise."""
    wl = load_workload("philly:sample=400,seed=5", models)
    wl = Workload(wl.name, tuple(dataclasses.replace(j, submit_time=j.submit_time / 20) for j in wl.jobs),
                  wl.source, wl.digest)
    ids = [j.job_id for j in wl.jobs]
    scripted = {"failures": ((wl.jobs[50].submit_time + 1.0, ids[50]), (wl.jobs[120].submit_time + 600.0, ids[120])),
                "admin_resizes": ((wl.jobs[200].submit_time + 5.0, ids[200], 1),)}
    runs = {}
    for name, pol in (("asked", _NeverBlocked()), ("skipping", FifoPolicy())):
        sim = Simulator(wl, pol, parse_cluster("4x4:t4"), models, SimConfig(seed=5, **scripted))  # type: ignore[arg-type]
        runs[name] = (sim, sim.run())
    (asked, r1), (skipping, r2) = runs["asked"], runs["skipping"]
    assert r1.job_rows.to_csv() == r2.job_rows.to_csv()
    assert r1.timeline_rows.to_csv() == r2.timeline_rows.to_csv()
    assert r1.summary["rounds"] == r2.summary["rounds"]
    assert skipping.rounds_skipped > asked.rounds_skipped + r1.summary["rounds"] // 10


class _Backfilling(FifoPolicy):
    """FIFO with backfilling (jobs behind a blocked head start when they fit), which breaks the promise it keeps
    declaring: an arrival that fits starts at once, where the simulator would have skipped the round."""

    def schedule(self, snap, ctx: PolicyContext):  # type: ignore[no-untyped-def]
        from elastisched.core.types import Allocation, Decision, KeptAllocations
        from elastisched.policies._common import fits

        d = super().schedule(snap, ctx)
        free = snap.free_by_type()
        added = dict(d.allocations.added) if isinstance(d.allocations, KeptAllocations) else {}
        for a in added.values():
            free[a.gpu_type] -= a.num_gpus
        for jid, job in snap.pending_jobs().items():
            t = fits(free, job.spec.gpu_types, job.spec.num_gpus) if jid not in d.reasons and jid not in added else None
            if t is not None:
                added[jid] = Allocation(num_gpus=job.spec.num_gpus, gpu_type=t)
                free[t] -= job.spec.num_gpus
        return Decision(KeptAllocations(snap.running_jobs(), added), d.reasons)


def test_conformance_holds_fifo_to_idle_while_blocked(models: PerfModels) -> None:
    """`elastisched policies check` puts the promise to the test: the round after a blocked one, with new jobs
    arrived, must change nothing. FIFO keeps it; a backfilling FIFO that declares it does not (and without
    the declaration, nothing is asked of it)."""
    assert not conformance(FifoPolicy, models)
    failures = conformance(_Backfilling, models)
    assert [f.invariant for f in failures if f.invariant.startswith("idle_while_blocked")], failures

    class _HonestBackfilling(_Backfilling):
        idle_while_blocked: ClassVar[bool] = False

    assert not conformance(_HonestBackfilling, models)
