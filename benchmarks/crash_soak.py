"""Crash soak (issue 11): 1,000 submissions through the real API, `kill -9` of the service at eight moments
(five at a fault hook, three of them inside the launch window), a restart on the same database and workdir
after each; then every job still queued is cancelled.

The real service (`python -m elastisched.service`: uvicorn, SQLite, local backend) runs real worker
subprocesses (`tests/backends/fake_worker.py`: stdlib only, a few short steps, checkpoints on SIGTERM) on
a small CPU cluster under fifo. Moments, in order (each followed by a restart on the same workdir):

1. `submit`: while 4 clients submit (each retries its request against the restarted service);
2. `running`: a seeded random moment while jobs run and finish;
3. `planned`: a generation is PLANNED in the store, nothing spawned yet (fault hook
   `ELASTISCHED_DEBUG_PAUSE_AT=planned:N`, `backends/_faults.py`);
4. `rank`: rank 0 of a two-rank generation spawned, rank 1 not (`rank:N`);
5. `spawned`: all ranks spawned, their PIDs not yet in the store (`spawned:N`);
6. `ended`: a generation's end recorded in the store, its consequence (job state, relaunch) not yet;
7. `stopping`: a cancelled job's workers SIGTERMed, the service not yet waited for them (`stopping:1`);
8. `startup`: right after the restarted service answers its health check (recovery's first rounds).
The hook can fire inside recovery (a lost generation relaunched at startup): that is a launch window too.

Checked from outside the service: no acknowledged submission is lost (database and API), none is made twice
(each carries an `Idempotency-Key`, kept across its retries: `duplicate_submissions`); a sampler reads
`/proc/*/environ` every 50 ms and counts a duplicate when two launch tokens of one job are alive at once
(confirmed by a second read of both processes) or one generation's rank is spawned twice; after cancelling
every job still queued, no process carrying this run's workdir in its environment is left (orphans); every
job is terminal with no live generation in the store, and every token seen in /proc is a generation the
store planned; no job whose workers all finished their steps (each rank logged "done") got a later generation (a
partial generation's rank 0 may finish alone: the fake worker has no collective to wait in).
Writes ``<out>/crash_soak.json`` (counts, per-moment details, time, config).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared helpers, also when a test loads us
from _harness import start_service, stop_service, wait_healthy
from _soak_checks import Procs, finish, is_wrapper, kill_all, wait_until

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "backends" / "fake_worker.py"
TOKEN = "crash-soak-token-0123456789"
PAUSE, PAUSE_FILE = "ELASTISCHED_DEBUG_PAUSE_AT", "ELASTISCHED_DEBUG_PAUSE_FILE"


class Service:
    """`python -m elastisched.service` on a fixed database and workdir; restartable, killable."""

    def __init__(self, tmp: Path, cluster: str, isolation: tuple[str, ...] = ()) -> None:
        self.tmp, self.cluster, self.isolation = tmp, cluster, isolation
        self.db = f"sqlite:///{tmp / 'state.db'}"
        self.work = tmp / "work"
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    def start(self, pause: str | None = None) -> None:
        """Start on the same database and workdir; with `pause`, armed at that fault hook (`backends/_faults.py`),
        and back as soon as it blocks there, e.g. relaunching a lost generation during recovery."""
        env = {k: v for k, v in os.environ.items() if k not in (PAUSE, PAUSE_FILE)} | {"ELASTISCHED_TOKEN": TOKEN,
                                                                      "OMP_NUM_THREADS": "1"}
        if pause:
            env |= {PAUSE: pause, PAUSE_FILE: str(self.work / "paused-at")}
        log = self.tmp / "service.log"
        self.proc, self.base = start_service(
            ["--db", self.db, "--cluster", self.cluster, "--policy", "fifo", "--workdir", str(self.work),
             "--scripts-dir", str(ROOT), "--tick", "0.2", "--grace", "5", *self.isolation], env, log)
        wait_healthy(self.proc, self.base, log, ready=(self.work / "paused-at").is_file if pause else None)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"})

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_service(self.proc)

    def store(self) -> Any:
        from elastisched.service.store import Store

        return Store(self.db)


class Soak:
    """One soak in progress: the service, the /proc sampler, the acknowledged submissions and the kills."""

    def __init__(self, tmp: Path, cluster: str, steps: int, sleep: float, log: Callable[[str], None],
                 isolation: tuple[str, ...] = ()) -> None:
        self.t_start = time.monotonic()
        self.svc = Service(tmp, cluster, isolation)
        self.procs = Procs(self.svc.work)
        self.worker_args = ["--steps", str(steps), "--sleep", str(sleep)]
        self.log = log
        self.acked: dict[int, str] = {}  # submission index -> job id, once the API answered 201
        self.unacked = 0  # requests with no answer, submitted again
        self.moments: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.up = threading.Event()  # set while the service answers; the submitters wait on it
        self.key = os.urandom(4).hex()  # this soak's prefix of the submissions' Idempotency-Keys

    def kill(self, name: str, **info: Any) -> None:
        self.up.clear()
        self.svc.kill9()
        self.moments.append({"moment": name, "t_s": round(time.monotonic() - self.t_start, 2), **info})
        self.log(f"kill -9 #{len(self.moments)} at {name} {info}")

    def restart(self, pause: str | None = None) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.svc.work / "paused-at").unlink()
        self.svc.start(pause)
        self.up.set()

    def paused(self) -> tuple[str, str]:
        """The fault point the service blocked at, and what it was doing there (`job:generation[:...]`)."""
        flag = self.svc.work / "paused-at"
        text = wait_until(lambda: flag.is_file() and flag.read_text(), 120, "the fault hook")
        point, what = text.split()
        return point, what

    def submitter(self, idx: list[int]) -> None:
        """Submit jobs `idx` one request at a time, each again after no answer (the service was killed)."""
        c: httpx.Client | None = None
        base = ""
        for i in idx:
            body = {"script": str(WORKER), "name": f"s{i}", "gpus": 2 if i % 3 == 1 else 1, "batch_size": 8,
                    "args": self.worker_args}
            while True:
                self.up.wait()
                try:
                    if c is None or base != self.svc.base:
                        if c is not None:
                            c.close()
                        base, c = self.svc.base, self.svc.client()
                    # the same key on every attempt: a request committed just before a kill is not made twice
                    r = c.post("/v1/jobs", json=body, headers={"Idempotency-Key": f"soak-{self.key}-{i}"})
                    if r.status_code != 201:
                        raise RuntimeError(f"submission {i}: HTTP {r.status_code} {r.text[:200]}")
                    with self.lock:
                        self.acked[i] = r.json()["id"]
                    break
                except httpx.HTTPError:
                    with self.lock:
                        self.unacked += 1  # no answer: it may or may not exist; submit it again
                    time.sleep(0.05)
        if c is not None:
            c.close()

    def submit_and_run(self, jobs: int, rng: random.Random) -> None:
        """Moments 1 (while 4 clients submit) and 2 (a seeded random moment while jobs run and finish)."""
        threads = [threading.Thread(target=self.submitter, args=(list(range(jobs))[k::4],)) for k in range(4)]
        for t in threads:
            t.start()
        wait_until(lambda: len(self.acked) >= jobs // 4, 300, "a quarter of the submissions")
        self.kill("submit", acked_before=len(self.acked))
        self.restart()
        for t in threads:
            t.join()
        self.log(f"{len(self.acked)} submissions acknowledged ({self.unacked} retried after no answer)")
        time.sleep(rng.uniform(0.5, 2.0))
        self.kill("running")

    def window(self, point: str) -> None:
        """Restart with the fault hook armed at `point`, wait until the service blocks there, look, kill."""
        self.restart(point)
        _, what = self.paused()
        job, gen, *rest = what.split(":")
        mine = {p: e for p, e in self.procs.scan().items()
                if e.get("ELASTISCHED_JOB_ID") == job and e.get("ELASTISCHED_GENERATION") == gen}
        ranks = sorted(int(e.get("ELASTISCHED_RANK", "-1")) for p, e in mine.items() if is_wrapper(str(p)))
        with contextlib.closing(self.svc.store()) as st:
            g = next(x for x in st.generations(job) if x["generation"] == int(gen))
        self.kill(point.split(":")[0], job=job, generation=int(gen), store_state=g["state"],
                  store_pids=len(g["pids"] or ()), ranks_alive=ranks, outcome=g["outcome"] if rest else None)

    def cut_a_stop(self) -> None:
        """Moment 7: cancel a running job, kill the service after its workers' SIGTERM, before it waited."""
        self.restart("stopping:1")
        with self.svc.client() as c:
            for _ in range(30):  # a 2 s job may finish before its cancel is handled: then cancel another
                running = wait_until(lambda: c.get("/v1/jobs", params={"state": "RUNNING"}).json(), 60,
                                     "a running job")
                c.delete(f"/v1/jobs/{max(running, key=lambda j: j['start_time'] or 0)['id']}")
                with contextlib.suppress(TimeoutError):
                    wait_until((self.svc.work / "paused-at").is_file, 5, "the stop")
                    break
        _, what = self.paused()
        self.kill("stopping", job=what.split(":")[0])


