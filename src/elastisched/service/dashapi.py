"""What the read-only dashboard endpoints (`routes/dashboard.py`) compute: utilisation history and a job's log
tail (issue 15 item 6).

Nothing here writes. The utilisation history is computed from what the store already records, so it needs no
sampler and survives a restart: a GPU counts as busy while a worker generation holding it runs (from
`generations.started_at` to `ended_at`, or now for one still running), and the total is the training nodes plus
the servers on loan at each moment (`loans.offered_at` to `returned_at`). Between a generation's stop and the
next one's start (a resize or restart) the job's GPUs count as idle: no worker runs on them then. Buckets are
exact time-weighted means, so a short burst is neither lost nor over-counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select

from elastisched.core.enums import GenerationState
from elastisched.service.store import Store
from elastisched.service.tables import events, generations, jobs, loans

Interval = tuple[float, float, float]  # start, end, GPUs
MAX_TAIL_FILES = 8


def _json_list(v: Any) -> list[Any]:
    import json

    return list(json.loads(v)) if isinstance(v, str) else list(v or [])


def _gpus(placement: Any) -> int:
    return sum(int(k) for _, k in _json_list(placement))


def bucket_means(intervals: Sequence[Interval], start: float, end: float, buckets: int) -> list[float]:
    """Time-weighted mean of the sum of `intervals` over each of `buckets` equal slices of [start, end]."""
    width = (end - start) / buckets
    acc = [0.0] * buckets
    for a, b, k in intervals:
        a, b = max(a, start), min(b, end)
        if b <= a or k == 0:
            continue
        i = min(buckets - 1, int((a - start) // width))
        while i < buckets and start + i * width < b:
            lo, hi = max(a, start + i * width), min(b, start + (i + 1) * width)
            if hi > lo:
                acc[i] += k * (hi - lo)
            i += 1
    return [x / width for x in acc]


def utilisation(store: Store, base_gpus: int, *, now: float, window_s: float, buckets: int,
                owner: str | None = None) -> dict[str, Any]:
    """Busy and total GPUs over the last `window_s` (from the first record if the service is younger), in
    `buckets` time-weighted means; with `owner`, also that user's busy GPUs (`mine`)."""
    with store.tx() as c:
        first = c.execute(select(events.c.time).order_by(events.c.seq).limit(1)).scalar()
        start = max(now - window_s, float(first) if first is not None else now - 1.0)
        if start >= now:
            start = now - 1.0
        q = (select(generations.c.placement, generations.c.started_at, generations.c.ended_at,
                    generations.c.state, jobs.c.owner)
             .join(jobs, jobs.c.id == generations.c.job_id)
             .where(generations.c.started_at.is_not(None))
             .where(or_(generations.c.ended_at.is_(None), generations.c.ended_at >= start)))
        gens = c.execute(q).all()
        lent = c.execute(select(loans.c.num_gpus, loans.c.offered_at, loans.c.returned_at)
                         .where(or_(loans.c.returned_at.is_(None), loans.c.returned_at >= start))).all()
    busy: list[Interval] = []
    mine: list[Interval] = []
    busy_now = 0
    for placement, t0, t1, state, who in gens:
        if t1 is None and state == GenerationState.EXITED:
            continue  # ended at an unknown time (settled after a crash): not counted
        iv = (float(t0), float(t1) if t1 is not None else now, float(_gpus(placement)))
        busy_now += int(iv[2]) if t1 is None else 0
        busy.append(iv)
        if owner is not None and who == owner:
            mine.append(iv)
    total: list[Interval] = [(start, now, float(base_gpus))]
    total += [(float(t0), float(t1) if t1 is not None else now, float(k)) for k, t0, t1 in lent]
    b, tot = bucket_means(busy, start, now, buckets), bucket_means(total, start, now, buckets)
    width = (now - start) / buckets
    busy_s, total_s = sum(b) * width, sum(tot) * width
    out: dict[str, Any] = {
        "start": start, "end": now, "bucket_s": width, "t": [start + i * width for i in range(buckets)],
        "busy": [round(x, 4) for x in b], "total": [round(x, 4) for x in tot],
        "busy_now": busy_now, "total_now": base_gpus + sum(int(k) for k, _, t1 in lent if t1 is None),
        "busy_gpu_s": busy_s, "total_gpu_s": total_s, "utilisation": busy_s / total_s if total_s else 0.0}
    if owner is not None:
        out["mine"] = [round(x, 4) for x in bucket_means(mine, start, now, buckets)]
    return out


def tail_files(paths: Sequence[Path], max_bytes: int) -> list[dict[str, Any]]:
    """The last `max_bytes` of each of the newest MAX_TAIL_FILES log files (`g<gen>-r<rank>.log`)."""
    out = []
    for p in list(paths)[-MAX_TAIL_FILES:]:
        try:
            size = p.stat().st_size
            with open(p, "rb") as f:
                f.seek(max(0, size - max_bytes))
                text = f.read(max_bytes).decode(errors="replace")
        except OSError:
            continue
        gen, rank = (int(x[1:]) for x in p.stem.split("-"))
        out.append({"generation": gen, "rank": rank, "size": size, "truncated": size > max_bytes, "text": text})
    return out
