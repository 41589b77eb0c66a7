"""One validated schema for every workload source.

Every loader turns its rows into `JobSpec`s through `RowReader`, which converts column by column and raises
`WorkloadError(path, line, column, value, why)` on the first bad value, so a user can jump to the exact cell.
Loaders read the whole file before returning: a bad row means nothing is produced, and the CLI writes
nothing to the output folder.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastisched.core.errors import WorkloadError
from elastisched.core.types import JobSpec


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
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _int(v: str) -> int:
    f = float(v)
    if f != int(f):
        raise ValueError("not an integer")
    return int(f)


def positive_int(v: str) -> int:
    i = _int(v)
    if i <= 0:
        raise ValueError("must be > 0")
    return i


def nonneg_float(v: str) -> float:
    f = float(v)
    if not f >= 0 or f == float("inf"):
        raise ValueError("must be a finite number >= 0")
    return f


def positive_float(v: str) -> float:
    f = nonneg_float(v)
    if f <= 0:
        raise ValueError("must be > 0")
    return f


def nonempty(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be empty")
    return v.strip()


class RowReader:
    """Converts named columns of one row, naming file, line and column on failure."""

    def __init__(self, path: str, line: int, row: dict[str, str]) -> None:
        self.path, self.line, self.row = path, line, row

    def get(self, column: str, conv: Callable[[str], Any], default: Any = ...) -> Any:
        raw = self.row.get(column)
        if raw is None or raw == "":
            if default is not ...:
                return default
            raise WorkloadError(self.path, self.line, column, raw, "missing value")
        try:
            return conv(raw)
        except (ValueError, TypeError) as e:
            raise WorkloadError(self.path, self.line, column, raw, str(e) or type(e).__name__) from None

    def fail(self, column: str, why: str) -> WorkloadError:
        return WorkloadError(self.path, self.line, column, self.row.get(column), why)


def require_columns(path: str, header: list[str], required: tuple[str, ...]) -> None:
    missing = [c for c in required if c not in header]
    if missing:
        raise WorkloadError(path, 1, missing[0], None, f"missing column(s) {missing}; header is {header}")


def check_sorted_unique(path: str, specs: list[JobSpec]) -> Iterator[JobSpec]:
    seen: set[str] = set()
    for i, s in enumerate(specs):
        if s.job_id in seen:
            raise WorkloadError(path, i + 2, "name", s.job_id, "duplicate job name")
        seen.add(s.job_id)
    return iter(sorted(specs, key=lambda s: (s.submit_time, s.job_id)))
