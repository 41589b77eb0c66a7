"""Load clients for the live service's benchmarks (`service_load.py`, `_scale_live.py`): users with their own
tokens, submissions at a fixed rate (open loop: each is due at its own instant, whatever the previous one
took), and polling clients that list and describe their own jobs (closed loop with a pause between requests).
Every request's latency is recorded per kind; every acknowledged job id is kept, so a run can prove none was
lost. Loopback only; every loop is bounded by a count or a deadline.

Imported by its bare name, as `_harness` is.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def pct(xs: Sequence[float], q: float) -> float:
    """The q-quantile (nearest rank) of `xs`; 0 for none."""
    if not xs:
        return 0.0
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def summary_ms(xs: Sequence[float]) -> dict[str, float]:
    """Count, p50, p90, p99 and max of latencies given in seconds, in milliseconds."""
    return {"n": len(xs), "p50": 1e3 * pct(xs, 0.5), "p90": 1e3 * pct(xs, 0.9), "p99": 1e3 * pct(xs, 0.99),
            "max": 1e3 * max(xs, default=0.0)}


@dataclass
class Recorder:
    """Latencies (s) per request kind, error texts, acknowledged ids per user; shared by client threads."""

    lat: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    ids: dict[str, list[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def timed(self, kind: str, call: Callable[[], httpx.Response], ok: int = 200) -> httpx.Response | None:
        t0 = time.perf_counter()
        try:
            r = call()
        except httpx.HTTPError as e:
            with self.lock:
                self.lat.setdefault(kind, []).append(time.perf_counter() - t0)
                self.errors.append(f"{kind}: {type(e).__name__}: {e}"[:300])
            return None
        dt = time.perf_counter() - t0
        with self.lock:
            self.lat.setdefault(kind, []).append(dt)
            if r.status_code != ok:
                self.errors.append(f"{kind}: {r.status_code} {r.text[:200]}")
        return r if r.status_code == ok else None

    def all_ids(self) -> list[str]:
        return [j for ids in self.ids.values() for j in ids]

    def report(self) -> dict[str, Any]:
        every = [x for xs in self.lat.values() for x in xs]
        return {"all": summary_ms(every), **{k: summary_ms(v) for k, v in sorted(self.lat.items())},
                "errors": len(self.errors), "error_samples": self.errors[:5]}


def submit_open_loop(base: str, tokens: Mapping[str, str], bodies: Sequence[dict[str, Any]], rate: float,
                     rec: Recorder, kind: str = "submit") -> float:
    """Submit `bodies` at `rate` per second in all: body i is due at start + i / rate and is sent by user
    i mod len(tokens) (one keep-alive client each). Returns the wall seconds the submissions took."""
    users = list(tokens)
    t0 = time.perf_counter()

    def client(k: int) -> None:
        user = users[k]
        with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {tokens[user]}"}) as c:
            for i in range(k, len(bodies), len(users)):
                wait = t0 + i / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                r = rec.timed(kind, lambda i=i: c.post("/v1/jobs", json=bodies[i]), ok=201)
                if r is not None:
                    with rec.lock:
                        rec.ids.setdefault(user, []).append(r.json()["id"])

    _run_threads([threading.Thread(target=client, args=(k,)) for k in range(len(users))])
    return time.perf_counter() - t0


@dataclass(frozen=True)
class PollMix:
    """What a polling client does: weights of describe (one of its jobs), ls (its jobs) and submit (a new
    job from `submit_body`), and its pause between requests (s)."""

    describe: float = 3.0
    ls: float = 1.0
    submit: float = 0.0
    think_s: float = 0.1

    def pick(self, rng: random.Random) -> str:
        return rng.choices(("describe", "ls", "submit"), (self.describe, self.ls, self.submit))[0]


def poll(base: str, tokens: Mapping[str, str], rec: Recorder, seconds: float, mix: PollMix,
         submit_body: Callable[[int], dict[str, Any]] | None = None, seed: int = 0) -> float:
    """One closed-loop client per user for `seconds`: describe / ls / submit by `mix`, each followed by the
    pause. Returns the wall seconds the clients ran."""
    users = list(tokens)
    t0 = time.perf_counter()
    deadline = t0 + seconds

    def client(k: int) -> None:
        user, rng = users[k], random.Random(seed * 1000 + k)
        with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {tokens[user]}"}) as c:
            n = 0
            while time.perf_counter() < deadline:
                kind = mix.pick(rng)
                mine = rec.ids.get(user) or []
                if kind == "describe" and mine:
                    jid = mine[rng.randrange(len(mine))]
                    rec.timed("describe", lambda jid=jid: c.get(f"/v1/jobs/{jid}"))
                elif kind == "submit" and submit_body is not None:
                    body = submit_body(k * 1_000_000 + n)
                    r = rec.timed("submit", lambda body=body: c.post("/v1/jobs", json=body), ok=201)
                    if r is not None:
                        with rec.lock:
                            rec.ids.setdefault(user, []).append(r.json()["id"])
                else:
                    rec.timed("ls", lambda: c.get("/v1/jobs"))
                n += 1
                if mix.think_s:
                    time.sleep(mix.think_s)

    _run_threads([threading.Thread(target=client, args=(k,)) for k in range(len(users))])
    return time.perf_counter() - t0


def _run_threads(threads: Sequence[threading.Thread]) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def user_tokens(db: str, n: int) -> dict[str, str]:
    """`n` users (`user00`…), each with a token made as `elastisched token create` makes one."""
    from elastisched.service.auth import create_token
    from elastisched.service.store import Store

    store = Store(db)
    try:
        return {f"user{k:02d}": create_token(store, f"user{k:02d}")[1] for k in range(n)}
    finally:
        store.close()


def process_times(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) and peak resident memory (MiB) of a running process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os

    tick = os.sysconf("SC_CLK_TCK")
    hwm = next((int(line.split()[1]) / 1024 for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmHWM")), 0.0)
    return {"cpu_s": (int(fields[11]) + int(fields[12])) / tick, "peak_rss_mb": hwm}


def final_states(db: str, ids: Sequence[str]) -> dict[str, Any]:
    """From a fresh connection to the database: acknowledged ids missing (lost), jobs per state, and how the
    generations ended."""
    from elastisched.service.store import Store

    store = Store(db)
    try:
        rows = {r["id"]: r["state"] for r in store.list_jobs()}
        outcomes: dict[str, int] = {}
        for g in store.generations():
            outcomes[str(g["outcome"])] = outcomes.get(str(g["outcome"]), 0) + 1
    finally:
        store.close()
    states: dict[str, int] = {}
    for s in rows.values():
        states[s] = states.get(s, 0) + 1
    lost = [j for j in ids if j not in rows]
    return {"in_db": len(rows), "acknowledged": len(ids), "lost": len(lost), "lost_sample": lost[:5],
            "states": states, "not_final": sum(n for s, n in states.items() if s not in TERMINAL),
            "generation_outcomes": outcomes}
