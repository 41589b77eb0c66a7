"""Crash soak (issue 11 must-show): 1,000 submissions through the real API, `kill -9` of the real service at
eight moments (five reached deterministically through the fault hook of `backends/_faults.py`: three inside
the launch window, a recorded end, a cut-off stop), a restart on the same workdir after each, then a cancel
of every job left. Two fast tests pin the defects the soak found (an end recorded just before a crash left
its job running forever; a generation that ran and ended while the service was down was relaunched).

The driver is `benchmarks/crash_soak.py` (its longer variant writes JSON); this test runs it once and
asserts: 0 acknowledged submissions lost, 0 generations of one job alive at once and no rank spawned twice
(sampled from /proc by each worker's launch token), 0 orphan workers after the cancel, every job terminal
with no live generation, and the hook really stopped the service inside each window it names.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
from pathlib import Path
from types import ModuleType

import pytest
from _svc_helpers import FAKE, ROOT, wait_for

from elastisched.backends.local import LocalBackend, start_ticks
from elastisched.core.cluster import parse_cluster
from elastisched.service import launches
from elastisched.service.daemon import Service
from elastisched.service.store import Store

NODES = parse_cluster("1x2:cpu", default_gpu_type="cpu")


def _soak_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_soak", ROOT / "benchmarks" / "crash_soak.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Crash(BaseException):
    """The process dies here (not an Exception: nothing in the service catches it)."""


@pytest.mark.parametrize("args", [["--steps", "2", "--sleep", "0.01"], ["--fail-always"]])
def test_an_end_recorded_just_before_a_crash_is_settled_on_restart(tmp_path: Path, args: list[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The crash came after the generation's end was written and before its consequence (the job's final
    state, or its retry): the restarted service finishes it, neither leaving the job running forever nor
    running a finished job again. (Found by the soak's `ended` moment.)"""
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    spec = {"num_gpus": 1, "min_gpus": 1, "max_gpus": 1, "batch_size": 8}
    jid = str(store.create_job(name=None, script=FAKE, args=args, spec=spec)["id"])
    be = LocalBackend(tmp_path / "work", grace_s=5.0, nodes=NODES)
    svc = Service(store, NODES, be, "fifo", tick_s=0.01, max_retries=1)
    svc.min_round_gap_s = 0.0

    def die_after_the_end_is_written(point: str, _what: str) -> None:  # at the `ended` fault point
        if point == "ended":
            raise _Crash

    monkeypatch.setattr(launches, "pause", die_after_the_end_is_written)
    with pytest.raises(_Crash):
        wait_for(lambda: svc.step(), 30, "the generation to end")
    row = store.get_job(jid)
    assert row is not None and row["state"] not in ("SUCCEEDED", "FAILED") and row["placement"]
    assert [g["state"] for g in store.generations(jid)] == ["EXITED"]
    monkeypatch.undo()
    svc2 = Service(store, NODES, LocalBackend(tmp_path / "work", grace_s=5.0, nodes=NODES), "fifo", tick_s=0.01,
                   max_retries=1)
    svc2.start()
    try:
        want = "SUCCEEDED" if "--steps" in args else "FAILED"
        done = wait_for(lambda: (r := store.get_job(jid)) is not None and r["state"] == want and r, 30, want)
    finally:
        svc2.stop()
        for pid in svc2.backend.started_pids:  # type: ignore[attr-defined]
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    gens = store.generations(jid)
    assert not done["placement"] and all(g["state"] == "EXITED" for g in gens)
    assert len(gens) == (1 if want == "SUCCEEDED" else 2)  # a finished job is not run again; a failed one retried
    store.close()


def test_a_generation_that_ran_and_ended_while_the_service_was_down_is_not_run_again(tmp_path: Path) -> None:
    """Crash in the launch window (workers spawned, PIDs not recorded), and the workers finish before the
    restart: no PID to adopt and no token in /proc, but their exit files say they ran. The job is done, not
    relaunched as if its generation had never started. (Found by the soak: a short job's generation "lost".)"""
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    spec = {"num_gpus": 2, "min_gpus": 2, "max_gpus": 2, "batch_size": 8}
    jid = str(store.create_job(name=None, script=FAKE, args=["--steps", "2", "--sleep", "0.01"], spec=spec)["id"])
    be = LocalBackend(tmp_path / "work", grace_s=5.0, nodes=NODES)
    svc = Service(store, NODES, be, "fifo", tick_s=0.01)
    svc.min_round_gap_s = 0.0
    be.poll = lambda: []  # type: ignore[method-assign]  # the service dies before it hears of the PIDs
    svc.step()
    run = be.job_dir(jid) / "run"
    wait_for(lambda: all((run / f"g1-r{r}.exit").exists() for r in (0, 1)), 30, "both ranks to finish")
    assert store.generations(jid)[0]["pids"] == []
    del svc, be  # kill -9
    svc2 = Service(store, NODES, LocalBackend(tmp_path / "work", grace_s=5.0, nodes=NODES), "fifo", tick_s=0.01)
    svc2.start()
    try:
        wait_for(lambda: (r := store.get_job(jid)) is not None and r["state"] in ("SUCCEEDED", "FAILED"), 30, "end")
    finally:
        svc2.stop()
    gens = store.generations(jid)
    assert store.get_job(jid)["state"] == "SUCCEEDED"  # type: ignore[index]
    assert [(g["generation"], g["outcome"]) for g in gens] == [(1, "succeeded")]
    assert svc2.backend.started_pids == []  # type: ignore[attr-defined]
    store.close()


