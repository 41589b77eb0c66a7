"""The REST API and CLI against a real service process (uvicorn on loopback, SQLite, fake workers)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _svc_helpers import FAKE, ROOT, TOKEN, ServiceProc, wait_for
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProc]:
    s = ServiceProc(tmp_path_factory.mktemp("api"), cluster="2x2:cpu", scripts_dir=ROOT / "tests").start()
    yield s
    s.stop()
    s.kill_workers()


def _cli(svc: ServiceProc, *args: str) -> str:
    from elastisched.cli.main import app

    r = CliRunner().invoke(app, list(args), env={"ELASTISCHED_SERVER": svc.url, "ELASTISCHED_TOKEN": TOKEN})
    assert r.exit_code == 0, r.output
    return r.output


def test_token_required_everywhere_but_health(svc: ServiceProc) -> None:
    with httpx.Client(base_url=svc.url, timeout=10) as c:
        assert c.get("/healthz").status_code == 200
        for method, path in [("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/v1/nodes"), ("GET", "/v1/jobs/x"),
                             ("POST", "/v1/loans"), ("POST", "/v1/reclaims"), ("GET", "/v1/jobs/x/logs"),
                             ("POST", "/v1/jobs/x:suspend"), ("POST", "/v1/jobs/x:resume"), ("GET", "/metrics")]:
            assert c.request(method, path).status_code == 401, path
            assert c.request(method, path, headers={"Authorization": "Bearer nope"}).status_code == 401, path


@pytest.mark.parametrize(("body", "field"), [
    ({"script": FAKE, "gpus": 0}, "gpus"),
    ({"script": FAKE, "min_gpus": 3, "max_gpus": 2}, "max_gpus"),
    ({"gpus": 1}, "script"),
    ({"script": FAKE, "batch_size": "big"}, "batch_size"),
    ({"script": FAKE, "adaptive": [8, 4]}, "adaptive"),
])
def test_bad_submissions_are_422_naming_the_field(svc: ServiceProc, body: dict[str, object], field: str) -> None:
    r = svc.api("POST", "/v1/jobs", json=body)
    assert r.status_code == 422
    assert any(field in d["loc"] for d in r.json()["detail"]), r.text


def test_other_bad_requests(svc: ServiceProc) -> None:
    r = svc.api("POST", "/v1/reclaims", json={"count": 0})
    assert r.status_code == 422 and "count" in r.json()["detail"][0]["loc"]
    assert svc.api("POST", "/v1/jobs/nope:resize", json={"gpus": 1}).status_code == 404
    assert svc.api("POST", "/v1/reclaims", json={"count": 5}).status_code == 422  # nothing on loan
    r = svc.api("POST", "/v1/jobs", json={"script": FAKE, "application": "no-such-model"})
    assert r.status_code == 422 and r.json()["detail"].startswith("application:")
    r = svc.api("POST", "/v1/jobs", json={"script": FAKE, "gpus": 2, "max_gpus": 1})
    assert r.status_code == 422 and r.json()["detail"].startswith("gpus:")


@pytest.mark.parametrize("script", ["/etc/passwd", "../../etc/passwd", str(ROOT / "examples" / "linreg_elastic.py")])
def test_scripts_outside_the_allowed_directory_are_refused(svc: ServiceProc, script: str) -> None:
    r = svc.api("POST", "/v1/jobs", json={"script": script})
    assert r.status_code == 403 and "outside the allowed directory" in r.json()["detail"]
    assert all(j["script"] != script for j in svc.api("GET", "/v1/jobs").json())


def test_queue_reason_cli_resize_logs_and_cancel(svc: ServiceProc) -> None:
    big = json.loads(_cli(svc, "submit", FAKE, "--gpus", "3", "--name", "big", "--json",
                          "--steps", "2000", "--sleep", "0.05"))
    wait_for(lambda: svc.job(big["id"])["state"] == "RUNNING", 30, "big running")
    small = _cli(svc, "submit", FAKE, "--gpus", "2", "--name", "small", "--steps", "5", "--sleep", "0.01").strip()
    wait_for(lambda: svc.job(small)["reason"] == "Resources", 10, "reason")
    out = _cli(svc, "ls")
    assert "REASON" in out and "Resources" in out and "small" in out and "3/3-3" in out
    # Admin resize shrinks the big job (checkpoint → new generation), which lets the small one start.
    _cli(svc, "resize", big["id"][:6], "2")
    wait_for(lambda: svc.job(big["id"])["generation"] == 2 and svc.job(big["id"])["gpus"] == 2, 30, "resized")
    wait_for(lambda: svc.job(small)["state"] == "SUCCEEDED", 30, "small done")
    logs = _cli(svc, "logs", big["id"])
    assert '"gen": 1' in logs and '"gen": 2' in logs and '"checkpointed"' in logs
    d = json.loads(_cli(svc, "describe", big["id"], "--json"))
    assert [g["cause"] for g in d["generations"]] == ["launch", "resize"] and d["restarts"] == 1
    assert "generations:" in _cli(svc, "describe", big["id"])
    nodes = json.loads(_cli(svc, "nodes", "--json"))
    assert sum(n["used"] for n in nodes) == 2 and sum(n["gpus"] for n in nodes) == 4
    _cli(svc, "cancel", big["id"])
    wait_for(lambda: svc.job(big["id"])["state"] == "CANCELLED", 30, "cancelled")
    assert svc.api("DELETE", f"/v1/jobs/{big['id']}").status_code == 409
    assert svc.job(big["id"])["generations"][-1]["outcome"] == "cancelled"


def test_logs_follow_streams_until_the_job_ends(svc: ServiceProc) -> None:
    jid = svc.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--steps", "10", "--sleep", "0.05"]}).json()["id"]
    with svc.client.stream("GET", f"/v1/jobs/{jid}/logs", params={"follow": True, "timeout_s": 60}) as r:  # type: ignore[union-attr]
        text = b"".join(r.iter_bytes()).decode()
    assert '"done": 10' in text and svc.job(jid)["state"] == "SUCCEEDED"


def test_failing_job_is_retried_then_failed(svc: ServiceProc) -> None:
    jid = svc.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--fail-always"]}).json()["id"]
    d = wait_for(lambda: (j := svc.job(jid))["state"] == "FAILED" and j, 30, "failed")
    assert d["retries"] == 2 and len(d["generations"]) == 3 and "exited with codes" in d["message"]


def test_loans_cli(svc: ServiceProc, tmp_path: Path) -> None:
    assert _cli(svc, "loans", "offer", "--gpus", "2").strip() == "loan-cpu-0"
    assert "loan-cpu-0" in _cli(svc, "loans")
    wait_for(lambda: any(n["pool"] == "loanable" for n in svc.api("GET", "/v1/nodes").json()), 10, "loan node")
    assert "reclaim" in _cli(svc, "loans", "reclaim", "1", "--deadline", "30")
    wait_for(lambda: json.loads(_cli(svc, "loans", "--json"))["loans"][0]["state"] == "RETURNED", 30, "returned")
    assert all(n["pool"] == "train" for n in svc.api("GET", "/v1/nodes").json())


def test_metrics_in_prometheus_text_format(svc: ServiceProc) -> None:
    with httpx.Client(base_url=svc.url, timeout=10) as c:
        assert c.get("/metrics").status_code == 401
    r = svc.api("GET", "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in r.text.splitlines()
              if line and not line.startswith("#")}
    jobs = svc.api("GET", "/v1/jobs").json()
    assert sum(v for k, v in values.items() if k.startswith("elastisched_jobs{")) == len(jobs)
    assert values['elastisched_gpus{pool="train",state="total"}'] == 4  # 2x2:cpu
    assert values["elastisched_rounds_total"] >= 0 and values["elastisched_engine_healthy"] == 1


def test_suspend_holds_a_job_and_resume_continues_it_from_its_checkpoint(svc: ServiceProc) -> None:
    jid = json.loads(_cli(svc, "submit", FAKE, "--name", "held", "--json", "--steps", "2000", "--sleep", "0.02"))["id"]
    wait_for(lambda: svc.job(jid)["state"] == "RUNNING", 30, "running")
    wait_for(lambda: '"step"' in svc.api("GET", f"/v1/jobs/{jid}/logs").text, 30, "started")
    assert "suspend requested" in _cli(svc, "suspend", jid)
    wait_for(lambda: (j := svc.job(jid))["state"] == "SUSPENDED" and j["reason"] == "Held" and j["gpus"] == 0,
             30, "held")
    assert svc.job(jid)["held"] and svc.job(jid)["generations"][-1]["outcome"] == "stopped"
    time.sleep(1.0)  # free slots, but no round may start a held job
    assert svc.job(jid)["state"] == "SUSPENDED" and len(svc.job(jid)["generations"]) == 1
    _cli(svc, "resume", jid)
    d = wait_for(lambda: (j := svc.job(jid))["state"] == "RUNNING" and j["generation"] == 2 and j, 30, "resumed")
    assert d["generations"][-1]["cause"] == "resume" and not d["held"]
    assert svc.api("POST", f"/v1/jobs/{jid}:resume").status_code == 409  # not held any more
    _cli(svc, "cancel", jid)
    wait_for(lambda: svc.job(jid)["state"] == "CANCELLED", 30, "cancelled")


def test_dashboard_page_is_public_but_its_data_needs_the_token(svc: ServiceProc) -> None:
    """`/` serves a page with no job data in it; every API path the page polls exists and needs the token."""
    import re

    svc.api("POST", "/v1/jobs", json={"script": str(FAKE), "name": "dash-secret-name", "args": ["--steps", "1"]})
    with httpx.Client(base_url=svc.url, timeout=10) as c:
        page = c.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "dash-secret-name" not in page.text and c.get("/dashboard").text == page.text
        polled = set(re.findall(r'get\("(/v1/[a-z]+)[?"]', page.text))
        assert polled == {"/v1/status", "/v1/nodes", "/v1/jobs", "/v1/loans", "/v1/reasons", "/v1/scheduler",
                          "/v1/utilisation"}
        for path in polled:
            assert c.get(path).status_code == 401, path
            assert svc.api("GET", path).status_code == 200, path
    assert any(j["name"] == "dash-secret-name" for j in svc.api("GET", "/v1/jobs").json())


# ---------------------------------------------------------------------------------------------- issue 11 item 3
@pytest.mark.parametrize(("body", "field", "says"), [
    ({"gpus": 5}, "gpus", "4 GPUs"),  # the cluster is 2x2:cpu
    ({"gpus": 5, "min_gpus": 5, "max_gpus": 8}, "gpus", "4 GPUs"),
    ({"gpu_type": "a100"}, "gpu_type", "cpu"),
    ({"gpus": 1, "gpu_type": "A100"}, "gpu_type", "cpu"),
])
def test_jobs_the_cluster_cannot_hold_are_refused_at_submit(svc: ServiceProc, body: dict[str, object], field: str,
                                                            says: str) -> None:
    r = svc.api("POST", "/v1/jobs", json={"script": FAKE, **body})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(f"{field}:") and says in r.json()["detail"]
    assert svc.api("POST", "/v1/jobs", json={"script": FAKE, "gpus": 4, "gpu_type": "cpu",
                                             "args": ["--steps", "1"]}).status_code == 201


# ---------------------------------------------------------------------------------------------- issue 11 item 5
BIG = "x" * (128 * 1024)


@pytest.mark.parametrize(("raw", "field"), [
    ('{"script": "%s", "duration_s": NaN}', "duration_s"),
    ('{"script": "%s", "work_scale": Infinity}', "work_scale"),
    ('{"script": "%s", "duration_s": -Infinity}', "duration_s"),
    ('{"script": "%s", "gpus": 1e400}', "gpus"),
    ('{"script": "%s", "batch_size": 99999999999999999999999}', "batch_size"),
    ('{"script": "%s", "duration_s": 1e308}', "duration_s"),
    ('{"script": "%s", "args": ["a\\u0000b"]}', "args"),
    ('{"script": "%s", "args": ["' + BIG + '"]}', "args"),
    ('{"script": "%s", "args": ["\\ud800"]}', "args"),
    ('{"script": "%s", "name": "\\udfff"}', "name"),
    ('{"script": "%s\\u0000"}', "script"),
    ('{"script": "%s", "adaptive": [1, 1e30]}', "adaptive"),
    ('{"script": "%s", "gpus": 1, "surprise": 1}', "surprise"),
])
def test_malformed_submissions_are_4xx_naming_the_field(svc: ServiceProc, raw: str, field: str) -> None:
    r = svc.api("POST", "/v1/jobs", content=raw.replace("%s", FAKE), headers={"content-type": "application/json"})
    assert r.status_code == 422, (r.status_code, r.text[:300])
    assert field in r.text and "Infinity" not in r.text and "NaN" not in r.text and BIG not in r.text


@pytest.mark.parametrize(("path", "params", "field"), [
    ("/v1/jobs/%00", None, "path"),
    ("/v1/jobs/ab%00cd", None, "path"),
    ("/v1/jobs/%ED%A0%80", None, "path"),  # UTF-8 of a lone surrogate
    ("/v1/jobs/%FF%FE", None, "path"),
    ("/v1/jobs/" + "a" * 300, None, "path"),
    ("/v1/jobs/" + "a" * 300 + "/logs", None, "path"),
    ("/v1/jobs/abc%25", None, "job_id"),
    ("/v1/jobs", {"limit": str(2**63)}, "limit"),
    ("/v1/jobs", {"limit": str(-(2**70))}, "limit"),
    ("/v1/jobs", {"limit": "NaN"}, "limit"),
    ("/v1/jobs", {"state": "RUNNING,NOPE"}, "state"),
    ("/v1/jobs", {"state": "\x00"}, "state"),
])
def test_malformed_paths_and_queries_are_4xx_naming_the_field(svc: ServiceProc, path: str,
                                                               params: dict[str, str] | None, field: str) -> None:
    r = svc.api("GET", path, params=params)
    assert 400 <= r.status_code < 500, (path, r.status_code, r.text[:300])
    assert field in r.text, (path, r.text[:300])


def test_log_query_bounds(svc: ServiceProc) -> None:
    jid = svc.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--steps", "1"]}).json()["id"]
    for bad in ("NaN", "inf", "-1", "1e999", "x"):
        r = svc.api("GET", f"/v1/jobs/{jid}/logs", params={"follow": True, "timeout_s": bad})
        assert r.status_code == 422 and "timeout_s" in r.text, (bad, r.text)
    assert "Traceback" not in svc.log_text()


# ---------------------------------------------------------------------------------------------- issue 11 item 4
def _metric(svc: ServiceProc, name: str) -> float:
    for line in svc.api("GET", "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def test_many_log_follows_neither_wedge_the_api_nor_outlive_their_clients(service_factory: Any) -> None:
    """45 follows of a quiet job (the server takes 32 and answers 429 to the rest) leave `GET /v1/jobs` fast;
    when the clients go away without a word, the server notices and frees every slot."""
    import socket

    svc = service_factory(cluster="1x1:cpu", scripts_dir=ROOT / "tests").start()
    jid = svc.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--steps", "100000", "--sleep", "1"]}).json()["id"]
    wait_for(lambda: svc.job(jid)["state"] == "RUNNING", 30, "running")
    socks, codes = [], []
    for _ in range(45):
        s = socket.create_connection(("127.0.0.1", svc.port), timeout=10)
        s.sendall(f"GET /v1/jobs/{jid}/logs?follow=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}"
                  "\r\n\r\n".encode())
        codes.append(int(s.recv(64).split()[1]))
        socks.append(s)
    assert codes.count(200) == 32 and codes.count(429) == 13, codes
    t0 = time.monotonic()
    assert svc.api("GET", "/v1/jobs").status_code == 200
    assert svc.api("GET", f"/v1/jobs/{jid}").status_code == 200
    assert time.monotonic() - t0 < 2.0
    assert _metric(svc, "elastisched_log_follows") == 32
    for s in socks:
        s.close()
    wait_for(lambda: _metric(svc, "elastisched_log_follows") == 0, 10, "abandoned follows released")
    svc.api("DELETE", f"/v1/jobs/{jid}")
    wait_for(lambda: svc.job(jid)["state"] == "CANCELLED", 30, "cancelled")


def test_a_follow_with_no_new_output_ends_after_the_idle_timeout(service_factory: Any) -> None:
    s = service_factory(cluster="1x1:cpu", scripts_dir=ROOT / "tests", extra=("--follow-idle", "1")).start()
    jid = s.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--steps", "100000", "--sleep", "1"]}).json()["id"]
    wait_for(lambda: s.job(jid)["state"] == "RUNNING", 30, "running")
    t0 = time.monotonic()
    with s.client.stream("GET", f"/v1/jobs/{jid}/logs", params={"follow": True}, timeout=30) as r:
        assert r.status_code == 200
        for _ in r.iter_bytes():
            pass
    assert time.monotonic() - t0 < 10 and s.job(jid)["state"] == "RUNNING"


def test_sigterm_stops_the_server_within_grace_with_follows_open(service_factory: Any) -> None:
    import signal
    import socket

    s = service_factory(cluster="1x1:cpu", scripts_dir=ROOT / "tests", grace=3.0).start()
    jid = s.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--steps", "100000", "--sleep", "1"]}).json()["id"]
    wait_for(lambda: s.job(jid)["state"] == "RUNNING", 30, "running")
    socks = []
    for _ in range(10):
        c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        c.sendall(f"GET /v1/jobs/{jid}/logs?follow=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}"
                  "\r\n\r\n".encode())
        assert c.recv(64).split()[1] == b"200"
        socks.append(c)
    t0 = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    try:
        s.proc.wait(timeout=15)
    finally:
        for c in socks:
            c.close()
    assert time.monotonic() - t0 <= 3.0 + 1.0, time.monotonic() - t0


@pytest.mark.parametrize("threads", ["0", "65"])
def test_api_threads_out_of_range_is_one_line_naming_the_option(tmp_path: Path, threads: str) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "elastisched.service", "--workdir", str(tmp_path / "w"),
                        "--api-threads", threads, "--isolation", "none"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == f"error: --api-threads={threads}: must be 1 to 64", r.stderr
    assert not (tmp_path / "w").exists()  # refused before anything was made
