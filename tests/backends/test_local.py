"""LocalBackend on real subprocesses (the stdlib fake worker): launch, resize, failures, crash recovery.

The backend never touches the store: actions carry their `LaunchSpec`, and it reports `JobStarted` (with
PIDs) and `GenerationEnded`; retries are the daemon's (tests/service/test_daemon.py).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from _backend_helpers import FAKE, wait_for

from elastisched.backends.base import GenerationEnded, GenerationRecord, JobHints, JobStarted
from elastisched.backends.local import LocalBackend, start_ticks
from elastisched.core.events import Action, ActionKind, LaunchSpec
from elastisched.core.types import NO_ALLOCATION, Allocation


def _spec(args: Sequence[str], gen: int = 1, cause: str = "launch") -> LaunchSpec:
    return LaunchSpec(FAKE, tuple(args), gen, cause, secrets.token_hex(16), batch_size=8)


def _launch(b: LocalBackend, jid: str, args: Sequence[str], *placement: tuple[str, int], gen: int = 1) -> LaunchSpec:
    spec = _spec(args, gen)
    b.apply([Action(ActionKind.LAUNCH, jid, Allocation(placement=placement), NO_ALLOCATION, spec)])
    return spec


def _collect(b: LocalBackend, jid: str, outcome: str | None = None, timeout: float = 20.0) -> list[object]:
    """Events until the job's generation ends (with `outcome`, when given)."""
    seen: list[object] = []

    def got() -> bool:
        seen.extend(b.poll())
        return any(isinstance(e, GenerationEnded) and e.job_id == jid and outcome in (None, e.outcome) for e in seen)

    wait_for(got, timeout, f"generation of {jid} ending {outcome or ''}")
    return seen


def _ended(events: list[object], jid: str) -> list[GenerationEnded]:
    return [e for e in events if isinstance(e, GenerationEnded) and e.job_id == jid]


def _log_lines(b: LocalBackend, jid: str) -> list[dict[str, object]]:
    out = []
    for p in b.log_paths(jid):
        out += [json.loads(line) for line in p.read_text().splitlines() if line.startswith("{")]
    return out


def _record(jid: str, spec: LaunchSpec, placement: tuple[tuple[str, int], ...], pids: Sequence[tuple[int, int | None]],
            keep: bool = True, state: str = "RUNNING") -> GenerationRecord:
    return GenerationRecord(jid, spec.generation, spec.token, Allocation(placement=placement), state, tuple(pids), (),
                            keep)


def test_launch_runs_ranks_to_completion_and_reports_pids(backends: Callable[..., LocalBackend]) -> None:
    b = backends()
    _launch(b, "j1", ["--steps", "3", "--sleep", "0.01"], ("cpu-0", 2), ("cpu-1", 1))
    events = _collect(b, "j1")
    started = [e for e in events if isinstance(e, JobStarted)]
    assert len(started) == 1 and len(started[0].pids) == 3 and all(t is not None for _, t in started[0].pids)
    assert started[0].port is not None
    (end,) = _ended(events, "j1")
    assert end.outcome == "succeeded" and end.exit_codes == (0, 0, 0)
    starts = [d for d in _log_lines(b, "j1") if d.get("start")]
    assert sorted(d["rank"] for d in starts) == [0, 1, 2] and {d["world"] for d in starts} == {3}
    assert all(d["entry"] for d in starts)  # the script runs under train._entry, the clean exit path of `launch`


