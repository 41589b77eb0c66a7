"""The local backend's processes: how a rank is known again (PID + start ticks, or its generation's launch
token in `/proc/*/environ`), read (its exit file, else its process) and signalled (its whole process group).
Apart from `local.py`, which decides when to launch, stop and adopt them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from elastisched.backends._jobfiles import read_regular
from elastisched.core.types import Allocation
from elastisched.train.contract import PREFIX, RANK

TOKEN = PREFIX + "LAUNCH_TOKEN"  # marks every process of one generation (found again after a crash)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now on loopback: one per job and generation (a shared rendezvous store couples jobs)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_ticks(pid: int) -> int | None:
    """Process start time in clock ticks since boot (/proc/PID/stat field 22); None if gone.

    PID + start time identifies a process across PID reuse, which a PID alone does not."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] == "Z":  # zombie: exited, waiting to be reaped
        return None
    return int(fields[19])


def find_by_token(token: str) -> dict[int, tuple[int, int | None]]:
    """Rank → (PID, start ticks) of the per-rank wrappers (process-group leaders) whose environment carries
    `token`. Only this user's processes are readable, which are the only ones we could have started."""
    needle = f"{TOKEN}={token}".encode() + b"\0"
    out: dict[int, tuple[int, int | None]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read()
            if needle not in env:
                continue
            with open(f"/proc/{d}/stat", encoding="utf-8") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) != int(d) or fields[0] == "Z":  # not a group leader (a worker under a wrapper), or dead
            continue
        rank = next((int(v.split(b"=", 1)[1]) for v in env.split(b"\0") if v.startswith(RANK.encode() + b"=")), 0)
        out[rank] = (int(d), int(fields[19]))
    return out


@dataclass
class _Rank:
    pid: int
    ticks: int | None
    exit_file: Path
    proc: subprocess.Popen[bytes] | None = None  # None when adopted after a restart

    def _recorded(self) -> list[str] | None:
        """The exit file's words (the job's account writes it: read as a regular file, never through a link)."""
        raw = read_regular(self.exit_file, limit=4096)
        if raw is None:
            return None
        return raw.decode(errors="replace").split() or ["-9"]

    def signalled(self) -> bool:
        """The worker exited after a SIGTERM/SIGINT (a checkpointed stop, not the end of training)."""
        rec = self._recorded()
        return rec is not None and len(rec) > 1

    def code(self) -> int | None:
        """Exit code when finished (-9 when gone without a code, e.g. SIGKILLed), else None."""
        rec = self._recorded()
        if rec is not None:
            with contextlib.suppress(ValueError):
                return int(rec[0])
            return -9
        if self.proc is not None:
            rc = self.proc.poll()
            if rc is None:
                return None
            rec = self._recorded()
            return int(rec[0]) if rec else (rc if rc != 0 else -9)
        if start_ticks(self.pid) == self.ticks and self.ticks is not None:
            return None
        return -9


@dataclass
class _Group:
    job_id: str
    generation: int
    allocation: Allocation
    ranks: list[_Rank]
    devices: list[int | None] = field(default_factory=list)  # CUDA device per rank (GPU nodes)
    stopping: bool = False

    def codes(self) -> list[int | None]:
        return [r.code() for r in self.ranks]

    def signal(self, sig: int) -> None:
        if sig == signal.SIGKILL:  # each rank leads its own session: kill its whole group
            for r in self.ranks:
                if r.pid > 0 and r.code() is None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(r.pid, signal.SIGKILL)
            return
        for r in self.ranks:
            if r.pid > 0 and r.code() is None:  # pid 0: a rank known only by its exit file
                with contextlib.suppress(ProcessLookupError):
                    os.kill(r.pid, sig)
