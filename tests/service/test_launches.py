"""The daemon as the single writer around a real LocalBackend: retries, launch failures, crash windows.

A "crash" here is dropping a Service and its backend without stopping them (their workers live on in their
own sessions, as after `kill -9` of the service) and starting a new one on the same store and workdir.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _svc_helpers import FAKE, wait_for

from elastisched.backends.local import LocalBackend, start_ticks
from elastisched.core.cluster import parse_cluster
from elastisched.service.daemon import Service
from elastisched.service.store import Store

NODES = parse_cluster("1x2:cpu", default_gpu_type="cpu")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Callable[..., tuple[Service, LocalBackend]]]:
    """Factory of (service, backend) on one store and workdir; all workers are killed at teardown."""
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    made: list[LocalBackend] = []

    def make(**kw: Any) -> tuple[Service, LocalBackend]:
        be = LocalBackend(tmp_path / "work", grace_s=5.0, nodes=NODES)
        made.append(be)
        svc = Service(store, NODES, be, "fifo", tick_s=0.01, **kw)
        svc.min_round_gap_s = 0.0
        return svc, be

    yield make
    for be in made:
        for pid in be.started_pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    store.close()


def _submit(svc: Service, *args: str, gpus: int = 1) -> str:
    spec = {"num_gpus": gpus, "min_gpus": gpus, "max_gpus": gpus, "batch_size": 8}
    jid = str(svc.store.create_job(name=None, script=FAKE, args=list(args), spec=spec)["id"])
    svc.wake()
    return jid


def _until(svc: Service, jid: str, states: tuple[str, ...], timeout: float = 30.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        svc.step()
        row = svc.store.get_job(jid)
        return row if row is not None and row["state"] in states else None

    return wait_for(done, timeout, f"job {jid} in {states}")


def _alive(pids: list[list[int]]) -> list[int]:
    return [p for p, t in pids if start_ticks(p) == t]


def test_a_failed_generation_is_retried_from_its_checkpoint_by_the_daemon(world: Callable[..., Any]) -> None:
    svc, be = world(max_retries=2)
    jid = _submit(svc, "--steps", "8", "--sleep", "0.01", "--fail-once-at", "4")
    row = _until(svc, jid, ("SUCCEEDED", "FAILED"))
    assert row["state"] == "SUCCEEDED" and row["retries"] == 1
    gens = svc.store.generations(jid)
    assert [(g["cause"], g["outcome"]) for g in gens] == [("launch", "failed"), ("retry", "succeeded")]
    resumed = [json.loads(x) for x in (be.job_dir(jid) / "logs" / "g2-r0.log").read_text().splitlines()
               if x.startswith('{"start"')]
    assert resumed[0]["step"] == 4
    assert [e["kind"] for e in svc.store.events(jid, ["retried"])] == ["retried"]


def test_retries_are_bounded(world: Callable[..., Any]) -> None:
    svc, _ = world(max_retries=1)
    jid = _submit(svc, "--fail-always")
    row = _until(svc, jid, ("SUCCEEDED", "FAILED"))
    assert row["state"] == "FAILED" and "codes [4]" in row["message"]
    assert [g["outcome"] for g in svc.store.generations(jid)] == ["failed", "failed"]


def test_a_launch_failure_fails_that_job_with_its_reason_never_the_service(world: Callable[..., Any]) -> None:
    svc, _ = world()
    bad = _submit(svc, "--steps", "1\x00")  # exec refuses an argument with a NUL byte
    row = _until(svc, bad, ("FAILED",))
    assert "launch of generation 1 failed" in row["message"] and "ValueError" in row["message"]
    good = _submit(svc, "--steps", "1", "--sleep", "0.01")
    assert _until(svc, good, ("SUCCEEDED",))["state"] == "SUCCEEDED"
    assert svc.last_error is None
    # and after a restart, recovery does not trip over the failed job
    svc2, _ = world()
    svc2.start()
    svc2.stop()
    assert svc2.last_error is None


def test_recovery_never_raises_out_of_startup(world: Callable[..., Any], caplog: pytest.LogCaptureFixture) -> None:
    svc, be = world()

    def broken(_records: object) -> list[object]:
        raise RuntimeError("corrupt record")

    be.recover = broken  # type: ignore[method-assign]
    svc.start()  # does not raise: the service runs, the failure is logged
    svc.stop()
    assert any("recovery failed" in r.message and "corrupt record" in (r.exc_text or str(r.exc_info))
               for r in caplog.records)


def test_a_crash_in_the_launch_window_launches_nothing_twice(world: Callable[..., Any]) -> None:
    """Generation planned and workers spawned, but the service dies before it records their PIDs: the new
    service finds them by launch token and adopts them; a cancel then stops them (no orphans)."""
    svc, be = world()
    jid = _submit(svc, "--steps", "400", "--sleep", "0.05", gpus=2)
    be.poll = lambda: []  # type: ignore[method-assign]  # the service dies before it hears of the PIDs
    svc.step()  # plans generation 1 (store), the backend spawns; JobStarted (PIDs) never reaches the store
    pids = sorted(be.started_pids)
    assert svc.store.generations(jid)[0]["pids"] == [] and len(pids) == 2
    del svc, be  # kill -9
    svc2, be2 = world()
    svc2.start()
    svc2.stop()  # the engine thread ran a while; stop it and drive steps by hand
    gens = svc2.store.generations(jid)
    assert len(gens) == 1 and sorted(p for p, _ in gens[0]["pids"]) == pids and be2.started_pids == []
    svc2.store.request_cancel(jid)
    _until(svc2, jid, ("CANCELLED",))
    wait_for(lambda: _alive(gens[0]["pids"]) == [], what="no orphan workers after cancel")


@pytest.mark.parametrize("request_kind", ["hold", "cancel"])
def test_a_held_or_cancelled_job_whose_stop_was_cut_off_is_not_relaunched(world: Callable[..., Any],
                                                                          request_kind: str) -> None:
    svc, _ = world()
    jid = _submit(svc, "--steps", "400", "--sleep", "0.05")
    _until(svc, jid, ("RUNNING",))
    pids = svc.store.generations(jid)[0]["pids"]
    if request_kind == "hold":
        svc.store.request_hold(jid, True)
    else:
        svc.store.request_cancel(jid)
    del svc  # the service dies before it acts on the request
    svc2, be2 = world()
    svc2._handle(be2.recover(svc2.launches.records()))
    svc2.step()
    row = svc2.store.get_job(jid)
    assert row["state"] == ("SUSPENDED" if request_kind == "hold" else "CANCELLED")
    assert [g["generation"] for g in svc2.store.generations(jid)] == [1] and be2.started_pids == []
    wait_for(lambda: _alive(pids) == [], what="workers stopped")
