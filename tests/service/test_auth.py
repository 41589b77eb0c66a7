"""Per-user access and the service's secrets (issue 11 item 9), against a real service process.

Two users with their own tokens (made by `elastisched token create`) and the legacy single token as admin:
each user sees and acts on its own jobs only, only an admin reaches loans; tokens are stored hashed; files are
private; jobs do not inherit the token; the API's schema pages and the engine's errors are not public.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _svc_helpers import FAKE, TOKEN, ServiceProc, wait_for
from typer.testing import CliRunner

ENV_SCRIPT = "import os\nprint('TOKEN=' + repr(os.environ.get('ELASTISCHED_TOKEN')), flush=True)\n"


def _cli(*args: str) -> str:
    from elastisched.cli.main import app

    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProc]:
    tmp = tmp_path_factory.mktemp("auth")
    scripts = tmp / "scripts"
    scripts.mkdir()
    shutil.copy(FAKE, scripts / "fake_worker.py")
    (scripts / "env.py").write_text(ENV_SCRIPT)
    s = ServiceProc(tmp, cluster="2x2:cpu", scripts_dir=scripts).start()
    yield s
    s.stop()
    s.kill_workers()


@pytest.fixture(scope="module")
def users(svc: ServiceProc) -> dict[str, str]:
    """Tokens of alice and bob (users) made with the CLI against the service's database while it runs."""
    out = {}
    for user in ("alice", "bob"):
        d = json.loads(_cli("token", "create", "--user", user, "--db", svc.db, "--json"))
        assert d["user"] == user and not d["admin"] and d["token"].startswith("est_")
        out[user] = d["token"]
    return out


def _submit(c: httpx.Client, svc: ServiceProc, name: str, steps: int = 2000) -> str:
    script = str(Path(svc.scripts_dir or "") / "fake_worker.py")
    r = c.post("/v1/jobs", json={"script": script, "name": name, "args": ["--steps", str(steps), "--sleep", "0.05"]})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def test_two_users_see_and_act_on_their_own_jobs_only(svc: ServiceProc, users: dict[str, str]) -> None:
    with svc.as_user(users["alice"]) as alice, svc.as_user(users["bob"]) as bob:
        a = _submit(alice, svc, "alice-job")
        b = _submit(bob, svc, "bob-job")
        assert [j["id"] for j in alice.get("/v1/jobs").json()] == [a]
        assert [j["id"] for j in bob.get("/v1/jobs").json()] == [b]
        assert alice.get("/v1/jobs", params={"state": "PENDING,RUNNING,STARTING"}).json()[0]["owner"] == "alice"
        # Every way to reach bob's job from alice's token is a 404 (as if it did not exist), prefixes included.
        for method, path, body in [("GET", f"/v1/jobs/{b}", None), ("GET", f"/v1/jobs/{b[:4]}", None),
                                   ("DELETE", f"/v1/jobs/{b}", None), ("POST", f"/v1/jobs/{b}:resize", {"gpus": 1}),
                                   ("POST", f"/v1/jobs/{b}:suspend", None), ("POST", f"/v1/jobs/{b}:resume", None),
                                   ("GET", f"/v1/jobs/{b}/logs", None)]:
            r = alice.request(method, path, json=body)
            assert r.status_code in (403, 404), (method, path, r.status_code)
        with alice.stream("GET", f"/v1/jobs/{b}/logs", params={"follow": True}) as r:
            assert r.status_code == 404
        # Loans and reclaims are for admins only; a user gets 403 naming why.
        for method, path, body in [("GET", "/v1/loans", None), ("POST", "/v1/loans", {"gpus_per_node": 1}),
                                   ("POST", "/v1/reclaims", {"count": 1})]:
            r = alice.request(method, path, json=body)
            assert r.status_code == 403 and "not an admin" in r.json()["detail"], (path, r.text)
        # Bob's job is untouched by all that; bob can act on it himself.
        wait_for(lambda: bob.get(f"/v1/jobs/{b}").json()["state"] == "RUNNING", 30, "bob's job running")
        d = bob.get(f"/v1/jobs/{b}").json()
        assert not d["held"] and d["resize_to"] is None and not any(e["kind"] == "cancel_requested"
                                                                     for e in d["events"])
        assert bob.post(f"/v1/jobs/{b}:resize", json={"gpus": 1}).status_code == 202
        # The admin (the legacy single token) sees both, resizes alice's job, reaches loans.
        everyone = {j["id"]: j["owner"] for j in svc.api("GET", "/v1/jobs").json()}
        assert everyone[a] == "alice" and everyone[b] == "bob"
        assert svc.api("POST", f"/v1/jobs/{a}:resize", json={"gpus": 1}).status_code == 202
        assert svc.api("GET", "/v1/loans").status_code == 200
        for jid, c in ((a, alice), (b, bob)):
            assert c.delete(f"/v1/jobs/{jid}").status_code == 202
            wait_for(lambda jid=jid: svc.job(jid)["state"] == "CANCELLED", 30, "cancelled")


