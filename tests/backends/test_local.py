"""LocalBackend on real subprocesses (the stdlib fake worker): launch, resize, retries, adoption."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

from _backend_helpers import FAKE, wait_for

from elastisched.backends.base import JobHints, JobRetried, JobStarted
from elastisched.backends.local import LocalBackend, start_ticks
from elastisched.core.events import Action, ActionKind, JobFailed, JobFinished
from elastisched.core.types import NO_ALLOCATION, Allocation
from elastisched.service.store import Store


def _job(store: Store, *args: str, gpus: int = 1) -> str:
    row = store.create_job(name="t", script=FAKE, args=list(args), spec={"num_gpus": gpus, "batch_size": 8})
    return str(row["id"])


def _launch(b: LocalBackend, jid: str, *placement: tuple[str, int]) -> None:
    b.apply([Action(ActionKind.LAUNCH, jid, Allocation(placement=placement), NO_ALLOCATION)])


def _collect(b: LocalBackend, kind: type, jid: str, timeout: float = 20.0) -> list[object]:
    seen: list[object] = []

    def got() -> bool:
        seen.extend(b.poll())
        return any(isinstance(e, kind) and e.job_id == jid for e in seen)

    wait_for(got, timeout, f"{kind.__name__} for {jid}")
    return seen


def _log_lines(b: LocalBackend, jid: str) -> list[dict[str, object]]:
    out = []
    for p in b.log_paths(jid):
        out += [json.loads(line) for line in p.read_text().splitlines() if line.startswith("{")]
    return out


def test_launch_runs_ranks_to_completion_and_records_pids(store: Store, backends: Callable[..., LocalBackend]) -> None:
    b = backends()
    jid = _job(store, "--steps", "3", "--sleep", "0.01", gpus=3)
    _launch(b, jid, ("cpu-0", 2), ("cpu-1", 1))
    gen = store.generations(jid)[0]
    assert gen["state"] == "RUNNING" and len(gen["pids"]) == 3 and all(t is not None for _, t in gen["pids"])
    events = _collect(b, JobFinished, jid)
    assert any(isinstance(e, JobStarted) for e in events)
    gen = store.generations(jid)[0]
    assert gen["state"] == "EXITED" and gen["outcome"] == "succeeded" and gen["exit_codes"] == [0, 0, 0]
    starts = [d for d in _log_lines(b, jid) if d.get("start")]
    assert sorted(d["rank"] for d in starts) == [0, 1, 2] and {d["world"] for d in starts} == {3}
    assert store.get_job(jid)["generation"] == 1


def test_resize_checkpoints_and_relaunches_a_new_generation(store: Store,
                                                          backends: Callable[..., LocalBackend]) -> None:
    b = backends()
    jid = _job(store, "--steps", "400", "--sleep", "0.02")
    _launch(b, jid, ("cpu-0", 1))
    wait_for(lambda: any(d.get("start") for d in _log_lines(b, jid)), what="first generation running")
    ck = b.job_dir(jid) / "ckpt" / "progress.json"
    wait_for(lambda: ck.exists() and json.loads(ck.read_text())["step"] >= 5, what="progress")
    old = Allocation(placement=(("cpu-0", 1),))
    b.apply([Action(ActionKind.RESIZE, jid, Allocation(placement=(("cpu-0", 1), ("cpu-1", 1))), old)])
    gens = store.generations(jid)
    assert [g["generation"] for g in gens] == [1, 2]
    assert gens[0]["outcome"] == "stopped" and gens[0]["exit_codes"] == [0]
    assert gens[1]["cause"] == "resize" and gens[1]["state"] == "RUNNING" and len(gens[1]["pids"]) == 2
    second = wait_for(lambda: [d for d in _log_lines(b, jid) if d.get("start") and d["gen"] == 2 and d["rank"] == 0],
                      what="second generation")
    assert second[0]["world"] == 2 and int(second[0]["step"]) >= 5  # resumed from the checkpoint
    assert store.get_job(jid)["restarts"] == 1
    b.cancel(jid)
    assert store.generations(jid)[1]["outcome"] == "cancelled"


def test_failed_generation_is_retried_from_checkpoint(store: Store, backends: Callable[..., LocalBackend]) -> None:
    b = backends(max_retries=2)
    jid = _job(store, "--steps", "8", "--sleep", "0.01", "--fail-once-at", "4")
    _launch(b, jid, ("cpu-0", 1))
    events = _collect(b, JobFinished, jid)
    assert [type(e) for e in events if not isinstance(e, JobStarted)] == [JobRetried, JobFinished]
    gens = store.generations(jid)
    assert [g["outcome"] for g in gens] == ["failed", "succeeded"] and gens[1]["cause"] == "retry"
    resumed = [d for d in _log_lines(b, jid) if d.get("start") and d["gen"] == 2]
    assert resumed[0]["step"] == 4
    assert store.get_job(jid)["retries"] == 1


def test_retries_are_bounded(store: Store, backends: Callable[..., LocalBackend]) -> None:
    b = backends(max_retries=1)
    jid = _job(store, "--fail-always")
    _launch(b, jid, ("cpu-0", 1))
    events = _collect(b, JobFailed, jid)
    assert sum(isinstance(e, JobRetried) for e in events) == 1
    assert [g["outcome"] for g in store.generations(jid)] == ["failed", "failed"]


def test_restarted_backend_adopts_live_workers_without_relaunching(
        store: Store, backends: Callable[..., LocalBackend]) -> None:
    first = backends()
    jid = _job(store, "--steps", "60", "--sleep", "0.05", gpus=2)
    _launch(first, jid, ("cpu-0", 2))
    pids = store.generations(jid)[0]["pids"]
    del first  # the service "crashes": its workers live on in their own session
    second = backends()
    events = second.recover()
    assert [(type(e), getattr(e, "adopted", None)) for e in events] == [(JobStarted, True)]
    assert [g["generation"] for g in store.generations(jid)] == [1]  # nothing launched twice
    assert second.groups[jid].ranks[0].pid == pids[0][0]
    _collect(second, JobFinished, jid, timeout=30)
    assert store.generations(jid)[0]["outcome"] == "succeeded"


def test_restart_settles_jobs_that_ended_or_died_while_down(store: Store,
                                                             backends: Callable[..., LocalBackend]) -> None:
    first = backends()
    done = _job(store, "--steps", "1", "--sleep", "0.01")
    lost = _job(store, "--steps", "400", "--sleep", "0.05")
    _launch(first, done, ("cpu-0", 1))
    _launch(first, lost, ("cpu-1", 1))
    exit_file = first.job_dir(done) / "run" / "g1-r0.exit"
    wait_for(exit_file.exists, what="short job to end")
    pid = store.generations(lost)[0]["pids"][0][0]
    os.killpg(pid, signal.SIGKILL)  # killed while the service is down: no exit file
    wait_for(lambda: start_ticks(pid) is None, what="worker gone")
    del first
    second = backends()
    events = second.recover()
    assert any(isinstance(e, JobFinished) and e.job_id == done for e in events)
    gens = store.generations(lost)
    assert [(g["generation"], g["outcome"]) for g in gens] == [(1, "lost"), (2, None)]
    assert gens[1]["cause"] == "resume" and lost in second.groups
    second.cancel(lost)


def test_wrap_records_exit_code(tmp_path: Path) -> None:
    import subprocess
    import sys

    exit_file = tmp_path / "x.exit"
    rc = subprocess.run([sys.executable, "-m", "elastisched.backends._wrap", str(exit_file), "--", sys.executable,
                         "-c", "raise SystemExit(7)"], timeout=30).returncode
    assert rc == 7 and exit_file.read_text() == "7"


def test_gpu_nodes_get_one_visible_device_per_rank(store: Store, backends: Callable[..., LocalBackend]) -> None:
    from elastisched.core.cluster import parse_cluster

    b = backends(nodes=parse_cluster("2x2:a100"))
    first = _job(store, "--steps", "200", "--sleep", "0.02", gpus=3)
    second = _job(store, "--steps", "1", "--sleep", "0.01")
    _launch(b, first, ("a100-0", 2), ("a100-1", 1))
    _launch(b, second, ("a100-1", 1))
    assert store.generations(first)[0]["devices"] == [0, 1, 2]
    assert store.generations(second)[0]["devices"] == [3]
    starts = wait_for(lambda: len(s := [d for d in _log_lines(b, first) if d.get("start")]) == 3 and s,
                      what="ranks started")
    assert sorted((d["rank"], d["cuda"], d["local_rank"]) for d in starts) == [(0, "0", "0"), (1, "1", "0"),
                                                                                (2, "2", "0")]
    b.cancel(first)
    _collect(b, JobFinished, second)
    assert b._devices(["a100-0", "a100-0", "a100-1", "a100-1"]) == [0, 1, 2, 3]  # all free again


def test_hints_of_running_jobs_are_reported(store: Store, backends: Callable[..., LocalBackend]) -> None:
    b = backends()
    jid = _job(store, "--steps", "30", "--sleep", "0.02", "--hints-every", "5")
    _launch(b, jid, ("cpu-0", 1))
    events = _collect(b, JobFinished, jid)
    hints = [e for e in events if isinstance(e, JobHints)]
    assert hints and all(h.job_id == jid and h.step % 5 == 0 and h.global_batch == 8 for h in hints)
    assert [h.step for h in hints] == sorted({h.step for h in hints})  # newest line per poll, never twice


def test_hints_reader_waits_for_a_complete_line(store: Store, backends: Callable[..., LocalBackend]) -> None:
    b = backends()
    path = b.job_dir("j1") / "ckpt" / "hints.jsonl"
    path.parent.mkdir(parents=True)
    line = json.dumps({"time": 1.0, "generation": 2, "step": 7, "epoch": 1, "world_size": 2})
    path.write_text(line[:10])
    assert b._hints("j1") is None
    path.write_text(line + "\nnot json\n")
    assert b._hints("j1") is not None and b._hints("j1") is None  # read once
    with open(path, "a") as f:
        f.write(line.replace('"step": 7', '"step": 9') + "\n")
    h = b._hints("j1")
    assert h is not None and (h.step, h.generation, h.world_size) == (9, 2, 2)
