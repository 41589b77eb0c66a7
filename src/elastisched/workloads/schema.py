"""One validated schema for every workload source: the valid range of every field, enforced in one place.

Every loader reads its file through `read_text` / `csv_rows` (bounded size, UTF-8 with an optional BOM,
any line ending, gzip checked), converts cells with `RowReader.get(column, FIELD)` where `FIELD` is one of
the `Field`s below, and hands its jobs to `finish`, which checks every `JobSpec` against the same table
(so a derived value such as `work_scale` cannot escape the ranges either) and refuses an empty workload.
A bad value raises `WorkloadError(path, line, column, value, why)` naming the exact cell; loaders read the
whole file before returning, so a bad row means nothing is produced and the CLI writes nothing.

Numbers are plain ASCII decimals (`12`, `-3.5`, `1e3`): no `+`, `_`, `inf`/`nan`, hex, or non-ASCII digits,
which Python's `float()` would otherwise accept. `FIELDS` is the table documented in docs/workloads.md.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import os
import re
import stat
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastisched.core.errors import ConfigError, WorkloadError
from elastisched.core.types import JobSpec

MAX_TIME = 10 * 365 * 86400.0  # ten years of seconds: the longest span a workload may cover
MAX_FILE_BYTES = 256 * 2**20  # a trace file (after gunzip); the 82k-job Philly trace is 3.4 MB
MAX_NAME = 200  # characters in a job name
_NUMBER = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,3})?")
_MAX_NUMBER_CHARS = 40


def _short(value: object, limit: int = 60) -> object:
    """Values echoed in errors are cut so that one bad 100 kB cell still gives a one-line message."""
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"...({len(value)} chars)"
    return value


def looks_numeric(text: str) -> bool:
    """True when `text` has the shape of a plain decimal (it may still be out of range)."""
    return _NUMBER.fullmatch(text.strip(" ")) is not None


def parse_number(text: str) -> float:
    """A finite ASCII decimal; `ValueError` (with the reason) for anything else."""
    s = text.strip(" ")
    if len(s) > _MAX_NUMBER_CHARS or not _NUMBER.fullmatch(s):
        raise ValueError("not a plain decimal number (ASCII digits, optional '-', '.', exponent)")
    f = float(s)
    if f != f or f in (float("inf"), float("-inf")):
        raise ValueError("not a finite number")
    return f


@dataclass(frozen=True, slots=True)
class Field:
    """A numeric field: integer or real, within [lo, hi] (lo excluded when `lo_open`)."""

    name: str
    integer: bool
    lo: float
    hi: float
    lo_open: bool = False
    doc: str = ""

    @property
    def range_text(self) -> str:
        def fmt(x: float) -> str:
            return str(int(x)) if x == int(x) else f"{x:g}"
        return f"{'(' if self.lo_open else '['}{fmt(self.lo)}, {fmt(self.hi)}]"

    @property
    def expected(self) -> str:
        return f"must be {'an integer' if self.integer else 'a number'} in {self.range_text}"

    def check(self, x: float) -> float:
        if not (self.lo < x if self.lo_open else self.lo <= x) or not x <= self.hi:
            raise ValueError(self.expected)
        if self.integer and x != int(x):
            raise ValueError(self.expected)
        return x

    def __call__(self, text: str) -> Any:
        try:
            x = parse_number(text)
        except ValueError as e:
            raise ValueError(f"{e}; {self.expected}") from None
        x = self.check(x)
        return int(x) if self.integer else x

    def option(self, key: str, text: str) -> Any:
        """Parse a command-line option value, raising `ConfigError(key, text, why)`."""
        try:
            return self(text)
        except ValueError as e:
            raise ConfigError(key, _short(text), str(e)) from None


SUBMIT_TIME = Field("submit time", False, 0, MAX_TIME, doc="`time` (Pollux, Sia, DeepBoot, ONES), `arrival_time` "
                    "(Gavel); seconds from the workload's start")
RAW_TIMESTAMP = Field("raw timestamp", False, 0, 1e10, doc="raw trace `timestamp`/`time`: Unix seconds, or an ISO "
                      "date read as UTC; rebased so the first job is at 0, and the span must fit the submit time range")
DURATION = Field("duration", False, 0, MAX_TIME, lo_open=True, doc="seconds: Pollux/Sia `duration`, DeepBoot "
                 "inference `duration` (DeepBoot's `-1` on a training row = absent)")
RAW_DURATION = Field("raw duration", False, 0, MAX_TIME, doc="raw trace `duration` (jobs under 60 s are then dropped)")
GPUS = Field("GPUs per job", True, 1, 65_536, doc="`num_replicas`, `num_gpus`, Gavel `scale_factor`")
BATCH = Field("batch size", True, 1, 2**20, doc="`batch_size` (global; ONES: per GPU), Gavel's `(batch size N)`")
WORK_SCALE = Field("work_scale", False, 0, 1e6, lo_open=True, doc="derived by the loader: multiples of the "
                   "application's full run (checked like the others)")
STEPS = Field("total steps", True, 1, 1e10, doc="Gavel `total_steps`")
NUM_TASK = Field("inference tasks", True, 1, 10_000_000, doc="DeepBoot `num_task`")
EPOCH_SIZE = Field("epoch size", True, 1, 1e9, doc="ONES `epoch_size` (samples)")
PATIENCE = Field("patience", True, 1, 10_000, doc="ONES `patience` (epochs)")
LR = Field("learning rate", False, 0, 100, lo_open=True, doc="ONES `lr`, `max_lr`")
ACCURACY = Field("accuracy", False, 0, 1, doc="ONES `target_acc` (a fraction)")
NUM_JOBS = Field("synthetic num_jobs", True, 1, 100_000, doc="`synthetic:num_jobs=`")
RATE = Field("synthetic rate", False, 0, 1e6, lo_open=True, doc="`synthetic:rate=`, arrivals per hour")
SAMPLE = Field("philly sample", True, 1, 10_000_000, doc="`philly:sample=` (all jobs when more than the trace has)")
DAYS = Field("philly days", False, 0, 3650, lo_open=True, doc="`philly:days=`")
SEED = Field("seed", True, 0, 2**32 - 1, doc="`--seed`, `philly:seed=`, `synthetic:seed=`")
RESTART_COST = Field("restart cost", False, 0, 86_400, doc="`--restart-cost` (seconds)")
FIELDS: tuple[Field, ...] = (SUBMIT_TIME, RAW_TIMESTAMP, DURATION, RAW_DURATION, GPUS, BATCH, WORK_SCALE, STEPS,
                             NUM_TASK, EPOCH_SIZE, PATIENCE, LR, ACCURACY, NUM_JOBS, RATE, SAMPLE, DAYS, SEED,
                             RESTART_COST)


def name_text(v: str) -> str:
    """A job or application name: printable, no surrounding blanks, at most `MAX_NAME` characters."""
    s = v.strip()
    if not s:
        raise ValueError("must not be empty")
    if len(s) > MAX_NAME:
        raise ValueError(f"longer than {MAX_NAME} characters")
    if not s.isprintable():
        raise ValueError("contains control or non-printable characters")
    return s



@dataclass(frozen=True, slots=True)
class InferenceTask:
    """An inference task row (DeepBoot format): holds `num_replicas` GPUs of the inference cluster."""

    name: str
    submit_time: float
    application: str
    num_replicas: int
    duration: float
    num_task: int


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    jobs: tuple[JobSpec, ...]
    source: str
    digest: str  # sha256 of the source bytes: recorded with every result
    inference: tuple[InferenceTask, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.jobs)


def file_digest(path: Path) -> str:
    return hashlib.sha256(_read_regular(Path(path))).hexdigest()[:16]


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file of at most `MAX_FILE_BYTES`, opened without blocking (a FIFO, socket or
    device is refused, never waited on); errors name the file."""
    p = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise WorkloadError(p, 0, "file", p, f"cannot read: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise WorkloadError(p, 0, "file", p, "is a directory, not a trace file")
        if not stat.S_ISREG(st.st_mode):
            raise WorkloadError(p, 0, "file", p, "is not a regular file (a FIFO, socket or device)")
        if st.st_size > MAX_FILE_BYTES:
            raise WorkloadError(p, 0, "file", st.st_size, f"larger than {MAX_FILE_BYTES} bytes")
        try:
            return f.read()  # its size was checked: read(MAX + 1) would allocate MAX bytes up front
        except OSError as e:
            raise WorkloadError(p, 0, "file", p, f"cannot read: {e.strerror or e}") from None


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, gunzipped when it ends in `.gz`, bounded by `MAX_FILE_BYTES`; errors name the file."""
    path = Path(path)
    p = str(path)
    raw = _read_regular(path)
    if path.suffix != ".gz":
        return raw
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as g:
            data = g.read(MAX_FILE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise WorkloadError(p, 0, "file", p, f"not a valid gzip file: {str(e) or type(e).__name__}") from None
    if len(data) > MAX_FILE_BYTES:
        raise WorkloadError(p, 0, "file", p, f"decompresses to more than {MAX_FILE_BYTES} bytes")
    return data


def read_text(path: str | Path) -> str:
    """UTF-8 text (a leading BOM is dropped); an undecodable byte is reported with its line."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = len(re.findall(rb"\r\n|\r|\n", data[:e.start])) + 1  # the line as csv_rows counts it
        bad = data[e.start:e.start + 1]
        raise WorkloadError(str(path), line, "encoding", bad, f"not UTF-8 text (byte offset {e.start})") from None


def csv_rows(path: str | Path, text: str) -> tuple[list[str], Iterator[tuple[int, dict[str, str]]]]:
    """Header and `(line, row)` pairs of a CSV text with any line ending; blank lines are skipped."""
    p = str(path)
    reader = csv.reader(io.StringIO(text, newline=""))

    def nxt() -> list[str] | None:
        try:
            return next(reader)
        except StopIteration:
            return None
        except csv.Error as e:
            raise WorkloadError(p, reader.line_num, "row", None, f"malformed CSV: {e}") from None

    header = [h.strip() for h in (nxt() or [])]
    dupes = sorted(h for h, n in Counter(header).items() if n > 1)  # (not list.count: a wide header is O(n))
    if dupes:
        raise WorkloadError(p, 1, dupes[0], None, "column appears more than once in the header")

    def rows() -> Iterator[tuple[int, dict[str, str]]]:
        while (cells := nxt()) is not None:
            if not cells or cells == [""] * len(cells):
                continue
            if len(cells) > len(header):
                raise WorkloadError(p, reader.line_num, "row", len(cells),
                                    f"row has {len(cells)} cells, the header {len(header)}")
            yield reader.line_num, dict(zip(header, cells, strict=False))
    return header, rows()


class RowReader:
    """Converts named columns of one row, naming file, line and column on failure."""

    def __init__(self, path: str, line: int, row: dict[str, str]) -> None:
        self.path, self.line, self.row = path, line, row

    def get(self, column: str, conv: Any, default: Any = ...) -> Any:
        raw = self.row.get(column)
        if raw is None or raw.strip() == "":
            if default is not ...:
                return default
            raise WorkloadError(self.path, self.line, column, raw, "missing value")
        try:
            return conv(raw)
        except (ValueError, TypeError, OverflowError) as e:
            raise WorkloadError(self.path, self.line, column, _short(raw), str(e) or type(e).__name__) from None

    def fail(self, column: str, why: str) -> WorkloadError:
        return WorkloadError(self.path, self.line, column, _short(self.row.get(column)), why)


def require_columns(path: str, header: list[str], required: tuple[str, ...]) -> None:
    missing = [c for c in required if c not in header]
    if missing:
        shown = [_short(h, 30) for h in header[:20]]
        raise WorkloadError(path, 1, missing[0], None, f"missing column(s) {missing}; header is {shown}")


def check_job(spec: JobSpec) -> str | None:
    """The first field of a `JobSpec` outside the schema's ranges, as 'column: why' (None when valid)."""
    d, mx, g = spec.duration, spec.max_gpus, GPUS.hi
    if (0.0 <= spec.submit_time <= MAX_TIME and type(spec.num_gpus) is int and 1 <= spec.num_gpus <= g
            and type(spec.batch_size) is int and 1 <= spec.batch_size <= BATCH.hi
            and type(spec.min_gpus) is int and 1 <= spec.min_gpus <= g
            and (mx is None or (type(mx) is int and spec.min_gpus <= mx <= g))
            and 0.0 < spec.work_scale <= WORK_SCALE.hi and (d is None or 0.0 < d <= MAX_TIME)
            and 0 < len(spec.job_id) <= MAX_NAME and spec.job_id.isprintable() and spec.job_id == spec.job_id.strip()):
        return None  # the common case, without building messages; anything else is explained below
    checks: tuple[tuple[str, Field, float | None], ...] = (
        ("submit_time", SUBMIT_TIME, spec.submit_time), ("num_gpus", GPUS, spec.num_gpus),
        ("batch_size", BATCH, spec.batch_size), ("min_gpus", GPUS, spec.min_gpus),
        ("max_gpus", GPUS, spec.max_gpus), ("work_scale", WORK_SCALE, spec.work_scale),
        ("duration", DURATION, spec.duration))
    for col, f, v in checks:
        if v is None:
            continue
        try:
            f.check(float(v))
        except (ValueError, TypeError, OverflowError) as e:
            return f"{col}: {e}"
    if spec.max_gpus is not None and not spec.min_gpus <= spec.max_gpus:
        return f"min_gpus: {spec.min_gpus} exceeds max_gpus {spec.max_gpus}"
    try:
        name_text(spec.job_id)
    except ValueError as e:
        return f"name: {e}"
    return None


def finish(path: str, name: str, jobs: Iterable[tuple[int, JobSpec]], digest: str,
           inference: Iterable[InferenceTask] = (), keep_order: bool = False) -> Workload:
    """Every loader's last step: range-check each job (derived fields too), refuse duplicate names and an
    empty workload, and sort by (submit time, name) unless `keep_order` (the loader's order is already by
    time, with its own tie-break). `jobs` pairs each spec with its source line."""
    seen: set[str] = set()
    out: list[JobSpec] = []
    for line, spec in jobs:
        bad = check_job(spec)
        if bad is not None:
            col, why = bad.split(": ", 1)
            raise WorkloadError(path, line, col, _short(getattr(spec, col, spec.job_id)), why)
        if spec.job_id in seen:
            raise WorkloadError(path, line, "name", _short(spec.job_id), "duplicate job name")
        seen.add(spec.job_id)
        out.append(spec)
    if not out:
        raise WorkloadError(path, 1, "rows", 0, "no training jobs: an empty workload has no JCT to report")
    if not keep_order:
        out.sort(key=lambda s: (s.submit_time, s.job_id))
    return Workload(name, tuple(out), path, digest, tuple(sorted(inference, key=lambda x: (x.submit_time, x.name))))

