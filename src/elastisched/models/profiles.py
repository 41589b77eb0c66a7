"""Loading measured application profiles (Pollux / Sia artifact format).

Layout of one application directory (Pollux artifact `simulator/traces/<app>/`, Sia `sia-simulator/traces/<app>/`):
- `placements[-<cluster>].csv`: `placement,local_bsz,step_time,sync_time`; placement "22" = 2 GPUs on each of 2 nodes
- `scalability[-<cluster>].csv`: `num_nodes,num_replicas,local_bsz,step_time,sync_time`
- `validation-<global batch>.csv`: `progress,iteration,metric,grad_sqr,grad_var`, one row per epoch

Sia names clusters, not GPU types; `SIA_GPU_TYPES` maps them (Sia artifact README: aws = T4, azure = V100,
dgx = A100, rtx = RTX 2080Ti, quad = RTX 6000). Column order differs between the two artifacts, so columns
are read by name.

Files are parsed with the csv module into numpy columns (`Columns`): pandas costs more to import than the
whole simulation of a Pollux workload takes, so it is loaded only when a caller asks for a DataFrame
(`ThroughputProfile.placements` / `.scalability`, `AppProfile.validation`). Python's float parser is
correctly rounded, as is pandas' default one, so both give the same numbers.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from elastisched.core.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

SIA_GPU_TYPES: dict[str, str] = {"aws": "t4", "azure": "v100", "dgx-ext": "a100", "rtx": "rtx", "quad": "rtx6000"}
#: Pollux's own traces were measured on g4dn.12xlarge (4x T4).
POLLUX_GPU_TYPE = "t4"
PLACEMENT_COLS = ("placement", "local_bsz", "step_time", "sync_time")
SCALABILITY_COLS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
VALIDATION_COLS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")

#: column name -> values (the `placement` column holds str, every other float64)
Columns = dict[str, np.ndarray]


def _columns(df: Any) -> Columns:
    """Columns of a DataFrame (profiles built in code, e.g. by tests or `elastisched profile`)."""
    return {str(c): (df[c].astype(str).to_numpy(object) if c == "placement" else df[c].to_numpy(float))
            for c in df.columns}


def _frame(cols: Columns) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame({k: (v.astype(str) if k == "placement" else v) for k, v in cols.items()})
    for k in ("num_nodes", "num_replicas", "local_bsz", "iteration"):  # integral in the files
        if k in df and len(df) and np.array_equal(df[k].to_numpy(float), np.round(df[k].to_numpy(float))):
            df[k] = df[k].astype("int64")
    return df


class ThroughputProfile:
    """Measured step/sync times of one application on one GPU type: numpy columns (`placement_columns`:
    placement, local_bsz, step_time, sync_time, num_nodes, num_replicas; `scalability_columns`), and the
    same as DataFrames on demand."""

    __slots__ = ("_pl", "_pl_df", "_sc", "_sc_df")

    def __init__(self, placements: pd.DataFrame | Columns, scalability: pd.DataFrame | Columns) -> None:
        self._pl_df = None if isinstance(placements, Mapping) else placements
        self._sc_df = None if isinstance(scalability, Mapping) else scalability
        self._pl: Columns = dict(placements) if isinstance(placements, Mapping) else _columns(placements)
        self._sc: Columns = dict(scalability) if isinstance(scalability, Mapping) else _columns(scalability)
        if "num_nodes" not in self._pl:
            self._pl["num_nodes"] = np.array([len(p) for p in self._pl["placement"]], dtype=float)
            self._pl["num_replicas"] = np.array([sum(int(c) for c in p) for p in self._pl["placement"]], dtype=float)

    @property
    def placement_columns(self) -> Columns:
        return self._pl

    @property
    def scalability_columns(self) -> Columns:
        return self._sc

    @property
    def placements(self) -> pd.DataFrame:  # placement (str of digits), local_bsz, step_time, sync_time, nodes, replicas
        if self._pl_df is None:
            self._pl_df = _frame(self._pl)
        return self._pl_df

    @property
    def scalability(self) -> pd.DataFrame:  # num_nodes, num_replicas, local_bsz, step_time, sync_time
        if self._sc_df is None:
            self._sc_df = _frame(self._sc)
        return self._sc_df


class AppProfile:
    """One application: throughput per GPU type and per-epoch validation rows per global batch (sorted)."""

    __slots__ = ("_val_df", "name", "throughput", "validation_columns")

    def __init__(self, name: str, throughput: dict[str, ThroughputProfile],
                 validation: Mapping[int, pd.DataFrame | Columns]) -> None:
        self.name = name
        self.throughput = throughput
        self.validation_columns: dict[int, Columns] = {
            b: dict(v) if isinstance(v, Mapping) else _columns(v) for b, v in validation.items()}
        frames = {b: v for b, v in validation.items() if not isinstance(v, Mapping)}
        self._val_df: dict[int, pd.DataFrame] | None = frames if len(frames) == len(validation) else None

    @property
    def validation(self) -> dict[int, pd.DataFrame]:  # global batch -> per-epoch rows, sorted by batch
        if self._val_df is None:
            self._val_df = {b: _frame(c) for b, c in self.validation_columns.items()}
        return self._val_df

    def epochs(self) -> dict[int, int]:
        """Rows (epochs) of each validation file."""
        return {b: len(c["progress"]) for b, c in self.validation_columns.items()}


def _read(path: Path, cols: tuple[str, ...]) -> Columns:
    try:
        with path.open(newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("profile", str(path), f"unreadable: {e}") from None
    header = [h.strip() for h in rows[0]] if rows else []
    missing = [c for c in cols if c not in header]
    if missing:
        raise ConfigError("profile", str(path), f"missing columns {missing}; have {header}")
    idx = {c: header.index(c) for c in cols}
    body = [r for r in rows[1:] if r]
    out: Columns = {}
    for c in cols:
        i = idx[c]
        try:
            if c == "placement":
                out[c] = np.array([r[i].strip() for r in body], dtype=object)
            else:
                out[c] = np.array([float(r[i]) for r in body], dtype=float)
        except (ValueError, IndexError):
            bad = next((n for n, r in enumerate(body, 2) if len(r) <= i or not _is_number(r[i])), "?")
            raise ConfigError("profile", str(path), f"column {c!r}: not a number on line {bad}") from None
    return out


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _placements(path: Path) -> Columns:
    cols = _read(path, PLACEMENT_COLS)
    if not all(p.isdigit() for p in cols["placement"]):
        bad = next(p for p in cols["placement"] if not p.isdigit())
        raise ConfigError("profile", str(path), f"placement {bad!r} is not a string of per-node GPU counts")
    return cols


def load_app(app_dir: Path, cluster_suffix: dict[str, str] | None = None) -> AppProfile:
    """Load one application; `cluster_suffix` maps file suffix ('' or 'aws', ...) to GPU type."""
    app_dir = Path(app_dir)
    suffixes = cluster_suffix or {"": POLLUX_GPU_TYPE}
    throughput: dict[str, ThroughputProfile] = {}
    for suffix, gpu_type in suffixes.items():
        tail = f"-{suffix}" if suffix else ""
        p, s = app_dir / f"placements{tail}.csv", app_dir / f"scalability{tail}.csv"
        if p.exists() and s.exists():
            throughput[gpu_type] = ThroughputProfile(_placements(p), _read(s, SCALABILITY_COLS))
    validation: dict[int, Columns] = {}
    for path in app_dir.glob("validation-*.csv"):
        m = re.fullmatch(r"validation-(\d+)\.csv", path.name)
        if m:
            validation[int(m.group(1))] = _read(path, VALIDATION_COLS)
    if not throughput or not validation:
        raise ConfigError("profile", str(app_dir), "needs placements*.csv, scalability*.csv and validation-*.csv")
    return AppProfile(app_dir.name, throughput, dict(sorted(validation.items())))


def bundled_pollux_dir() -> Path:
    return Path(str(resources.files("elastisched.models") / "profiles" / "pollux"))


def load_pollux_bundled() -> dict[str, AppProfile]:
    root = bundled_pollux_dir()
    return {d.name: load_app(d) for d in sorted(root.iterdir()) if d.is_dir()}


def load_sia(root: Path) -> dict[str, AppProfile]:
    """Sia's per-GPU-type traces (read from a path; Sia ships no licence, so they are not bundled)."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError("--profiles", str(root), "not a directory")
    apps = {}
    for d in sorted(root.iterdir()):
        if d.is_dir() and any(d.glob("validation-*.csv")) and any(d.glob("placements-*.csv")):
            apps[d.name] = load_app(d, SIA_GPU_TYPES)
    if not apps:
        raise ConfigError("--profiles", str(root), "no application directories with Sia-format profiles")
    return apps


def merge(base: dict[str, AppProfile], extra: dict[str, AppProfile]) -> dict[str, AppProfile]:
    """Add GPU types from `extra` to `base`; validation data of `base` wins (same measurements)."""
    out = dict(base)
    for name, prof in extra.items():
        if name in out:
            tp = dict(prof.throughput)
            tp.update(out[name].throughput)
            out[name] = AppProfile(name, tp, out[name].validation_columns)
        else:
            out[name] = prof
    return out