def users_options(tmp: Path) -> tuple[str, ...]:
    """`--isolation users` (root): each job as its user's account, created by the service; the system Python
    with this checkout's package when ours is not reachable by other accounts (a pyenv under a 0700 /root)."""
    from elastisched.backends.identity import probe

    tmp.chmod(0o755)
    opts = ("--isolation", "users", "--create-job-users")
    if probe(sys.executable, {"PATH": "/usr/bin:/bin"}, tmp) is None:
        return opts
    return (*opts, "--job-python", "/usr/bin/python3", "--job-env", f"PYTHONPATH={ROOT / 'src'}")


def soak(tmp: Path, *, jobs: int = 1000, seed: int = 0, cluster: str = "2x4:cpu", steps: int = 20,
         sleep: float = 0.1, run_s: float = 10.0, log: Callable[[str], None] = print, users: bool = False
         ) -> dict[str, Any]:
    """Run the soak in `tmp` (a fresh folder) and return its counts; raises only on a harness failure. `users`:
    jobs run as their user's account (`--isolation users`), else as the service."""
    rng = random.Random(seed)
    run = Soak(tmp, cluster, steps, sleep, log, users_options(tmp) if users else ())
    run.procs.start()
    try:
        run.restart()
        run.submit_and_run(jobs, rng)  # 1-2.
        for point, most in (("planned", 6), ("rank", 3), ("spawned", 6), ("ended", 6)):  # 3-6. (seeded visit)
            run.window(f"{point}:{rng.randint(1, most)}")
        run.cut_a_stop()  # 7.
        run.restart()
        run.kill("startup")  # 8. right after the restarted service answers (recovery, first rounds)
        run.restart()
        time.sleep(run_s)
        return finish(run.svc, run.procs, run.acked, run.unacked, run.moments, jobs, run.t_start, log)
    finally:
        run.procs.stop()
        run.svc.stop()
        kill_all(run.procs)


