"""The full Philly trace with the elastic policies (`scale.py --sections philly`).

Each run is one policy on the bundled Philly trace (`philly`: the 74,428 jobs that pass the loader's filters)
on `640x4:t4` (2,560 GPUs, about Philly's own size), in a fresh process: CPU seconds of the simulation
(`time.process_time` around `simulate`, the bar's judge: one BLAS thread, the trace and the models loaded
before the clock starts), the process's CPU including loading, wall seconds, peak RSS, rounds, and the average
and 95th-percentile JCT of the finished jobs. Policies are a list (`--philly-policies`; unregistered ones are
skipped with a note); `--philly-options NAME:KEY=VALUE` sets a policy option (each run records its options).
A run prints its progress (simulated day, rounds, CPU, active jobs) to stderr every `PROGRESS_ROUNDS` rounds, and
stops once its CPU passes `--philly-cpu-cap` (default: the bar), recorded as unfinished with how far it got.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_POLICIES = "lyra_scaled,pollux,sia,elastisched"
#: what the runs use (docs/scale.md says why): Pollux searching every minute for 106 days takes hours
DEFAULT_OPTIONS = ("pollux:budget_s=0.005", "pollux:quiet_s=300")
BAR_S = 600.0  # issue 22: each run ≤ 10 minutes of CPU
PROGRESS_ROUNDS = 2000


class OverCap(Exception):
    """The run used more CPU than its cap (raised from inside a round; the partial run is discarded)."""


def _watched(policy: Any, cap_s: float | None, c0: float, seen: dict[str, Any]) -> None:
    """Wrap `policy.schedule`: note the simulated time and round count, print progress, stop past the cap."""
    inner = policy.schedule

    def schedule(snap: Any, ctx: Any) -> Any:
        seen["now"], seen["rounds"] = float(snap.now), seen["rounds"] + 1
        cpu = time.process_time() - c0
        if seen["rounds"] % PROGRESS_ROUNDS == 0:
            print(f"    day {snap.now / 86400:6.1f}  rounds {seen['rounds']:7d}  cpu {cpu:7.1f} s  "
                  f"active {len(snap.jobs)}", file=sys.stderr, flush=True)
        if cap_s is not None and cpu > cap_s:
            raise OverCap
        return inner(snap, ctx)

    policy.schedule = schedule


def run_one(policy: str, options: dict[str, Any], workload: str, cluster: str, seed: int,
            cap_s: float | None = None) -> dict[str, Any]:
    """One run, in this process; past `cap_s` of CPU, how far it got instead of its results."""
    import numpy as np

    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, simulate
    from elastisched.sim.runner import setup

    s = setup(workload, cluster)
    pol = make_policy(policy, **options)
    seen: dict[str, Any] = {"now": 0.0, "rounds": 0}
    c0, w0 = time.process_time(), time.perf_counter()
    _watched(pol, cap_s, c0, seen)
    head = {"policy": policy, "options": options, "workload": workload, "cluster": cluster, "seed": seed,
            "jobs": len(s.workload.jobs)}
    try:
        r = simulate(s.workload, pol, s.nodes, s.models, SimConfig(seed=seed))
    except OverCap:
        span = max(j.submit_time for j in s.workload.jobs)
        return {**head, "error": f"over the CPU cap ({cap_s:.0f} s) at simulated day {seen['now'] / 86400:.1f} "
                f"(last arrival: day {span / 86400:.1f})", "cpu_s": time.process_time() - c0,
                "wall_s": time.perf_counter() - w0, "sim_time_reached_s": seen["now"], "last_arrival_s": span,
                "rounds": seen["rounds"], "cap_s": cap_s, "meets_bar": False,
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    jct = np.asarray(r.jobs["jct"], dtype=float)
    return {**head, "finished": int(r.summary["n_finished"]), "rounds": int(r.summary["rounds"]),
            "cpu_s": cpu, "process_cpu_s": time.process_time(), "wall_s": wall,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "avg_jct": float(jct.mean()) if len(jct) else None,
            "p95_jct": float(np.percentile(jct, 95)) if len(jct) else None,
            "decision_ms_p99": r.summary.get("decision_ms_p99"), "meets_bar": cpu <= BAR_S}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("philly")
    g.add_argument("--philly-policies", default=DEFAULT_POLICIES,
                   help="comma-separated policies (unregistered ones are skipped; default: %(default)s)")
    g.add_argument("--philly-options", action="append", default=None, metavar="NAME:KEY=VALUE",
                   help=f"a policy option, repeatable (default: {' '.join(DEFAULT_OPTIONS)})")
    g.add_argument("--philly-workload", default="philly", help="workload spec (default: %(default)s; a sample such "
                   "as philly:sample=5000,seed=1 for a quick run)")
    g.add_argument("--philly-cluster", default="640x4:t4", help="cluster (default: %(default)s)")
    g.add_argument("--philly-cpu-cap", type=float, default=BAR_S,
                   help="CPU seconds after which a run stops, recorded as unfinished with the simulated day it "
                   "reached (default: the bar, %(default)s; 0: no cap)")
    g.add_argument("--philly-timeout", type=float, default=7200.0,
                   help="wall seconds one run may take before it is recorded as unfinished (default: %(default)s)")


def _child(policy: str, options: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    spec = {"policy": policy, "options": options, "workload": args.philly_workload, "cluster": args.philly_cluster,
            "seed": 0, "cap_s": args.philly_cpu_cap or None}
    base = {k: spec[k] for k in ("policy", "options", "workload", "cluster")}
    try:
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), json.dumps(spec)],
                             stdout=subprocess.PIPE, text=True, timeout=args.philly_timeout, check=False,
                             env={**os.environ, "PYTHONHASHSEED": "0"})
    except subprocess.TimeoutExpired:
        return {**base, "error": f"unfinished after {args.philly_timeout:.0f} s wall"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:  # its traceback went to stderr, above
        return {**base, "error": f"exit status {out.returncode}, no result"}
    return dict(json.loads(lines[-1]))


def run(args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    from _scale_decisions import _known, _parse_options

    opts = _parse_options(list(args.philly_options if args.philly_options is not None else DEFAULT_OPTIONS))
    runs: list[dict[str, Any]] = []
    skipped: list[str] = []
    workload = "philly:sample=2000,seed=1" if args.quick else args.philly_workload
    args.philly_workload = workload
    for name in [p.strip() for p in str(args.philly_policies).split(",") if p.strip()]:
        if not _known(name):
            skipped.append(name)
            print(f"  {name}: not registered here, skipped", flush=True)
            continue
        row = _child(name, opts.get(name, {}), args)
        runs.append(row)
        print("  " + (f"{name}: {row['error']}" if "error" in row else
                      f"{name:>12} cpu {row['cpu_s']:7.1f} s  wall {row['wall_s']:7.1f} s  "
                      f"rss {row['peak_rss_mib']:.0f} MiB  avg JCT {row['avg_jct']:.0f} s  rounds {row['rounds']}"),
              flush=True)
    return {"runs": runs, "skipped": skipped, "bar_cpu_s": BAR_S, "clock": "process_time around simulate"}


if __name__ == "__main__":  # one run in a fresh process (called by `run`)
    spec = json.loads(sys.argv[1])
    print(json.dumps(run_one(spec["policy"], spec["options"], spec["workload"], spec["cluster"], spec["seed"],
                             spec.get("cap_s"))))
