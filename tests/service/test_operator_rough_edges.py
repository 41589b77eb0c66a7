"""An operator's first day (issue 24 items 4 and 6): `ls` shows the GPU type a running job runs on and why a
failed job failed; `describe` prints no Python `None` or raw dicts; a cancelled job has a `cancelled` event and
its last log line does not promise a relaunch; `submit --gpu-type/--name` have help; "cannot reach" says how to
start the service; a script outside --scripts-dir names the flag; the dashboard's "last ran" is the true age."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from _svc_helpers import FAKE, ROOT, TOKEN, ServiceProc, wait_for
from typer.testing import CliRunner

from elastisched.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def svc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProc]:
    s = ServiceProc(tmp_path_factory.mktemp("ops"), cluster="1x2:cpu", scripts_dir=ROOT / "tests").start()
    s.started_at = time.time()  # type: ignore[attr-defined]
    yield s
    s.stop()
    s.kill_workers()


def _cli(svc: ServiceProc, *args: str) -> str:
    r = runner.invoke(app, list(args), env={"ELASTISCHED_SERVER": svc.url, "ELASTISCHED_TOKEN": TOKEN})
    assert r.exit_code == 0, r.output
    return r.output


def _row(out: str, job: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith(job))


def test_ls_shows_the_running_type_and_why_a_job_failed(svc: ServiceProc) -> None:
    run = svc.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--steps", "600", "--sleep", "0.1"]}).json()["id"]
    bad = svc.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--fail-always"]}).json()["id"]
    wait_for(lambda: svc.job(run)["state"] == "RUNNING", 60, "the first job running")
    wait_for(lambda: svc.job(bad)["state"] == "FAILED", 60, "the failing job failed")
    out = _cli(svc, "ls")
    assert _row(out, run)[4] == "cpu", out  # TYPE: the type of the nodes it runs on, not "-"
    failed = _row(out, bad)
    assert failed[2] == "FAILED" and "exited" in " ".join(failed[9:]), out  # REASON: its message
    svc.api("DELETE", f"/v1/jobs/{run}")
    wait_for(lambda: svc.job(run)["state"] == "CANCELLED", 60, "the cancel")


def test_describe_prints_no_python_none_or_raw_dicts_and_cancel_is_an_event(svc: ServiceProc) -> None:
    jid = svc.api("POST", "/v1/jobs", json={"script": FAKE, "args": ["--steps", "600", "--sleep", "0.1"]}).json()["id"]
    wait_for(lambda: svc.job(jid)["state"] == "RUNNING", 60, "the job running")
    svc.api("DELETE", f"/v1/jobs/{jid}")
    wait_for(lambda: svc.job(jid)["state"] == "CANCELLED", 60, "the cancel")
    out = _cli(svc, "describe", jid)
    assert "None" not in out and "{'" not in out and "[[" not in out and "[]" not in out, out
    assert "placement:   -" in out and "cancelled by=user request" in out, out
    assert [e["kind"] for e in svc.job(jid)["events"]][-1] == "cancelled"


def test_submit_help_and_the_messages_that_say_what_to_do(svc: ServiceProc, tmp_path: object) -> None:
    out = runner.invoke(app, ["submit", "--help"], env={"COLUMNS": "200"}).output
    for flag in ("--gpu-type", "--name"):
        line = next(x for x in out.splitlines() if flag in x)
        assert len(line.split(flag, 1)[1].split()) > 2, line  # the flag has a help text
    r = runner.invoke(app, ["ls", "--server", "http://127.0.0.1:9", "--token", TOKEN])
    assert r.exit_code == 3 and "elastisched serve" in r.output, r.output
    r = svc.api("POST", "/v1/jobs", json={"script": "/etc/hostname"})
    assert r.status_code == 403 and "--scripts-dir" in r.json()["detail"], r.text


def test_dashboard_last_ran_is_the_true_age(svc: ServiceProc) -> None:
    wait_for(lambda: svc.api("GET", "/v1/scheduler").json()["rounds"] > 0, 30, "a round")
    d = svc.api("GET", "/v1/scheduler").json()
    alive = time.time() - svc.started_at  # type: ignore[attr-defined]
    assert 0 <= d["last_round_ago_s"] <= alive + 1, (d["last_round_ago_s"], alive)