def _account_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (one soak each)")
    ap.add_argument("--run-s", type=float, default=30.0, help="run time after the last restart, before the cancel")
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--isolation", default="none", choices=["none", "users"], help="users: jobs as their user's "
                    "Unix account (root; docs/security.md), writes crash_soak-users.json")
    a = ap.parse_args()
    runs = []
    for seed in (int(x) for x in a.seeds.split(",")):
        had = _account_exists("es-admin")
        with tempfile.TemporaryDirectory(prefix="elastisched-crash-", dir="/tmp") as tmp:
            r = soak(Path(tmp), jobs=a.jobs, seed=seed, run_s=a.run_s, users=a.isolation == "users")
        if a.isolation == "users" and not had and _account_exists("es-admin"):  # the account the service made
            subprocess.run(["userdel", "es-admin"], capture_output=True, check=False, timeout=60)
        r["seed"] = seed
        r["pass"] = (r["submissions"] == a.jobs and r["kills"] >= 5 and not r["lost"] and not r["lost_api"]
                     and not r["duplicate_submissions"]
                     and not r["duplicated"] and not r["rank_spawned_twice"] and not r["orphans"]
                     and not r["rerun_after_done"]
                     and not r["unknown_tokens"] and not r["n_inconsistent_before_cancel"]
                     and not r["live_generations_after_cancel"] and not r["bad_generation_numbering"])
        runs.append(r)
    result = {"benchmark": "crash_soak", "config": {"jobs": a.jobs, "seeds": a.seeds, "run_s": a.run_s,
                                                    "cluster": "2x4:cpu", "policy": "fifo", "worker": str(WORKER),
                                                    "isolation": a.isolation},
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
              "runs": runs, "pass": all(r["pass"] for r in runs)}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / ("crash_soak-users.json" if a.isolation == "users" else "crash_soak.json")).write_text(
        json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"} | {
        "runs": [{k: v for k, v in r.items() if k in ("seed", "submissions", "kills", "lost", "duplicated",
                                                       "duplicate_submissions", "orphans", "wall_s", "pass")}
                 for r in runs]}, indent=2))


if __name__ == "__main__":
    main()
