"""Service load benchmark (issue 7): 1,000 submissions through the REST API on loopback.

Starts the real service (`python -m elastisched.service`, uvicorn, SQLite in a temp dir, fifo on a 1-slot
cluster so one job runs and 999 queue), submits N jobs one request at a time over a keep-alive connection
from `--clients` threads, then checks that none is lost (API list and a fresh read of the database) and
records per-request latency (p50/p99/max), list latency with N jobs known, and the service's resident
memory (VmRSS, VmHWM) with N jobs known after a few engine rounds. Targets: p99 ≤ 100 ms, RSS ≤ 300 MB.
`--as-user` submits with a per-user token (`elastisched token create`, checked against the database and then
cached) instead of the service's admin token.
Writes ``<out>/service_load.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

TOKEN = "bench-token"


def _rss(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=1, help="concurrent keep-alive clients")
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--as-user", action="store_true", help="submit with a per-user token, not the admin token")
    a = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="elastisched-load-"))
    script = tmp / "sleeper.py"
    script.write_text("import time\ntime.sleep(600)\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = f"sqlite:///{tmp / 'state.db'}"
    log = open(tmp / "service.log", "wb")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, "-m", "elastisched.service", "--db", db, "--port", str(port),
                             "--cluster", "1x1:cpu", "--policy", "fifo", "--workdir", str(tmp / "work"),
                             "--scripts-dir", str(tmp), "--grace", "2"],
                            env={**os.environ, "ELASTISCHED_TOKEN": TOKEN}, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    result: dict[str, Any] = {"benchmark": "service_load", "jobs": a.jobs, "clients": a.clients, "as_user": a.as_user,
                              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                          "loadavg_before": os.getloadavg()}}
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"service did not start: {(tmp / 'service.log').read_text()[-2000:]}")
            time.sleep(0.1)
        if a.as_user:
            from elastisched.service.auth import create_token
            from elastisched.service.store import Store

            st = Store(db)
            headers = {"Authorization": f"Bearer {create_token(st, 'bench')[1]}"}
            st.close()
        rss_idle = _rss(proc.pid)
        lat: list[float] = []
        ids: list[str] = []
        errors: list[str] = []
        lock = threading.Lock()
        per = [a.jobs // a.clients + (i < a.jobs % a.clients) for i in range(a.clients)]

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
        wall = time.perf_counter() - t0
        time.sleep(2.0)  # let the engine run rounds over the full queue
        with httpx.Client(base_url=base, headers=headers, timeout=60) as c:
            t1 = time.perf_counter()
            listed = c.get("/v1/jobs").json()
            list_s = time.perf_counter() - t1
            health = c.get("/healthz").json()
        rss = _rss(proc.pid)
        from elastisched.service.store import Store

        store = Store(db)
        in_db = {r["id"] for r in store.list_jobs()}
        store.close()
        listed_ids = {j["id"] for j in listed}
        result.update({
            "submitted_ok": len(ids), "errors": errors[:5], "lost_api": len(set(ids) - listed_ids),
            "lost_db": len(set(ids) - in_db), "wall_s": wall, "throughput_rps": len(lat) / wall,
            "latency_ms": {"p50": 1e3 * statistics.median(lat), "p99": 1e3 * _pct(lat, 0.99),
                           "max": 1e3 * max(lat), "mean": 1e3 * statistics.fmean(lat)},
            "list_all_ms": 1e3 * list_s, "rss_mb_idle": rss_idle, "rss_mb": rss, "engine_rounds": health["rounds"],
            "running": sum(j["state"] == "RUNNING" for j in listed), "loadavg_after": os.getloadavg(),
            "targets": {"p99_ms": 100, "rss_mb": 300},
        })
        result["pass"] = (not result["lost_api"] and not result["lost_db"] and len(ids) == a.jobs
                          and result["latency_ms"]["p99"] <= 100 and rss["VmRSS"] <= 300)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        _kill_workers(db)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "service_load.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


def _kill_workers(db: str) -> None:
    """The sleeper job's workers outlive the service by design (adoption); end them here."""
    from elastisched.service.store import Store

    store = Store(db)
    for gen in store.generations():
        for pid, _ticks in gen["pids"]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    store.close()


if __name__ == "__main__":
    main()