def test_resize_checkpoints_and_relaunches_a_new_generation(backends: Callable[..., LocalBackend]) -> None:
    b = backends()
    args = ["--steps", "400", "--sleep", "0.02"]
    _launch(b, "j1", args, ("cpu-0", 1))
    wait_for(lambda: any(d.get("start") for d in _log_lines(b, "j1")), what="first generation running")
    ck = b.job_dir("j1") / "ckpt" / "progress.json"
    wait_for(lambda: ck.exists() and json.loads(ck.read_text())["step"] >= 5, what="progress")
    old = Allocation(placement=(("cpu-0", 1),))
    b.apply([Action(ActionKind.RESIZE, "j1", Allocation(placement=(("cpu-0", 1), ("cpu-1", 1))), old,
                    _spec(args, 2, "resize"))])
    events = b.poll()
    assert [(e.generation, e.outcome, e.exit_codes) for e in _ended(events, "j1")] == [(1, "stopped", (0,))]
    assert [len(e.pids) for e in events if isinstance(e, JobStarted) and e.generation == 2] == [2]
    second = wait_for(lambda: [d for d in _log_lines(b, "j1") if d.get("start") and d["gen"] == 2 and d["rank"] == 0],
                      what="second generation")
    assert second[0]["world"] == 2 and int(second[0]["step"]) >= 5  # resumed from the checkpoint
    b.cancel("j1")
    assert [e.outcome for e in _ended(b.poll(), "j1")] == ["cancelled"]


def test_failed_generation_is_reported_not_relaunched(backends: Callable[..., LocalBackend]) -> None:
    b = backends()
    _launch(b, "j1", ["--fail-always"], ("cpu-0", 1))
    events = _collect(b, "j1")
    (end,) = _ended(events, "j1")
    assert end.outcome == "failed" and end.exit_codes == (4,) and "codes [4]" in end.reason
    assert "j1" not in b.groups and len([e for e in events if isinstance(e, JobStarted)]) == 1


def test_a_launch_that_cannot_start_fails_the_generation_not_the_backend(
        backends: Callable[..., LocalBackend]) -> None:
    """An argument with a NUL byte makes exec fail: the generation ends launch_failed with the reason."""
    b = backends()
    _launch(b, "bad", ["--steps", "1\x00"], ("cpu-0", 2))
    (end,) = _ended(b.poll(), "bad")
    assert end.outcome == "launch_failed" and "ValueError" in end.reason and "bad" not in b.groups
    _launch(b, "good", ["--steps", "1", "--sleep", "0.01"], ("cpu-0", 1))  # the backend still works
    assert [e.outcome for e in _ended(_collect(b, "good"), "good")] == ["succeeded"]


def test_rank_zero_finished_means_the_job_finished(backends: Callable[..., LocalBackend]) -> None:
    """Rank 0 exits 0 (done); rank 1 then aborts in teardown: the generation succeeded, it is not re-run."""
    b = backends()
    _launch(b, "j1", ["--steps", "3", "--sleep", "0.01", "--teardown-abort"], ("cpu-0", 2))
    (end,) = _ended(_collect(b, "j1"), "j1")
    assert end.exit_codes[0] == 0 and end.exit_codes[1] != 0
    assert end.outcome == "succeeded"


def test_restarted_backend_adopts_live_workers_without_relaunching(backends: Callable[..., LocalBackend]) -> None:
    first = backends()
    spec = _launch(first, "j1", ["--steps", "60", "--sleep", "0.05"], ("cpu-0", 2))
    (started,) = [e for e in first.poll() if isinstance(e, JobStarted)]
    del first  # the service "crashes": its workers live on in their own session
    second = backends()
    events = second.recover([_record("j1", spec, (("cpu-0", 2),), started.pids)])
    assert [(type(e), getattr(e, "adopted", None)) for e in events] == [(JobStarted, True)]
    assert second.groups["j1"].ranks[0].pid == started.pids[0][0] and second.started_pids == []  # nothing twice
    assert [e.outcome for e in _ended(_collect(second, "j1", timeout=30), "j1")] == ["succeeded"]


