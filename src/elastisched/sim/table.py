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
from collections.abc import Sequence
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
