"""Reading `sacct --parsable2` text into runs: the cells (times, durations, TRES, states, job ids) and the rows
(steps skipped, heterogeneous components merged, requeued runs kept apart). Apart from `sacct.py`, which turns
runs into a workload; every bad cell is one `WorkloadError` naming the line and column."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from elastisched.core.errors import WorkloadError
from elastisched.workloads.schema import GPUS, RowReader

REQUIRED = ("JobID", "Submit", "Start", "State")
UNKNOWN = frozenset({"", "Unknown", "None", "N/A"})
JOB_ID = re.compile(r"(?P<base>[0-9]{1,20})(?:_(?P<task>[0-9]{1,10}|\[[0-9,\-%:]{1,200}\]))?"
                    r"(?:\+(?P<het>[0-9]{1,6}))?(?:\.(?P<step>[A-Za-z0-9_+\-]{1,40}))?")
ELAPSED = re.compile(r"(?:(?P<d>[0-9]{1,5})-)?(?:(?P<h>[0-9]{1,2}):)?(?P<m>[0-9]{1,2}):(?P<s>[0-9]{1,2})(?:\.[0-9]+)?")
GPU_TRES = re.compile(r"gres/gpu(?::(?P<type>[^=,]{1,64}))?=(?P<n>[^,]*)")
STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                    "BOOT_FAIL", "DEADLINE", "PENDING", "RUNNING", "REQUEUED", "RESIZING", "REVOKED", "SUSPENDED",
                    "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT", "STOPPED"})

__all__ = ["is_sacct_header", "read_runs"]


@dataclass
class _Run:
    """One job as its rows say (components of a heterogeneous job merged)."""

    name: str
    line: int
    submit: float
    start: float | None
    end: float | None
    gpus: int
    gpu_type: str | None
    state: str


def is_sacct_header(first_line: str) -> bool:
    cols = first_line.strip().rstrip("|").split("|")
    return len(cols) > 1 and "JobID" in cols


def _time(v: str) -> float | None:
    """sacct's `YYYY-MM-DDTHH:MM:SS` (a zone, if any, is honoured; none is read as UTC); None when unknown."""
    if v.strip() in UNKNOWN:
        return None
    if not (v.isascii() and len(v) <= 40):
        raise ValueError("not a sacct time such as 2026-12-02T19:38:05")
    try:
        dt = datetime.fromisoformat(v.strip())
    except ValueError:
        raise ValueError("not a sacct time such as 2026-12-02T19:38:05") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _elapsed(v: str) -> float | None:
    if v.strip() in UNKNOWN:
        return None
    m = ELAPSED.fullmatch(v.strip())
    if m is None:
        raise ValueError("not a sacct duration [D-][HH:]MM:SS")
    d, h, mi, s = (int(m.group(k) or 0) for k in ("d", "h", "m", "s"))
    if mi > 59 or s > 59 or (m.group("h") and h > 23 and m.group("d")):
        raise ValueError("minutes and seconds must be below 60")
    return float(((d * 24 + h) * 60 + mi) * 60 + s)


def _gpus(v: str) -> tuple[int, str | None]:
    """(GPUs, type or None) of a TRES list; (0, None) for a job without GPUs."""
    total, typed, gtype = None, 0, None
    for m in GPU_TRES.finditer(v):
        n = GPUS(m.group("n")) if m.group("n").strip() not in ("0", "") else 0
        if m.group("type") is None:
            total = n
        else:
            typed += n
            gtype = gtype or m.group("type").strip().lower()
    return (total if total is not None else typed), gtype


def _state(v: str) -> str:
    s = v.strip().split(" ")[0].upper()  # "CANCELLED by 1000"
    if s not in STATES:
        raise ValueError(f"not a Slurm job state ({', '.join(sorted(STATES)[:6])}, ...)")
    return s


