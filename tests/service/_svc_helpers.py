"""Run the real service (uvicorn in a subprocess on 127.0.0.1, SQLite in tmp_path) for tests."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

ROOT = Path(__file__).resolve().parents[2]
FAKE = str(ROOT / "tests" / "backends" / "fake_worker.py")
EXAMPLE = str(ROOT / "examples" / "linreg_elastic.py")
TOKEN = "test-token-0123456789-abcdef"  # the admin token (at least 24 characters)
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(pred: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
    """Poll `pred` until truthy; fail (never hang) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class ServiceProc:
    """`python -m elastisched.service` with a given cluster and policy; restartable on the same database."""

    def __init__(self, tmp: Path, *, cluster: str = "2x2:cpu", policy: str = "fifo", grace: float = 10.0,
                 scripts_dir: str | Path | None = ROOT, extra: tuple[str, ...] = (), token: str | None = TOKEN,
                 isolation: str = "none", env: dict[str, str] | None = None) -> None:
        """`scripts_dir=None` starts the service without `--scripts-dir`; `token=None` without a legacy token.
        `isolation` none (jobs as the service) unless a test is about per-user accounts (tests/service/
        test_isolation.py), so that jobs may write into pytest's private tmp_path."""
        self.tmp, self.cluster, self.policy, self.grace = tmp, cluster, policy, grace
        self.scripts_dir = None if scripts_dir is None else str(scripts_dir)
        self.extra, self.token = (*extra, "--isolation", isolation), token
        self.env = dict(env or {})  # more of the service's environment
        self.db = f"sqlite:///{tmp / 'state.db'}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.client: httpx.Client | None = None

    def start(self) -> ServiceProc:
        """Start the service on a free port. A port found free can be taken before the service binds it (a Ray
        cluster's workers open ports all the time): then it is started again on another, at most 3 times."""
        for attempt in range(3):
            self._spawn(free_port())
            try:
                wait_for(self._healthy, 60, "service health")
                return self
            except AssertionError as e:
                if "address already in use" not in str(e) or attempt == 2:
                    raise
        return self

    def _spawn(self, port: int) -> None:
        self.port = port
        if self.client is not None:
            self.client.close()
        env = {k: v for k, v in os.environ.items() if k != "ELASTISCHED_TOKEN"} | {"OMP_NUM_THREADS": "1"}
        if self.token is not None:
            env["ELASTISCHED_TOKEN"] = self.token
        env.update(self.env)
        log = open(self.tmp / "service.log", "ab")  # noqa: SIM115 - handed to the child
        scripts = [] if self.scripts_dir is None else ["--scripts-dir", self.scripts_dir]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "elastisched.service", *([] if "ELASTISCHED_DB" in env else ["--db", self.db]),
             "--port", str(self.port),
             "--cluster", self.cluster, "--policy", self.policy, "--workdir", str(self.tmp / "work"),
             *scripts, "--tick", "0.2", "--grace", str(self.grace), *self.extra],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30,
                                   headers={"Authorization": f"Bearer {self.token}"} if self.token else {})

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"service exited: {(self.tmp / 'service.log').read_text()[-3000:]}")
        try:
            return self.client is not None and self.client.get("/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        assert self.client is not None
        return self.client.request(method, path, **kw)

    def job(self, jid: str) -> dict[str, Any]:
        r = self.api("GET", f"/v1/jobs/{jid}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def as_user(self, token: str) -> httpx.Client:
        """A client that sends `token` (close it, or use it in a `with`)."""
        return httpx.Client(base_url=self.url, timeout=30, headers={"Authorization": f"Bearer {token}"})

    def log_text(self) -> str:
        return (self.tmp / "service.log").read_text(errors="replace")

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def kill_workers(self) -> None:
        """Teardown: SIGKILL every worker the store knows (each rank leads its own process group)."""
        from elastisched.service.store import Store

        store = Store(self.db)
        try:
            for gen in store.generations():
                for pid, _ticks in gen["pids"]:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
        finally:
            store.close()
