"""The engine loop in-process with a recording backend: persist-before-act, reclaim, cancel, admin resize."""

from __future__ import annotations

import time

import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.core.events import Action, ActionKind, JobFinished
from elastisched.service.daemon import Service
from elastisched.service.store import Store
from fake_backend import InstantBackend


class RecordingBackend(InstantBackend):
    """Records actions, checks they were persisted first (decision, action, planned generation) and reports
    workers started, as a backend would; like every backend it never writes the store."""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self.applied: list[Action] = []

    def check(self, action: Action) -> None:
        logged = self.store.events(kinds=["action"])
        assert any(e["job_id"] == action.job_id and e["data"]["kind"] == action.kind.value for e in logged), action
        self.applied.append(action)
        if action.kind in (ActionKind.LAUNCH, ActionKind.RESIZE):
            assert action.launch is not None
            gen = self.store.generations(action.job_id)[-1]
            assert (gen["generation"], gen["state"], gen["token"]) == (action.launch.generation, "PLANNED",
                                                                       action.launch.token)  # persisted first


def _svc(policy: str = "fifo") -> tuple[Service, Store, RecordingBackend]:
    store = Store("sqlite://")
    backend = RecordingBackend(store)
    svc = Service(store, parse_cluster("1x2:cpu"), backend, policy, tick_s=0.01)
    svc.min_round_gap_s = 0.0
    return svc, store, backend


def _submit(store: Store, gpus: int = 1, app: str | None = "cifar10") -> str:
    spec = {"num_gpus": gpus, "min_gpus": gpus, "max_gpus": gpus, "batch_size": 128, "application": app}
    return str(store.create_job(name=None, script="/x.py", args=[], spec=spec)["id"])


def test_fifo_round_persists_decision_then_launches_and_gives_reasons() -> None:
    svc, store, be = _svc()
    ids = [_submit(store) for _ in range(3)]
    svc.step()
    assert [(a.kind, a.job_id) for a in be.applied] == [(ActionKind.LAUNCH, ids[0]), (ActionKind.LAUNCH, ids[1])]
    assert store.get_job(ids[2])["reason"] == "Resources"
    assert store.events(kinds=["decision"])[0]["data"]["policy"] == "fifo"
    svc.step()
    assert store.get_job(ids[0])["state"] == "RUNNING"
    be.events.append(JobFinished(time.time(), ids[0]))
    svc._dirty = True
    svc.step()
    assert store.get_job(ids[0])["state"] == "SUCCEEDED"
    assert be.applied[-1].job_id == ids[2] and be.applied[-1].kind is ActionKind.LAUNCH


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "srtf"])
def test_reclaim_vacates_the_returned_server_for_any_policy(policy: str) -> None:
    svc, store, be = _svc(policy)
    ids = [_submit(store, app=None if policy == "fifo" else "cifar10") for _ in range(4)]
    svc.step()
    assert (svc.engine.ctx.perf is None) == (policy == "fifo")  # models are loaded on the first profiled job
    store.add_loans([("loan-cpu-0", "cpu", 2)])
    svc.wake()
    svc.step()
    on_loan = [j for j in ids if any(n == "loan-cpu-0" for n, _ in store.get_job(j)["placement"])]
    assert len(on_loan) == 2
    store.add_reclaim(1, time.time() + 30)
    svc.step()
    suspended = [a.job_id for a in be.applied if a.kind is ActionKind.SUSPEND]
    assert sorted(suspended) == sorted(on_loan)
    assert all(store.get_job(j)["state"] == "SUSPENDED" for j in on_loan)
    assert store.list_loans()[0]["state"] == "RETURNED"
    assert store.list_reclaims()[0]["nodes"] == ["loan-cpu-0"]
    assert [n.node_id for n in svc.nodes()] == ["cpu-0"]


def test_cancel_and_admin_resize() -> None:
    svc, store, be = _svc()
    a, b = _submit(store), _submit(store)
    svc.step()
    store.request_cancel(b)
    store.request_resize(a, 2)
    svc.step()
    assert be.cancelled == [b] and store.get_job(b)["state"] == "CANCELLED"
    resize = [x for x in be.applied if x.kind is ActionKind.RESIZE]
    assert len(resize) == 1 and resize[0].allocation.gpus == 2 and resize[0].job_id == a
    svc.step()  # fifo keeps the pinned size: no action undoes the resize
    assert [x.kind for x in be.applied].count(ActionKind.RESIZE) == 1
    store.request_resize(a, 3)  # does not fit on 2 slots: it waits, with a reason
    svc.step()
    assert "ResizePending" in store.get_job(a)["reason"]


def test_user_suspend_holds_the_job_until_resume() -> None:
    svc, store, be = _svc()
    a, b = _submit(store), _submit(store)
    svc.step()
    svc.step()
    store.request_hold(a, True)
    svc.step()
    assert [(x.kind, x.job_id) for x in be.applied if x.kind is ActionKind.SUSPEND] == [(ActionKind.SUSPEND, a)]
    row = store.get_job(a)
    assert row["state"] == "SUSPENDED" and row["reason"] == "Held" and row["placement"] == []
    svc.wake()
    svc.step()
    svc.step()  # a free slot, but no policy sees a held job
    assert [x.job_id for x in be.applied if x.kind is ActionKind.LAUNCH] == [a, b]
    store.request_hold(a, False)
    svc.wake()
    svc.step()
    assert [x.job_id for x in be.applied if x.kind is ActionKind.LAUNCH] == [a, b, a]


def test_held_time_is_not_attained_service() -> None:
    """A job suspended by the user for 950 s resumes with the service it had, not 950 GPU-seconds more.
    Service counts from the launch action (t = 0), as in the simulator: the engine's JobState rule."""
    from elastisched.core.clock import SimClock

    svc, store, _ = _svc()
    clock = SimClock()
    svc.clock = clock  # type: ignore[assignment]
    a = _submit(store)
    svc.step()  # launched at t = 0
    clock.advance_to(10.0)
    svc.wake()
    svc.step()
    clock.advance_to(50.0)
    store.request_hold(a, True)
    svc.wake()
    svc.step()  # held at t = 50 after 50 s on 1 GPU
    clock.advance_to(1000.0)
    store.request_hold(a, False)
    svc.wake()
    svc.step()
    view = svc.snapshot(svc.nodes()).jobs[a]
    assert view.attained_service == pytest.approx(50.0, abs=1e-6)
    assert view.run_time == pytest.approx(50.0, abs=1e-6)


def test_one_unprofiled_job_does_not_take_the_models_away_from_the_others() -> None:
    """Each view carries its own model (JobView.model): None only for the job whose application has none."""
    svc, store, _ = _svc("fifo")  # (policies read JobView.model with a per-job fallback: the policies' work)
    profiled, unprofiled = _submit(store), _submit(store, app=None)
    svc.step()
    snap = svc.snapshot(svc.nodes())
    assert snap.jobs[profiled].model is not None and snap.jobs[profiled].model.name == "cifar10"
    assert snap.jobs[unprofiled].model is None
    assert svc.engine.ctx.perf is not None  # the registry stays available to the policy
    assert snap.jobs[profiled].total_work > 1.0 and snap.jobs[unprofiled].total_work == 1.0
