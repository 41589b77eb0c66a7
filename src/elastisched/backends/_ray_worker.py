"""The Ray actor behind one rank: it runs the user's script on its node as a subprocess on the launch contract.

Why a subprocess and not the actor itself: the script then leaves through `train._entry` exactly as under
`elastisched launch` and the local backend (same clean exit path, same SIGTERM → checkpoint → exit 0), and a
stop can be a signal rather than a Ray call into user code. The actor plays the role the local backend's
`_wrap` plays: it forwards SIGTERM, reaps the child and writes the exit file (`"<code> [SIGTERM]"`, the same
format) in the job's directory on the shared file system, so a restarted service can settle a generation
that ended while it was down. The child gets `PR_SET_PDEATHSIG = SIGKILL`: when the actor dies (its node is
lost, or the backend kills it) the training process dies with it instead of training on as an orphan.

Imported on every Ray node (the package must be installed there); stdlib and ray only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Any

import ray

from elastisched.backends._wrap import STOP_NOTE, settled_signals

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=4)
class RankRunner:
    """One rank of one generation. Methods are few and cheap: the backend polls `status` every tick."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.code: int | None = None
        self.signals: set[str] = set()
        self.exit_file: str | None = None
        self._lock = threading.Lock()

    def where(self) -> tuple[str, str, int]:
        """(Ray node id, node IP, a TCP port free now on that IP): rank 0's answer is the rendezvous."""
        ip = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            port = int(s.getsockname()[1])
        return ray.get_runtime_context().get_node_id(), ip, port

    def start(self, args: list[str], env: dict[str, str], cwd: str, log_path: str, exit_file: str) -> tuple[int, int]:
        """Start `python -u -m elastisched.train._entry SCRIPT ARGS` (this node's interpreter); (pid, ticks)."""
        full = {**os.environ, **env, STOP_NOTE: f"{exit_file}.note"}
        if os.environ.get("CUDA_VISIBLE_DEVICES"):
            full["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]  # Ray's pick for this bundle
            full["LOCAL_RANK"] = "0"
        self.exit_file = exit_file
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        os.makedirs(os.path.dirname(exit_file), exist_ok=True)
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-u", "-m", "elastisched.train._entry", *args], env=full,
                                         cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        threading.Thread(target=self._reap, daemon=True).start()
        return self.proc.pid, _ticks(self.proc.pid) or 0

    def _reap(self) -> None:
        assert self.proc is not None and self.exit_file is not None
        code = self.proc.wait()
        with self._lock:
            self.code = code
            tmp = f"{self.exit_file}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                self.signals = set(settled_signals(self.signals, code, f"{self.exit_file}.note"))
                f.write(" ".join([str(code), *sorted(self.signals)]))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.exit_file)

    def status(self) -> tuple[int | None, bool, int]:
        """(exit code or None while running, whether it exited after a stop signal, pid)."""
        with self._lock:
            return self.code, bool(self.signals), self.proc.pid if self.proc else 0

    def signal(self, name: str) -> None:
        """SIGTERM: the checkpointed stop of the launch contract; SIGKILL: the whole process group."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if name == "SIGKILL":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            return
        with self._lock:
            self.signals.add(name)
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(getattr(signal, name))

    def ping(self) -> Any:
        return True


def _ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])
