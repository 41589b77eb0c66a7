"""Local backend: every job generation is a group of subprocesses on this machine, on the launch contract.

Nodes come from a cluster spec (`2x4:cpu`): a "GPU" is a worker slot. A resize is a generation restart
(ecosystem.md §B.1 "Adopt"): SIGTERM → the workers checkpoint and exit 0 → SIGKILL the process group after
the grace period → relaunch at the new size (the action's `LaunchSpec`: generation + 1) on a fresh
rendezvous port. Each rank runs under `_wrap`, which records the exit code in a file, in its own session (so
workers outlive a crashed service, and SIGKILL escalation reaches a rank's grandchildren through its process
group), and the script runs under `train._entry` (the clean exit path of `launch`).

Idempotent across a crash: every worker carries its generation's launch token in its environment, written
(with the generation) to the store by the daemon before the backend spawns anything. A restarted service
hands `recover` the generations the store knows; their workers are found by recorded (PID, start time) or,
when the crash came before the PIDs were recorded, by the token in `/proc/*/environ` — adopted, or stopped
when the job no longer wants them (cancelled, held, superseded), never launched twice. The backend keeps no
state of its own in the store: it reports facts (`JobStarted` with PIDs, `GenerationEnded`) and the daemon,
the single writer, records them and decides retries.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from elastisched.backends import _jobfiles
from elastisched.backends._faults import pause
from elastisched.backends._local_procs import TOKEN, _Group, _Rank, find_by_token, free_port, start_ticks
from elastisched.backends.base import (
    BackendBase,
    BackendEvent,
    GenerationEnded,
    GenerationRecord,
    JobHints,
    JobStarted,
    stops_then_launches,
)
from elastisched.backends.hints import read_hints, write_batch_target
from elastisched.backends.identity import Account, IdentityError, JobUsers, unreadable
from elastisched.backends.job_env import JobEnv
from elastisched.core.enums import GenerationOutcome, GenerationState
from elastisched.core.events import Action, LaunchSpec
from elastisched.core.types import Allocation, NodeView
from elastisched.train.contract import CHECKPOINT_DIR, PREFIX, LaunchEnv, worker_envs

__all__ = ["TOKEN", "LocalBackend", "find_by_token", "free_port", "start_ticks"]


class LocalBackend(BackendBase):
    """Subprocess backend. `apply` blocks for at most `grace_s` while resized jobs checkpoint."""

    def __init__(self, workdir: str | os.PathLike[str], *, python: str = sys.executable, grace_s: float = 15.0,
                 extra_env: dict[str, str] | None = None, nodes: Sequence[NodeView] = (),
                 users: JobUsers | None = None, job_env: JobEnv | None = None) -> None:
        """`users`: which account each user's jobs run as (default: the service's own, isolation `none`);
        `job_env`: the environment jobs start from (default: the allow-listed part of ours); `extra_env` is
        set for every job on top."""
        self.workdir = Path(workdir)
        self.python = python
        self.grace_s = grace_s
        self.users = users or JobUsers("none")
        self.env = job_env or JobEnv(os.environ, fixed=extra_env)
        self.groups: dict[str, _Group] = {}
        self.started_pids: list[int] = []  # every rank wrapper this backend spawned (process-group leaders)
        self._pending: list[BackendEvent] = []
        self._hint_pos: dict[str, int] = {}  # job -> bytes of hints.jsonl already read
        # Nodes whose type is not `cpu` are slices of this machine's GPUs: node i's slots are the next
        # num_gpus device indices, handed to ranks as CUDA_VISIBLE_DEVICES (one device per rank).
        self.device_base: dict[str, tuple[int, int]] = {}
        k = 0
        for n in nodes:
            if n.gpu_type != "cpu":
                self.device_base[n.node_id] = (k, n.num_gpus)
                k += n.num_gpus

    def _devices(self, nodes: Sequence[str]) -> list[int | None]:
        """Lowest free device index on each rank's node (None on CPU slots)."""
        busy = {d for g in self.groups.values() for d in g.devices if d is not None}
        out: list[int | None] = []
        for n in nodes:
            base = self.device_base.get(n)
            if base is None:
                out.append(None)
                continue
            free = next((d for d in range(base[0], base[0] + base[1]) if d not in busy), None)
            if free is None:
                raise RuntimeError(f"node {n}: no free device (placement exceeds its {base[1]} GPUs)")
            busy.add(free)
            out.append(free)
        return out

    # ------------------------------------------------------------------ paths
    def job_dir(self, job_id: str) -> Path:
        return self.workdir / "jobs" / job_id

    def log_paths(self, job_id: str) -> list[Path]:
        """Log files of a job in generation, then rank order."""
        d = self.job_dir(job_id) / "logs"
        if not d.is_dir():
            return []
        return sorted(d.glob("g*-r*.log"), key=lambda p: tuple(int(x[1:]) for x in p.stem.split("-")))

    # ------------------------------------------------------------------ actions
    def apply(self, actions: Sequence[Action]) -> None:
        stops, launches = stops_then_launches(actions)
        done = self._stop_many(stops, outcome=GenerationOutcome.STOPPED)
        for a, launch in launches:
            if a.job_id in done:  # it finished its work before the stop reached it: never run it again
                self._pending.append(GenerationEnded(time.time(), a.job_id, launch.generation,
                                                     GenerationOutcome.SUCCEEDED, (), "finished before the resize"))
                continue
            self._pending.extend(self._launch(a.job_id, a.allocation, launch))

    def cancel(self, job_id: str) -> None:
        self._stop_many([job_id], outcome=GenerationOutcome.CANCELLED)
        self._hint_pos.pop(job_id, None)

    def _stop_many(self, job_ids: Sequence[str], outcome: str) -> set[str]:
        """SIGTERM all groups at once (they checkpoint in parallel), wait up to grace, then SIGKILL. Returns the
        jobs whose rank 0 had finished the work (exit 0 without a checkpointed stop, as in `_ended`)."""
        groups = [self.groups[j] for j in job_ids if j in self.groups]
        self._stop_groups(groups)
        done = set()
        for g in groups:
            codes = g.codes()
            end = outcome
            if outcome == GenerationOutcome.STOPPED and codes[0] == 0 and not g.ranks[0].signalled():
                end = GenerationOutcome.SUCCEEDED
                done.add(g.job_id)
            self._pending.append(GenerationEnded(time.time(), g.job_id, g.generation, end, tuple(codes)))
            self.groups.pop(g.job_id, None)
        return done

    def _stop_groups(self, groups: Sequence[_Group]) -> None:
        for g in groups:
            g.stopping = True
            g.signal(signal.SIGTERM)
        if groups:
            pause("stopping", " ".join(f"{g.job_id}:{g.generation}" for g in groups))
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and any(c is None for g in groups for c in g.codes()):
            time.sleep(0.05)
        for g in groups:
            if any(c is None for c in g.codes()):
                g.signal(signal.SIGKILL)
                self._wait_gone(g)

    @staticmethod
    def _wait_gone(g: _Group, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(c is None for c in g.codes()):
            time.sleep(0.02)

    def _launch(self, job_id: str, alloc: Allocation, spec: LaunchSpec) -> list[BackendEvent]:
        """Spawn the ranks of generation `spec.generation` (already recorded by the daemon, with its token) as
        the account of the job's user. A spawn that fails (no account, exec refused) ends the generation as
        `launch_failed` with the reason: the job fails, not us."""
        gen = spec.generation
        jd = self.job_dir(job_id)
        ranks: list[_Rank] = []
        pause("planned", f"{job_id}:{gen}")
        try:
            if any("\x00" in w for w in (spec.script, *spec.args)):  # as exec would: no NUL in an argument
                raise ValueError("an argument holds a NUL byte")
            acct = self.users.account(spec.user)
            why = unreadable(spec.script, acct) if acct is not None else None
            if why:  # say so now, not in a traceback in the log after every retry
                raise IdentityError(f"the script {why}")
            _jobfiles.prepare(jd, acct)
            argv = _jobfiles.write_owned(jd / f"g{gen}.argv", json.dumps([spec.script, *spec.args]).encode(), acct)
            world = alloc.gpus
            port = free_port()
            nodes = [n for n, k in alloc.placement for _ in range(k)]
            envs = worker_envs(nproc=world, master_port=port, job_id=job_id, generation=gen,
                               local_batch=alloc.local_batch, global_batch=spec.batch_size,  # library splits the rest
                               checkpoint_dir=str(jd / "ckpt"))
            devices = self._devices(nodes)
            for r, le in enumerate(envs):
                env = self._env(jd, spec, le, nodes[r], devices[r], world, acct)
                ranks.append(self._spawn(jd, gen, r, str(argv), env, acct))
                if r < len(envs) - 1:
                    pause("rank", f"{job_id}:{gen}:{r}")
        except (OSError, ValueError, RuntimeError, IdentityError) as e:
            for r in ranks:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(r.pid, signal.SIGKILL)
            why = f"launch of generation {gen} failed: {type(e).__name__}: {e}"[:1000]
            return [GenerationEnded(time.time(), job_id, gen, GenerationOutcome.LAUNCH_FAILED, reason=why)]
        self.groups[job_id] = _Group(job_id, gen, alloc, ranks, devices)
        pause("spawned", f"{job_id}:{gen}")
        return [JobStarted(time.time(), job_id, gen, pids=tuple((r.pid, r.ticks) for r in ranks),
                           devices=tuple(devices), port=port)]

    def _env(self, jd: Path, spec: LaunchSpec, le: LaunchEnv, node: str, device: int | None, world: int,
             acct: Account | None) -> dict[str, str]:
        """One rank's environment: the allow-listed base, the job's own variables, then the launch contract."""
        contract = {**le.to_env(), "LOCAL_WORLD_SIZE": str(world), PREFIX + "NODE": node,
                    CHECKPOINT_DIR: str(jd / "ckpt"), TOKEN: spec.token}
        if device is not None:  # one visible device per rank: it is cuda:0 inside the worker
            contract.update(CUDA_VISIBLE_DEVICES=str(device), LOCAL_RANK="0")
        return self.env.build(spec.env, contract, home=str(jd / "home"), user=acct.name if acct else None)

    def _spawn(self, jd: Path, gen: int, r: int, argv: str, env: dict[str, str], acct: Account | None) -> _Rank:
        """Rank `r` under `_wrap`, in its own session, as `acct` (no supplementary groups, umask 077); its
        output goes to a log file the service creates and hands to the account."""
        exit_file = jd / "run" / f"g{gen}-r{r}.exit"
        ids: dict[str, object] = {}
        if acct is not None:
            ids = {"user": acct.uid, "group": acct.gid, "extra_groups": [], "umask": 0o077}
        log = _jobfiles.open_owned(jd / "logs" / f"g{gen}-r{r}.log", acct)
        try:
            p = subprocess.Popen([self.python, "-m", "elastisched.backends._wrap", str(exit_file), "--", self.python,
                                  "-u", "-m", "elastisched.backends._argv", argv], env=env, stdout=log,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(jd / "home"),
                                 start_new_session=True, **ids)  # type: ignore[call-overload]
        finally:
            os.close(log)
        self.started_pids.append(p.pid)
        return _Rank(p.pid, start_ticks(p.pid), exit_file, p)

    # ------------------------------------------------------------------ events
    def poll(self) -> list[BackendEvent]:
        out, self._pending = self._pending, []
        for g in list(self.groups.values()):
            h = self._hints(g.job_id)
            if h is not None:
                out.append(h)
            codes = g.codes()
            if all(c is None for c in codes):
                continue
            if any(c not in (None, 0) for c in codes) and any(c is None for c in codes):
                # A crashed rank leaves its peers blocked in a collective: take the group down.
                g.signal(signal.SIGKILL)
                self._wait_gone(g)
                codes = g.codes()
            elif any(c is None for c in codes):
                continue  # rank 0 done first; wait for the others
            out.append(self._ended(g, codes))
        return out

    def _hints(self, job_id: str) -> JobHints | None:
        """The newest complete line appended to the job's hints file since the last poll (one stat per poll)."""
        h, self._hint_pos[job_id] = read_hints(self.job_dir(job_id) / "ckpt" / "hints.jsonl",
                                               self._hint_pos.get(job_id, 0), job_id)
        return h

    def set_batch(self, job_id: str, batch_size: int) -> None:
        """An in-place batch change (`backends/hints.py`): the running workers switch at a step boundary."""
        g = self.groups.get(job_id)
        if g is not None:
            write_batch_target(self.job_dir(job_id) / "ckpt", batch_size, g.generation)

    def _ended(self, g: _Group, codes: list[int | None]) -> GenerationEnded:
        """How a generation whose ranks all exited ended. Rank 0 exiting 0 unsignalled means the job finished
        its work (it reported completion): the job is done even if another rank then died in teardown, so
        a finished job is never run again."""
        self.groups.pop(g.job_id, None)
        self._hint_pos.pop(g.job_id, None)
        t, ok = time.time(), all(c == 0 for c in codes)
        if ok and any(r.signalled() for r in g.ranks):
            # Stopped by a signal we did not send (an operator, the OS): it checkpointed, so resume it.
            return GenerationEnded(t, g.job_id, g.generation, GenerationOutcome.INTERRUPTED, tuple(codes),
                                   "stopped by a signal")
        if ok or (codes[0] == 0 and not g.ranks[0].signalled()):
            return GenerationEnded(t, g.job_id, g.generation, GenerationOutcome.SUCCEEDED, tuple(codes))
        return GenerationEnded(t, g.job_id, g.generation, GenerationOutcome.FAILED, tuple(codes),
                               f"generation {g.generation} exited with codes {codes}")

    # ------------------------------------------------------------------ restart
    def recover(self, generations: Sequence[GenerationRecord]) -> list[BackendEvent]:
        """Adopt each generation to keep whose workers are still the same processes (by recorded PID and start
        time, else by launch token), settle the ones that ended while the service was down (exit files),
        report the lost ones; stop every live worker of a generation not to keep."""
        out: list[BackendEvent] = []
        for rec in generations:
            jid, n = rec.job_id, rec.generation
            run = self.job_dir(jid) / "run"
            pids, ran = list(rec.pids), set[int]()
            if rec.token and (len(pids) != rec.allocation.gpus or not any(start_ticks(p) == t for p, t in pids)):
                # Ranks that ran and ended while we were down are gone from /proc but left their exit files.
                if not rec.pids:
                    ran = {r for r in range(rec.allocation.gpus) if (run / f"g{n}-r{r}.exit").exists()}
                found = find_by_token(rec.token)  # the crash came before the PIDs were recorded
                deadline = time.monotonic() + 1.0  # a rank forked but not yet exec'd shows its parent's environment
                while len(ran | found.keys()) < rec.allocation.gpus and time.monotonic() < deadline:
                    time.sleep(0.05)
                    found = find_by_token(rec.token)
                if found or ran:
                    pids = [found.get(r, (0, None)) for r in range(max([*found, *ran]) + 1)]
            ranks = [_Rank(int(pid), ticks, run / f"g{n}-r{r}.exit") for r, (pid, ticks) in enumerate(pids)
                     if pid or (run / f"g{n}-r{r}.exit").exists()]  # pid 0: known by its exit file alone
            g = _Group(jid, n, rec.allocation, ranks, list(rec.devices or [None] * len(ranks)))
            codes = g.codes()
            if not rec.keep:
                self._stop_groups([g])
                out.append(GenerationEnded(time.time(), jid, n, GenerationOutcome.STOPPED, tuple(g.codes())))
                continue
            if not ranks or len(ranks) != rec.allocation.gpus:
                # Planned but never (fully) started: stop what there is (gone before the daemon relaunches it).
                g.signal(signal.SIGKILL)
                self._wait_gone(g)
                out.append(GenerationEnded(time.time(), jid, n, GenerationOutcome.LOST, tuple(codes),
                                           "never fully started"))
                continue
            if all(c is None for c in codes) or (any(c is None for c in codes) and not any(codes)):
                self.groups[jid] = g
                out.append(JobStarted(time.time(), jid, n, adopted=True, pids=tuple((r.pid, r.ticks) for r in ranks),
                                      devices=tuple(g.devices)))
                continue
            if rec.state == GenerationState.STOPPING or all(c == -9 for c in codes):
                # Interrupted mid-stop, or killed while we were down: resume from the checkpoint.
                g.signal(signal.SIGKILL)
                self._wait_gone(g)
                out.append(GenerationEnded(time.time(), jid, n, GenerationOutcome.LOST, tuple(codes),
                                           "gone while we were down"))
                continue
            out.append(self._ended(g, codes))
        return out + self.poll()

    def close(self) -> None:
        """Workers are left running on purpose: a restarted service adopts them."""
        for g in self.groups.values():
            for r in g.ranks:
                if r.proc is not None:
                    r.proc.returncode = r.proc.poll()
