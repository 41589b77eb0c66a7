"""Where a budgeted Pollux run's CPU goes on a long trace (issue 22, docs/scale.md "Full Philly").

One run of `pollux` (default: the whole Philly trace on `640x4:t4` with the options of `scale.py --sections
philly`, `budget_s=0.005, quiet_s=300`), stopped at `--cap` CPU seconds, with counters around the phases of a
round (thread CPU time):
- `tables`: the goodput tables of a searching round (`PolluxBeliefs._compute`, called once per searching round):
  calls, ms, and of the raw tables recomputed how many kept their fit and size (only new gradient statistics);
- `refit`: bringing every job's fit to its observations (`PolluxBeliefs.refit`), and within it
- `fits`: the L-BFGS fits themselves (`PolluxBeliefs._fit`): count and ms.
The counters wrap methods that earlier commits have too, so the same file measures an older tree side by side
(`PYTHONPATH=OLD/src python benchmarks/pollux_phases.py --label before`). With a budget the run depends on the
machine's speed: compare phases per call, measured at the same time, not totals across days.

Run: `OPENBLAS_NUM_THREADS=1 python benchmarks/pollux_phases.py --label NAME` (`--quick`: a 300-job sample, ~20 s);
updates `benchmarks/results/pollux_phases.json` under NAME.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "pollux_phases.json"


def _timed(counter: Counter[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        t = time.thread_time()
        try:
            return fn(*args)
        finally:
            counter[f"{name}_ms"] += 1000 * (time.thread_time() - t)
            counter[f"{name}_calls"] += 1

    return wrapper


def _count_tables(counter: Counter[str], compute: Callable[..., Any]) -> Callable[..., Any]:
    """Count the raw tables asked for and those whose fit and size are the ones of the job's previous table."""
    last: dict[int, tuple[Any, int]] = {}

    def wrapper(raw_need: list[Any], *rest: Any) -> Any:
        for b, fn, _, m in raw_need:
            prev = last.get(id(b))
            counter["raw_tables"] += 1
            counter["raw_same_fit_and_size"] += prev is not None and prev[0] is fn.perf and prev[1] == m
            last[id(b)] = (fn.perf, m)
        return compute(raw_need, *rest)

    return wrapper


def measure(workload: str, cluster: str, options: dict[str, Any], cap_s: float) -> dict[str, Any]:
    """The run, its counters and how far it got (in this process)."""
    sys.path.insert(0, str(HERE))
    import _scale_philly
    from elastisched.policies.pollux.beliefs import PolluxBeliefs

    c: Counter[str] = Counter()
    compute = _count_tables(c, _timed(c, "tables", PolluxBeliefs._compute))
    PolluxBeliefs._compute = staticmethod(compute)  # type: ignore[method-assign,assignment]
    PolluxBeliefs.refit = _timed(c, "refit", PolluxBeliefs.refit)  # type: ignore[method-assign]
    PolluxBeliefs._fit = _timed(c, "fit", PolluxBeliefs._fit)  # type: ignore[method-assign]
    run = _scale_philly.run_one("pollux", options, workload, cluster, 0, cap_s)
    per = {k: c[f"{k}_ms"] / c[f"{k}_calls"] if c[f"{k}_calls"] else None for k in ("tables", "refit", "fit")}
    return {"workload": workload, "cluster": cluster, "options": options, "cap_s": cap_s,
            "cpu_s": run["cpu_s"], "rounds": run["rounds"], "day_reached": run.get("sim_time_reached_s", 0) / 86400
            if "error" in run else None, "finished": "error" not in run,
            "searching_rounds": c["tables_calls"],
            "tables": {"calls": c["tables_calls"], "ms": c["tables_ms"], "ms_per_call": per["tables"],
                       "raw": c["raw_tables"], "raw_same_fit_and_size": c["raw_same_fit_and_size"]},
            "refit": {"calls": c["refit_calls"], "ms": c["refit_ms"], "ms_per_call": per["refit"],
                      "besides_fits_ms_per_call": (c["refit_ms"] - c["fit_ms"]) / c["refit_calls"]
                      if c["refit_calls"] else None},
            "fits": {"count": c["fit_calls"], "ms": c["fit_ms"], "ms_each": per["fit"]}}


def _commit() -> str:
    import elastisched

    src = Path(elastisched.__file__).resolve().parent
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=src, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--label", required=True, help="the key this run is stored under in the results file")
    p.add_argument("--workload", default="philly", help="workload spec (default %(default)s)")
    p.add_argument("--cluster", default="640x4:t4", help="cluster (default %(default)s)")
    p.add_argument("--budget-s", type=float, default=0.005, help="Pollux budget_s (default %(default)s)")
    p.add_argument("--quiet-s", type=float, default=300.0, help="Pollux quiet_s (default %(default)s)")
    p.add_argument("--cap", type=float, default=330.0, help="CPU seconds after which the run stops")
    p.add_argument("--out", type=Path, default=RESULTS, help="results file (default %(default)s)")
    p.add_argument("--quick", action="store_true",
                   help="a 300-job Philly sample on 16x4:t4, capped at 120 s (or at --cap if less)")
    a = p.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    workload, cluster, cap = ("philly:sample=300,seed=1", "16x4:t4", min(a.cap, 120.0)) if a.quick else (
        a.workload, a.cluster, a.cap)
    res = measure(workload, cluster, {"budget_s": a.budget_s, "quiet_s": a.quiet_s}, cap)
    res.update(commit=_commit(), measured_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
               blas_threads=os.environ.get("OPENBLAS_NUM_THREADS"), load_average=os.getloadavg())
    old = json.loads(a.out.read_text()) if a.out.exists() else {}
    old[a.label] = res
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(old, indent=1) + "\n")
    t, f = res["tables"], res["fits"]
    print(f"{a.label}: {res['rounds']} rounds ({res['searching_rounds']} searching) in {res['cpu_s']:.1f} s; tables "
          f"{t['ms_per_call'] or 0:.2f} ms/searching round; {f['count']} fits, {f['ms_each'] or 0:.2f} ms each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
