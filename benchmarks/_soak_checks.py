"""What the crash soak (`crash_soak.py`) checks from outside the service: a sampler of /proc while it runs
(two launch tokens of one job alive at once, a rank spawned twice), the store against /proc before the final
cancel, and the counts after it (lost submissions, orphans, live generations, reruns, unknown tokens).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import httpx

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


class SoakService(Protocol):
    """What the checks need of the soak's service: its workdir, a store and an API client."""

    work: Path

    def store(self) -> Any: ...

    def client(self) -> httpx.Client: ...


def wait_until(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    """Poll `pred` until it returns something truthy (returned); TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")


def _env_of(pid: str) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return dict(kv.split("=", 1) for kv in raw.decode(errors="replace").split("\0") if "=" in kv)


def is_wrapper(pid: str) -> bool:
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
            if is_wrapper(str(pid)):
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


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def kill_all(procs: Procs) -> None:
    """Harness cleanup (after the checks): nothing of this run may outlive it."""
    for pid in procs.scan():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _by_job(gens: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for g in sorted(gens, key=lambda g: int(g["generation"])):
        out.setdefault(g["job_id"], []).append(g)
    return out


def _inconsistent(svc: SoakService, procs: Procs) -> list[dict[str, Any]]:
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


def _rerun_after_done(work: Path, gens: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Jobs whose workers all finished their steps ("done" in every rank's log) and that got a later generation."""
    rerun = []
    for jid, gs in gens.items():
        logs = work / "jobs" / jid / "logs"
        done = [g["generation"] for g in gs if all('"done"' in _read(logs / f"g{g['generation']}-r{r}.log")
                                                   for r in range(sum(int(k) for _, k in g["placement"])))]
        if done and max(g["generation"] for g in gs) > min(done):
            rerun.append(jid)
    return rerun


def finish(svc: SoakService, procs: Procs, acked: dict[int, str], unacked: int, moments: list[dict[str, Any]],
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
        wait_until(lambda: all(j["state"] in TERMINAL for j in c.get("/v1/jobs").json()), 120, "every job terminal",
                   0.5)
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: not procs.scan(), 30, "no workers left")
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
    rerun = _rerun_after_done(svc.work, gens)
    for m in moments:
        if m.get("job") in final:
            m["final_state"] = final[m["job"]]["state"]
    states = {s: sum(r["state"] == s for r in final.values()) for s in sorted({r["state"] for r in final.values()})}
    names = Counter(r["name"] for r in final.values())  # one name per submission: a second job is a duplicate
    return {
        "submissions": len(acked), "jobs_target": jobs, "unanswered_retried": unacked, "jobs_in_db": len(final),
        "duplicate_submissions": sum(n - 1 for n in names.values()),
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
