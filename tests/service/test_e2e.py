"""End-to-end (issue 7 acceptance): the example model as real elastic jobs through the real service.

Six jobs, 3 training slots plus one server (2 slots) on loan: jobs queue, one is resized while running,
the loaned server is reclaimed mid-run (its jobs scale in or are checkpointed and requeued), and every job
ends SUCCEEDED having done exactly its number of optimizer steps (nothing lost, nothing done twice).
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from _svc_helpers import EXAMPLE, ROOT, ServiceProc, wait_for

N, BATCH = 2048, 64  # 32 optimizer steps per epoch at any world size (global batch fixed, unless a policy sets it)
PROFILES = ROOT / "tests" / "service" / "data" / "profiles"  # `linreg` measured here (its README)
#: policies whose jobs need a performance model (gavel) or choose batch sizes from one (pollux, sia): their jobs
#: name the profiled application `linreg`, and the service reads `PROFILES`
MODELLED = ("pollux", "sia", "gavel")
POLICIES = ["fifo", *(pytest.param(p, marks=pytest.mark.skipif(
    importlib.util.find_spec(f"elastisched.policies.{p}") is None, reason=f"{p} policy not available"))
    for p in ("lyra", *MODELLED))]


def _args(epochs: int, log: Path) -> list[str]:
    return ["--epochs", str(epochs), "--n", str(N), "--batch-size", str(BATCH), "--log", str(log)]


def _final(svc: ServiceProc, jid: str) -> dict[str, Any]:
    lines = [ln for ln in svc.api("GET", f"/v1/jobs/{jid}/logs").text.splitlines() if ln.startswith('{"final_mse"')]
    assert len(lines) == 1, f"job {jid}: expected one final line, got {lines}"
    return dict(json.loads(lines[0]))


def _steps(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]


def _exact(steps: list[dict[str, Any]], epochs: int, n: int = N) -> int:
    """Replay the step log (any batch changes included): every step number once, and each epoch consumes
    exactly its `n` samples (a step takes min(batch, what is left of the epoch)). Returns the steps."""
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1)), "a step lost or done twice"
    left: dict[int, int] = {}
    for s in steps:
        left.setdefault(s["epoch"], n)
        assert left[s["epoch"]] > 0, f"step {s['step']} after its epoch was done"
        left[s["epoch"]] -= min(s["batch"], left[s["epoch"]])
    assert sorted(left) == list(range(epochs)) and not any(left.values()), left
    return len(steps)


BACKENDS = ["local", pytest.param("ray", marks=pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                                                  reason="ray not installed")), "slurm"]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A real Ray cluster (tests/service/_ray_cluster.py): head, t4×2, v100×1, k80×1 and a loanable t4×2."""
    from _ray_cluster import start_cluster

    c = start_cluster()
    yield c
    c.shutdown()


@dataclass
class _Run:
    """One run of the six-job scenario: the service, the jobs submitted (name → id, epochs) and their logs."""

    svc: ServiceProc
    logs: Path
    backend: str
    modelled: bool
    ids: dict[str, str] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)

    def jobs(self) -> dict[str, dict[str, Any]]:
        return {j["name"]: j for j in self.svc.api("GET", "/v1/jobs").json()}

    def steps(self, name: str) -> list[dict[str, Any]]:
        return _steps(self.logs / f"{name}.jsonl")


def _start_service(service_factory: Any, tmp_path: Path, policy: str, backend: str,
                   request: pytest.FixtureRequest) -> tuple[_Run, Any]:
    """The service on `backend` (Ray's module cluster or a real Slurm), started; (the run, the Slurm cluster)."""
    extra: tuple[str, ...] = ()
    address = ""
    if backend != "local" and policy in MODELLED:  # not a pass: said so in the report of issue 12's branch
        pytest.skip(f"the linreg profile is measured for gpu type `cpu` and the {backend} test cluster's nodes are "
                    "typed GPUs (t4, ...): a modelled policy has no model for them and selects no job (NotSelected)")
    if backend == "ray":  # the nodes come from Ray (--cluster is not used); the loan names a loanable Ray node
        address = request.getfixturevalue("ray_cluster").address
        extra = ("--backend", "ray", "--ray-address", address)
    env: dict[str, str] = {}
    slurm = None
    if backend == "slurm":  # a real Slurm (tests/slurm_cluster.py): n1 t4×2 + n2 t4×1 train, n3 t4×2 loanable
        slurm = request.getfixturevalue("slurm_cluster")
        (tmp_path / "shared").mkdir()
        extra = ("--backend", "slurm", "--slurm", "partition=train", "--slurm", "loan-partition=loan",
                 "--slurm", f"shared={tmp_path / 'shared'}")
        env = {"SLURM_CONF": str(slurm.conf)}
    modelled = policy in MODELLED
    if modelled:
        extra += ("--profiles", str(PROFILES))
    svc = service_factory(cluster="1x3:cpu", policy=policy, scripts_dir=ROOT, extra=extra, env=env)
    if address:  # stop the service BEFORE cleaning the module's cluster: a live service would relaunch (retry)
        from _ray_cluster import clean  # the generations `clean` kills, and its detached ones would outlive us

        request.addfinalizer(lambda: (svc.stop(), clean(address)))
    svc.start()
    return _Run(svc, tmp_path, backend, modelled), slurm


