"""The fake backend (backends/fake.py): jobs run by their performance model's clock, through the Backend protocol.

Each expected instant is computed here from the application's model directly (its progress per epoch and
rate per epoch at the placement), not through the fake's own bookkeeping, so a fake that ran jobs at another
pace, forgot progress across a stop or kept no restart window would fail.
"""

from __future__ import annotations

import pytest

from elastisched.backends.base import GenerationEnded, GenerationRecord, JobStarted
from elastisched.backends.fake import FakeBackend
from elastisched.core.cluster import parse_cluster
from elastisched.core.enums import Cause, GenerationOutcome
from elastisched.core.events import Action, ActionKind, LaunchSpec
from elastisched.core.types import NO_ALLOCATION, Allocation, JobSpec
from elastisched.service.profiles import load_models

NODES = parse_cluster("4x8:t4")
MODELS = load_models(None)
APP = MODELS.app("cifar10")
SCALE = 0.02


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _spec(jid: str = "j1", gpus: int = 2, **kw: object) -> JobSpec:
    return JobSpec(jid, 0.0, str(kw.pop("application", "cifar10")), gpus, APP.init_batch_size,
                   work_scale=float(kw.pop("work_scale", SCALE)), **kw)  # type: ignore[arg-type]


def _act(kind: ActionKind, spec: JobSpec, place: tuple[tuple[str, int], ...], gen: int,
         prev: tuple[tuple[str, int], ...] = ()) -> Action:
    launch = LaunchSpec("job.py", (), gen, Cause.LAUNCH, "tok", job=spec)
    return Action(kind, spec.job_id, Allocation(placement=place) if place else NO_ALLOCATION,
                  Allocation(placement=prev) if prev else NO_ALLOCATION, None if kind is ActionKind.SUSPEND else launch)


def _model_seconds(progress_from: float, gpus: int) -> float:
    """Seconds of running (no restart) the model needs from `progress_from` to the end, on one node of t4."""
    bounds = APP.epoch_end * SCALE
    cfg = APP.batch_config(gpus, APP.init_batch_size)
    rates = APP.data_parallel_rates("t4", (gpus,), cfg)[1]
    t, p = 0.0, progress_from
    for e in range(len(bounds) - 1):
        if bounds[e + 1] <= p:
            continue
        t += (bounds[e + 1] - max(p, bounds[e])) / rates[min(e, len(rates) - 1)]
        p = bounds[e + 1]
    return t


def _ends(events: list[object]) -> list[tuple[str, int, str]]:
    return [(e.job_id, e.generation, e.outcome) for e in events if isinstance(e, GenerationEnded)]


def test_a_job_finishes_when_its_model_says() -> None:
    clock = Clock()
    fake = FakeBackend(NODES, MODELS, now=clock)
    spec = _spec()
    fake.apply([_act(ActionKind.LAUNCH, spec, (("t4-0", 2),), 1)])
    started = fake.poll()
    assert [(e.job_id, e.generation) for e in started if isinstance(e, JobStarted)] == [("j1", 1)]
    done_at = 1000.0 + APP.restart_cost + _model_seconds(0.0, 2)
    clock.t = done_at - 0.5
    assert fake.poll() == []
    clock.t = done_at + 0.5
    ends = fake.poll()
    assert _ends(ends) == [("j1", 1, GenerationOutcome.SUCCEEDED)]
    assert ends[0].time == pytest.approx(done_at, abs=1e-6)  # reported at the instant it finished
    assert fake.runs == {}


def test_a_resize_keeps_progress_and_pays_the_restart() -> None:
    clock = Clock()
    fake = FakeBackend(NODES, MODELS, now=clock)
    spec = _spec()
    fake.apply([_act(ActionKind.LAUNCH, spec, (("t4-0", 2),), 1)])
    ran = 40.0
    clock.t = 1000.0 + APP.restart_cost + ran
    fake.apply([_act(ActionKind.RESIZE, spec, (("t4-1", 4),), 2, prev=(("t4-0", 2),))])
    assert _ends(fake.poll()) == [("j1", 1, GenerationOutcome.STOPPED)]
    # progress made in `ran` seconds at 2 GPUs, in the model's first epochs
    full2 = _model_seconds(0.0, 2)
    done = 0.0
    for step in range(1, 10_000):  # bisection-free: the progress whose remaining time is full2 - ran
        p = APP.epoch_end[-1] * SCALE * step / 10_000
        if _model_seconds(p, 2) <= full2 - ran:
            done = p
            break
    expect = clock.t + APP.restart_cost + _model_seconds(done, 4)
    clock.t = expect + 1.0
    ends = fake.poll()
    assert _ends(ends) == [("j1", 2, GenerationOutcome.SUCCEEDED)]
    assert ends[0].time == pytest.approx(expect, rel=2e-3)
    restart_free = 1000.0 + APP.restart_cost + _model_seconds(0.0, 4)
    assert ends[0].time > restart_free  # the resize cost a restart window


