"""Service load benchmark (issues 7 and 23): the REST API on loopback under many clients.

Starts the real service (`python -m elastisched.service`, uvicorn, SQLite in a temp dir, fifo on a 1-slot
cluster so one job runs and the rest queue; `--backend fake` on a larger fake cluster instead), then:

1. submission: N jobs, one request at a time over a keep-alive connection from `--clients` threads (closed
   loop, as fast as the service answers), with the admin token or (`--as-user`) a per-user token;
2. mixed (`--mixed-s`, default 60 s): `--clients` users, each with its own token (as `elastisched token
   create` makes), each a closed loop of `ls` (its jobs), `describe` (one of its jobs) and `submit` in equal
   shares, with `--think-s` between a client's requests (0: back to back, the saturation reading).

Then it checks that none is lost (every acknowledged id in the API's list and in a fresh read of the
database) and records per-request latency per kind (p50/p90/p99/max), requests per second, the service's CPU
seconds (and the clients' own: they share the machine's cores) and resident memory (VmRSS, VmHWM). Targets:
p99 <= 100 ms in both phases, 0 errors, RSS <= 300 MB.
Writes ``<out>/service_load.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks' shared helpers
from _harness import kill_workers, start_service, stop_service, wait_healthy
from _load import PollMix, Recorder, poll, process_times, user_tokens

TOKEN = "bench-token-0123456789abcdef"


def _rss(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=1, help="concurrent keep-alive clients")
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--as-user", action="store_true", help="submit with a per-user token, not the admin token")
    ap.add_argument("--mixed-s", type=float, default=60.0, help="seconds of the mixed ls/describe/submit phase "
                    "(0: none)")
    ap.add_argument("--think-s", type=float, default=0.0, help="a mixed-phase client's pause between requests")
    ap.add_argument("--backend", choices=["local", "fake"], default="local")
    ap.add_argument("--api-threads", type=int, default=None, help="the service's --api-threads (default: its own)")
    return ap.parse_args()


def _start(tmp: Path, db: str, backend: str, api_threads: int | None) -> tuple[subprocess.Popen[bytes], str]:
    """The service on a 1-slot cluster under fifo (one job runs, the rest queue), or on 100 fake nodes of 8
    GPUs; not yet answering."""
    cluster = ["--cluster", "1x1:cpu"] if backend == "local" else ["--backend", "fake", "--cluster", "100x8:t4"]
    if api_threads is not None:
        cluster += ["--api-threads", str(api_threads)]
    return start_service(["--db", db, *cluster, "--policy", "fifo", "--workdir", str(tmp / "work"),
                          "--scripts-dir", str(tmp), "--grace", "2"], {**os.environ, "ELASTISCHED_TOKEN": TOKEN},
                         tmp / "service.log")


def _user_token(db: str) -> str:
    """A per-user token created in the database, as `elastisched token create` does."""
    from elastisched.service.auth import create_token
    from elastisched.service.store import Store

    st = Store(db)
    token = create_token(st, "bench")[1]
    st.close()
    return str(token)


@dataclass
class Submitted:
    """What the submitting clients saw: per-request latency (s), acknowledged ids, error texts, wall time (s)."""

    lat: list[float]
    ids: list[str]
    errors: list[str]
    wall: float


def _submit_all(base: str, headers: dict[str, str], script: Path, jobs: int, clients: int) -> Submitted:
    """`jobs` submissions from `clients` keep-alive threads, one request at a time each."""
    lat: list[float] = []
    ids: list[str] = []
    errors: list[str] = []
    lock = threading.Lock()
    per = [jobs // clients + (i < jobs % clients) for i in range(clients)]

    def client(n: int, k: int) -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=30) as c:
            for i in range(n):
                body = {"script": str(script), "name": f"c{k}-{i}", "gpus": 1, "batch_size": 32}
                t0 = time.perf_counter()
                r = c.post("/v1/jobs", json=body)
                dt = time.perf_counter() - t0
                with lock:
                    lat.append(dt)
                    (ids.append(r.json()["id"]) if r.status_code == 201 else errors.append(r.text[:200]))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(n, k)) for k, n in enumerate(per)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Submitted(lat, ids, errors, time.perf_counter() - t0)


def _measure(base: str, headers: dict[str, str], pid: int, db: str, sub: Submitted,
             rss_idle: dict[str, float], more_ids: list[str]) -> dict[str, Any]:
    """With every job known: nothing lost (API and database; `more_ids`: acknowledged in the mixed phase), the
    list latency, memory, the engine's rounds."""
    time.sleep(2.0)  # let the engine run rounds over the full queue
    with httpx.Client(base_url=base, headers=headers, timeout=60) as c:
        t1 = time.perf_counter()
        listed = c.get("/v1/jobs").json()
        list_s = time.perf_counter() - t1
        health = c.get("/healthz").json()
    rss = _rss(pid)
    from elastisched.service.store import Store

    store = Store(db)
    in_db = {r["id"] for r in store.list_jobs()}
    store.close()
    listed_ids = {j["id"] for j in listed}
    lat, ids, wall = sub.lat, [*sub.ids, *more_ids], sub.wall
    return {
        "submitted_ok": len(sub.ids), "errors": sub.errors[:5], "acknowledged_all": len(ids),
        "lost_api": len(set(ids) - listed_ids),
        "lost_db": len(set(ids) - in_db), "wall_s": wall, "throughput_rps": len(lat) / wall,
        "latency_ms": {"p50": 1e3 * statistics.median(lat), "p99": 1e3 * _pct(lat, 0.99),
                       "max": 1e3 * max(lat), "mean": 1e3 * statistics.fmean(lat)},
        "list_all_ms": 1e3 * list_s, "rss_mb_idle": rss_idle, "rss_mb": rss, "engine_rounds": health["rounds"],
        "running": sum(j["state"] == "RUNNING" for j in listed), "loadavg_after": os.getloadavg(),
        "targets": {"p99_ms": 100, "rss_mb": 300},
    }


