"""The last holes of issue 23: secrets that never stay in the service's environment or command line, a job's
environment built from an allow-list, the minimum admin token, script paths the OS refuses (422, not 500),
paths that are not regular files (API and `sim run`), the per-user queued-jobs limit, security headers."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from _svc_helpers import FAKE, TOKEN, ServiceProc, wait_for

from elastisched.service.routes.meta import DASHBOARD


def _job_env(svc: ServiceProc, jid: str) -> dict[str, str]:
    wait_for(lambda: svc.job(jid)["state"] == "SUCCEEDED", 60, "the job to finish")
    line = next(ln for ln in svc.api("GET", f"/v1/jobs/{jid}/logs").text.splitlines() if ln.startswith('{"env"'))
    return dict(json.loads(line)["env"])


def test_secrets_leave_the_environment_and_jobs_get_only_the_allow_list(service_factory: Any, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'state.db'}"
    svc = service_factory(cluster="1x1:cpu", env={"ELASTISCHED_DB": db, "SERVICE_ONLY_SECRET": "s3cr3t-canary",
                                                  "OMP_NUM_THREADS": "1"}).start()
    assert svc.proc is not None
    environ = Path(f"/proc/{svc.proc.pid}/environ").read_bytes()  # the kernel's copy, after the re-exec
    cmdline = Path(f"/proc/{svc.proc.pid}/cmdline").read_bytes()
    for secret in (TOKEN, db):
        assert secret.encode() not in environ and secret.encode() not in cmdline
    assert b"ELASTISCHED_TOKEN=" not in environ and b"ELASTISCHED_DB=" not in environ
    assert (tmp_path / "state.db").exists()  # the URL from $ELASTISCHED_DB was used
    jid = svc.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--steps", "1", "--show-env"],
                                           "env": {"MY_SETTING": "on", "PYTHONHASHSEED": "0"}}).json()["id"]
    env = _job_env(svc, jid)
    assert env["MY_SETTING"] == "on" and env["PYTHONHASHSEED"] == "0" and env["OMP_NUM_THREADS"] == "1"
    assert "PATH" in env and env["ELASTISCHED_JOB_ID"] == jid and env["HOME"].endswith(f"{jid}/home")
    assert not {"ELASTISCHED_TOKEN", "ELASTISCHED_DB", "SERVICE_ONLY_SECRET"} & set(env), sorted(env)
    for bad in ({"ELASTISCHED_JOB_ID": "x"}, {"RANK": "3"}, {"CUDA_VISIBLE_DEVICES": "0"}, {"1X": "y"},
                {"A": "\u0000"}):
        r = svc.api("POST", "/v1/jobs", json={"script": FAKE, "env": bad})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "env", (bad, r.text)


def _run_service(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ELASTISCHED_")}
    return subprocess.run([sys.executable, "-m", "elastisched.service", "--workdir", str(tmp / "w"), "--port", "9",
                           "--isolation", "none", *args], env=base | (env or {}), capture_output=True, text=True,
                          timeout=60)


def test_a_short_admin_token_and_a_password_on_the_command_line_are_refused(tmp_path: Path) -> None:
    r = _run_service(tmp_path, env={"ELASTISCHED_TOKEN": "short-token"})
    assert r.returncode == 2 and "at least 24 characters" in r.stderr and "short-token" not in r.stderr, r.stderr
    r = _run_service(tmp_path, env={"ELASTISCHED_TOKEN": "a" * 40})  # long but one character
    assert r.returncode == 2 and "8 of them different" in r.stderr, r.stderr
    r = _run_service(tmp_path, "--db", "postgresql+psycopg://me:hunter2pw@127.0.0.1:1/x")
    assert r.returncode == 2 and "ELASTISCHED_DB" in r.stderr and "hunter2pw" not in r.stderr, r.stderr
    (tmp_path / "tokfile").write_text("tiny\n")
    r = _run_service(tmp_path, "--token-file", str(tmp_path / "tokfile"))
    assert r.returncode == 2 and "--token-file" in r.stderr, r.stderr


def test_script_paths_the_os_refuses_are_422_naming_script(service_factory: Any, tmp_path: Path) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    os.mkfifo(scripts / "fifo.py")
    (scripts / "loop.py").symlink_to(scripts / "loop.py")
    (scripts / "adir").mkdir()
    svc = service_factory(cluster="1x1:cpu", scripts_dir=scripts).start()
    cases = {"component of 256 ASCII bytes": "a" * 256, "component of 256 UTF-8 bytes (128 characters)": "é" * 128,
             "path over PATH_MAX in 3,630 characters": "/".join(["é" * 120] * 30), "a FIFO": "fifo.py",
             "a loop of links": "loop.py", "a directory": "adir", "missing": "nope.py"}
    with httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as c:
        for what, script in cases.items():
            t0 = time.monotonic()
            r = c.post("/v1/jobs", json={"script": script})
            assert r.status_code == 422 and r.json()["detail"].startswith("script:"), (what, r.status_code, r.text)
            assert time.monotonic() - t0 < 5, what  # never a hang (a FIFO is not opened)
            assert r.headers.get("connection", "keep-alive") != "close", what
        assert c.get("/v1/jobs").status_code == 200  # the same connection still serves
    assert "Traceback" not in svc.log_text()


def test_sim_run_refuses_a_fifo_workload_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "elastisched.cli", "sim", "run", "--workload", str(fifo), "--policy",
                        "fifo", "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "not a regular file" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_user_may_queue_at_most_the_limit(service_factory: Any) -> None:
    from elastisched.service.auth import create_token
    from elastisched.service.store import Store

    svc = service_factory(cluster="1x1:cpu", extra=("--max-queued-per-user", "2")).start()
    store = Store(svc.db)
    try:
        _, bob = create_token(store, "bob")
    finally:
        store.close()
    long = {"script": FAKE, "args": ["--steps", "600", "--sleep", "0.1"]}
    with svc.as_user(bob) as c:
        first = c.post("/v1/jobs", json=long).json()["id"]
        wait_for(lambda: svc.job(first)["state"] == "RUNNING", 60, "bob's first job to run")
        assert [c.post("/v1/jobs", json=long).status_code for _ in range(2)] == [201, 201]  # two queued
        r = c.post("/v1/jobs", json=long)
        assert r.status_code == 429 and r.headers["retry-after"] == "30", r.text
        assert r.json()["detail"].startswith("jobs: user 'bob' has 2 jobs queued"), r.text
    assert svc.api("POST", "/v1/jobs", json=long).status_code == 201  # an admin is not limited


def _sha(block: str) -> str:
    return base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()


def test_security_headers_on_the_dashboard_and_the_api(service_factory: Any) -> None:
    from elastisched.service.auth import create_token
    from elastisched.service.store import Store

    svc = service_factory(cluster="1x1:cpu").start()
    page = httpx.get(f"{svc.url}/")
    csp = page.headers["content-security-policy"]
    script = re.search(r"<script>(.*?)</script>", DASHBOARD, re.S)
    style = re.search(r"<style>(.*?)</style>", DASHBOARD, re.S)
    assert script and style
    assert f"script-src 'sha256-{_sha(script[1])}';" in csp and f"style-src 'sha256-{_sha(style[1])}';" in csp
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "unsafe-eval" not in csp
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
    api = svc.api("GET", "/v1/jobs")
    assert api.headers["cache-control"] == "no-store" and api.headers["content-security-policy"].startswith(
        "default-src 'none'") and api.headers["referrer-policy"] == "no-referrer"
    store = Store(svc.db)
    try:
        _, bob = create_token(store, "bob")
    finally:
        store.close()
    with svc.as_user(bob) as c:  # cluster-wide job counts are an operator's: docs/security.md
        r = c.get("/metrics")
        assert r.status_code == 403 and r.json()["detail"].startswith("Authorization:"), r.text
        assert c.get("/v1/status").json()["isolation"] == "none"