def test_a_partly_started_generation_is_gone_before_recovery_hands_it_back_for_relaunch(tmp_path: Path) -> None:
    """Crash between spawning rank 0 and rank 1 (the soak's `rank` moment): recovery SIGKILLs rank 0 and reports
    the generation lost, and the daemon relaunches the job at once, so rank 0 must be gone by then, not merely
    signalled (a SIGKILLed process lives on until it is scheduled), or two generations are alive together."""
    store = Store(f"sqlite:///{tmp_path / 'state.db'}")
    spec = {"num_gpus": 2, "min_gpus": 2, "max_gpus": 2, "batch_size": 8}
    jid = str(store.create_job(name=None, script=FAKE, args=["--steps", "400", "--sleep", "0.05"], spec=spec)["id"])
    be = LocalBackend(tmp_path / "work", grace_s=5.0, nodes=NODES)
    svc = Service(store, NODES, be, "fifo", tick_s=0.01)
    svc.min_round_gap_s = 0.0
    be.poll = lambda: []  # type: ignore[method-assign]  # the service dies before it hears of the PIDs
    svc.step()
    r0, r1 = be.started_pids
    os.killpg(r1, signal.SIGKILL)  # as if rank 1 had never been spawned: no process, no exit file
    proc1 = be.groups[jid].ranks[1].proc
    assert proc1 is not None
    wait_for(lambda: proc1.poll() is not None, 10, "rank 1 gone")
    ticks = start_ticks(r0)
    del svc, be
    try:
        be2 = LocalBackend(tmp_path / "work", grace_s=5.0, nodes=NODES)
        svc2 = Service(store, NODES, be2, "fifo", tick_s=0.01)
        events = be2.recover(svc2.launches.records())
        assert [(type(e).__name__, getattr(e, "outcome", None)) for e in events] == [("GenerationEnded", "lost")]
        assert start_ticks(r0) != ticks  # gone (or a zombie), not just signalled
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(r0, signal.SIGKILL)
    store.close()


def test_kill9_at_eight_moments_loses_nothing_runs_nothing_twice_leaves_no_orphan(tmp_path: Path) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    r = _soak_module().soak(tmp_path, jobs=1000, seed=0, run_s=5.0, log=lambda m: print(m, flush=True))
    print(json.dumps(r, indent=1, default=str))
    moments = {m["moment"]: m for m in r["moments"]}
    assert r["submissions"] == 1000 and r["kills"] >= 5
    assert {"planned", "rank", "spawned", "ended", "stopping"} <= set(moments)
    # the service was stopped inside each launch-window point it names, as seen from the store and /proc
    assert moments["planned"]["store_state"] == "PLANNED" and moments["planned"]["ranks_alive"] == []
    assert moments["rank"]["store_state"] == "PLANNED" and moments["rank"]["ranks_alive"] == [0]
    assert moments["spawned"]["store_pids"] == 0 and moments["spawned"]["ranks_alive"]
    if moments["ended"]["outcome"] == "succeeded":  # its end was recorded, its job's state not: still done
        assert moments["ended"]["final_state"] == "SUCCEEDED", moments["ended"]
    assert r["lost"] == 0 and r["lost_api"] == 0, r["lost_ids"]
    assert r["duplicate_submissions"] == 0 and r["jobs_in_db"] == 1000, r  # retried with their Idempotency-Keys
    assert r["duplicated"] == 0 and r["rank_spawned_twice"] == [], r["duplicates"]
    assert r["rerun_after_done"] == [], r["rerun_after_done"]  # a finished generation is the job's last
    assert r["unknown_tokens"] == 0 and r["bad_generation_numbering"] == []
    assert r["n_inconsistent_before_cancel"] == 0, r["inconsistent_before_cancel"]
    assert r["orphans"] == 0 and r["live_generations_after_cancel"] == []
    assert set(r["states_final"]) <= {"SUCCEEDED", "CANCELLED"}, r["states_final"]
    assert r["tokens_seen_alive"] > 10 and r["proc_scans"] > 100  # the sampler saw the workers it checks
