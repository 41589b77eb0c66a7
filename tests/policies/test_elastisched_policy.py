"""The `elastisched` policy: shortest predicted remaining time first, honest about what jobs declare, batch in the
profiled range, loans shrunk before evicted, servers expected back left unfilled, state that survives a restart."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.core.enums import LengthKnowledge
from elastisched.core.events import ActionKind
from elastisched.core.types import (
    Allocation,
    ClusterSnapshot,
    JobPhase,
    JobSpec,
    JobView,
    NodeView,
    PendingReason,
    Pool,
)
from elastisched.loaning.forecast import DAY
from elastisched.loaning.timeline import LoanPlan
from elastisched.models import PerfModels
from elastisched.policies.base import PolicyContext, make_policy
from elastisched.sim import SimConfig, simulate
from elastisched.sim.length_estimate import LengthEstimate
from elastisched.workloads import load_workload
from elastisched.workloads.schema import Workload

MODELS = PerfModels.load()


def _wl(*jobs: JobSpec) -> Workload:
    return Workload("hand", tuple(jobs), "test", "0")


def _rigid(jid: str, scale: float, t: float = 0.0, gpus: int = 1) -> JobSpec:
    return JobSpec(jid, t, "cifar10", gpus, 128, min_gpus=gpus, max_gpus=gpus, work_scale=scale, category="rigid")


def test_registered_and_honest() -> None:
    p = make_policy("elastisched")
    assert p.elastic and p.batch_in_place and p.knows_length is LengthKnowledge.DECLARED
    with pytest.raises(ValueError, match="preempt"):
        make_policy("elastisched", preempt=0.5)
    with pytest.raises(ValueError, match="value='x'"):
        make_policy("elastisched", value="x")


def test_the_shorter_declared_job_runs_first_after_the_minimum_run() -> None:
    long, short = _rigid("a-long", 0.5), _rigid("b-short", 0.05, t=1.0)
    one = parse_cluster("1x1:t4")
    r = simulate(_wl(long, short), make_policy("elastisched"), one, MODELS, SimConfig()).jobs.set_index("job")
    # a-long started alone at t=0, is protected for min_run (1,200 s), then the 10x shorter job preempts it
    assert r.loc["b-short", "end"] < r.loc["a-long", "end"] and r.loc["a-long", "preemptions"] == 1
    assert r.loc["b-short", "start"] == pytest.approx(1200.0, abs=61.0)
    eager = simulate(_wl(long, short), make_policy("elastisched", min_run=0.0), one, MODELS, SimConfig())
    assert eager.jobs.set_index("job").loc["b-short", "start"] < 61.0
    # without declared lengths the policy cannot tell them apart: both finish, at most one preemption on a guess
    hidden = simulate(_wl(long, short), make_policy("elastisched"), one, MODELS,
                      SimConfig(length_estimate=LengthEstimate.parse("none")))
    assert hidden.summary["n_finished"] == 2 and hidden.summary["preemptions"] <= 1


def test_batches_stay_inside_the_profiled_range_and_change_in_place() -> None:
    wl = load_workload("pollux:workload-6", MODELS)
    wl = Workload(wl.name, wl.jobs[:40], wl.source, wl.digest)
    seen: list[tuple[str, int]] = []
    in_place = []

    def watch(snap: ClusterSnapshot, res: Any) -> None:
        for a in res.actions:
            if a.allocation.placement:
                seen.append((snap.jobs[a.job_id].spec.application, a.allocation.batch_size))
            if a.kind is ActionKind.RESIZE and a.previous.same_gpus(a.allocation):
                in_place.append(a.job_id)

    r = simulate(wl, make_policy("elastisched"), parse_cluster("4x4:t4"), MODELS, SimConfig(on_round=watch))
    assert r.summary["n_finished"] == 40 and seen and in_place
    for app, batch in seen:
        a = MODELS.app(app)
        assert a.init_batch_size <= batch <= a.max_batch_size, (app, batch)
    assert r.summary["restarts"] < 40 * 6  # the anti-thrash rules hold restarts to a few per job


def _nodes() -> tuple[NodeView, ...]:
    return (NodeView("t0", "t4", 4, Pool.TRAIN, 0), NodeView("l0", "t4", 4, Pool.LOANABLE, 1),
            NodeView("l1", "t4", 4, Pool.LOANABLE, 2))


def _elastic(jid: str, placement: tuple[tuple[str, int], ...], lo: int = 1, hi: int = 8) -> JobView:
    spec = JobSpec(jid, 0.0, "cifar10", hi, 512, min_gpus=lo, max_gpus=hi, elastic=True)
    app = MODELS.app("cifar10")
    return JobView(spec, JobPhase.RUNNING, Allocation(placement, batch_size=512), progress=1.0,
                   total_work=app.total_work, start_time=0.0, model=app, declared_work=app.total_work,
                   attained_service=1000.0, updated_at=5000.0)


def test_a_reclaim_shrinks_an_elastic_job_instead_of_evicting_one() -> None:
    """Two loaned servers, one to give back: l0 holds the extras of a job based on t0, l1 the whole of another
    job. Returning l0 stops no job: the first job shrinks to its training server and keeps running."""
    pol = make_policy("elastisched")
    a = _elastic("a", (("t0", 4), ("l0", 4)))
    b = _elastic("b", (("l1", 2),), lo=2, hi=2)
    snap = ClusterSnapshot(5000.0, _nodes(), {"a": a, "b": b}, reclaim_demand=1)
    d = pol.schedule(snap, PolicyContext(perf=MODELS))
    assert d.reclaim == ("l0",)
    kept = dict(d.allocations["a"].placement)
    assert kept.get("t0") == 4 and "l0" not in kept  # shrunk to its training server (it may grow on l1's free GPUs)
    assert d.allocations["b"].placement == (("l1", 2),)


def test_servers_expected_back_take_no_new_gpus() -> None:
    """After two days in which the inference side took both loaned servers back every afternoon, a job that
    arrives in the morning does not start on them, though it would grow there."""
    pol = make_policy("elastisched", loan_horizon=6 * 3600.0)
    busy = _elastic("busy", (("t0", 4),), lo=4, hi=4)
    for t in np.arange(0.0, 2 * DAY, 1800.0):
        hour = (t % DAY) / 3600
        lent = _nodes() if not 12 <= hour < 18 else _nodes()[:1]
        pol.schedule(ClusterSnapshot(float(t), lent, {"busy": busy}), PolicyContext(perf=MODELS))
    new = _elastic("new", ())
    new = JobView(new.spec, JobPhase.PENDING, Allocation(), total_work=new.total_work, model=new.model,
                  declared_work=new.declared_work)
    d = pol.schedule(ClusterSnapshot(2 * DAY + 9 * 3600, _nodes(), {"busy": busy, "new": new}),
                     PolicyContext(perf=MODELS))
    assert "new" not in d.allocations and d.reasons["new"] in (PendingReason.RESOURCES, PendingReason.NOT_SELECTED)
    fresh = make_policy("elastisched", loan_horizon=6 * 3600.0)  # no history: the loans are used
    d2 = fresh.schedule(ClusterSnapshot(2 * DAY + 9 * 3600, _nodes(), {"busy": busy, "new": new}),
                        PolicyContext(perf=MODELS))
    assert {n for n, _ in d2.allocations["new"].placement} <= {"l0", "l1"}


def test_state_round_trips_and_learns_lengths() -> None:
    wl = load_workload("pollux:workload-6", MODELS)
    wl = Workload(wl.name, wl.jobs[:20], wl.source, wl.digest)
    pol = make_policy("elastisched")
    simulate(wl, pol, parse_cluster("4x4:t4"), MODELS, SimConfig(loans=LoanPlan(((0.0, 1), (3600.0, 0)))))
    state = json.loads(json.dumps(pol.state_dict()))
    assert len(state["belief"]["samples"]) == 20 and state["attained"] == {} == state["moved"]  # active jobs only
    again = make_policy("elastisched")
    again.load_state_dict(state)
    assert again.state_dict() == state
    assert again.belief.params() != make_policy("elastisched").belief.params()  # what it learned came back
