"""The two files a running job shares with its backend in its checkpoint directory (`train/contract.py`).

`hints.jsonl` (job → service): rank 0 appends one JSON line per statistics step (AdaptDL's hint keys); the
backend turns the newest complete lines into a `JobHints` event. `batch-target.json` (service → job): the
global batch the scheduler chose for the job's current GPUs, written atomically; the training library's
rank 0 reads it at a step boundary and the value rides in the next all-reduce, so every rank switches at
the same step without a restart (an in-place "reconfigure", `engine.jobstate.change_kind`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from elastisched.backends._jobfiles import read_regular, write_into
from elastisched.backends.base import JobHints
from elastisched.train.contract import BATCH_TARGET_FILE


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def parse_hints(chunk: bytes, job_id: str) -> JobHints | None:
    """The newest well-formed line of `chunk` (complete lines), with the gradient statistics of the newest
    line that has them (a progress-only line written after a statistics line must not hide them). Reported
    `grad_var` is tr(Σ) at the job's base batch (AdaptDL); it is returned per sample (× `initBatchSize`)."""
    newest: dict[str, object] | None = None
    stats: tuple[float, float] | None = None
    for line in reversed(chunk.splitlines()):
        try:
            h = json.loads(line)
            if not isinstance(h, dict):
                continue
            float(h["time"]), int(h["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a malformed line (user code may write here too): try the one before
        if newest is None:
            newest = h
        sqr, var, base = _num(h.get("grad_sqr")), _num(h.get("grad_var")), _num(h.get("initBatchSize"))
        if sqr is not None and var is not None and base:
            stats = (sqr, var * base)
            break
    if newest is None:
        return None
    h = newest
    try:
        return JobHints(float(h["time"]), job_id, int(h.get("generation") or 0), int(h["step"]),  # type: ignore[arg-type]
                        int(h.get("epoch") or 0), h.get("globalBatchSize"),  # type: ignore[arg-type]
                        int(h.get("world_size") or 1), h.get("throughput"),  # type: ignore[arg-type]
                        *(stats or (None, None)))
    except (ValueError, TypeError):
        return None


def read_hints(path: Path, pos: int, job_id: str) -> tuple[JobHints | None, int]:
    """The hint of the complete lines appended to `path` after byte `pos` (one stat when nothing is new), and
    the position to read from next time (a line being written is read next time). The job owns the file:
    it is read only if it is a regular file reached without a link (`_jobfiles.read_regular`)."""
    chunk = read_regular(path, pos)
    if not chunk:
        return None, pos
    end = chunk.rfind(b"\n") + 1
    if end == 0:
        return None, pos
    return parse_hints(chunk[:end], job_id), pos + end


def write_batch_target(checkpoint_dir: str | os.PathLike[str], batch_size: int, generation: int) -> Path:
    """Tell the workers of `generation` to train at `batch_size` from their next step boundary (tmp file +
    rename, so a reader never sees half a file; a later generation ignores it: its batch came with its launch).
    The directory is the job's: the file goes to its owner and never through a link planted there."""
    d = Path(checkpoint_dir)
    d.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"batch_size": int(batch_size), "generation": int(generation), "time": time.time()})
    return write_into(d, BATCH_TARGET_FILE, data.encode())
