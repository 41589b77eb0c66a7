"""Start N local worker processes on the launch contract, forward SIGTERM, escalate to SIGKILL.

A resize is a generation restart: the backend asks the workers to checkpoint (SIGTERM), waits with a
deadline, kills whatever is left, and relaunches at the new size on a fresh port. All workers of one
launch live in their own process group so that the escalation reaches grandchildren too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

from elastisched.train.contract import LaunchEnv, worker_envs

DEFAULT_GRACE_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free right now on `host` (one per job and generation; never reuse a store)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class WorkerGroup:
    """The processes of one generation of one job on this machine."""

    procs: list[subprocess.Popen[bytes]]
    envs: list[LaunchEnv]
    pgid: int | None = None
    started_at: float = field(default_factory=time.monotonic)

    def poll(self) -> list[int | None]:
        """Exit code per rank (None while running)."""
        return [p.poll() for p in self.procs]

    def alive(self) -> bool:
        return any(code is None for code in self.poll())

    def signal(self, sig: int) -> None:
        """Send `sig` to every live worker (and, for SIGKILL, to the whole process group)."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)
        if sig == signal.SIGKILL:
            # The shared group (start_workers) or each worker's own group (WarmPool workers).
            for pg in {self.pgid, *(p.pid for p in self.procs)} - {None}:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pg, signal.SIGKILL)  # type: ignore[arg-type]

    def wait(self, timeout: float | None = None) -> list[int | None]:
        """Wait until all workers exit or `timeout` passes. A failed rank takes the others down."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            codes = self.poll()
            if all(c is not None for c in codes):
                return codes
            if any(c not in (None, 0) for c in codes):
                # A crashed rank leaves its peers blocked in a collective: stop them.
                self.stop(grace=5.0)
                return self.poll()
            if deadline is not None and time.monotonic() >= deadline:
                return codes
            time.sleep(0.02)

    def stop(self, grace: float = DEFAULT_GRACE_S) -> list[int | None]:
        """SIGTERM (workers checkpoint and exit 0), then SIGKILL the group after `grace` seconds."""
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.alive():
            time.sleep(0.02)
        if self.alive():
            self.signal(signal.SIGKILL)
            for p in self.procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=5.0)
        return self.poll()


def start_workers(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    nproc: int = 1,
    accum: list[int] | None = None,
    local_batch: int | None = None,
    global_batch: int | None = None,
    job_id: str = "local",
    generation: int = 0,
    checkpoint_dir: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    python: str = sys.executable,
    stdout: int | None = None,
    stderr: int | None = None,
    pool: WarmPool | None = None,
) -> WorkerGroup:
    """Start `nproc` workers of `script` on 127.0.0.1 with a fresh rendezvous port (from `pool`'s
    pre-imported interpreters when given; stdout/stderr/python are then the pool's)."""
    if nproc < 1:
        raise ValueError(f"nproc={nproc} must be >= 1")
    port = free_port()
    envs = worker_envs(
        nproc=nproc,
        master_port=port,
        job_id=job_id,
        generation=generation,
        accum=accum,
        local_batch=local_batch,
        global_batch=global_batch,
        checkpoint_dir=checkpoint_dir,
    )
    if pool is not None:
        return _assign_pool(pool, envs, script, args, extra_env)
    return _spawn(envs, script, args, extra_env, python, stdout, stderr)


def _assign_pool(pool: WarmPool, envs: list[LaunchEnv], script: str | os.PathLike[str], args: Sequence[str],
                 extra_env: Mapping[str, str] | None) -> WorkerGroup:
    """Hand each rank's assignment to one of `pool`'s pre-imported interpreters (on its stdin)."""
    procs = pool.take(len(envs))
    for le, p in zip(envs, procs, strict=True):
        job = {"env": {**le.to_env(), "LOCAL_WORLD_SIZE": str(len(envs)), **(extra_env or {})},
               "script": os.fspath(script), "args": list(args)}
        assert p.stdin is not None
        p.stdin.write((json.dumps(job) + "\n").encode())
        p.stdin.close()
    return WorkerGroup(procs=procs, envs=envs, pgid=None)


def _spawn(envs: list[LaunchEnv], script: str | os.PathLike[str], args: Sequence[str],
           extra_env: Mapping[str, str] | None, python: str, stdout: int | None, stderr: int | None) -> WorkerGroup:
    """Start one fresh interpreter per rank, all in one new process group (for SIGKILL escalation)."""
    procs: list[subprocess.Popen[bytes]] = []
    pgid: int | None = None
    for le in envs:
        env = dict(os.environ)
        env.update(le.to_env())
        env["LOCAL_WORLD_SIZE"] = str(len(envs))
        env.setdefault("OMP_NUM_THREADS", "1")
        if extra_env:
            env.update(extra_env)
        # the first worker leads the group
        p = subprocess.Popen(
            [python, "-u", "-m", "elastisched.train._entry", os.fspath(script), *args],
            env=env,
            stdout=stdout,
            stderr=stderr,
            process_group=0 if pgid is None else pgid,
        )
        if pgid is None:
            pgid = p.pid
        procs.append(p)
    return WorkerGroup(procs=procs, envs=envs, pgid=pgid)


class WarmPool:
    """Idle interpreters that have already imported torch (see `_standby`), so that a relaunch after a
    resize skips the import. Idle members block on stdin and use no CPU; `close()` ends them."""

    def __init__(self, size: int, *, python: str = sys.executable, stdout: int | None = None,
                 stderr: int | None = None, env: Mapping[str, str] | None = None) -> None:
        self.size, self.python, self.stdout, self.stderr = size, python, stdout, stderr
        self.env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(env or {})}
        self.idle: list[subprocess.Popen[bytes]] = []
        self._ready_dir = tempfile.mkdtemp(prefix="elastisched-pool-")
        self.refill()

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen([self.python, "-u", "-m", "elastisched.train._standby", self._ready_dir],
                                stdin=subprocess.PIPE, stdout=self.stdout, stderr=self.stderr, env=self.env,
                                process_group=0)

    def refill(self) -> None:
        """Top the pool up to `size` (call when the machine is idle, not on a resize's critical path)."""
        self.idle = [p for p in self.idle if p.poll() is None]
        while len(self.idle) < self.size:
            self.idle.append(self._spawn())

    def is_ready(self, p: subprocess.Popen[bytes]) -> bool:
        return os.path.exists(os.path.join(self._ready_dir, str(p.pid)))

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Block until every idle member has finished its imports."""
        deadline = time.monotonic() + timeout
        while not all(self.is_ready(p) for p in self.idle):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def take(self, n: int) -> list[subprocess.Popen[bytes]]:
        """n members, warm ones first; cold ones are spawned if the pool is short."""
        self.idle = [p for p in self.idle if p.poll() is None]
        while len(self.idle) < n:
            self.idle.append(self._spawn())
        self.idle.sort(key=lambda p: not self.is_ready(p))
        out, self.idle = self.idle[:n], self.idle[n:]
        return out

    def close(self) -> None:
        for p in self.idle:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.close()
        for p in self.idle:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.idle = []
        shutil.rmtree(self._ready_dir, ignore_errors=True)


def restart(
    old: WorkerGroup,
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    grace: float = DEFAULT_GRACE_S,
    pool: WarmPool | None = None,
    **kwargs: object,
) -> WorkerGroup:
    """Resize by generation restart: SIGTERM the old generation (it checkpoints and exits 0; SIGKILL
    after `grace`), then start the new one, in `pool`'s pre-imported interpreters when given. The new
    workers start only after every old worker has exited, so ports, GPU memory and the checkpoint are
    released and complete."""
    old.stop(grace=grace)
    return start_workers(script, args, pool=pool, **kwargs)  # type: ignore[arg-type]


def launch(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    grace: float = DEFAULT_GRACE_S,
    **kwargs: object,
) -> list[int]:
    """Run workers to completion, forwarding SIGTERM/SIGINT to them; returns exit codes per rank.

    SIGTERM to the launcher is forwarded once; if the workers are not gone `grace` seconds later,
    the process group is killed (agents stuck in rendezvous ignore SIGTERM).
    """
    group = start_workers(script, args, **kwargs)  # type: ignore[arg-type]
    term_at: list[float] = []

    def _forward(signum: int, _frame: FrameType | None) -> None:
        if not term_at:
            term_at.append(time.monotonic())
        group.signal(signal.SIGTERM)

    old = {s: signal.signal(s, _forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            codes = group.wait(timeout=0.2)
            if all(c is not None for c in codes):
                break
            if term_at and time.monotonic() - term_at[0] > grace:
                group.signal(signal.SIGKILL)
                codes = group.wait(timeout=5.0)
                break
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return [(-9 if c is None else c) for c in group.poll()]
