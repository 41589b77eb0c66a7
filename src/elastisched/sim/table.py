"""A simulation's per-row results (jobs, timeline) as plain rows, turned into a DataFrame only on demand.

Importing pandas costs more than simulating a whole Pollux workload, and `sim run` only writes CSV files, so
`Rows.to_csv` writes what `DataFrame(rows).to_csv(index=False)` writes (the same per-column type inference:
a column of ints stays integral, one with a float or a missing value is float64 and prints every number as a
float, a missing value as an empty field; tests/sim/test_table.py compares the bytes with pandas').

A long replay appends its rows as they happen to a `Table`: numbers 8 bytes each in one array, text columns as
references, instead of a tuple of objects per row (a million-job replay's rows and its rounds' timeline would
otherwise take gigabytes); `Table.freeze` gives the same `Rows` interface over the columns.
"""

from __future__ import annotations

import csv
import io
import math
from array import array
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
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


class Table:
    """Rows appended one at a time, kept by column: `numeric` columns as float64 in one array (row-major),
    the others as references. A numeric column reads back as pandas would infer it from the rows: integral
    while every value appended is an int, else float64 (missing values, None or NaN, as NaN)."""

    def __init__(self, columns: Sequence[str], text: Sequence[str] = ()) -> None:
        self.columns = list(columns)
        self._text = [i for i, c in enumerate(self.columns) if c in text]
        self._nums = [i for i, c in enumerate(self.columns) if c not in text]
        self._values = array("d")
        self._strings: list[list[Any]] = [[] for _ in self._text]
        self._integral = tuple(range(len(self._nums)))  # numeric columns (by position among them) all ints so far
        self.rows = 0
        self._pending: list[Sequence[float | int | None]] = []  # rows appended, not yet in the columns
        self._pending_text: list[Sequence[Any]] = []  # their text cells

    def append(self, numbers: Sequence[float | int | None], text: Sequence[Any] = ()) -> None:
        """One row: its numeric cells in `numeric` order, its text cells in `text` order. Rows wait in a short
        list and join the columns a chunk at a time (`_flush`, before anything reads them): one conversion per
        chunk instead of one per row, which a replay's millions of rows made a cost of its own."""
        self._pending.append(numbers)
        if self._strings:
            self._pending_text.append(text)
        elif text:
            raise ValueError(f"a table without text columns got text cells {text!r}")
        self.rows += 1
        if len(self._pending) >= _CHUNK:
            self._flush()

    def _flush(self) -> None:
        """Move the waiting rows into the columns, as appending them one by one would (`_append_row`)."""
        rows, texts = self._pending, self._pending_text
        if not rows:
            return
        self._pending, self._pending_text = [], []
        k, m = len(self._nums), len(self._strings)
        flat = list(chain.from_iterable(rows))
        if len(flat) != k * len(rows) or (m and set(map(len, texts)) != {m}):
            for r, numbers in enumerate(rows):  # (a row of another length: each as it came, to fail as it did)
                self._append_row(numbers, texts[r] if m else ())
            return
        for i in self._integral:  # a column stays integral while every value is an exact int
            col = flat[i::k]
            if set(map(type, col)) != {int} or min(col) < -_EXACT or max(col) > _EXACT:
                self._integral = tuple(i for i in self._integral if all(map(_is_int, flat[i::k])))
                break
        try:  # (`fromlist` appends all or nothing)
            self._values.fromlist(flat)
        except TypeError:  # a missing value (None) somewhere: row by row, as they came
            for numbers in rows:
                self._append_values(numbers)
        for column, values in zip(self._strings, zip(*texts, strict=True), strict=True) if m else ():
            column.extend(values)

    def _append_row(self, numbers: Sequence[float | int | None], text: Sequence[Any]) -> None:
        """One row into the columns (the rows before it are there already)."""
        if self._integral:
            self._integral = tuple(i for i in self._integral if _is_int(numbers[i]))
        self._append_values(numbers)
        for column, v in zip(self._strings, text, strict=True):
            column.append(v)

    def _append_values(self, numbers: Sequence[float | int | None]) -> None:
        row = list(numbers)
        try:  # (`fromlist` appends all or nothing: `extend` would leave the cells before a bad one appended)
            self._values.fromlist(row)
        except TypeError:  # a missing value (None): NaN; anything else is not a number
            self._values.fromlist([math.nan if v is None else _number(v) for v in row])

    def __len__(self) -> int:
        return self.rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        """The rows as tuples in column order (built for the purpose: for small tables and tests)."""
        return iter(self.freeze().rows)

    def numbers(self, name: str) -> np.ndarray:
        """A numeric column as float64, rows as appended."""
        self._flush()
        k = len(self._nums)
        return np.frombuffer(self._values, dtype=float)[self._nums.index(self.columns.index(name))::k].copy() \
            if self.rows else np.zeros(0)

    def texts(self, name: str) -> list[Any]:
        """A text column, rows as appended (the table's own list: do not modify)."""
        self._flush()
        return self._strings[self._text.index(self.columns.index(name))]

    def patch(self, rows: Sequence[int], values: Mapping[str, np.ndarray]) -> None:
        """Overwrite cells of float columns (figures known only after their rows were appended): column name ->
        its values at `rows`."""
        self._flush()
        k = len(self._nums)
        grid = np.frombuffer(self._values, dtype=float).reshape(self.rows, k)  # a view: the array is written
        idx = np.asarray(rows, dtype=np.int64)
        for name, v in values.items():
            j = self._nums.index(self.columns.index(name))
            if j in self._integral:
                raise TypeError(f"column {name!r} holds ints; patch writes floats")
            grid[idx, j] = v
        del grid  # (an array exporting its buffer cannot grow)

    def freeze(self, order: Sequence[int] | np.ndarray | None = None) -> Columns:
        """The columns, their rows in `order` (default: as appended)."""
        self._flush()
        k = len(self._nums)
        grid = np.frombuffer(self._values, dtype=float).reshape(self.rows, k) if self.rows else np.zeros((0, k))
        idx = np.arange(self.rows) if order is None else np.asarray(order, dtype=np.int64)
        out: dict[str, np.ndarray | list[Any]] = {}
        for j, i in enumerate(self._nums):  # (column by column: all rows reordered at once cost 8 bytes a cell more)
            col = grid[idx, j]
            out[self.columns[i]] = col.astype(np.int64) if j in self._integral and self.rows else col
        positions = idx.tolist()
        for j, i in enumerate(self._text):
            out[self.columns[i]] = list(map(self._strings[j].__getitem__, positions))
        return Columns(self.columns, out, self.rows)


