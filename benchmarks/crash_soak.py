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

Checked from outside the service: no acknowledged submission is lost (database and API); a sampler reads
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
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "backends" / "fake_worker.py"
TOKEN = "crash-soak-token"
PAUSE, PAUSE_FILE = "ELASTISCHED_DEBUG_PAUSE_AT", "ELASTISCHED_DEBUG_PAUSE_FILE"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _env_of(pid: str) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def _is_wrapper(pid: str) -> bool:
    """A rank's wrapper leads its process group (a child it forked has the same command line until exec)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[2] == pid and b"elastisched.backends._wrap" in cmd


class Procs:
    """The worker processes of one workdir, read from /proc: a sampler thread records violations."""

    def __init__(self, workdir: Path, interval: float = 0.05) -> None:
        self.needle = f"ELASTISCHED_CHECKPOINT_DIR={workdir / 'jobs'}/".encode()
        self.interval = interval
        self.tokens: dict[str, tuple[str, int]] = {}  # token -> (job, generation) ever seen alive
        self.rank_pids: dict[tuple[str, str], set[int]] = {}  # (token, rank) -> wrapper PIDs seen
        self.duplicates: list[dict[str, Any]] = []
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def scan(self) -> dict[int, dict[str, str]]:
        """PID -> environment of every live process of this workdir (a worker or its wrapper)."""
        out: dict[int, dict[str, str]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if self.needle not in f.read():
                        continue
            except OSError:
                continue
            env = _env_of(d)
            if env is not None:
                out[int(d)] = env
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        self.scans += 1
        by_job: dict[str, dict[str, int]] = {}
        for pid, env in self.scan().items():
            tok, job = env.get("ELASTISCHED_LAUNCH_TOKEN", ""), env.get("ELASTISCHED_JOB_ID", "")
            self.tokens.setdefault(tok, (job, int(env.get("ELASTISCHED_GENERATION", "0"))))
            by_job.setdefault(job, {})[tok] = pid
            if _is_wrapper(str(pid)):
                self.rank_pids.setdefault((tok, env.get("ELASTISCHED_RANK", "?")), set()).add(pid)
        for job, toks in by_job.items():
            if len(toks) > 1:  # both still there at a second read: they coexisted
                alive = [t for t, p in toks.items() if (_env_of(str(p)) or {}).get("ELASTISCHED_LAUNCH_TOKEN") == t]
                if len(alive) > 1:
                    self.duplicates.append({"job": job, "generations": sorted(self.tokens[t][1] for t in alive),
                                            "time": time.time()})

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class Service:
    """`python -m elastisched.service` on a fixed database and workdir; restartable, killable."""

    def __init__(self, tmp: Path, cluster: str) -> None:
        self.tmp, self.cluster = tmp, cluster
        self.db = f"sqlite:///{tmp / 'state.db'}"
        self.work = tmp / "work"
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""

    def start(self, pause: str | None = None) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in (PAUSE, PAUSE_FILE)} | {"ELASTISCHED_TOKEN": TOKEN,
                                                                      "OMP_NUM_THREADS": "1"}
        if pause:
            env |= {PAUSE: pause, PAUSE_FILE: str(self.work / "paused-at")}
        with open(self.tmp / "service.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "elastisched.service", "--db", self.db, "--port", str(port), "--cluster",
                 self.cluster, "--policy", "fifo", "--workdir", str(self.work), "--scripts-dir", str(ROOT),
                 "--tick", "0.2", "--grace", "5"], env=env, stdout=log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if pause and (self.work / "paused-at").is_file():
                return  # blocked at the hook already, e.g. relaunching a lost generation during recovery
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {(self.tmp / 'service.log').read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base}/healthz", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError("service did not become healthy in 90 s")

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"})

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def store(self) -> Any:
        from elastisched.service.store import Store

        return Store(self.db)


def _wait(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


def soak(tmp: Path, *, jobs: int = 1000, seed: int = 0, cluster: str = "2x4:cpu", steps: int = 20,
         sleep: float = 0.1, run_s: float = 10.0, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the soak in `tmp` (a fresh folder) and return its counts; raises only on a harness failure."""
    rng = random.Random(seed)
    t_start = time.monotonic()
    svc = Service(tmp, cluster)
    procs = Procs(svc.work)
    acked: dict[int, str] = {}
    unacked = 0
    moments: list[dict[str, Any]] = []
    lock = threading.Lock()
    up = threading.Event()

    def kill(name: str, **info: Any) -> None:
        up.clear()
        svc.kill9()
        moments.append({"moment": name, "t_s": round(time.monotonic() - t_start, 2), **info})
        log(f"kill -9 #{len(moments)} at {name} {info}")

    def restart(pause: str | None = None) -> None:
        with contextlib.suppress(FileNotFoundError):
            (svc.work / "paused-at").unlink()
        svc.start(pause)
        up.set()

    def paused() -> tuple[str, str]:
        text = _wait(lambda: (svc.work / "paused-at").is_file() and (svc.work / "paused-at").read_text(), 120,
                     "the fault hook")
        point, what = text.split()
        return point, what

    def submitter(k: int, idx: list[int]) -> None:
        nonlocal unacked
        c: httpx.Client | None = None
        base = ""
        for i in idx:
            body = {"script": str(WORKER), "name": f"s{i}", "gpus": 2 if i % 3 == 1 else 1, "batch_size": 8,
                    "args": ["--steps", str(steps), "--sleep", str(sleep)]}
            while True:
                up.wait()
                try:
                    if c is None or base != svc.base:
                        if c is not None:
                            c.close()
                        base, c = svc.base, svc.client()
                    r = c.post("/v1/jobs", json=body)
                    if r.status_code != 201:
                        raise RuntimeError(f"submission {i}: HTTP {r.status_code} {r.text[:200]}")
                    with lock:
                        acked[i] = r.json()["id"]
                    break
                except httpx.HTTPError:
                    with lock:
                        unacked += 1  # no answer: it may or may not exist; submit it again
                    time.sleep(0.05)
        if c is not None:
            c.close()

    def window(point: str) -> None:
        """Restart with the fault hook armed at `point`, wait until the service blocks there, look, kill."""
        restart(point)
        _, what = paused()
        job, gen, *rest = what.split(":")
        mine = {p: e for p, e in procs.scan().items()
                if e.get("ELASTISCHED_JOB_ID") == job and e.get("ELASTISCHED_GENERATION") == gen}
        ranks = sorted(int(e.get("ELASTISCHED_RANK", "-1")) for p, e in mine.items() if _is_wrapper(str(p)))
        with contextlib.closing(svc.store()) as st:
            g = next(x for x in st.generations(job) if x["generation"] == int(gen))
        kill(point.split(":")[0], job=job, generation=int(gen), store_state=g["state"],
             store_pids=len(g["pids"] or ()), ranks_alive=ranks, outcome=g["outcome"] if rest else None)

    procs.start()
    try:
        restart()
        threads = [threading.Thread(target=submitter, args=(k, list(range(jobs))[k::4])) for k in range(4)]
        for t in threads:
            t.start()
        _wait(lambda: len(acked) >= jobs // 4, 300, "a quarter of the submissions")
        kill("submit", acked_before=len(acked))  # 1. while 4 clients submit
        restart()
        for t in threads:
            t.join()
        log(f"{len(acked)} submissions acknowledged ({unacked} retried after no answer)")
        time.sleep(rng.uniform(0.5, 2.0))
        kill("running")  # 2. a seeded random moment while jobs run and finish
        for point, most in (("planned", 6), ("rank", 3), ("spawned", 6), ("ended", 6)):  # 3-6. (seeded visit)
            window(f"{point}:{rng.randint(1, most)}")
        restart("stopping:1")  # 7. a cancel's stop cut off after SIGTERM
        with svc.client() as c:
            for _ in range(30):  # a 2 s job may finish before its cancel is handled: then cancel another
                running = _wait(lambda: c.get("/v1/jobs", params={"state": "RUNNING"}).json(), 60, "a running job")
                c.delete(f"/v1/jobs/{max(running, key=lambda j: j['start_time'] or 0)['id']}")
                with contextlib.suppress(TimeoutError):
                    _wait((svc.work / "paused-at").is_file, 5, "the stop")
                    break
        _, what = paused()
        kill("stopping", job=what.split(":")[0])
        restart()
        kill("startup")  # 7. right after the restarted service answers (recovery, first rounds)
        restart()
        time.sleep(run_s)
        return _finish(svc, procs, acked, unacked, moments, jobs, t_start, log)
    finally:
        procs.stop()
        svc.stop()
        _kill_all(procs)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _kill_all(procs: Procs) -> None:
    """Harness cleanup (after the checks): nothing of this run may outlive it."""
    for pid in procs.scan():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _by_job(gens: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for g in sorted(gens, key=lambda g: int(g["generation"])):
        out.setdefault(g["job_id"], []).append(g)
    return out


def _inconsistent(svc: Service, procs: Procs) -> list[dict[str, Any]]:
    """Jobs whose store rows disagree with /proc: a queued or ended job with a live generation, a running
    one without exactly one live generation (its current) whose workers are alive or not yet spawned."""
    with contextlib.closing(svc.store()) as st:
        rows = st.list_jobs()
        gens = _by_job(st.generations())
    alive = {e.get("ELASTISCHED_LAUNCH_TOKEN") for e in procs.scan().values()}
    out = []
    for r in rows:
        live = [g for g in gens.get(r["id"], []) if g["state"] != "EXITED"]
        if r["state"] in TERMINAL or r["state"] in ("PENDING", "SUSPENDED"):
            ok = not live and not r["placement"]
        else:
            ok = len(live) == 1 and live[0]["generation"] == r["generation"] and bool(r["placement"])
            ok = ok and (live[0]["token"] in alive or live[0]["state"] == "PLANNED")
        if not ok:
            out.append({"job": r["id"], "state": r["state"], "generation": r["generation"],
                        "live": [(g["generation"], g["state"]) for g in live]})
    return out


def _finish(svc: Service, procs: Procs, acked: dict[int, str], unacked: int, moments: list[dict[str, Any]],
            jobs: int, t_start: float, log: Callable[[str], None]) -> dict[str, Any]:
    """Consistency before the cancel, cancel every job still queued or running, then count."""
    with contextlib.closing(svc.store()) as st:
        rows = {r["id"]: r for r in st.list_jobs()}
    with svc.client() as c:
        listed = {j["id"] for j in c.get("/v1/jobs").json()}
    lost_db = sorted(set(acked.values()) - set(rows))
    lost_api = sorted(set(acked.values()) - listed)
    inconsistent = _inconsistent(svc, procs)
    if inconsistent:  # a job whose workers just exited is settled at the next poll: look again
        time.sleep(3.0)
        again = {(j["job"], j["generation"]) for j in _inconsistent(svc, procs)}
        inconsistent = [j for j in inconsistent if (j["job"], j["generation"]) in again]
    before = {s: sum(r["state"] == s for r in rows.values()) for s in sorted({r["state"] for r in rows.values()})}
    log(f"before cancel: {before}; inconsistent {len(inconsistent)}")
    t_cancel = time.monotonic()
    with svc.client() as c:
        for jid, r in rows.items():
            if r["state"] not in TERMINAL:
                c.delete(f"/v1/jobs/{jid}")
        _wait(lambda: all(j["state"] in TERMINAL for j in c.get("/v1/jobs").json()), 120, "every job terminal", 0.5)
    with contextlib.suppress(TimeoutError):
        _wait(lambda: not procs.scan(), 30, "no workers left")
    procs.sample()
    orphans = sorted(procs.scan())
    with contextlib.closing(svc.store()) as st:
        final = {r["id"]: r for r in st.list_jobs()}
        gens = _by_job(st.generations())
    planned = {g["token"]: (j, g["generation"]) for j, gs in gens.items() for g in gs}
    unknown = sorted(t for t, jg in procs.tokens.items() if planned.get(t) != jg)
    numbering = sorted(j for j, gs in gens.items() if [g["generation"] for g in gs] != list(range(1, len(gs) + 1)))
    after_live = sorted(j for j, gs in gens.items() if any(g["state"] != "EXITED" for g in gs))
    rank_twice = sorted(f"{t[:8]}:{r}" for (t, r), pids in procs.rank_pids.items() if len(pids) > 1)
    rerun = []  # a job whose workers all finished their steps ("done" in every rank's log) got a later generation
    for jid, gs in gens.items():
        logs = svc.work / "jobs" / jid / "logs"
        done = [g["generation"] for g in gs if all('"done"' in _read(logs / f"g{g['generation']}-r{r}.log")
                                                   for r in range(sum(int(k) for _, k in g["placement"])))]
        if done and max(g["generation"] for g in gs) > min(done):
            rerun.append(jid)
    for m in moments:
        if m.get("job") in final:
            m["final_state"] = final[m["job"]]["state"]
    states = {s: sum(r["state"] == s for r in final.values()) for s in sorted({r["state"] for r in final.values()})}
    return {
        "submissions": len(acked), "jobs_target": jobs, "unanswered_retried": unacked, "jobs_in_db": len(final),
        "kills": len(moments), "moments": moments,
        "lost": len(lost_db), "lost_api": len(lost_api), "lost_ids": lost_db[:10],
        "duplicated": len(procs.duplicates), "duplicates": procs.duplicates[:10],
        "rank_spawned_twice": rank_twice, "rerun_after_done": rerun[:10], "unknown_tokens": len(unknown),
        "orphans": len(orphans), "inconsistent_before_cancel": inconsistent[:10],
        "n_inconsistent_before_cancel": len(inconsistent), "live_generations_after_cancel": after_live[:10],
        "bad_generation_numbering": numbering[:10], "states_before_cancel": before, "states_final": states,
        "generations_total": sum(len(g) for g in gens.values()), "tokens_seen_alive": len(procs.tokens),
        "proc_scans": procs.scans, "cancel_s": round(time.monotonic() - t_cancel, 2),
        "wall_s": round(time.monotonic() - t_start, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (one soak each)")
    ap.add_argument("--run-s", type=float, default=30.0, help="run time after the last restart, before the cancel")
    ap.add_argument("--out", default="results/bench")
    a = ap.parse_args()
    runs = []
    for seed in (int(x) for x in a.seeds.split(",")):
        with tempfile.TemporaryDirectory(prefix="elastisched-crash-") as tmp:
            r = soak(Path(tmp), jobs=a.jobs, seed=seed, run_s=a.run_s)
        r["seed"] = seed
        r["pass"] = (r["submissions"] == a.jobs and r["kills"] >= 5 and not r["lost"] and not r["lost_api"]
                     and not r["duplicated"] and not r["rank_spawned_twice"] and not r["orphans"]
                     and not r["rerun_after_done"]
                     and not r["unknown_tokens"] and not r["n_inconsistent_before_cancel"]
                     and not r["live_generations_after_cancel"] and not r["bad_generation_numbering"])
        runs.append(r)
    result = {"benchmark": "crash_soak", "config": {"jobs": a.jobs, "seeds": a.seeds, "run_s": a.run_s,
                                                    "cluster": "2x4:cpu", "policy": "fifo", "worker": str(WORKER)},
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
              "runs": runs, "pass": all(r["pass"] for r in runs)}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "crash_soak.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"} | {
        "runs": [{k: v for k, v in r.items() if k in ("seed", "submissions", "kills", "lost", "duplicated",
                                                       "orphans", "wall_s", "pass")} for r in runs]}, indent=2))


if __name__ == "__main__":
    main()
