"""The REST API and CLI against a real service process (uvicorn on loopback, SQLite, fake workers)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

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
    from elastisched.cli import app

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
        polled = set(re.findall(r'get\("(/v1/[a-z]+)"\)', page.text))
        assert polled == {"/v1/nodes", "/v1/jobs", "/v1/loans"}
        for path in polled:
            assert c.get(path).status_code == 401, path
            assert svc.api("GET", path).status_code == 200, path
    assert any(j["name"] == "dash-secret-name" for j in svc.api("GET", "/v1/jobs").json())
