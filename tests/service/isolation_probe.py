"""Two users on one service, and user B's job attacking (issue 23, finding 1): the scenario behind
`test_isolation.py`, runnable by hand against any checkout of elastisched, as root.

    sudo python tests/service/isolation_probe.py                   # this checkout (per-user accounts)
    git archive main src | tar -x -C /tmp/es-main                  # the code before issue 23...
    sudo python tests/service/isolation_probe.py --src /tmp/es-main/src   # ...whose jobs all run as the service

It starts `python -m elastisched.service` (from `--src` when given, else this checkout) on a fresh SQLite
workdir with the admin token in both `$ELASTISCHED_TOKEN` and `<workdir>/token`, creates users A and B,
submits A's job (the fake worker, with a secret argument, writing a checkpoint and a log) and, once A runs,
B's job `isolation_attacks.py`, which tries every attack of the finding from inside B's job: read the
service's `/proc/PID/environ` and the token file, read and write the database (an admin token row), list the
workdir, read A's log, arguments, environment and checkpoint, write into A's checkpoint directory, signal the
service and SIGKILL A's workers. It prints one line per attack (SUCCEEDED / failed, with why) and A's fate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
FAKE = HERE.parent / "backends" / "fake_worker.py"
ATTACKS = HERE / "isolation_attacks.py"
ADMIN = "probe-admin-" + secrets.token_urlsafe(18)


def _wait(pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def job_python_options(base: Path) -> list[str]:
    """`--job-python`/`--job-env` for a machine whose interpreter lives where other accounts cannot reach it
    (e.g. under a 0700 /root): the system Python with this checkout's package, copied if it is private too."""
    import elastisched
    from elastisched.backends.identity import probe

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if probe(sys.executable, env, base) is None:
        return []
    system = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    pkg = Path(elastisched.__file__).resolve().parents[1]
    if probe(system, env | {"PYTHONPATH": str(pkg)}, base) is not None:
        pkg = base / "pkg"
        shutil.copytree(Path(elastisched.__file__).resolve().parent, pkg / "elastisched",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for root, dirs, files in os.walk(pkg):
            for n in (*dirs, *files):
                os.chmod(os.path.join(root, n), 0o755 if n in dirs else 0o644)
        pkg.chmod(0o755)
    return ["--job-python", system, "--job-env", f"PYTHONPATH={pkg}"]


class Scenario:
    """One service, users A and B (tokens in its database), A's job and B's attack."""

    def __init__(self, base: Path, src: str | None) -> None:
        self.base, self.src = base, src
        self.work, self.scripts = base / "work", base / "scripts"
        self.db = self.work / "elastisched.db"
        self.users = {k: f"{k}-{secrets.token_hex(3)}" for k in ("a", "b")}
        self.tokens: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def setup(self) -> None:
        from elastisched.service.auth import create_token, precreate_private
        from elastisched.service.store import Store

        self.base.chmod(0o755)  # job accounts must reach their own job directories under it
        self.scripts.mkdir()
        self.scripts.chmod(0o755)  # explicitly: an earlier test in this process may have set umask 077
        for f in (FAKE, ATTACKS):
            shutil.copy(f, self.scripts / f.name)
            (self.scripts / f.name).chmod(0o644)
        self.work.mkdir(mode=0o700)
        fd = os.open(self.work / "token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (ADMIN + "\n").encode())
        os.close(fd)
        precreate_private(self.db)
        store = Store(f"sqlite:///{self.db}")
        for k, user in self.users.items():
            self.tokens[k] = create_token(store, user)[1]
        store.close()

    def start(self, options: list[str]) -> None:
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ELASTISCHED_")}
        env |= {"ELASTISCHED_TOKEN": ADMIN, "OMP_NUM_THREADS": "1"}
        if self.src:
            env["PYTHONPATH"] = self.src
        log = open(self.base / "service.log", "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "elastisched.service", "--db", f"sqlite:///{self.db}", "--workdir", str(self.work),
             "--scripts-dir", str(self.scripts), "--cluster", "1x2:cpu", "--policy", "fifo", "--tick", "0.2",
             "--grace", "5", "--port", str(port), *options], env=env, stdout=log, stderr=subprocess.STDOUT,
            cwd=str(self.base))
        log.close()
        self.url = f"http://127.0.0.1:{port}"
        _wait(self._healthy, 60, "the service to answer")

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"service exited: {(self.base / 'service.log').read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        return False

    def api(self, who: str, method: str, path: str, **kw: Any) -> Any:
        tok = ADMIN if who == "admin" else self.tokens[who]
        r = httpx.request(method, f"{self.url}{path}", headers={"Authorization": f"Bearer {tok}"}, timeout=30, **kw)
        assert r.status_code < 400, f"{method} {path}: {r.status_code} {r.text[:500]}"
        return r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text

    def run(self) -> dict[str, Any]:
        """A's job, then B's attack once A runs; both to their end. Returns what happened."""
        canary = "canary-" + secrets.token_hex(8)
        a = self.api("a", "POST", "/v1/jobs", json={
            "script": str(self.scripts / FAKE.name), "name": "a", "args": ["--steps", "120", "--sleep", "0.1",
                                                                          "--note", canary]})
        aid = a["id"]
        ck = self.work / "jobs" / aid / "ckpt" / "progress.json"
        try:
            da = _wait(lambda: (d := self.api("admin", "GET", f"/v1/jobs/{aid}"))["state"] == "RUNNING"
                       and d["generations"][-1]["pids"] and ck.exists() and d, 120, "A running with a checkpoint")
        except AssertionError as e:
            d, log = self.api("admin", "GET", f"/v1/jobs/{aid}"), self.api("admin", "GET", f"/v1/jobs/{aid}/logs")
            raise AssertionError(f"{e}: A is {d['state']} ({d['message']}), generations {d['generations']}, "
                                 f"log {log[-1500:]!r}, service log "
                                 f"{(self.base / 'service.log').read_text()[-1500:]}") from None
        gen = da["generations"][-1]
        assert self.proc is not None
        b = self.api("b", "POST", "/v1/jobs", json={
            "script": str(self.scripts / ATTACKS.name), "name": "b", "args": [
                "--service-pid", str(self.proc.pid), "--workdir", str(self.work), "--db", str(self.db),
                "--api", self.url, "--job", a["id"], "--gen", str(gen["generation"]),
                "--pids", ",".join(str(p) for p, _ in gen["pids"]), "--canary", canary]})
        final = ("SUCCEEDED", "FAILED", "CANCELLED")
        db = _wait(lambda: (d := self.api("b", "GET", f"/v1/jobs/{b['id']}"))["state"] in final and d, 120, "B's end")
        log = self.api("b", "GET", f"/v1/jobs/{b['id']}/logs")
        line = next((ln for ln in log.splitlines() if ln.startswith('{"attacks"')), None)
        assert line is not None, f"B printed no report (state {db['state']}, message {db['message']}): {log[-2000:]}"
        da = _wait(lambda: (d := self.api("admin", "GET", f"/v1/jobs/{a['id']}"))["state"] in final and d, 180,
                   "A's end")
        return {"b": json.loads(line), "a": {k: da[k] for k in ("state", "retries", "restarts", "generation")},
                "a_id": a["id"]}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        from elastisched.service.store import Store

        if self.db.exists():
            store = Store(f"sqlite:///{self.db}")
            for g in store.generations():
                for pid, _ in g["pids"] or ():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
            store.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def remove_accounts(users: dict[str, str]) -> None:
    """Delete the job accounts `--create-job-users` made for the scenario's users (and their groups)."""
    from elastisched.backends.identity import _lookup, created_name

    for user in users.values():
        name = created_name(user)
        if _lookup(name) is not None:
            subprocess.run(["userdel", name], capture_output=True, check=False, timeout=60)


def report(result: dict[str, Any]) -> str:
    lines = [f"B's job ran as uid {result['b']['whoami']['uid']}"]
    for name, r in result["b"]["attacks"].items():
        lines.append(f"  {name:20} {'SUCCEEDED' if r['ok'] else 'failed   '}  {r['detail']}")
    a = result["a"]
    lines.append(f"A's job: {a['state']}, retries {a['retries']}, restarts {a['restarts']}, "
                 f"generation {a['generation']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=None, help="the `src` folder of the checkout to run (default: this one)")
    ap.add_argument("--json", default=None, help="also write the result here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the scenario starts the service as root, as a deployment with per-user accounts does")
    base = Path(tempfile.mkdtemp(prefix="es-iso-", dir="/tmp"))
    sc = Scenario(base, a.src)
    try:
        sc.setup()
        options = [] if a.src else ["--isolation", "users", "--create-job-users", *job_python_options(base)]
        sc.start(options)
        result = sc.run()
    finally:
        sc.stop()
        remove_accounts(sc.users)
        shutil.rmtree(base, ignore_errors=True)
    print(report(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
