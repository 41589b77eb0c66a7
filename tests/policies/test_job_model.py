"""Per-job performance models in the policies (issue 10 part 3): `JobView.model` first, then `ctx.perf`, then
the policy's model-free fallback for that job alone; policies without a fallback raise a clear ConfigError."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from elastisched.core.errors import ConfigError
from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, NodeView
from elastisched.models import PerfModels
from elastisched.policies._common import job_model, require_model
from elastisched.policies.base import PolicyContext, make_policy
from elastisched.policies.lyra.policy import DEFAULT_DURATION, LyraPolicy

NODES = (NodeView("a", "t4", 4, index=0), NodeView("b", "t4", 4, index=1))


def _view(jid: str, app: str, gpus: int = 1, model: object = None, elastic: bool = False,
          duration: float | None = None, progress: float = 0.0) -> JobView:
    spec = JobSpec(jid, 0.0, app, gpus, 128 * gpus, min_gpus=1 if elastic else gpus,
                   max_gpus=4 * gpus if elastic else gpus, elastic=elastic, duration=duration)
    return JobView(spec, JobPhase.PENDING, Allocation(), progress=progress, total_work=1000.0, model=model)


def _snap(*views: JobView) -> ClusterSnapshot:
    return ClusterSnapshot(10.0, NODES, {v.job_id: v for v in views})


def test_job_model_prefers_the_view_then_ctx_then_none(models: PerfModels) -> None:
    own = models.app("bert")
    assert job_model(_view("j", "cifar10", model=own), PolicyContext(perf=models)) is own
    assert job_model(_view("j", "cifar10"), PolicyContext(perf=models)) is models.app("cifar10")
    assert job_model(_view("j", "cifar10", model=own), PolicyContext(perf=None)) is own
    assert job_model(_view("j", "mystery"), PolicyContext(perf=models)) is None
    assert job_model(_view("j", "cifar10"), PolicyContext(perf=None)) is None


@pytest.mark.parametrize("name", ["srtf", "optimus"])
@pytest.mark.parametrize("perf", [True, False])
def test_policy_without_fallback_names_job_and_application(name: str, perf: bool, models: PerfModels) -> None:
    """srtf.py:28 and optimus.py:32 used to `assert ctx.perf is not None`; a job without a model is now a
    ConfigError naming the job and its application (with or without models for the other jobs)."""
    snap = _snap(_view("ok", "cifar10", model=models.app("cifar10")), _view("lost-7", "mystery"))
    pol = make_policy(name)
    with pytest.raises(ConfigError, match=r"^application='mystery': job lost-7: policy " + name) as e:
        pol.schedule(snap, PolicyContext(perf=models if perf else None))
    assert e.value.field == "application" and e.value.value == "mystery"
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["srtf", "optimus"])
def test_policy_without_fallback_runs_on_view_models_alone(name: str, models: PerfModels) -> None:
    """The bodies fill `JobView.model`: a policy needs no `ctx.perf` then, and decides as it did with it."""
    views = [_view(f"j{i}", app, 2) for i, app in enumerate(("cifar10", "bert", "ncf", "yolov3", "imagenet"))]
    with_ctx = make_policy(name).schedule(_snap(*views), PolicyContext(perf=models))
    own = [dataclasses.replace(v, model=models.app(v.spec.application)) for v in views]
    with_views = make_policy(name).schedule(_snap(*own), PolicyContext(perf=None))
    assert dict(with_ctx.allocations) == dict(with_views.allocations)
    assert dict(with_ctx.reasons) == dict(with_views.reasons)


def test_srtf_reads_the_jobs_own_model(models: PerfModels) -> None:
    """Two cifar10 jobs, one GPU free: the one whose own model says it is faster goes first, although
    `ctx.perf` would rank them equal (the earlier submission wins ties)."""
    nodes = (NodeView("a", "t4", 1, index=0),)
    first = _view("first", "cifar10")
    second = _view("second", "cifar10", model=models.app("ncf"))
    assert require_model(second, PolicyContext(perf=models), "srtf") is models.app("ncf")
    pol = make_policy("srtf")
    t_first = pol.remaining_time(first, PolicyContext(perf=models), 1)
    t_second = pol.remaining_time(second, PolicyContext(perf=models), 1)
    winner = "second" if t_second < t_first else "first"
    d = pol.schedule(ClusterSnapshot(10.0, nodes, {"first": first, "second": second}), PolicyContext(perf=models))
    assert list(d.allocations) == [winner]
    assert t_second != t_first  # the two models really differ


def test_lyra_falls_back_for_the_unprofiled_job_alone(models: PerfModels) -> None:
    """One unprofiled application switches only its own job to the linear model (daemon.py:416 used to
    switch every job): the profiled job is still predicted from its profile."""
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0))
    known = _view("known", "cifar10", elastic=True)
    lost = _view("lost", "mystery", elastic=True, duration=1200.0, progress=250.0)
    pol = LyraPolicy()
    t_known = pol._times(ctx, known, "t4", 1, 3, 4)
    t_lost = pol._times(ctx, lost, "t4", 1, 3, 4)
    assert t_lost == pytest.approx([1200.0 * 0.75 / n for n in (1, 2, 3, 4)])  # linear in its duration
    app = models.app("cifar10")
    assert t_known[0] == pytest.approx(1000.0 / app.goodput("t4", (1,), app.batch_config(1, 128), 0))
    d = pol.schedule(_snap(known, lost), ctx)
    assert {"known", "lost"} <= set(d.allocations)  # both run; neither stops the round
    assert not d.reasons


def test_lyra_fallback_without_duration_uses_an_hour() -> None:
    ctx = PolicyContext(perf=None)
    t = LyraPolicy()._times(ctx, _view("j", "mystery", gpus=2), "t4", 2, 0, 4)
    assert t[0] == pytest.approx(DEFAULT_DURATION * 2 / 2)
