"""The Slurm backend against a real Slurm (tests/slurm_cluster.py: slurmctld, slurmd n1 t4×2 and n2 t4×1 in the
`train` partition, n3 t4×2 in `loan`, each slurmd in its own network namespace): a node that dies mid-run, a
service killed with -9 while jobs run, and jobs run as each user's account (`sbatch --uid`).

Issue 25's must-shows; the six-job end-to-end run is `tests/service/test_e2e.py[...-slurm]`.
"""

from __future__ import annotations

import itertools
import json
import os
import pwd
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from _svc_helpers import EXAMPLE, ServiceProc, wait_for

N, BATCH = 2048, 64  # 32 optimizer steps per epoch
CKPT = 40  # the node-failure job checkpoints every CKPT steps: at most that much work may be lost

#: a job script that writes one marker line per start (per rank of each generation), then runs the example
MARKED = '''import json, os, runpy, sys
marks = sys.argv.pop(1)
with open(marks, "a") as f:
    f.write(json.dumps({k: os.environ.get(v) for k, v in (("job", "ELASTISCHED_JOB_ID"),
            ("gen", "ELASTISCHED_GENERATION"), ("rank", "RANK"), ("slurm", "SLURM_JOB_ID"),
            ("node", "SLURMD_NODENAME"))}) + "\\n")
sys.argv[0] = EXAMPLE
runpy.run_path(EXAMPLE, run_name="__main__")
'''


def _steps(log: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()] if log.exists() else []


