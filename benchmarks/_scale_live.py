"""The `live` section of benchmarks/scale.py (issue 22): the live service with the fake backend at datacenter
size, through the real API, store, daemon, engine and policy.

Per database (SQLite in a temporary directory; PostgreSQL from the distribution's packages, started here):
`python -m elastisched.service --backend fake --cluster NxG:t4`, `--live-clients` users with their own
tokens; `--live-jobs` jobs submitted at `--live-rate` per second (open loop, spread over the users); then the
users poll for `--live-poll-s` seconds (each: describe one of its jobs or list its jobs, a pause between
requests); then the run waits (at most `--live-drain-s`) until every job has reached a final state. Measured:
every API request's latency (p50/p90/p99/max, per kind and in all), the daemon's round times (the wall time of
each step that ran a round, and its policy + engine part, from `GET /v1/scheduler`), the service's CPU seconds
and peak RSS, and, from a fresh connection to the database, acknowledged jobs missing (lost) and jobs per state.

Jobs: seeded; cifar10 and ncf (bundled profiles, t4), 1/2/4/8 GPUs, each sized (`work_scale`) to run
`--live-job-s` seconds (a range) at its requested size by the model, plus the application's restart cost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from _harness import start_service, stop_service, wait_healthy
from _load import PollMix, Recorder, final_states, poll, process_times, submit_open_loop, user_tokens

ADMIN = "scale-live-admin-token-0123456789"
APPS = ("cifar10", "ncf")
GPUS = ((1, 0.4), (2, 0.25), (4, 0.2), (8, 0.15))  # requested GPUs and their share of the jobs


@dataclass(frozen=True)
class LiveConfig:
    nodes: int = 1000
    gpus_per_node: int = 8
    jobs: int = 10_000
    rate: float = 50.0
    clients: int = 20
    poll_s: float = 600.0
    drain_s: float = 900.0
    job_s: tuple[float, float] = (30.0, 150.0)
    policy: str = "tiresias"
    think_s: float = 0.1
    seed: int = 0
    tick_s: float = 0.5
    modelled: bool = True  # False: jobs without an application, each with a drawn `duration_s` (no restart cost)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("live (the service with the fake backend)")
    g.add_argument("--live-nodes", type=int, default=1000)
    g.add_argument("--live-gpus-per-node", type=int, default=8)
    g.add_argument("--live-jobs", type=int, default=10_000)
    g.add_argument("--live-rate", type=float, default=50.0, help="submissions per second (default 50)")
    g.add_argument("--live-clients", type=int, default=20, help="users submitting and polling (default 20)")
    g.add_argument("--live-poll-s", type=float, default=600.0, help="polling phase (s, default 600)")
    g.add_argument("--live-drain-s", type=float, default=900.0, help="most time to wait for every job to end")
    g.add_argument("--live-think-s", type=float, default=0.1, help="a polling client's pause between requests")
    g.add_argument("--live-policy", default="tiresias")
    g.add_argument("--live-dbs", default="sqlite,postgresql", help="databases to run on (sqlite,postgresql)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    quick = bool(getattr(args, "quick", False))
    cfg = LiveConfig(nodes=args.live_nodes, gpus_per_node=args.live_gpus_per_node, jobs=args.live_jobs,
                     rate=args.live_rate, clients=args.live_clients, poll_s=args.live_poll_s,
                     drain_s=args.live_drain_s, think_s=args.live_think_s, policy=args.live_policy)
    if quick:
        cfg = LiveConfig(nodes=50, jobs=500, rate=50.0, clients=5, poll_s=20.0, drain_s=300.0, job_s=(5.0, 20.0),
                         policy=cfg.policy)
    out: dict[str, Any] = {"config": asdict(cfg), "targets": {"api_p99_ms": 100, "round_p99_s": 2.0}}
    for db in [d.strip() for d in args.live_dbs.split(",") if d.strip()]:
        print(f"--> live on {db}: {cfg.nodes}x{cfg.gpus_per_node} GPUs, {cfg.jobs} jobs", flush=True)
        out[db] = run_one(cfg, db)
        print(json.dumps({k: out[db][k] for k in ("pass", "api_ms", "round_s", "jobs")}, indent=1), flush=True)
    return out


@contextlib.contextmanager
def database(kind: str, tmp: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'state.db'}"
    elif kind == "postgresql":
        from _postgres import postgres

        with postgres() as url:
            yield url
    else:
        raise ValueError(f"--live-dbs: {kind!r} is not sqlite or postgresql")


def job_bodies(cfg: LiveConfig) -> list[dict[str, Any]]:
    """The seeded workload: each job sized to run a drawn time at its requested size by its model (or, not
    `modelled`, given that time as its duration)."""
    if not cfg.modelled:
        rng = random.Random(cfg.seed)
        return [{"script": "job.py", "name": f"j{i}", "gpus": min(rng.choices(*zip(*GPUS, strict=True))[0],
                                                                   cfg.gpus_per_node),
                 "duration_s": rng.uniform(*cfg.job_s)} for i in range(cfg.jobs)]
    from elastisched.core.types import Allocation, JobSpec
    from elastisched.engine.jobstate import new_state
    from elastisched.service.profiles import load_models

    models = load_models(None)
    full: dict[tuple[str, int], float] = {}  # model seconds of the whole application run at g GPUs
    for app in APPS:
        a = models.app(app)
        for g, _ in GPUS:
            st = new_state(JobSpec("x", 0.0, app, g, a.init_batch_size), a, 0.0)
            st.apply(Allocation(placement=(("n", g),)), 0.0, {"n": "t4"}, 0.0)
            full[app, g] = st.finish_time()
    rng = random.Random(cfg.seed)
    sizes, weights = [g for g, _ in GPUS], [w for _, w in GPUS]
    bodies = []
    for i in range(cfg.jobs):
        app, g = APPS[i % len(APPS)], rng.choices(sizes, weights)[0]
        g = min(g, cfg.gpus_per_node)
        target = rng.uniform(*cfg.job_s)
        bodies.append({"script": "job.py", "name": f"j{i}", "gpus": g, "application": app,
                       "batch_size": models.app(app).init_batch_size, "work_scale": target / full[app, g]})
    return bodies


def run_one(cfg: LiveConfig, db_kind: str) -> dict[str, Any]:
    """One whole run on one database; the service and the database are stopped whatever happens."""
    tmp = Path(tempfile.mkdtemp(prefix="elastisched-scale-live-"))
    (tmp / "job.py").write_text("# never run: the fake backend runs jobs by their performance model\n")
    bodies = job_bodies(cfg)
    with database(db_kind, tmp) as db:
        tokens = user_tokens(db, cfg.clients)
        proc, base = start_service(["--db", db, "--backend", "fake", "--cluster",
                                    f"{cfg.nodes}x{cfg.gpus_per_node}:t4", "--policy", cfg.policy, "--workdir",
                                    str(tmp / "work"), "--scripts-dir", str(tmp), "--tick", str(cfg.tick_s),
                                    "--grace", "2"], _env(), tmp / "service.log")
        try:
            wait_healthy(proc, base, tmp / "service.log", timeout=120)
            return _measure(cfg, proc.pid, base, db, tokens, bodies) | {"db": db_kind}
        finally:
            stop_service(proc)


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "ELASTISCHED_TOKEN": ADMIN, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def _measure(cfg: LiveConfig, pid: int, base: str, db: str, tokens: dict[str, str],
             bodies: list[dict[str, Any]]) -> dict[str, Any]:
    rec = Recorder()
    cpu0, w0 = process_times(pid), time.perf_counter()
    submit_s = submit_open_loop(base, tokens, bodies, cfg.rate, rec)
    cpu1 = process_times(pid)
    poll_s = poll(base, tokens, rec, cfg.poll_s, PollMix(describe=3, ls=1, think_s=cfg.think_s), seed=cfg.seed)
    cpu2 = process_times(pid)
    drained = _drain(base, cfg.drain_s)
    cpu3 = process_times(pid)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as c:
        sched = c.get("/v1/scheduler").json()
    final = final_states(db, rec.all_ids())
    api = rec.report()
    rounds = sched["round_seconds"]
    ok = (api["all"]["p99"] <= 100 and rounds["step"]["p99"] <= 2.0 and final["lost"] == 0
          and final["not_final"] == 0 and api["errors"] == 0 and final["acknowledged"] == cfg.jobs)
    return {"pass": ok, "api_ms": api, "round_s": rounds, "jobs": final,
            "phases_s": {"submit": submit_s, "poll": poll_s, "drain": drained,
                         "wall": time.perf_counter() - w0},
            "service_cpu_s": {"submit": cpu1["cpu_s"] - cpu0["cpu_s"], "poll": cpu2["cpu_s"] - cpu1["cpu_s"],
                              "drain": cpu3["cpu_s"] - cpu2["cpu_s"], "all": cpu3["cpu_s"] - cpu0["cpu_s"]},
            "service_peak_rss_mb": cpu3["peak_rss_mb"], "submit_rate_achieved": len(bodies) / submit_s,
            "requests_per_s_polling": sum(len(v) for k, v in rec.lat.items() if k != "submit") / poll_s}


def _drain(base: str, limit_s: float) -> float:
    """Wait until no job is active (the Prometheus job gauges), at most `limit_s`; the seconds waited."""
    t0 = time.perf_counter()
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60) as c:
        while time.perf_counter() - t0 < limit_s:
            text = c.get("/metrics").text
            active = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                         if line.startswith("elastisched_jobs{") and any(f'"{s}"' in line for s in
                                                                          ("PENDING", "RUNNING", "RESTARTING",
                                                                           "SUSPENDED")))
            if active == 0:
                break
            time.sleep(0.5)
    return time.perf_counter() - t0
