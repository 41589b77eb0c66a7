"""Loading measured application profiles (Pollux / Sia artifact format).

Layout of one application directory (Pollux artifact `simulator/traces/<app>/`, Sia `sia-simulator/traces/<app>/`):
- `placements[-<cluster>].csv`: `placement,local_bsz,step_time,sync_time`; placement "22" = 2 GPUs on each of 2 nodes
- `scalability[-<cluster>].csv`: `num_nodes,num_replicas,local_bsz,step_time,sync_time`
- `validation-<global batch>.csv`: `progress,iteration,metric,grad_sqr,grad_var`, one row per epoch

Sia names clusters, not GPU types; `SIA_GPU_TYPES` maps them (Sia artifact README: aws = T4, azure = V100,
dgx = A100, rtx = RTX 2080Ti, quad = RTX 6000). Column order differs between the two artifacts, so columns
are read by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from elastisched.core.errors import ConfigError

SIA_GPU_TYPES: dict[str, str] = {"aws": "t4", "azure": "v100", "dgx-ext": "a100", "rtx": "rtx", "quad": "rtx6000"}
#: Pollux's own traces were measured on g4dn.12xlarge (4x T4).
POLLUX_GPU_TYPE = "t4"
PLACEMENT_COLS = ("placement", "local_bsz", "step_time", "sync_time")
SCALABILITY_COLS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
VALIDATION_COLS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")


@dataclass(frozen=True, slots=True)
class ThroughputProfile:
    """Measured step/sync times of one application on one GPU type."""

    placements: pd.DataFrame  # placement (str of digits), local_bsz, step_time, sync_time, num_nodes, num_replicas
    scalability: pd.DataFrame  # num_nodes, num_replicas, local_bsz, step_time, sync_time


@dataclass(frozen=True, slots=True)
class AppProfile:
    name: str
    throughput: dict[str, ThroughputProfile]  # gpu type -> profile
    validation: dict[int, pd.DataFrame]  # global batch -> per-epoch rows, sorted by batch


def _read(path: Path, cols: tuple[str, ...]) -> pd.DataFrame:
    df = pd.read_csv(path, dtype={"placement": str})
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ConfigError("profile", str(path), f"missing columns {missing}; have {list(df.columns)}")
    return df[list(cols)].copy()


def _placements(path: Path) -> pd.DataFrame:
    df = _read(path, PLACEMENT_COLS)
    df["placement"] = df["placement"].astype(str)
    df["num_nodes"] = df["placement"].str.len()
    df["num_replicas"] = df["placement"].map(lambda p: sum(int(c) for c in p))
    return df


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
    validation: dict[int, pd.DataFrame] = {}
    for path in app_dir.glob("validation-*.csv"):
        m = re.fullmatch(r"validation-(\d+)\.csv", path.name)
        if m:
            validation[int(m.group(1))] = _read(path, VALIDATION_COLS).reset_index(drop=True)
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
            out[name] = AppProfile(name, tp, out[name].validation)
        else:
            out[name] = prof
    return out


def as_array(df: pd.DataFrame, cols: list[str]) -> np.ndarray:
    return df[cols].to_numpy(dtype=float)
