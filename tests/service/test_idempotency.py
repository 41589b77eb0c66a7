"""Idempotent submission (issue 23 item 2): a `POST /v1/jobs` whose answer the client never read — the connection
dropped after the service committed, or the service was killed between the commit and the answer — retried
with the same `Idempotency-Key` gives the first job, never a second one; the CLI sends a key and retries."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from _svc_helpers import FAKE, TOKEN, ServiceProc, wait_for

BODY = {"script": FAKE, "args": ["--steps", "1", "--sleep", "0.01"], "name": "idem"}


def _dropped_post(port: int, body: dict[str, Any], key: str | None) -> None:
    """POST the body, wait until the answer is there (the service committed), close without reading it."""
    data = json.dumps(body).encode()
    head = (f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(data)}\r\n" + (f"Idempotency-Key: {key}\r\n" if key else "") + "\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head.encode() + data)
        ready, _, _ = select.select([s], [], [], 30)
        assert ready, "no answer within 30 s"
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # close with RST


def _named(svc: ServiceProc, name: str) -> list[dict[str, Any]]:
    return [j for j in svc.api("GET", "/v1/jobs").json() if j["name"] == name]


def test_twenty_retries_after_dropped_connections_make_one_job(service_factory: Any) -> None:
    svc = service_factory(cluster="1x1:cpu").start()
    key = str(uuid.uuid4())
    for _ in range(20):
        _dropped_post(svc.port, BODY, key)
    r = svc.api("POST", "/v1/jobs", json=BODY, headers={"Idempotency-Key": key})  # the 21st, read this time
    assert r.status_code == 201 and r.headers.get("idempotent-replayed") == "true", r.text
    jobs = _named(svc, "idem")
    assert [j["id"] for j in jobs] == [r.json()["id"]], jobs
    # without a key each dropped request is a job of its own: what the key prevents
    control = BODY | {"name": "nokey"}
    for _ in range(3):
        _dropped_post(svc.port, control, None)
    assert len(_named(svc, "nokey")) == 3


def test_a_key_is_bound_to_its_body_and_its_user(service_factory: Any) -> None:
    from elastisched.service.auth import create_token
    from elastisched.service.store import Store

    svc = service_factory(cluster="1x1:cpu").start()
    first = svc.api("POST", "/v1/jobs", json=BODY, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 201 and "idempotent-replayed" not in first.headers
    other = svc.api("POST", "/v1/jobs", json=BODY | {"gpus": 1, "name": "other"}, headers={"Idempotency-Key": "k-1"})
    assert other.status_code == 409, other.text
    assert other.json()["detail"].startswith("Idempotency-Key:") and first.json()["id"] in other.json()["detail"]
    same = svc.api("POST", "/v1/jobs", json={"name": "idem", "script": FAKE, "args": BODY["args"], "gpus": 1},
                   headers={"Idempotency-Key": "k-1"})  # the same request spelled otherwise (a default named)
    assert same.status_code == 201 and same.json()["id"] == first.json()["id"]
    for bad in (b"has space", b"x" * 256, "é".encode()):
        r = svc.api("POST", "/v1/jobs", json=BODY, headers={"Idempotency-Key": bad})
        assert r.status_code == 422 and "Idempotency-Key" in json.dumps(r.json()), (bad, r.text)
    store = Store(svc.db)
    try:
        _, alice = create_token(store, "alice")
    finally:
        store.close()
    with svc.as_user(alice) as c:  # keys are per user: alice's k-1 is a new job of hers
        mine = c.post("/v1/jobs", json=BODY, headers={"Idempotency-Key": "k-1"})
    assert mine.status_code == 201 and mine.json()["id"] != first.json()["id"] and mine.json()["owner"] == "alice"


def test_a_kill9_between_commit_and_answer_leaves_one_job_after_restart(service_factory: Any, tmp_path: Path) -> None:
    pause = tmp_path / "paused"
    svc = service_factory(cluster="1x1:cpu", env={"ELASTISCHED_DEBUG_PAUSE_AT": "submitted",
                                                  "ELASTISCHED_DEBUG_PAUSE_FILE": str(pause)}).start()
    key, got = str(uuid.uuid4()), []

    def post() -> None:
        try:
            got.append(httpx.post(f"{svc.url}/v1/jobs", json=BODY, timeout=60, headers={
                "Idempotency-Key": key, "Authorization": f"Bearer {TOKEN}"}).status_code)
        except httpx.HTTPError as e:
            got.append(type(e).__name__)

    t = threading.Thread(target=post)
    t.start()
    wait_for(pause.exists, 30, "the service to pause after the commit")
    committed = pause.read_text().split()[1]
    svc.kill9()
    t.join(30)
    assert got and got[0] != 201, got  # the client never got its answer
    svc.env = {}
    svc.start()
    r = svc.api("POST", "/v1/jobs", json=BODY, headers={"Idempotency-Key": key})
    assert r.status_code == 201 and r.json()["id"] == committed and r.headers["idempotent-replayed"] == "true"
    assert [j["id"] for j in _named(svc, "idem")] == [committed]


class DroppingProxy:
    """A loopback TCP proxy that forwards each request but, for the first `drops` connections, closes the
    client's side as soon as the service's answer arrives (the client sees a lost connection)."""

    def __init__(self, target: int, drops: int) -> None:
        self.target, self.drops, self.dropped = target, drops, 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        drop = self.dropped < self.drops
        self.dropped += drop
        with client, socket.create_connection(("127.0.0.1", self.target)) as up:
            while True:
                r, _, _ = select.select([client, up], [], [], 30)
                if not r:
                    return
                for s in r:
                    data = s.recv(65536)
                    if not data or (drop and s is up):
                        return  # the answer is dropped: the client's connection closes unanswered
                    (up if s is client else client).sendall(data)

    def close(self) -> None:
        self.sock.close()


def test_the_cli_retries_a_lost_connection_with_its_key(service_factory: Any) -> None:
    svc = service_factory(cluster="1x1:cpu").start()
    proxy = DroppingProxy(svc.port, drops=3)
    try:
        env = {**os.environ, "ELASTISCHED_SERVER": f"http://127.0.0.1:{proxy.port}", "ELASTISCHED_TOKEN": TOKEN}
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "elastisched.cli", "submit", FAKE, "--name", "cli", "--",
                            "--steps", "1"], env=env, capture_output=True, text=True, timeout=120)
    finally:
        proxy.close()
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("retrying in") == 3, r.stderr
    jobs = _named(svc, "cli")
    assert [j["id"] for j in jobs] == [r.stdout.strip()], (jobs, r.stdout)
    print(f"CLI: 3 lost connections, 1 job, {time.monotonic() - t0:.1f} s")
