"""Datacenter-scale benchmark (issue 22): writes benchmarks/results/scale.json (committed).

One file, several sections, each measured by a module beside this one that exposes
`run(args: argparse.Namespace) -> dict` and `add_arguments(parser)`:

- `replay`    (`_scale_replay.py`): whole-trace replays, CPU / wall / peak RSS against the number of jobs;
- `decisions` (`_scale_decisions.py`): decision time per round against GPUs and active jobs, per elastic policy:
  `{"points": [{policy, options, gpus, cluster, types, nodes, jobs (mean active), jobs_max, rounds, p50_s, p99_s,
  max_s (wall), cpu_p50_s, cpu_p99_s, cpu_max_s, cpu_total_s (thread CPU), budget_s, peak_rss_mib, sim_cpu_s,
  sim_wall_s, finished, submitted} | {policy, gpus, ..., error}], skipped, bar_s, rounds_minutes, jobs_at_8192,
  seed, clock, meets_bar_at_top: {policy: bool}}`;
- `philly`    (`_scale_philly.py`): the full Philly trace with the elastic policies: `{"runs": [{policy, options,
  workload, cluster, seed, jobs, finished, rounds, cpu_s, process_cpu_s, wall_s, peak_rss_mib, avg_jct, p95_jct,
  decision_ms_p99, meets_bar} | {..., error}], skipped, bar_cpu_s, clock}`;
- `budgets`   (`_scale_budgets.py`): each default per-round budget's effect on JCT on the eight Pollux workloads
  (with and without, seeds 0-2; one row per policy and budget): `{"policies": [{policy, budget, workloads:
  [{workload, jct_without, jct_with, spread_without, spread_with, seeds, rel_diff, max_round_cpu_s}],
  mean_jct_without, mean_jct_with, mean_rel_diff, worst_rel_diff, slowest_round_cpu_s, errors,
  within_bar, runs}], bar, cluster, seeds, workloads}`;
- `live`      (`_scale_live.py`): the live service with the fake backend.

A run updates only the sections it ran (`--sections replay,decisions`), so one section can be measured again
without the others; every section records when, on which commit and with how many BLAS threads it was measured.
Time with one BLAS thread: `OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python benchmarks/scale.py --sections …`.
`benchmarks/scale_plots.py` draws docs/scale.md's figures from the JSON.

Schemas (besides each section's provenance: measured_at, commit, blas_threads, cpus, python):
- `replay`: {workload, cluster, profiles, seed, repeat, runs: [{policy, jobs, seed, cluster, gpus, gpu_types,
  cpu_s, wall_s (simulate() alone: the headline), load_cpu_s (generating the workload), peak_rss_mib (the whole
  process), policy_s (inside policy.schedule, all rounds), rounds, events, finished, avg_jct, avg_queue,
  decision_ms_p99, compiled_modules (0: every module from source), interpolations_asked (0: a warm cache),
  yardstick_s, cpu_samples, wall_samples, rss_samples, yardstick_samples, interpolations_asked_samples}],
  growth: {policy:
  {slope (of log CPU on log jobs; 1 = linear), cpu_us_per_job: {jobs: µs}}}, targets: {jobs, cpu_s,
  peak_rss_mib}, met: {policy: bool}, load_average}; `replay_compiled`: the same, measured with the compiled
  core (`make native`, then `--sections replay --key-suffix _compiled`); `replay_compiled_*` and
  `replay_source_*` (e.g. `_compiled_warm_2026_12_07`): measured again, each under its own suffix; the figures
  draw the newest of each kind;
- `decisions`: {points: [{policy, gpus, jobs, p50_s, p99_s, cpu_p99_s, budget_s (None: no time budget)}], …};
- `philly`: {runs: [{policy, cluster, jobs, cpu_s, wall_s, peak_rss_mib, avg_jct}], …}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "scale.json"
SECTIONS: dict[str, str] = {"replay": "_scale_replay", "decisions": "_scale_decisions", "philly": "_scale_philly",
                            "budgets": "_scale_budgets", "live": "_scale_live"}


def _section_module(name: str) -> Any:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    return importlib.import_module(SECTIONS[name])


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _provenance() -> dict[str, Any]:
    return {"measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "commit": _commit(),
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "unset"), "cpus": os.cpu_count(),
            "python": sys.version.split()[0]}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated sections to measure (default: all of {', '.join(SECTIONS)})")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON file to update (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="small sizes only (a smoke run; do not commit its JSON)")
    p.add_argument("--key-suffix", default="",
                   help="store each section under its name + this suffix, keeping the one measured before (e.g. "
                        "`--sections replay --key-suffix _compiled` after `make native`)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    pre, _ = parser.parse_known_args(argv)
    names = [s.strip() for s in pre.sections.split(",") if s.strip()]
    unknown = [s for s in names if s not in SECTIONS]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    modules = {n: _section_module(n) for n in names}
    for m in modules.values():
        m.add_arguments(parser)
    args = parser.parse_args(argv)
    out: Path = args.out
    data: dict[str, Any] = json.loads(out.read_text()) if out.is_file() else {}
    for name, module in modules.items():
        print(f"==> section {name}", flush=True)
        result = module.run(args)
        if args.quick:
            result["quick"] = True
        data[name + args.key_suffix] = {**_provenance(), **result}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")  # after each section: nothing lost
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
