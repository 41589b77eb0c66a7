"""`SimConfig.resize_cost` (in-memory resize priced apart from a restart) and `JobView.samples_done`.

Both are additive: with the defaults (resize_cost None) every result is the one of a single restart cost.
"""

from __future__ import annotations

import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobSpec
from elastisched.engine.jobstate import keeps_gpus as _keeps_gpus
from elastisched.models import PerfModels
from elastisched.policies.base import Policy, PolicyContext, make_policy
from elastisched.sim import SimConfig, simulate
from elastisched.sim.simulator import Simulator
from elastisched.workloads.schema import Workload


def wl(*jobs: JobSpec) -> Workload:
    return Workload("hand", tuple(jobs), "test", "0")


class _Plan(Policy):
    """Runs job "a" on a fixed allocation per time window: `plan` = ((from_time, placement), ...)."""

    name = "plan"
    interval = 10.0
    elastic = True

    def __init__(self, plan: tuple[tuple[float, tuple[tuple[str, int], ...]], ...]) -> None:
        self.plan = plan

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        if "a" not in snap.jobs:
            return Decision({})
        place = [p for t, p in self.plan if t <= snap.now][-1]
        cur = snap.jobs["a"].allocation
        if dict(cur.placement) == dict(place):
            return Decision({"a": cur})
        return Decision({"a": Allocation(place, batch_size=256 * sum(g for _, g in place))})


def _run(models: PerfModels, plan: tuple[tuple[float, tuple[tuple[str, int], ...]], ...],
         **cfg: float | None) -> Simulator:
    spec = JobSpec("a", 0.0, "cifar10", 2, 512, work_scale=0.05)
    sim = Simulator(wl(spec), _Plan(plan), parse_cluster("2x4:t4"), models, SimConfig(**cfg, keep_finished=True))  # type: ignore[arg-type]
    sim.run()
    return sim


def test_keeps_gpus() -> None:
    a = Allocation((("n0", 2),))
    assert _keeps_gpus(a, Allocation((("n0", 4),)))
    assert _keeps_gpus(a, Allocation((("n0", 1), ("n1", 4))))
    assert not _keeps_gpus(a, Allocation((("n1", 2),)))  # moved: a restart
    assert not _keeps_gpus(Allocation(()), a)  # launch / resume: a restart


def test_in_place_resize_pays_resize_cost(models: PerfModels) -> None:
    grow = ((0.0, (("t4-0", 2),)), (100.0, (("t4-0", 4),)))
    base = _run(models, grow)  # default: the resize costs the full 30 s restart
    cheap = _run(models, grow, resize_cost=1.0)
    same = _run(models, grow, resize_cost=30.0)
    end = {k: s.done[0].end_time for k, s in (("base", base), ("cheap", cheap), ("same", same))}
    assert end["same"] == end["base"]  # resize_cost = restart cost: identical
    assert end["base"] - end["cheap"] == pytest.approx(29.0, rel=1e-6)  # 30 s restart vs 1 s resize
    assert base.done[0].launches == cheap.done[0].launches == 2


def test_move_and_launch_still_pay_restart_cost(models: PerfModels) -> None:
    move = ((0.0, (("t4-0", 2),)), (100.0, (("t4-1", 2),)))
    a = _run(models, move)
    b = _run(models, move, resize_cost=1.0)
    assert a.done[0].end_time == b.done[0].end_time  # no GPU kept: a restart either way
    one = ((0.0, (("t4-0", 2),)),)
    assert _run(models, one).done[0].end_time == _run(models, one, resize_cost=0.0).done[0].end_time


def test_resize_during_launch_does_not_cut_the_launch_short(models: PerfModels) -> None:
    early = ((0.0, (("t4-0", 2),)), (10.0, (("t4-0", 4),)))
    s = _run(models, early, resize_cost=1.0)
    # the job launched at 0 s is still starting at 10 s: it starts work at 30 s on 4 GPUs, not at 11 s
    solo = _run(models, ((0.0, (("t4-0", 4),)),))
    assert s.done[0].end_time == pytest.approx(solo.done[0].end_time, rel=1e-9)


def test_samples_done_counts_processed_samples(models: PerfModels) -> None:
    spec = JobSpec("a", 0.0, "cifar10", 4, 512, min_gpus=4, max_gpus=4, work_scale=0.05)
    sim = Simulator(wl(spec), make_policy("fifo"), parse_cluster("1x4:t4"), models, SimConfig(keep_finished=True))
    sim.run()
    job = sim.done[0]
    app = models.app("cifar10")
    tput = app.throughput("t4", (4,), app.batch_config(4, 512))
    assert job.end_time is not None
    assert job.samples == pytest.approx(tput * (job.end_time - 30.0), rel=1e-9)  # restart time excluded
    assert job.make_view(job.end_time).samples_done == job.samples


def test_samples_done_in_views_during_the_run(models: PerfModels) -> None:
    seen: list[tuple[float, float, float]] = []

    class Watch(Policy):
        name = "watch"
        interval = 20.0
        needs_progress = True

        def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
            if "a" not in snap.jobs:
                return Decision({})
            v = snap.jobs["a"]
            seen.append((snap.now, v.samples_done, v.progress))
            return Decision({"a": v.allocation if v.gpus else Allocation((("t4-0", 2),), batch_size=512)})

    spec = JobSpec("a", 0.0, "cifar10", 2, 512, work_scale=0.05)
    simulate(wl(spec), Watch(), parse_cluster("1x4:t4"), models, SimConfig())
    app = models.app("cifar10")
    tput = app.throughput("t4", (2,), app.batch_config(2, 512))
    for now, samples, _ in seen:
        assert samples == pytest.approx(tput * max(0.0, now - 30.0), rel=1e-9)
    assert [s for _, s, _ in seen] == sorted(s for _, s, _ in seen) and seen[-1][1] > 0


def test_defaults_leave_results_unchanged(models: PerfModels) -> None:
    from elastisched.workloads import load_workload

    w = load_workload("synthetic:num_jobs=30,rate=30,seed=5", models)
    a = simulate(w, make_policy("optimus"), parse_cluster("4x4:t4"), models, SimConfig(seed=2))
    b = simulate(w, make_policy("optimus"), parse_cluster("4x4:t4"), models, SimConfig(seed=2, resize_cost=None))
    assert a.jobs.equals(b.jobs)
    c = simulate(w, make_policy("optimus"), parse_cluster("4x4:t4"), models, SimConfig(seed=2, resize_cost=0.0))
    assert not c.jobs.equals(a.jobs)  # optimus resizes in place, so the knob does reach it