def _submit_plan(run: _Run, policy: str) -> None:
    """Submit the jobs: more slots asked than the cluster has, so some queue."""
    elastic = policy in ("lyra", "pollux", "sia")
    # d, e and f are the ones that can land on the loan: long enough (~10 s alone on a quiet machine) that the one
    # on it is still training when the reclaim reaches it (at 12-30 epochs, ~1-4 s, one finished first on CI).
    # a is resized from its first step on: 3,840 steps, so it still trains when the resize reaches it (a poll,
    # two calls and a round later) on a machine several times faster (at 40 epochs, ~2 s of two workers here)
    plan = [("a", "2", 120), ("b", "1:2" if elastic else "1", 30), ("c", "1", 12), ("d", "1", 90), ("e", "1", 90),
            ("f", "1", 90)]
    if run.modelled:  # reduced plan: one-worker jobs (pollux starts every job on one GPU; one worker runs ~10x the
        # steps/s of two on these cores, hence more epochs), no admin resize (fifo and lyra cover it)
        plan = [("a", "1", 150), ("b", "1:2" if elastic else "1", 150), ("c", "1", 40), ("d", "1", 150),
                ("e", "1", 150)]
    # Ray's cluster has 4 training slots (t4×2, v100, k80), not 3: once b and c finish, d, e and f fit on training
    # nodes and none needs the loan (CI, loaded: "timed out waiting for a job training on the loan"). On Ray d, e
    # and f ask for t4, the loan's type: a (resized to 1) and d fill the training t4 node, so e and f always
    # wait for the loan however fast b and c are. (Not for the modelled plan: its profile decides the types.)
    for name, gpus, ep in plan:
        lo, hi = (int(x) for x in (gpus.split(":") * 2)[:2])
        t4 = {"gpu_type": "t4"} if run.backend == "ray" and not run.modelled and name in "def" else {}
        r = run.svc.api("POST", "/v1/jobs", json={"script": EXAMPLE, "name": name, "gpus": lo, "min_gpus": lo,
                                                  "max_gpus": hi, "batch_size": BATCH, "duration_s": 60, **t4,
                                                  **({"application": "linreg"} if run.modelled else {}),
                                                  "args": _args(ep, run.logs / f"{name}.jsonl")})
        assert r.status_code == 201, r.text
        run.ids[name], run.epochs[name] = r.json()["id"], ep


def _admin_resize(run: _Run) -> None:
    """An admin resize of a running job: checkpoint → relaunch at the new size, generation + 1."""
    gen_a = run.jobs()["a"]["generation"]
    assert run.svc.api("POST", f"/v1/jobs/{run.ids['a']}:resize", json={"gpus": 1}).status_code == 202
    total = run.epochs["a"] * N // BATCH
    try:
        wait_for(lambda: run.jobs()["a"]["generation"] > gen_a and run.jobs()["a"]["gpus"] == 1, 60, "a resized")
    except AssertionError as e:  # the premise: a still trained when the resize reached it
        a = run.svc.job(run.ids["a"])
        raise AssertionError(f"{e}; a logged {len(run.steps('a'))} of {total} steps; state {a['state']}, "
                             f"generations {a['generations']}") from None
    print(f"a: {sum(s['gen'] == gen_a for s in run.steps('a'))} of {total} steps done when the resize stopped it")