@pytest.fixture
def slurm_service(slurm_cluster: Any, tmp_path: Path) -> Iterator[Callable[..., ServiceProc]]:
    """Services on the Slurm backend (stopped before the cluster is reset)."""
    made: list[ServiceProc] = []

    def make(shared: Path | None = None, extra: tuple[str, ...] = (), **kw: Any) -> ServiceProc:
        shared = shared or tmp_path / "shared"
        shared.mkdir(exist_ok=True)
        s = ServiceProc(tmp_path, cluster="1x1:cpu", extra=(
            "--backend", "slurm", "--slurm", "partition=train", "--slurm", "loan-partition=loan",
            "--slurm", f"shared={shared}", *extra), env={"SLURM_CONF": str(slurm_cluster.conf)}, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.stop()


def _submit(svc: ServiceProc, name: str, gpus: int, epochs: int, log: Path, *more: str, script: str = EXAMPLE,
            first: tuple[str, ...] = ()) -> str:
    r = svc.api("POST", "/v1/jobs", json={
        "script": script, "name": name, "gpus": gpus, "batch_size": BATCH,
        "args": [*first, "--epochs", str(epochs), "--n", str(N), "--batch-size", str(BATCH), "--log", str(log),
                 *more]})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _all_end(svc: ServiceProc, timeout: float) -> list[dict[str, Any]]:
    return wait_for(lambda: (js := svc.api("GET", "/v1/jobs").json()) and all(
        j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for j in js) and js, timeout, "all jobs to end")


def _final_steps(svc: ServiceProc, jid: str) -> list[int]:
    text = svc.api("GET", f"/v1/jobs/{jid}/logs").text
    return [json.loads(ln)["steps"] for ln in text.splitlines() if ln.startswith('{"final_mse"')]


# The node's slurmd, its slurmstepds and the job's processes are SIGKILLed together (everything in the node's
# network namespace): no checkpoint on the way out. Slurm marks the node DOWN after SlurmdTimeout (6 s here)
# and ends the job NODE_FAIL; the backend reports the node lost and the job resumes on the other node from its
# last periodic checkpoint (--checkpoint-interval CKPT).
def test_node_failure_resumes_from_checkpoint_on_the_other_node(slurm_service: Any, slurm_cluster: Any,
                                                                tmp_path: Path) -> None:
    svc = slurm_service().start()
    log, epochs = tmp_path / "w.jsonl", 60  # 1,920 steps
    jid = _submit(svc, "w", 1, epochs, log, "--checkpoint-interval", str(CKPT))
    wait_for(lambda: len(_steps(log)) > 3 * CKPT, 120, "w past a few checkpoints")
    first = svc.job(jid)
    (node, _k), = first["placement"]
    t0 = time.monotonic()
    assert slurm_cluster.kill_node(node), f"nothing ran on {node}"
    try:
        d = wait_for(lambda: (j := svc.job(jid))["generation"] > first["generation"] and j["state"] == "RUNNING"
                     and j, 120, "w relaunched")
    except AssertionError as e:
        j = svc.job(jid)
        raise AssertionError(f"{e}; w logged {len(_steps(log))} of {epochs * N // BATCH} steps; state "
                             f"{j['state']}, generations {j['generations']}; node {slurm_cluster.node_state(node)}"
                             f"\n{svc.log_text()[-3000:]}") from None
    took = time.monotonic() - t0
    assert all(n != node for n, _ in d["placement"]), d["placement"]
    assert slurm_cluster.node_state(node).startswith("down"), slurm_cluster.node_state(node)
    kinds = [e["kind"] for e in d["events"]]
    assert "node_lost" in kinds and "retried" not in kinds, kinds  # requeued by the loss, not failed and retried
    assert node not in {n["node"] for n in svc.api("GET", "/v1/nodes").json()}
    done = _all_end(svc, 240)
    assert done[0]["state"] == "SUCCEEDED", done
    assert _final_steps(svc, jid) == [epochs * N // BATCH]
    steps = _steps(log)
    old = [s["step"] for s in steps if s["gen"] == first["generation"]]
    new = [s["step"] for s in steps if s["gen"] == d["generation"]]
    lost = max(old) - (new[0] - 1)  # steps done before the failure and done again after it
    print(f"node failure on Slurm: last step before {max(old)}, resumed at {new[0]}, lost work {lost} steps "
          f"(checkpoint interval {CKPT}); relaunched on {d['placement']} {took:.1f} s after the kill")
    assert 0 <= lost <= CKPT
    assert svc.job(jid)["restarts"] >= 1


def test_kill9_restart_adopts_slurm_jobs_none_lost_none_twice(slurm_service: Any, slurm_cluster: Any,
                                                              tmp_path: Path) -> None:
    """The service is killed with -9 while x (2 ranks on n1) and y (1 on n2) train under Slurm and z waits; the
    restarted service adopts x and y by their Slurm job names. Every rank of every generation writes one marker
    line when it starts: exactly one per (job, generation, rank), one Slurm job per generation, every step once."""
    script, marks = tmp_path / "marked.py", tmp_path / "marks.jsonl"
    script.write_text(f"EXAMPLE = {EXAMPLE!r}\n{MARKED}")
    svc = slurm_service(scripts_dir=tmp_path).start()
    plan = {"x": (2, 500), "y": (1, 500), "z": (1, 8)}  # x and y: 16,000 steps, ~40-60 s here
    ids: dict[str, str] = {}

    def submit(n: str) -> None:
        ids[n] = _submit(svc, n, plan[n][0], plan[n][1], tmp_path / f"{n}.jsonl", script=str(script),
                         first=(str(marks),))

    # x first: its two ranks meet over the nodes' bridge and then train slower than one rank; y (one rank, fast)
    # and z once x trains, and the crash as soon as y trains (y need only outlast the service's down time)
    submit("x")
    wait_for(lambda: _steps(tmp_path / "x.jsonl"), 120, "x training")
    submit("y")
    submit("z")
    wait_for(lambda: _steps(tmp_path / "y.jsonl"), 120, "y training")
    before = {n: svc.job(j) for n, j in ids.items()}
    assert before["z"]["state"] == "PENDING", {n: (j["state"], j["placement"], len(j["generations"])) for n, j in
                                               before.items()}
    svc.kill9()
    time.sleep(1.0)
    svc.start()  # same database, new port
    for n in "xy":
        j = svc.job(ids[n])
        assert j["generation"] == before[n]["generation"] and any(e["kind"] == "adopted" for e in j["events"]), (
            f"{n} not adopted ({len(_steps(tmp_path / f'{n}.jsonl'))} steps logged): {j['state']} {j['events']}")
    done = _all_end(svc, 300)
    assert {j["name"]: j["state"] for j in done} == dict.fromkeys(ids, "SUCCEEDED")
    starts = [json.loads(ln) for ln in marks.read_text().splitlines()]
    per = {k: len(list(v)) for k, v in itertools.groupby(sorted((m["job"], m["gen"], m["rank"]) for m in starts))}
    gens = {jid: svc.job(jid)["generations"] for jid in ids.values()}
    want = {(jid, str(g["generation"]), str(r)) for jid, gs in gens.items() for g in gs
            for r in range(sum(k for _, k in g["placement"]))}
    assert set(per) == want and set(per.values()) == {1}, (per, want)  # 0 lost, 0 duplicated starts
    assert [len(gens[ids[n]]) for n in "xy"] == [1, 1]  # adopted, never relaunched
    slurm_jobs = {m["slurm"] for m in starts}
    assert len(slurm_jobs) == sum(len(g) for g in gens.values())  # one Slurm job per generation
    acct = slurm_cluster.tool("sacct", "-a", "-X", "-n", "-P", "-o", "JobName", "-S", "now-1hour")
    names = [ln for ln in acct.splitlines() if ln in {f"es-{g['token']}" for gs in gens.values() for g in gs}]
    assert len(names) == len(set(names)) == len(slurm_jobs), names  # Slurm's accounting agrees: none twice
    for n, jid in ids.items():
        assert _final_steps(svc, jid) == [plan[n][1] * N // BATCH], n  # 0 lost, 0 duplicated work
        assert [s["step"] for s in _steps(tmp_path / f"{n}.jsonl")] == list(range(1, plan[n][1] * N // BATCH + 1))
    print(f"service kill -9 under Slurm: {len(starts)} starts for {len(want)} (job, generation, rank); "
          f"{len(slurm_jobs)} Slurm jobs; adopted x and y")


JOB_WHOAMI = '''import json, os, pwd
print(json.dumps({"uid": os.getuid(), "user": pwd.getpwuid(os.getuid()).pw_name,
                  "slurm_job": os.environ.get("SLURM_JOB_ID")}), flush=True)
'''


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (sbatch --uid)")
def test_isolation_users_runs_the_job_as_the_users_account_through_slurm(slurm_service: Any, slurm_cluster: Any,
                                                                         tmp_path: Path) -> None:
    """`--isolation users` on Slurm: the service (root) submits with `sbatch --uid`; the job runs as es-<user>,
    and Slurm's accounting names that account."""
    from isolation_probe import job_python_options

    from elastisched.backends.identity import created_name
    from elastisched.service.auth import create_token
    from elastisched.service.store import Store

    base = Path(tempfile.mkdtemp(prefix="es-slurm-iso-", dir="/tmp"))
    base.chmod(0o755)
    try:
        (base / "shared").mkdir(mode=0o755)
        (base / "scripts").mkdir(mode=0o755)
        (base / "scripts" / "whoami.py").write_text(JOB_WHOAMI)
        (base / "scripts" / "whoami.py").chmod(0o644)
        store = Store(f"sqlite:///{tmp_path / 'state.db'}")
        tok = create_token(store, "carol")[1]
        store.close()
        svc = slurm_service(shared=base / "shared", scripts_dir=base / "scripts", isolation="users",
                            extra=("--create-job-users", *job_python_options(base))).start()
        with svc.as_user(tok) as c:
            r = c.post("/v1/jobs", json={"script": str(base / "scripts" / "whoami.py"), "name": "who", "gpus": 1})
            assert r.status_code == 201, r.text
            jid = r.json()["id"]
            job = wait_for(lambda: (j := c.get(f"/v1/jobs/{jid}").json())["state"] in ("SUCCEEDED", "FAILED") and j,
                           120, "the job to end")
            assert job["state"] == "SUCCEEDED", (job, c.get(f"/v1/jobs/{jid}/logs").text[-3000:])
            out = [json.loads(ln) for ln in c.get(f"/v1/jobs/{jid}/logs").text.splitlines() if ln.startswith("{")]
        acct = created_name("carol")
        assert out and out[0]["user"] == acct and out[0]["uid"] == pwd.getpwnam(acct).pw_uid != 0, out
        events = svc.job(jid)["events"]  # (the admin's view: a user's events carry no data)
        sub = [e for e in events if e["kind"] == "backend_job"]
        assert sub and sub[0]["data"]["external_id"] == f"slurm:{out[0]['slurm_job']}", events
        user = lambda: slurm_cluster.tool("sacct", "-n", "-X", "-P", "-o", "User,JobName", "-j",  # noqa: E731
                                          out[0]["slurm_job"]).split()
        wait_for(lambda: user() == [f"{acct}|es-{svc.job(jid)['generations'][0]['token']}"], 30,
                 "Slurm's accounting to name the account")  # (slurmctld sends it to slurmdbd in the background)
    finally:
        from isolation_probe import remove_accounts

        remove_accounts({"c": "carol"})
        shutil.rmtree(base, ignore_errors=True)