def _job_id(v: str) -> re.Match[str]:
    m = JOB_ID.fullmatch(v.strip())
    if m is None:
        raise ValueError("not a Slurm job id (123, 123_4, 123_[5-9], 123+1, 123.batch, ...)")
    return m


def _header(p: str, first: str) -> tuple[list[str], bool]:
    trailing = first.endswith("|")  # `--parsable` ends every line with a '|'; `--parsable2` does not
    cols = [c.strip() for c in (first[:-1] if trailing else first).split("|")]
    dupes = sorted({c for c in cols if cols.count(c) > 1})
    if dupes:
        raise WorkloadError(p, 1, dupes[0], None, "column appears more than once in the header")
    missing = [c for c in REQUIRED if c not in cols]
    if not {"AllocTRES", "ReqTRES"} & set(cols):
        missing.append("AllocTRES or ReqTRES")
    if not {"End", "Elapsed"} & set(cols):
        missing.append("End or Elapsed")
    if missing:
        raise WorkloadError(p, 1, missing[0], None, f"missing sacct column(s) {missing}; run sacct --parsable2 "
                            "-o JobID,Submit,Start,End,Elapsed,State,AllocTRES,ReqTRES (docs/slurm.md)")
    return cols, trailing


def _row_run(r: RowReader, cols: list[str], name: str) -> _Run:
    """One job-level row as a run (its time cells checked against each other)."""
    state = r.get("State", _state)
    submit = r.get("Submit", _time, None)
    if submit is None:
        raise r.fail("Submit", "unknown submit time: every job sacct lists was submitted")
    start = r.get("Start", _time, None)
    end = r.get("End", _time, None) if "End" in cols else None
    elapsed = r.get("Elapsed", _elapsed, None) if "Elapsed" in cols else None
    if end is None and start is not None and elapsed is not None and state not in ("RUNNING", "PENDING"):
        end = start + elapsed
    if start is not None and start < submit:
        raise r.fail("Start", "before Submit")
    if start is not None and end is not None and end < start:
        raise r.fail("End", "before Start")
    col = "AllocTRES" if "AllocTRES" in cols and r.row.get("AllocTRES", "").strip() else "ReqTRES"
    gpus, gtype = r.get(col, _gpus, (0, None)) if col in cols else (0, None)
    return _Run(name, r.line, submit, start, end, gpus, gtype, state)


def read_runs(p: str, text: str) -> list[_Run]:
    """The jobs of a sacct text, in file order: steps skipped, heterogeneous components merged, requeued runs
    kept apart (`123`, `123~2`)."""
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise WorkloadError(p, 1, "header", None, "empty file: expected sacct --parsable2 output")
    cols, trailing = _header(p, lines[0])
    runs: list[_Run] = []
    latest: dict[str, _Run] = {}
    count: dict[str, int] = {}
    for i, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        cells = (raw[:-1] if trailing and raw.endswith("|") else raw).split("|")
        if len(cells) != len(cols):
            raise WorkloadError(p, i, "row", len(cells), f"row has {len(cells)} fields, the header {len(cols)}")
        r = RowReader(p, i, dict(zip(cols, cells, strict=True)))
        jid = r.get("JobID", _job_id)
        if jid.group("step") is not None:
            continue
        name = jid.group("base") + (f"_{jid.group('task')}" if jid.group("task") else "")
        if jid.group("het") not in (None, "0") and name in latest:  # a later component of a het job
            run, part = latest[name], _row_run(r, cols, name)
            run.gpus += part.gpus
            run.gpu_type = run.gpu_type or part.gpu_type
            run.start = min(x for x in (run.start, part.start) if x is not None) if part.start else run.start
            run.end = max(run.end, part.end) if run.end is not None and part.end is not None else None
            continue
        count[name] = count.get(name, 0) + 1
        run = _row_run(r, cols, name if count[name] == 1 else f"{name}~{count[name]}")
        runs.append(run)
        latest[name] = run
    return runs
