"""The live service passes a job's life to the policy through the engine (`Engine.submitted` / `ended`):
ONES's saved state (what the daemon persists in the store) holds only the jobs still active, a cancelled job
leaves it as a finished one does, and a restart on the same store neither double-counts nor resurrects.

In-process service, real SQLite store (a file: the restart reopens it), manual clock and an instant backend
whose workers start at once and finish when the test says.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from elastisched.core.clock import SimClock
from elastisched.core.cluster import parse_cluster
from elastisched.core.events import JobFinished
from elastisched.core.types import JobId, JobSpec
from elastisched.policies.base import make_policy
from elastisched.policies.tiresias.policy import TiresiasPolicy
from elastisched.service.daemon import Service
from elastisched.service.store import Store
from fake_backend import InstantBackend

NODES = parse_cluster("2x4:a100")


def _service(store: Store, policy: Any = "ones") -> tuple[Service, InstantBackend, SimClock]:
    clock = SimClock()
    be = InstantBackend()
    svc = Service(store, NODES, be, policy, tick_s=0.0, clock=clock)
    svc.min_round_gap_s = 0.0
    return svc, be, clock


def _submit(store: Store) -> str:
    spec = {"num_gpus": 1, "min_gpus": 1, "max_gpus": 1, "batch_size": 128, "application": "cifar10"}
    return str(store.create_job(name=None, script="/x.py", args=[], spec=spec)["id"])


def _steps(svc: Service, clock: SimClock, n: int = 2) -> None:
    for _ in range(n):
        clock.advance_to(clock.now() + 5.0)
        svc.wake()
        svc.step()


def _state_ids(store: Store) -> set[str]:
    """Every job id in ONES's saved state: genome columns, deployed slots, per-job state, throughput log."""
    st = store.get_meta("policy_state:ones")
    assert st is not None, "the daemon saved no ONES state"
    return set(st["ids"]) | set(st["slots"]) | set(st["jobs"]) | set(st["thr"]["obs"])


def _active(store: Store) -> set[str]:
    return {str(r["id"]) for r in store.active_jobs()}


def _finish_running(store: Store, be: InstantBackend, k: int) -> list[str]:
    running = [str(r["id"]) for r in store.list_jobs(["RUNNING"])][:k]
    be.events.extend(JobFinished(time.time(), j) for j in running)
    return running


def test_ones_saved_state_holds_only_the_active_jobs(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'svc.db'}")
    svc, be, clock = _service(store)
    ids = [_submit(store) for _ in range(50)]
    _steps(svc, clock)
    assert _state_ids(store) == _active(store) == set(ids)
    finished: list[str] = []
    while len(finished) < 25:
        finished += _finish_running(store, be, 5)
        _steps(svc, clock)
    assert _state_ids(store) == _active(store)  # midway: exactly the jobs still active
    assert not _state_ids(store) & set(finished)
    while _active(store):
        assert _finish_running(store, be, 8), "no job runs"
        _steps(svc, clock)
    assert _state_ids(store) == set()
    assert store.count_by_state().get("SUCCEEDED") == 50


def test_a_cancelled_job_leaves_the_policy_state(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'svc.db'}")
    svc, be, clock = _service(store)
    ids = [_submit(store) for _ in range(12)]  # 8 GPUs: some run, some queue
    _steps(svc, clock)
    queued = next(j for j in ids if store.get_job(j)["state"] == "PENDING")
    running = next(j for j in ids if store.get_job(j)["state"] == "RUNNING")
    for j in (queued, running):
        store.request_cancel(j)
    _steps(svc, clock)
    assert store.get_job(running)["state"] == "CANCELLED" and running in be.cancelled
    assert _state_ids(store) == _active(store) == set(ids) - {queued, running}


class CountingTiresias(TiresiasPolicy):
    """Tiresias that counts its hooks (not registered)."""

    name = "tiresias-counting"

    def __init__(self) -> None:
        super().__init__()
        self.submits: list[JobId] = []
        self.finishes: list[JobId] = []

    def on_submit(self, spec: JobSpec, now: float) -> None:
        self.submits.append(spec.job_id)
        super().on_submit(spec, now)

    def on_finish(self, job_id: JobId, now: float) -> None:
        self.finishes.append(job_id)
        super().on_finish(job_id, now)


def test_hooks_once_per_event_and_a_restart_neither_double_counts_nor_resurrects(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'svc.db'}")
    pol = CountingTiresias()
    svc, be, clock = _service(store, pol)
    ids = [_submit(store) for _ in range(6)]
    _steps(svc, clock, 3)
    done = _finish_running(store, be, 2)
    _steps(svc, clock, 3)
    assert sorted(pol.submits) == sorted(ids) and sorted(pol.finishes) == sorted(done)  # once each
    saved = store.get_meta("policy_state:tiresias-counting")
    assert sorted(saved["q0"] + saved["q1"]) == sorted(set(ids) - set(done))
    # a job ends after the last save (a crash before the daemon saved again): the restart forgets it too
    late = sorted(_active(store))[0]
    store.update_job(late, state="FAILED", end_time=time.time() + 1.0)
    again = CountingTiresias()
    svc2, _, clock2 = _service(store, again)
    assert again.finishes == [late]
    clock2.advance_to(clock.now())
    _steps(svc2, clock2)
    assert sorted(again.submits) == sorted(_active(store))  # every active job announced again, once
    saved = store.get_meta("policy_state:tiresias-counting")
    q = saved["q0"] + saved["q1"]
    assert len(q) == len(set(q)) and set(q) == _active(store)


def test_ones_on_submit_and_on_finish_are_idempotent() -> None:
    """The contract a restart relies on (`policies.base.Policy.on_submit`)."""
    pol = make_policy("ones")
    pol.on_finish("never-seen", 0.0)
    pol.on_finish("never-seen", 0.0)
    assert pol.js == {} and pol.finished_run_times == []  # type: ignore[attr-defined]
