"""Workload loaders: every public trace format becomes `JobSpec`s through one validated schema.

`load_workload(spec, models)` accepts:
- `pollux:workload-N` — a bundled Pollux artifact workload (160 jobs, 8 h);
- `philly` / `philly:sample=N,seed=S,days=D` — the bundled 82k-job Philly trace (see `traces.py`);
- `synthetic:num_jobs=N,rate=R,seed=S`;
- a path: `.csv` with a `name` column (Pollux/Sia/DeepBoot), `.csv[.gz]` with `duration,num_gpus`
  (raw trace), `.trace`/`.tsv` (Gavel/Shockwave).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from elastisched.core.errors import ConfigError
from elastisched.workloads.pollux import load_pollux_csv
from elastisched.workloads.schema import (
    DAYS,
    NUM_JOBS,
    RATE,
    SAMPLE,
    SEED,
    InferenceTask,
    Workload,
    csv_rows,
    read_text,
)

if TYPE_CHECKING:
    from elastisched.models.registry import PerfModels

__all__ = ["InferenceTask", "Workload", "bundled_workload_path", "load_workload"]

_BUNDLED_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def bundled_workload_path(name: str) -> Path:
    folder = Path(str(resources.files("elastisched.workloads") / "data" / "pollux" / "workloads"))
    path = folder / f"{name}.csv"
    if not _BUNDLED_NAME.fullmatch(name) or not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.csv")))
        raise ConfigError("--workload", f"pollux:{name}", f"no such bundled workload (known: {known})")
    return path


def _opts(kind: str, text: str, known: tuple[str, ...]) -> dict[str, str]:
    """`key=value,...` options of a named source; unknown or repeated keys are errors, not ignored."""
    out: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip() and text.strip() == "":
            continue
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq:
            raise ConfigError(f"{kind}:", part, f"options are key=value, comma-separated (keys: {', '.join(known)})")
        if key not in known:
            raise ConfigError(f"{kind}:{key}", value, f"unknown option; known: {', '.join(known)}")
        if key in out:
            raise ConfigError(f"{kind}:{key}", value, "given more than once")
        out[key] = value.strip()
    return out


def load_workload(spec: str, models: PerfModels) -> Workload:
    kind, _, rest = spec.partition(":")
    if kind == "pollux" and rest:
        return load_pollux_csv(bundled_workload_path(rest), models.apps, name=rest)
    # the other loaders are imported by the branch that uses them (a start-up cost a Pollux run does not pay)
    from elastisched.workloads.traces import load_raw_trace

    if kind == "philly":
        o = _opts(kind, rest, ("sample", "seed", "days"))
        days = DAYS.option("philly:days", o["days"]) if "days" in o else None
        return load_raw_trace(None, models, seed=SEED.option("philly:seed", o.get("seed", "0")),
                              sample=SAMPLE.option("philly:sample", o["sample"]) if "sample" in o else None,
                              end=days * 86400 if days else None)
    if kind == "synthetic":
        from elastisched.workloads.synthetic import synthetic

        o = _opts(kind, rest, ("num_jobs", "rate", "seed"))
        return synthetic(models, num_jobs=NUM_JOBS.option("synthetic:num_jobs", o.get("num_jobs", "100")),
                         rate_per_hour=RATE.option("synthetic:rate", o.get("rate", "20")),
                         seed=SEED.option("synthetic:seed", o.get("seed", "0")))
    path = Path(spec)
    try:
        if "\0" in spec or not spec.strip():
            raise ValueError("not a usable path")
        exists, is_dir, regular = path.exists(), path.is_dir(), path.is_file()
    except OSError as e:
        raise ConfigError("--workload", spec, f"bad path: {e.strerror or type(e).__name__}") from None
    except ValueError as e:
        raise ConfigError("--workload", spec, f"bad path: {e}") from None
    if not exists:
        raise ConfigError("--workload", spec, "no such file (or use pollux:workload-N, philly, synthetic:...)")
    if is_dir:
        raise ConfigError("--workload", spec, "is a directory; expected a trace file")
    if not regular:  # a FIFO, socket or device: reading it could block for ever
        raise ConfigError("--workload", spec, "is not a regular file (a FIFO, socket or device); expected a trace file")
    if path.suffix in (".trace", ".tsv"):
        from elastisched.workloads.gavel import load_gavel_tsv

        return load_gavel_tsv(path, models)
    header, _ = csv_rows(str(path), read_text(path))
    if "name" in header:
        return load_pollux_csv(path, models.apps)
    if "duration" in header and "num_gpus" in header:
        return load_raw_trace(path, models)
    raise ConfigError("--workload", spec, f"unrecognised header {[h[:30] for h in header[:12]]}: expected "
                      "Pollux/Sia columns (name,time,...) or a raw trace (timestamp|time,duration,num_gpus)")
