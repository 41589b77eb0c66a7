"""A simulation's per-row results (jobs, timeline) as plain rows, turned into a DataFrame only on demand.

Importing pandas costs more than simulating a whole Pollux workload, and `sim run` only writes CSV files, so
`Rows.to_csv` writes what `DataFrame(rows).to_csv(index=False)` writes (the same per-column type inference:
a column of ints stays integral, one with a float or a missing value is float64 and prints every number as a
float, a missing value as an empty field; tests/sim/test_table.py compares the bytes with pandas').
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


def _kind(values: list[Any]) -> str:
    """pandas' inferred dtype family of a column: 'bool', 'int', 'float' or 'object'."""
    present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if all(isinstance(v, (bool, np.bool_)) for v in values) and values:
        return "bool"
    if not all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
               for v in present):
        return "object"
    if len(present) == len(values) and all(isinstance(v, (int, np.integer)) for v in values):
        return "int"
    return "float"


def _cell(v: Any, kind: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if kind == "float":
        return repr(float(v))
    if kind == "int":
        return str(int(v))
    if isinstance(v, float):
        return repr(v)
    return str(v)


class WorkLog(Mapping[tuple[str, tuple[int, ...], int], float]):
    """A finished job's `work_by_config` (progress per (GPU type, shape, epoch)) followed by its `work_tail`
    (the whole epochs it finished in one go, `engine.jobstate.JobState.work_tail`), read-only and compact:
    ~14 bytes an entry instead of ~130 for a dict of tuples, same keys, same order, same values. A 74k-job
    Philly replay keeps ~4 million such entries until the results are collected."""

    __slots__ = ("_configs", "_epoch", "_which", "_work")

    def __init__(self, work: Mapping[tuple[str, tuple[int, ...], int], float],
                 tail: tuple[tuple[str, tuple[int, ...]], np.ndarray, np.ndarray] | None = None) -> None:
        """`work` and, after it, `tail`: ((GPU type, shape), epochs, work per epoch), `JobState.tail_entries`."""
        keys = list(work)
        pairs = list(map(itemgetter(0, 1), keys))
        index = {p: i for i, p in enumerate(dict.fromkeys(pairs))}
        if tail is not None:
            index.setdefault(tail[0], len(index))
        self._configs: list[tuple[str, tuple[int, ...]]] = list(index)
        self._which = (np.zeros(len(keys), dtype=np.int32) if len(index) == 1  # one configuration (most jobs)
                       else np.fromiter(map(index.__getitem__, pairs), dtype=np.int32, count=len(keys)))
        self._epoch = np.fromiter(map(itemgetter(2), keys), dtype=np.int64, count=len(keys))
        self._work = np.fromiter(work.values(), dtype=float, count=len(keys))
        if tail is not None:
            config, epochs, done = tail
            self._which = np.concatenate([self._which, np.full(len(epochs), index[config], dtype=np.int32)])
            self._epoch = np.concatenate([self._epoch, epochs])
            self._work = np.concatenate([self._work, done])

    def arrays(self) -> tuple[list[tuple[str, tuple[int, ...]]], np.ndarray, np.ndarray, np.ndarray]:
        """(configs, config index per entry, epoch per entry, work per entry), in insertion order."""
        return self._configs, self._which, self._epoch, self._work

    def __len__(self) -> int:
        return len(self._work)

    def __iter__(self) -> Iterator[tuple[str, tuple[int, ...], int]]:
        for w, e in zip(self._which.tolist(), self._epoch.tolist(), strict=True):
            yield (*self._configs[w], e)

    def __getitem__(self, key: tuple[str, tuple[int, ...], int]) -> float:
        for k, v in self.items():
            if k == key:
                return v
        raise KeyError(key)

    def items(self) -> Iterator[tuple[tuple[str, tuple[int, ...], int], float]]:  # type: ignore[override]
        for w, e, v in zip(self._which.tolist(), self._epoch.tolist(), self._work.tolist(), strict=True):
            yield (*self._configs[w], e), v


class Rows:
    """Rows of a table with named columns; a DataFrame (`frame`) built once, when asked for."""

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.columns = list(columns)
        self.rows = [tuple(r) for r in rows]
        self._frame: pd.DataFrame | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]

    def array(self, name: str) -> np.ndarray:
        """A numeric column as float64 (missing values NaN)."""
        return np.array([np.nan if v is None else v for v in self.column(name)], dtype=float)

    @property
    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            import pandas as pd

            self._frame = pd.DataFrame(self.rows, columns=self.columns)
        return self._frame

    def to_csv(self) -> str:
        kinds = [_kind([r[i] for r in self.rows]) for i in range(len(self.columns))]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        for r in self.rows:
            w.writerow([_cell(v, k) for v, k in zip(r, kinds, strict=True)])
        return buf.getvalue()
