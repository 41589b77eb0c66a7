"""The live service as the service benchmarks run it: `python -m elastisched.service` in a subprocess on a
free loopback port, waited for until it answers `/healthz`, stopped with SIGINT, and the workers it leaves
behind ended (they outlive the service by design, for adoption; a benchmark must not leave any).

Shared by `calibration.py`, `crash_soak.py` and `service_load.py`, which import it by its bare name: run as
scripts, their folder is on `sys.path`; loaded from a file by a test, each puts it there first.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx


class ServiceFailed(RuntimeError):
    """The service exited or did not answer its health check in time (a harness failure, not a result)."""


def free_port() -> int:
    """A loopback port nobody listens on now (the service binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_service(options: Sequence[str], env: Mapping[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the service with `options` (everything but `--port`), its output appended to `log`; returns the
    process and its base URL. The log is opened in append mode so that a restarted service adds to it."""
    port = free_port()
    if "--isolation" not in options:  # the benchmarks measure scheduling: jobs run as the service, as before
        options = [*options, "--isolation", "none"]
    with open(log, "ab") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen([sys.executable, "-m", "elastisched.service", "--port", str(port), *options],
                                env=dict(env), stdout=out, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def _tail(log: Path, chars: int = 3000) -> str:
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def wait_healthy(proc: subprocess.Popen[bytes], base: str, log: Path, *, timeout: float = 90.0, every: float = 0.1,
                 ready: Callable[[], bool] | None = None) -> None:
    """Return once `/healthz` answers 200, or once `ready()` holds (a service blocked on purpose before it
    answers, e.g. at a fault hook); raise `ServiceFailed` with the log's tail if it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready is not None and ready():
            return
        if proc.poll() is not None:
            raise ServiceFailed(f"service exited: {_tail(log)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return
        time.sleep(every)
    raise ServiceFailed(f"service did not become healthy in {timeout:g} s: {_tail(log)}")


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (a clean shutdown), then SIGKILL if it has not exited within 30 s."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def kill_workers(db: str) -> None:
    """SIGKILL the process group of every worker the store recorded (none should be left; end any)."""
    from elastisched.service.store import Store

    store = Store(db)
    for gen in store.generations():
        for pid, _ticks in gen["pids"] or ():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    store.close()