def _loan_and_reclaim(run: _Run) -> tuple[dict[str, Any], str]:
    """Lend an inference server, wait for a job to train on it, reclaim it: (the job it was taken from, node)."""
    offer = run.svc.api("POST", "/v1/loans", json={"nodes": 1, "gpus_per_node": 2,
                                                   **({"gpu_type": "t4"} if run.backend != "local" else {})})
    assert offer.status_code == 201, offer.text
    loan_node = offer.json()[0]["node_id"]
    assert loan_node == {"local": "loan-cpu-0", "slurm": "n3"}.get(run.backend) or loan_node.startswith("loan-t4-")
    on_loan = wait_for(lambda: [j for j in run.jobs().values() if j["state"] == "RUNNING"
                                and any(n == loan_node for n, _ in j["placement"])
                                and run.steps(j["name"])], 90, "a job training on the loan")
    # the job on it scales in or is checkpointed; none is lost
    victim = max(on_loan, key=lambda j: run.epochs[j["name"]] * N // BATCH - len(run.steps(j["name"])))
    assert run.svc.api("POST", "/v1/reclaims", json={"count": 1, "deadline_s": 30}).status_code == 202
    wait_for(lambda: run.svc.api("GET", "/v1/loans").json()["loans"][0]["state"] == "RETURNED", 60, "loan returned")
    assert all(n != loan_node for j in run.jobs().values() for n, _ in j["placement"])
    return victim, loan_node


def _check_every_job_exact(run: _Run) -> None:
    """Every job ends SUCCEEDED having done exactly its steps, across generations and batch changes."""
    done = wait_for(lambda: (js := run.jobs()) and all(j["state"] in ("SUCCEEDED", "FAILED") for j in js.values())
                    and js, 240, "all jobs to end")
    assert {n: j["state"] for n, j in done.items()} == dict.fromkeys(run.ids, "SUCCEEDED")
    for name, jid in run.ids.items():
        final = _final(run.svc, jid)
        # exact progress across generations (and across in-place batch changes, which pollux and sia make)
        assert final["steps"] == _exact(run.steps(name), run.epochs[name]), (name, final)
        if not run.modelled:
            assert final["steps"] == run.epochs[name] * N // BATCH, (name, final)
        assert final["final_mse"] < 5.0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("policy", POLICIES)
def test_six_example_jobs_resize_loan_and_reclaim(service_factory: Any, tmp_path: Path, policy: str, backend: str,
                                                  request: pytest.FixtureRequest) -> None:
    run, slurm = _start_service(service_factory, tmp_path, policy, backend, request)
    _submit_plan(run, policy)
    # 7 (modelled: 5) slots asked of 3: the queue says why the others wait
    # (gavel may rotate: a job it preempts for another waits SUSPENDED, reason Preempted)
    wait_for(lambda: any(j["state"] in ("PENDING", "SUSPENDED") and j["reason"] for j in run.jobs().values()), 20,
             "a REASON")
    # the modelled policies choose their own order (sia may start a last): the loan comes while jobs still wait
    first = ["a"] if not run.modelled else list(run.ids)
    wait_for(lambda: any(run.jobs()[n]["state"] == "RUNNING" and run.steps(n) for n in first), 90,
             "a training" if not run.modelled else "a job training")
    if not run.modelled:  # 1) an admin resize of a running job
        _admin_resize(run)
    victim, loan_node = _loan_and_reclaim(run)  # 2) a server lent, used, and 3) reclaimed mid-run
    _check_every_job_exact(run)
    v = run.svc.job(victim["id"])
    assert len(v["generations"]) >= 2 and v["generations"][0]["outcome"] == "stopped"
    # a generation after the first one that trained continued from its checkpoint (a generation may be stopped
    # before its first step: gavel preempts for a job with less service, sia moves a job again at once)
    vsteps = run.steps(victim["name"])
    resumed = [s for s in vsteps if s["gen"] > vsteps[0]["gen"]]
    assert resumed and resumed[0]["step"] > 1
    assert run.svc.job(run.ids["a"])["restarts"] >= (0 if run.modelled else 1)
    reclaims = run.svc.api("GET", "/v1/loans").json()["reclaims"]
    assert [(r["state"], r["nodes"]) for r in reclaims] == [("DONE", [loan_node])]
    if backend == "slurm":  # the returned server was drained, then resumed for inference once empty
        _slurm_checks(slurm, run.svc, run.ids, loan_node)


def _slurm_checks(slurm: Any, svc: Any, ids: dict[str, str], loan_node: str) -> None:
    """Slurm's side of the run: every generation was one Slurm job named by its launch token, the accounting
    agrees, and the loan went back through a drain."""
    log = (slurm.root / "slurmctld.log").read_text(errors="replace")
    assert re.search(rf"update_node: node {loan_node} reason set to: elastisched: loan returned", log), log[-2000:]
    assert re.search(rf"update_node: node {loan_node} state set to IDLE", log), log[-2000:]
    assert slurm.node_state(loan_node) == "idle"
    names = {f"es-{g['token']}" for jid in ids.values() for g in svc.job(jid)["generations"]}

    def unaccounted() -> list[str]:
        acct = slurm.tool("sacct", "-a", "-X", "-n", "-P", "-o", "JobName,State", "-S", "now-1hour")
        return sorted(names - {ln.split("|")[0] for ln in acct.splitlines() if ln.startswith("es-")})

    # slurmctld hands job records to slurmdbd asynchronously: a generation that just ended may reach sacct a few
    # seconds later (two full runs lost one name each to that lag), so the check waits, boundedly, for all of them
    try:
        wait_for(lambda: not unaccounted(), 60, "every generation in sacct")
    except AssertionError:
        raise AssertionError(f"not in sacct after 60 s: {unaccounted()}") from None


@pytest.mark.skipif(importlib.util.find_spec("elastisched.policies.pollux.policy") is None,
                    reason="pollux not available")
def test_pollux_job_changes_its_batch_from_its_gradient_statistics(service_factory: Any, tmp_path: Path) -> None:
    """Issue 14's live must-show. The chain: the training library's statistics hints (hints.jsonl: grad_sqr,
    grad_var, throughput) → the backend's JobHints → the daemon's LiveJobs → JobView.grad_stats → pollux's
    goodput-optimal batch → an in-place reconfigure (event) → batch-target.json → the workers switch at a step
    boundary, in the same generation. The profile carries no gradient noise (by it alone pollux keeps 64), so
    a batch other than 64 can only come from the statistics the job measured."""
    svc = service_factory(cluster="1x1:cpu", policy="pollux", scripts_dir=ROOT,
                          extra=("--profiles", str(PROFILES), "--policy-interval", "1")).start()
    # ~20 s at batch 64 on a quiet machine: long enough that pollux, on a cold start (no fitted model or cached
    # interpolation yet: seconds), still sees rounds of settled statistics before the job ends (at 40 epochs a
    # cold start failed 1 run in 5)
    n, epochs, log = 8192, 120, tmp_path / "p.jsonl"
    # lr 0.005: SGD settles close to the optimum, where the gradient noise scale is thousands of samples (at the
    # example's lr 0.05 it stays ~260, where pollux's goodput-optimal batch on this machine's profile is 64)
    args = ["--epochs", str(epochs), "--n", str(n), "--batch-size", "64", "--stats-interval", "4", "--lr", "0.005",
            "--log", str(log)]
    r = svc.api("POST", "/v1/jobs", json={"script": EXAMPLE, "name": "p", "gpus": 1, "batch_size": 64,
                                          "application": "linreg", "args": args})
    assert r.status_code == 201, r.text
    jid = r.json()["id"]
    job = wait_for(lambda: (j := svc.job(jid))["state"] in ("SUCCEEDED", "FAILED") and j, 240, "the job to end")
    assert job["state"] == "SUCCEEDED", job
    assert [g["generation"] for g in job["generations"]] == [1] and job["restarts"] == 0  # never relaunched
    recs = [e["data"] for e in job["events"] if e["kind"] == "reconfigure"]
    assert recs, "pollux never changed the batch"
    hints_file = tmp_path / "work" / "jobs" / jid / "ckpt" / "hints.jsonl"
    hints = [json.loads(x) for x in hints_file.read_text().splitlines()]
    measured = {(h["grad_sqr"], h["grad_var"] * h["initBatchSize"]) for h in hints if h.get("grad_sqr") is not None}
    # every decision used statistics that one of the job's hints reported (none came from the model)
    assert all(e["source"] == "hints" and tuple(e["grad_stats"]) in measured for e in recs), recs
    assert recs[0]["previous"] == 64 and recs[0]["batch_size"] != 64
    # the workers applied the scheduler's batches in place (generation 1), in the order the service chose them
    applied = [h for h in hints if h.get("source") == "scheduler"]
    assert applied and applied[0]["previousBatchSize"] == 64 and all(h["generation"] == 1 for h in applied)
    chosen = [e["batch_size"] for e in recs]
    assert applied[0]["globalBatchSize"] == chosen[0] and {h["globalBatchSize"] for h in applied} <= set(chosen)
    steps = _steps(log)
    assert steps[0]["batch"] == 64 and steps[-1]["batch"] == applied[-1]["globalBatchSize"]
    final = _final(svc, jid)
    assert final["steps"] == _exact(steps, epochs, n) < epochs * n // 64  # fewer, larger steps; no sample lost
    assert final["batch"] == applied[-1]["globalBatchSize"] and final["final_mse"] < 1.0  # σ² = 0.25 at the optimum