def test_workers_started_before_their_pids_were_recorded_are_found_by_token(
        backends: Callable[..., LocalBackend]) -> None:
    """A crash after spawning but before the PIDs reached the store (the launch window): recovery finds the
    workers by the launch token in their environment and adopts them; nothing is launched twice."""
    first = backends()
    spec = _launch(first, "j1", ["--steps", "60", "--sleep", "0.05"], ("cpu-0", 2))
    pids = sorted(first.started_pids)
    del first
    second = backends()
    events = second.recover([_record("j1", spec, (("cpu-0", 2),), (), state="PLANNED")])
    assert [(type(e), getattr(e, "adopted", None)) for e in events] == [(JobStarted, True)]
    assert sorted(r.pid for r in second.groups["j1"].ranks) == pids and second.started_pids == []
    second.cancel("j1")
    wait_for(lambda: all(start_ticks(p) is None for p in pids), what="adopted workers gone")  # cancel reaches them


def test_recovery_stops_the_workers_of_a_generation_no_longer_wanted(backends: Callable[..., LocalBackend]) -> None:
    """A held or cancelled job whose stop was cut off by a crash: its workers are stopped, not adopted."""
    first = backends()
    spec = _launch(first, "j1", ["--steps", "400", "--sleep", "0.05"], ("cpu-0", 1))
    pids = list(first.started_pids)
    del first
    second = backends()
    events = second.recover([_record("j1", spec, (("cpu-0", 1),), (), keep=False, state="STOPPING")])
    assert [(type(e), getattr(e, "outcome", None)) for e in events] == [(GenerationEnded, "stopped")]
    assert "j1" not in second.groups
    wait_for(lambda: all(start_ticks(p) is None for p in pids), what="workers gone")


def test_restart_settles_jobs_that_ended_or_died_while_down(backends: Callable[..., LocalBackend]) -> None:
    first = backends()
    done = _launch(first, "done", ["--steps", "1", "--sleep", "0.01"], ("cpu-0", 1))
    lost = _launch(first, "lost", ["--steps", "400", "--sleep", "0.05"], ("cpu-1", 1))
    pids = {e.job_id: e.pids for e in first.poll() if isinstance(e, JobStarted)}
    wait_for((first.job_dir("done") / "run" / "g1-r0.exit").exists, what="short job to end")
    pid = pids["lost"][0][0]
    os.killpg(pid, signal.SIGKILL)  # killed while the service is down: no exit file
    wait_for(lambda: start_ticks(pid) is None, what="worker gone")
    del first
    second = backends()
    events = second.recover([_record("done", done, (("cpu-0", 1),), pids["done"]),
                             _record("lost", lost, (("cpu-1", 1),), pids["lost"])])
    assert [(e.job_id, e.outcome) for e in events if isinstance(e, GenerationEnded)] == [("done", "succeeded"),
                                                                                         ("lost", "lost")]
    assert second.groups == {} and second.started_pids == []  # relaunching is the daemon's decision


def test_wrap_records_exit_code(tmp_path: Path) -> None:
    import subprocess
    import sys

    exit_file = tmp_path / "x.exit"
    rc = subprocess.run([sys.executable, "-m", "elastisched.backends._wrap", str(exit_file), "--", sys.executable,
                         "-c", "raise SystemExit(7)"], timeout=30).returncode
    assert rc == 7 and exit_file.read_text() == "7"


_SIGTERM_ME = "import os, signal, time; os.kill(os.getppid(), signal.SIGTERM); time.sleep(1.0)\n"