def test_tokens_are_stored_hashed_and_can_be_revoked(svc: ServiceProc, users: dict[str, str]) -> None:
    raw = (svc.tmp / "state.db").read_bytes() + (svc.tmp / "state.db-wal").read_bytes()
    for tok in users.values():
        secret = tok.split("_", 2)[2]
        assert secret.encode() not in raw and tok.encode() not in raw
    carol = json.loads(_cli("token", "create", "--user", "carol", "--db", svc.db, "--json"))
    with svc.as_user(carol["token"]) as c:
        assert c.get("/v1/jobs").status_code == 200
        assert c.get("/v1/jobs", headers={"Authorization": f"Bearer {carol['token'][:-1]}x"}).status_code == 401
        assert "revoked" in _cli("token", "revoke", carol["id"], "--db", svc.db)
        wait_for(lambda: c.get("/v1/jobs").status_code == 401, 20, "revoked token refused")
    listed = json.loads(_cli("token", "list", "--db", svc.db, "--json"))
    assert {r["user"] for r in listed} >= {"alice", "bob", "carol"} and "token" not in json.dumps(listed).lower()


def test_jobs_do_not_inherit_the_service_token(svc: ServiceProc) -> None:
    jid = svc.api("POST", "/v1/jobs", json={"script": str(Path(svc.scripts_dir or "") / "env.py")}).json()["id"]
    wait_for(lambda: svc.job(jid)["state"] == "SUCCEEDED", 30, "env job done")
    text = svc.api("GET", f"/v1/jobs/{jid}/logs").text
    assert "TOKEN=None" in text and TOKEN not in text


def test_service_files_are_private(svc: ServiceProc) -> None:
    work = svc.tmp / "work"
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    files = [svc.tmp / f"state.db{s}" for s in ("", "-wal", "-shm")]
    files += [p for p in work.rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" for p in files)
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, f"{p} is {oct(stat.S_IMODE(p.stat().st_mode))}"
    for p in work.rglob("*"):
        if p.is_dir():
            assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, f"{p} is {oct(stat.S_IMODE(p.stat().st_mode))}"


def test_schema_pages_need_auth_and_health_says_no_more_than_ok(svc: ServiceProc) -> None:
    with httpx.Client(base_url=svc.url, timeout=10) as c:
        for path in ("/docs", "/redoc", "/openapi.json", "/v1/openapi.json"):
            assert c.get(path).status_code in (401, 404), path
        health = c.get("/healthz").json()
        assert "last_error" not in health and set(health) <= {"ok", "rounds"}
    assert "/v1/jobs" in svc.api("GET", "/v1/openapi.json").json()["paths"]
    assert "last_error" in svc.api("GET", "/v1/status").json()


def test_without_scripts_dir_or_token_the_service_runs_nothing_and_keeps_its_token_private(tmp_path: Path) -> None:
    s = ServiceProc(tmp_path, cluster="1x1:cpu", scripts_dir=None, token=None)
    env = os.environ.pop("ELASTISCHED_TOKEN", None)
    try:
        tok_file = tmp_path / "work" / "token"
        s.token = None
        s.start()
        tok = wait_for(lambda: tok_file.exists() and tok_file.read_text().strip(), 10, "token file")
        assert stat.S_IMODE(tok_file.stat().st_mode) == 0o600
        with s.as_user(tok) as admin:
            r = admin.post("/v1/jobs", json={"script": FAKE})
            assert r.status_code == 403 and "outside the allowed directory" in r.json()["detail"]
            scripts = tmp_path / "work" / "scripts"
            assert scripts.is_dir() and not any(scripts.iterdir())
            assert str(scripts) in r.json()["detail"]
    finally:
        if env is not None:
            os.environ["ELASTISCHED_TOKEN"] = env
        s.stop()


def test_a_user_cannot_take_every_log_follow(svc: ServiceProc, users: dict[str, str]) -> None:
    """A user who is not an admin gets a quarter of `--max-follows` (8 of 32); the others still get theirs."""
    import socket

    def follow(jid: str, token: str) -> tuple[int, socket.socket]:
        s = socket.create_connection(("127.0.0.1", svc.port), timeout=10)
        s.sendall(f"GET /v1/jobs/{jid}/logs?follow=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}"
                  "\r\n\r\n".encode())
        return int(s.recv(256).split()[1]), s

    with svc.as_user(users["alice"]) as alice:
        jid = _submit(alice, svc, "alice-quiet", steps=100000)
        opened = [follow(jid, users["alice"]) for _ in range(9)]
        assert [code for code, _ in opened] == [200] * 8 + [429]
        code, admin_sock = follow(jid, TOKEN)
        assert code == 200
        for _, s in [*opened, (code, admin_sock)]:
            s.close()
        alice.delete(f"/v1/jobs/{jid}")


def test_a_missing_scripts_dir_is_a_one_line_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "elastisched.service", "--workdir", str(tmp_path / "w"),
                        "--scripts-dir", str(tmp_path / "nope"), "--port", "0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "--scripts-dir" in r.stderr, r.stderr
