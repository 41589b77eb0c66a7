"""Workload loaders: every public trace format becomes `JobSpec`s through one validated schema.

`load_workload(spec, models)` accepts:
- `pollux:workload-N` — a bundled Pollux artifact workload (160 jobs, 8 h);
- `philly` / `philly:sample=N,seed=S,days=D` — the bundled 82k-job Philly trace (see `traces.py`);
- `synthetic:num_jobs=N,rate=R,seed=S`;
- a path: `.csv` with a `name` column (Pollux/Sia/DeepBoot), `.csv[.gz]` with `duration,num_gpus`
  (raw trace), `.trace`/`.tsv` (Gavel/Shockwave).
"""

from __future__ import annotations

import csv
import gzip
from importlib import resources
from pathlib import Path

from elastisched.core.errors import ConfigError
from elastisched.models.registry import PerfModels
from elastisched.workloads.gavel import load_gavel_tsv
from elastisched.workloads.pollux import load_pollux_csv
from elastisched.workloads.schema import InferenceTask, Workload
from elastisched.workloads.synthetic import synthetic
from elastisched.workloads.traces import load_raw_trace

__all__ = ["InferenceTask", "Workload", "bundled_workload_path", "load_workload"]


def bundled_workload_path(name: str) -> Path:
    path = Path(str(resources.files("elastisched.workloads") / "data" / "pollux" / "workloads" / f"{name}.csv"))
    if not path.exists():
        raise ConfigError("--workload", f"pollux:{name}", "no such bundled workload (workload-1 .. workload-8)")
    return path


def _opts(text: str) -> dict[str, str]:
    out = {}
    for part in filter(None, text.split(",")):
        if "=" not in part:
            raise ConfigError("--workload", text, f"option {part!r} must be key=value")
        k, v = part.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def load_workload(spec: str, models: PerfModels) -> Workload:
    kind, _, rest = spec.partition(":")
    if kind == "pollux" and rest:
        return load_pollux_csv(bundled_workload_path(rest), models.apps, name=rest)
    if kind == "philly":
        o = _opts(rest)
        days = float(o.pop("days")) if "days" in o else None
        wl = load_raw_trace(None, models, seed=int(o.pop("seed", 0)),
                            sample=int(o["sample"]) if "sample" in o else None,
                            end=days * 86400 if days else None)
        o.pop("sample", None)
        if o:
            raise ConfigError("--workload", spec, f"unknown option(s) {sorted(o)}; known: sample, seed, days")
        return wl
    if kind == "synthetic":
        o = _opts(rest)
        return synthetic(models, num_jobs=int(o.get("num_jobs", 100)), rate_per_hour=float(o.get("rate", 20)),
                         seed=int(o.get("seed", 0)))
    path = Path(spec)
    if not path.exists():
        raise ConfigError("--workload", spec, "no such file (or use pollux:workload-N, philly, synthetic:...)")
    if path.suffix in (".trace", ".tsv"):
        return load_gavel_tsv(path, models)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:  # type: ignore[operator]
        header = next(csv.reader(f), [])
    if "name" in header:
        return load_pollux_csv(path, models.apps)
    if "duration" in header and "num_gpus" in header:
        return load_raw_trace(path, models)
    raise ConfigError("--workload", spec, f"unrecognised header {header}")