def _mixed(a: argparse.Namespace, base: str, db: str, pid: int, script: Path) -> dict[str, Any]:
    """The mixed phase: per-user clients listing, describing and submitting; latency per kind, CPU, ids."""
    tokens = user_tokens(db, a.clients)
    rec = Recorder()
    body = lambda i: {"script": str(script), "name": f"m{i}", "gpus": 1, "batch_size": 32}  # noqa: E731
    cpu0, mine0 = process_times(pid)["cpu_s"], time.process_time()
    wall = poll(base, tokens, rec, a.mixed_s, PollMix(describe=1, ls=1, submit=1, think_s=a.think_s), body)
    cpu, mine = process_times(pid)["cpu_s"] - cpu0, time.process_time() - mine0
    n = sum(len(v) for v in rec.lat.values())
    return {"clients": a.clients, "think_s": a.think_s, "wall_s": wall, "requests": n, "requests_per_s": n / wall,
            "service_cpu_s": cpu, "client_cpu_s": mine, "loadavg_after": os.getloadavg(), "latency_ms": rec.report(),
            "ids": rec.all_ids()}


def main() -> None:
    a = _parse()
    tmp = Path(tempfile.mkdtemp(prefix="elastisched-load-"))
    script = tmp / "sleeper.py"
    script.write_text("import time\ntime.sleep(600)\n")
    db = f"sqlite:///{tmp / 'state.db'}"
    result: dict[str, Any] = {"benchmark": "service_load", "jobs": a.jobs, "clients": a.clients, "as_user": a.as_user,
                              "backend": a.backend,
                              "api_threads": a.api_threads,
                              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                          "loadavg_before": os.getloadavg()}}
    proc, base = _start(tmp, db, a.backend, a.api_threads)
    try:
        wait_healthy(proc, base, tmp / "service.log", timeout=60)
        headers = {"Authorization": f"Bearer {_user_token(db) if a.as_user else TOKEN}"}
        rss_idle = _rss(proc.pid)
        sub = _submit_all(base, headers, script, a.jobs, a.clients)
        mixed = _mixed(a, base, db, proc.pid, script) if a.mixed_s > 0 else None
        admin = {"Authorization": f"Bearer {TOKEN}"}  # the check lists every user's jobs
        result.update(_measure(base, admin, proc.pid, db, sub, rss_idle, mixed["ids"] if mixed else []))
        ok = (not result["lost_api"] and not result["lost_db"] and len(sub.ids) == a.jobs
              and result["latency_ms"]["p99"] <= 100 and result["rss_mb"]["VmRSS"] <= 300)
        if mixed is not None:
            lat = mixed.pop("latency_ms")
            mixed["ids"] = len(mixed["ids"])
            result["mixed"] = mixed | {"latency_ms": lat}
            ok = ok and lat["all"]["p99"] <= 100 and lat["errors"] == 0
        result["pass"] = ok
    finally:
        stop_service(proc)
        kill_workers(db)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "service_load.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
