"""Performance models of the live service: the bundled profiles plus the ones measured on this cluster.

`serve --profiles DIR` reads one directory per application, in the format the simulator reads (Pollux
artifact layout, written by `elastisched profile`):

    DIR/<app>/placements.csv, scalability.csv     step/sync time per (placement, local batch)
    DIR/<app>/placements-<type>.csv, ...          more GPU types, one suffix each (optional)
    DIR/<app>/validation-<batch>.csv              progress per epoch at that global batch
    DIR/<app>/meta.json                           optional: {"gpu_type": "cpu", "restart_cost_s": 4.2}

The unsuffixed files were measured on `gpu_type` (default `cpu`, the local backend's worker slot);
`restart_cost_s` is the measured stop + relaunch time the policies charge for a rescale (else the models'
default). `benchmarks/calibration.py` builds its simulator's models with this same function, so a policy
sees the same numbers in both bodies there; `elastisched sim --profiles` still reads profiles through
`PerfModels.load` (no one-node override, no `meta.json` restart cost).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from elastisched.core.errors import ConfigError
from elastisched.models.profiles import AppProfile, ThroughputProfile, bundled_pollux_dir, load_app, load_pollux_bundled
from elastisched.models.registry import PerfModels
from elastisched.models.throughput import ThroughputModel, canonical_placement, fit_pollux

META = "meta.json"


def _app_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        raise ConfigError("--profiles", str(root), "not a directory")
    return [d for d in sorted(root.iterdir())
            if d.is_dir() and any(d.glob("validation-*.csv")) and any(d.glob("placements*.csv"))]


def app_names(profiles_dir: str | os.PathLike[str] | None) -> set[str]:
    """Names of the applications the models will know (cheap: no model is built)."""
    names = {d.name for d in bundled_pollux_dir().iterdir() if d.is_dir()}
    if profiles_dir is not None:
        names |= {d.name for d in _app_dirs(Path(profiles_dir))}
    return names


def load_user_profiles(profiles_dir: str | os.PathLike[str]) -> tuple[dict[str, AppProfile], dict[str, float]]:
    """Measured applications under `profiles_dir` and their measured restart costs (seconds)."""
    apps: dict[str, AppProfile] = {}
    restart: dict[str, float] = {}
    for d in _app_dirs(Path(profiles_dir)):
        meta = json.loads((d / META).read_text()) if (d / META).is_file() else {}
        suffixes = {"": str(meta.get("gpu_type", "cpu")).lower()}
        for p in d.glob("placements-*.csv"):
            t = p.stem[len("placements-"):]
            suffixes[t] = t.lower()
        apps[d.name] = load_app(d, suffixes)
        if meta.get("restart_cost_s") is not None:
            restart[d.name] = float(meta["restart_cost_s"])
    return apps, restart


def load_models(profiles_dir: str | os.PathLike[str] | None = None) -> PerfModels:
    """Bundled Pollux profiles plus `profiles_dir`'s applications (theirs win on a name clash)."""
    profiles = load_pollux_bundled()
    restart: dict[str, float] = {}
    if profiles_dir is not None:
        user, restart = load_user_profiles(profiles_dir)
        profiles = {**profiles, **user}
    models = PerfModels(profiles, restart_cost=restart or None)
    for name in user if profiles_dir is not None else ():
        app = models.app(name)
        for t, tp in app.profile.throughput.items():
            if tp.placements["num_nodes"].nunique() == 1 and tp.scalability["num_nodes"].nunique() <= 1:
                app._models[t] = OneNodeModel(tp)
    return models


class OneNodeModel(ThroughputModel):
    """Step time from a profile measured on one node (what `elastisched profile` writes on one machine).

    The local backend's nodes are slices of the one machine that was profiled, so a placement is predicted
    by its replica count whatever its node split (Lyra predicts extras "on nodes of their own"; 1+1 on two
    local "nodes" is still two processes on one host). `ThroughputModel` handles one-node profiles too
    (`ProfileInterpolator`), but it treats a multi-node placement as unmeasured and uses the Pollux fit,
    whose inter-node terms a one-node profile cannot identify. A measured replica count is interpolated in
    the local batch, other counts linearly between the measured ones, and anything outside by the Pollux
    model fitted to the same points.
    """

    def __init__(self, profile: ThroughputProfile) -> None:
        pl = profile.placements
        self._by_placement = {}
        for key, df in pl.groupby("placement"):
            df = df.sort_values("local_bsz")
            self._by_placement[str(key)] = (df["local_bsz"].to_numpy(float),
                                            df[["step_time", "sync_time"]].to_numpy(float))
        pts = pl[["num_replicas", "local_bsz"]].to_numpy(float)
        vals = pl[["step_time", "sync_time"]].to_numpy(float)
        self._pts2, self._vals2 = pts, vals
        self._max_nodes = 1
        self.min_local_bsz = int(pl["local_bsz"].min())
        self.max_local_bsz = int(pl["local_bsz"].max())
        self.params = fit_pollux(np.ones(len(pts)), pts[:, 0], pts[:, 1], vals[:, 0], vals[:, 1])
        self.step_sync = lru_cache(maxsize=65536)(self._step_sync)

    def _step_sync(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        p = canonical_placement(placement)
        if not p:
            raise ValueError("empty placement")
        n = sum(p)  # the local backend's nodes are slices of the machine that was profiled: count replicas
        key = str(n)
        if key in self._by_placement:
            bs, ts = self._by_placement[key]
            if bs[0] <= local_bsz <= bs[-1]:
                return float(np.interp(local_bsz, bs, ts[:, 0])), float(np.interp(local_bsz, bs, ts[:, 1]))
        reps = np.unique(self._pts2[:, 0])
        if reps[0] <= n <= reps[-1] and len(reps) > 1:
            lo, hi = reps[reps <= n].max(), reps[reps >= n].min()
            a, b = self._at(lo, local_bsz), self._at(hi, local_bsz)
            if a is not None and b is not None:
                w = 0.0 if hi == lo else (n - lo) / (hi - lo)
                return float(a[0] + w * (b[0] - a[0])), float(a[1] + w * (b[1] - a[1]))
        return self.params.step_sync(1, n, local_bsz)

    def _at(self, reps: float, local_bsz: float) -> tuple[float, float] | None:
        m = self._pts2[:, 0] == reps
        bs, ts = self._pts2[m, 1], self._vals2[m]
        order = np.argsort(bs)
        bs, ts = bs[order], ts[order]
        if not bs[0] <= local_bsz <= bs[-1]:
            return None
        return float(np.interp(local_bsz, bs, ts[:, 0])), float(np.interp(local_bsz, bs, ts[:, 1]))