@pytest.mark.parametrize(("body", "recorded"), [
    # a plain script that survives the SIGTERM and exits 0: a stop, as before (no word from the library)
    ("import signal; signal.signal(signal.SIGTERM, lambda *a: None)\n" + _SIGTERM_ME, "0 SIGTERM"),
    # a library worker that got the SIGTERM after its last step and exits 0: it finished, run it never again
    ("from elastisched.train import runtime; ctx = runtime.init()\n" + _SIGTERM_ME
     + "assert ctx.stop_requested\n", "0"),
    # a library worker that agreed on the stop and checkpointed: relaunch it
    ("from elastisched.train import runtime; ctx = runtime.init()\n" + _SIGTERM_ME
     + "ctx.stop_agreed = ctx.stop_requested\nctx.after_step()\nraise SystemExit(3)\n", "0 SIGTERM"),
    # the same, with the SIGTERM sent to the worker itself (an operator, the OS), not through the wrapper
    ("import os, signal; from elastisched.train import runtime; ctx = runtime.init()\n"
     "os.kill(os.getpid(), signal.SIGTERM)\nctx.stop_agreed = ctx.stop_requested\nctx.after_step()\n",
     "0 SIGTERM"),
])
def test_wrap_tells_a_finished_worker_from_a_checkpointed_stop(tmp_path: Path, body: str, recorded: str) -> None:
    import subprocess
    import sys

    exit_file = tmp_path / "x.exit"
    subprocess.run([sys.executable, "-m", "elastisched.backends._wrap", str(exit_file), "--", sys.executable,
                    "-c", body], timeout=60, check=False)
    assert exit_file.read_text() == recorded


def test_gpu_nodes_get_one_visible_device_per_rank(backends: Callable[..., LocalBackend]) -> None:
    from elastisched.core.cluster import parse_cluster

    b = backends(nodes=parse_cluster("2x2:a100"))
    first, second = "first", "second"
    _launch(b, first, ["--steps", "200", "--sleep", "0.02"], ("a100-0", 2), ("a100-1", 1))
    _launch(b, second, ["--steps", "1", "--sleep", "0.01"], ("a100-1", 1))
    devices = {e.job_id: e.devices for e in b.poll() if isinstance(e, JobStarted)}
    assert devices == {first: (0, 1, 2), second: (3,)}
    starts = wait_for(lambda: len(s := [d for d in _log_lines(b, first) if d.get("start")]) == 3 and s,
                      what="ranks started")
    assert sorted((d["rank"], d["cuda"], d["local_rank"]) for d in starts) == [(0, "0", "0"), (1, "1", "0"),
                                                                                (2, "2", "0")]
    b.cancel(first)
    _collect(b, second, "succeeded")
    assert b._devices(["a100-0", "a100-0", "a100-1", "a100-1"]) == [0, 1, 2, 3]  # all free again


def test_hints_of_running_jobs_are_reported(backends: Callable[..., LocalBackend]) -> None:
    b = backends()
    jid = "j1"
    _launch(b, jid, ["--steps", "30", "--sleep", "0.02", "--hints-every", "5"], ("cpu-0", 1))
    events = _collect(b, jid)
    hints = [e for e in events if isinstance(e, JobHints)]
    assert hints and all(h.job_id == jid and h.step % 5 == 0 and h.global_batch == 8 for h in hints)
    assert [h.step for h in hints] == sorted({h.step for h in hints})  # newest line per poll, never twice


def test_hints_reader_waits_for_a_complete_line(backends: Callable[..., LocalBackend]) -> None:
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


def test_resize_of_a_generation_that_already_finished_does_not_run_it_again(
        backends: Callable[..., LocalBackend]) -> None:
    """A resize that reaches a job after its workers finished (exit 0, no checkpointed stop) ends the job:
    both the old generation and the planned one are reported succeeded and nothing is launched."""
    b = backends()
    spec = _launch(b, "j1", ["--steps", "2", "--sleep", "0.01"], ("cpu-0", 1))
    exit_file = b.job_dir("j1") / "run" / f"g{spec.generation}-r0.exit"
    wait_for(exit_file.exists, 20, "the worker to finish")
    new = _spec(["--steps", "2"], gen=2, cause="resize")
    old = Allocation(placement=(("cpu-0", 1),))
    b.apply([Action(ActionKind.RESIZE, "j1", Allocation(placement=(("cpu-0", 2),)), old, new)])
    events = b.poll()
    assert not [e for e in events if isinstance(e, JobStarted) and e.generation == 2] and "j1" not in b.groups
    assert [(e.generation, e.outcome) for e in _ended(events, "j1")] == [(1, "succeeded"), (2, "succeeded")]