_EXACT = 2**53  # ints up to this are stored exactly as float64
_CHUNK = 4096  # rows a `Table` converts at once


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and -_EXACT <= v <= _EXACT


def _number(v: Any) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"a numeric column got {v!r}")
    return float(v)


class Columns(Rows):
    """`Rows` stored by column (`Table.freeze`): numeric columns as int64 / float64 arrays."""

    def __init__(self, columns: Sequence[str], data: Mapping[str, np.ndarray | list[Any]], n: int) -> None:
        self.columns = list(columns)
        self._data = data
        self._n = n
        self._frame = None

    @property
    def rows(self) -> list[tuple[Any, ...]]:  # type: ignore[override]
        """Rows as tuples (built on each call: for small tables and tests)."""
        return list(zip(*(self.column(c) for c in self.columns), strict=True))

    def __len__(self) -> int:
        return self._n

    def column(self, name: str) -> list[Any]:
        v = self._data[name]
        if not isinstance(v, np.ndarray):
            return list(v)
        return [None if x != x else x for x in v.tolist()] if v.dtype.kind == "f" else v.tolist()

    def array(self, name: str) -> np.ndarray:
        v = self._data[name]
        return v.astype(float) if isinstance(v, np.ndarray) else np.array(
            [np.nan if x is None else x for x in v], dtype=float)

    @property
    def frame(self) -> pd.DataFrame:
        if self._frame is None:
            import pandas as pd

            self._frame = (pd.DataFrame({c: self._data[c] for c in self.columns}, columns=self.columns) if self._n
                           else pd.DataFrame([], columns=self.columns))
        return self._frame

    def to_csv(self) -> str:
        cells = [self._cells(c) for c in self.columns]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.columns)
        w.writerows(zip(*cells, strict=True))
        return buf.getvalue()

    def _cells(self, name: str) -> list[str]:
        v = self._data[name]
        if isinstance(v, np.ndarray):
            if v.dtype.kind != "f":
                return list(map(str, v.tolist()))
            return ["" if x != x else repr(x) for x in v.tolist()]
        kind = _kind(v)
        return [_cell(x, kind) for x in v]