def test_suspend_then_resume_continues_from_the_checkpoint_and_cancel_ends_it() -> None:
    clock = Clock()
    fake = FakeBackend(NODES, MODELS, now=clock)
    spec = _spec()
    fake.apply([_act(ActionKind.LAUNCH, spec, (("t4-0", 2),), 1)])
    clock.t += APP.restart_cost + 30.0
    fake.apply([_act(ActionKind.SUSPEND, spec, (), 1, prev=(("t4-0", 2),))])
    assert _ends(fake.poll()) == [("j1", 1, GenerationOutcome.STOPPED)]
    progress = fake.runs["j1"].state.progress
    assert progress > 0
    clock.t += 500.0  # suspended: no progress, no end
    assert fake.poll() == [] and fake.runs["j1"].state.progress == progress
    fake.apply([_act(ActionKind.LAUNCH, spec, (("t4-2", 2),), 2)])
    expect = clock.t + APP.restart_cost + _model_seconds(progress, 2)
    fake.cancel("j1")
    assert _ends(fake.poll())[-1] == ("j1", 2, GenerationOutcome.CANCELLED)
    clock.t = expect + 1
    assert _ends(fake.poll()) == []  # a cancelled job never reports an end of its own


def test_work_done_before_a_resize_reaches_it_finishes_the_new_generation() -> None:
    clock = Clock()
    fake = FakeBackend(NODES, MODELS, now=clock)
    spec = _spec()
    fake.apply([_act(ActionKind.LAUNCH, spec, (("t4-0", 2),), 1)])
    clock.t = 1000.0 + APP.restart_cost + _model_seconds(0.0, 2) + 1.0  # done, not yet polled
    fake.apply([_act(ActionKind.RESIZE, spec, (("t4-1", 4),), 2, prev=(("t4-0", 2),))])
    ends = _ends(fake.poll())
    assert ("j1", 2, GenerationOutcome.SUCCEEDED) in ends  # the daemon's current generation ends the job
    assert not any(o == GenerationOutcome.STOPPED for *_, o in ends)


def test_a_job_without_a_model_runs_its_duration_and_mtbf_failures_are_seeded() -> None:
    clock = Clock()
    fake = FakeBackend(NODES, MODELS, now=clock, restart_s=2.0)
    spec = _spec("d1", gpus=2, application="nothing-profiled", duration=100.0)
    fake.apply([_act(ActionKind.LAUNCH, spec, (("t4-0", 4),), 1)])  # twice the GPUs asked: half the time
    clock.t = 1000.0 + 2.0 + 50.0 - 0.1
    assert _ends(fake.poll()) == []
    clock.t += 0.2
    assert _ends(fake.poll()) == [("d1", 1, GenerationOutcome.SUCCEEDED)]

    def failures(seed: int) -> list[float]:
        clk = Clock()
        f = FakeBackend(NODES, MODELS, now=clk, mtbf_s=50.0, seed=seed)
        f.apply([_act(ActionKind.LAUNCH, _spec(f"m{k}", work_scale=1.0), (("t4-0", 1),), 1) for k in range(20)])
        clk.t += 10_000.0
        return sorted(e.time for e in f.poll() if isinstance(e, GenerationEnded) and e.outcome == "failed")

    first = failures(3)
    assert len(first) == 20 and first == failures(3) and first != failures(4)
    assert 10.0 < (sum(first) / 20 - 1000.0) < 150.0  # exponential with mean 50 s (20 draws)


def test_nothing_survives_a_restart_and_loaned_servers_have_their_type() -> None:
    fake = FakeBackend(NODES, MODELS)
    alloc = Allocation(placement=(("t4-0", 1),))
    keep = GenerationRecord("a", 3, "tok", alloc, "RUNNING", (), (), True)
    drop = GenerationRecord("b", 1, "tok", alloc, "STOPPING", (), (), False)
    assert [(e.job_id, e.outcome) for e in fake.recover([keep, drop])] == [
        ("a", GenerationOutcome.LOST), ("b", GenerationOutcome.STOPPED)]
    assert fake._node_types(Allocation(placement=(("loan-v100-3", 8), ("t4-1", 1)))) == {"loan-v100-3": "v100",
                                                                                           "t4-1": "t4"}
    with pytest.raises(ValueError, match="mtbf_s"):
        FakeBackend(NODES, MODELS, mtbf_s=0.0)
