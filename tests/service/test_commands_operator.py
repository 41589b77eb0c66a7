"""The operator's first hour at the command line (issue 15 items 5 and 7): `serve` says where the dashboard is
(with its token fragment) and where the token lives, a 401 says where the client looked for a token and how to
get one, and `logs` on a job without output says why (pending and its reason)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from _svc_helpers import FAKE, ROOT, TOKEN, free_port, wait_for
from typer.testing import CliRunner

from elastisched.cli.main import app
from elastisched.service.reasons import EXPLAIN

runner = CliRunner()


def _serve(tmp: Path, env_token: str | None) -> tuple[subprocess.Popen[str], list[str], int]:
    """`elastisched serve` as a user runs it; returns the process, its first stderr lines and its port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "ELASTISCHED_TOKEN"}
    if env_token is not None:
        env["ELASTISCHED_TOKEN"] = env_token
    exe = Path(sys.executable).with_name("elastisched")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from elastisched.cli.main import app; app()"]
    proc = subprocess.Popen([*cmd, "serve", "--workdir", str(tmp / "w"), "--port", str(port), "--cluster", "1x1:cpu",
                             "--scripts-dir", str(ROOT), "--grace", "2",
                             "--isolation", "none"], env=env, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stderr is not None
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()  # type: ignore[union-attr]
    out: list[str] = []
    while not out or not out[-1].startswith("per-user tokens"):
        try:
            out.append(lines.get(timeout=60).rstrip("\n"))
        except queue.Empty:
            proc.kill()
            raise AssertionError(f"serve printed only {out}") from None
    return proc, out, port


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("from_env", [False, True], ids=["token-file", "token-env"])
def test_serve_prints_the_dashboard_url_with_its_token_and_where_the_token_is(tmp_path: Path, from_env: bool) -> None:
    proc, out, port = _serve(tmp_path, "env-token-abcdefghijklmnopq" if from_env else None)
    try:
        file = (tmp_path / "w" / "token").resolve()
        assert out[0].startswith(f"elastisched serving on http://127.0.0.1:{port} "), out
        assert out[1].startswith(f"dashboard: http://127.0.0.1:{port}/#token="), out
        tok = out[1].split("#token=", 1)[1]
        if from_env:
            assert tok == "env-token-abcdefghijklmnopq" and not file.exists()
            assert "from $ELASTISCHED_TOKEN" in out[2], out
        else:
            assert tok == file.read_text().strip() and len(tok) >= 20
            assert out[2].startswith(f"admin token: {file} ") and f"export ELASTISCHED_TOKEN=$(cat {file})" in out[2]
        assert out[3] == f"per-user tokens: elastisched token create --user NAME --workdir {file.parent}", out
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            wait_for(lambda: _ok(c), 60, "the service to answer")
            assert "<title>elastisched</title>" in c.get("/").text
            who = c.get("/v1/status", headers={"Authorization": f"Bearer {tok}"})  # the printed token works
            assert who.status_code == 200 and who.json()["admin"] is True, who.text
    finally:
        _stop(proc)


def _ok(c: httpx.Client) -> bool:
    try:
        return c.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def test_serve_with_a_missing_scripts_dir_prints_one_error_line_and_no_url(tmp_path: Path) -> None:
    r = runner.invoke(app, ["serve", "--workdir", str(tmp_path / "w"), "--scripts-dir", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "--scripts-dir" in r.output and "#token=" not in r.output, r.output
    assert r.output.strip().count("\n") == 0, r.output


@pytest.fixture
def svc(service_factory: Any) -> Any:
    return service_factory(cluster="1x1:cpu", policy="fifo").start()


def test_401_says_where_the_client_looked_and_how_to_get_a_token(svc: Any, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ELASTISCHED_TOKEN", raising=False)
    file = tmp_path / ".elastisched" / "token"
    r = runner.invoke(app, ["ls", "--server", svc.url])
    assert r.exit_code == 1 and "error (401)" in r.output, r.output
    assert f"no token was sent: no --token flag, $ELASTISCHED_TOKEN is not set, and {file} does not exist" in r.output
    assert "elastisched token create --user NAME" in r.output and "WORKDIR/token" in r.output, r.output
    r = runner.invoke(app, ["ls", "--server", svc.url, "--token", "nope"])
    assert r.exit_code == 1 and "the token from --token was refused" in r.output, r.output
    r = runner.invoke(app, ["ls", "--server", svc.url], env={"ELASTISCHED_TOKEN": "nope"})
    assert r.exit_code == 1 and "the token from $ELASTISCHED_TOKEN was refused" in r.output, r.output
    file.parent.mkdir()
    file.write_text("stale\n")
    r = runner.invoke(app, ["ls", "--server", svc.url])
    assert r.exit_code == 1 and f"the token from the file {file} was refused" in r.output, r.output
    file.write_text(TOKEN + "\n")  # the right one in the file: no error
    r = runner.invoke(app, ["ls", "--server", svc.url])
    assert r.exit_code == 0, r.output


def test_logs_on_a_pending_job_says_it_is_pending_and_why(svc: Any) -> None:
    body = {"script": FAKE, "args": ["--steps", "600", "--sleep", "0.1"], "gpus": 1}
    run = svc.api("POST", "/v1/jobs", json=body).json()["id"]
    wait_for(lambda: "start" in svc.api("GET", f"/v1/jobs/{run}/logs").text, 60, "the first job's output")
    wait = svc.api("POST", "/v1/jobs", json=body | {"name": "second"}).json()["id"]
    wait_for(lambda: svc.job(wait)["reason"] == "Resources", 30, "the second job's pending reason")
    env = {"ELASTISCHED_TOKEN": TOKEN}
    r = runner.invoke(app, ["logs", wait, "--server", svc.url], env=env)
    assert r.exit_code == 0, r.output
    assert f"job {wait} (second) is pending, so it has no logs yet" in r.output, r.output
    assert f"Why it waits: Resources: {EXPLAIN['Resources']}" in r.output, r.output
    r = runner.invoke(app, ["describe", wait, "--server", svc.url], env=env)
    assert r.exit_code == 0 and f"reason:      Resources: {EXPLAIN['Resources']}" in r.output, r.output
    r = runner.invoke(app, ["logs", run, "--server", svc.url], env=env)  # a job with output prints it, as before
    assert r.exit_code == 0 and '"start": true' in r.output and "pending" not in r.output, r.output
    # -f on the pending job: says so, follows, and ends (exit 0) when the job does
    exe = Path(sys.executable).with_name("elastisched")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from elastisched.cli.main import app; app()"]
    follow = subprocess.Popen([*cmd, "logs", wait, "-f", "--server", svc.url], env=os.environ | env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert follow.stderr is not None
    first = follow.stderr.readline()
    assert f"job {wait} (second) is pending" in first, first
    assert follow.stderr.readline().startswith("Following: its output appears here once it starts")
    svc.api("DELETE", f"/v1/jobs/{wait}")
    wait_for(lambda: svc.job(wait)["state"] == "CANCELLED", 30, "the cancel")
    assert follow.wait(timeout=30) == 0
    r = runner.invoke(app, ["logs", wait, "--server", svc.url], env=env)
    assert r.exit_code == 0 and "ended (CANCELLED) without printing anything" in r.output, r.output
    svc.api("DELETE", f"/v1/jobs/{run}")
