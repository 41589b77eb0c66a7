"""Seeds on the standard benchmark (issue 13 items 1 and 6): the eight Pollux workloads on `16x4:t4`.

For each policy × workload × seed: mean JCT, the JCT decomposition totals (`sim.metrics`), restarts, and the
CPU seconds of one simulation (`time.process_time`, one process, BLAS pinned to one thread by the caller),
with each policy's CPU time as a ratio to tiresias's in the same run. Writes one JSON:
`python benchmarks/seed_speed.py --policies tiresias,lyra,jabas,ones --seeds 0,1,2 --out results/bench/seeds.json`.
Per policy: mean JCT over the workloads, averaged over the seeds, with its spread (max − min of the per-seed
means) and the decomposition means over every run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

DECOMP = ["queued", "restarting", "running", "best", "loss_gpus", "loss_batch"]


def run(policies: list[str], workloads: list[int], seeds: list[int], cluster: str) -> dict[str, Any]:
    from elastisched import __version__
    from elastisched.core.cluster import parse_cluster
    from elastisched.models import PerfModels
    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, simulate
    from elastisched.workloads import load_workload

    models = PerfModels.load()
    nodes = parse_cluster(cluster)
    wls = {w: load_workload(f"pollux:workload-{w}", models) for w in workloads}
    simulate(wls[workloads[0]], make_policy("fifo"), nodes, models, SimConfig())  # warm the model fits
    rows: list[dict[str, Any]] = []
    for p in policies:
        for w in workloads:
            for s in seeds:
                c0 = time.process_time()
                r = simulate(wls[w], make_policy(p), nodes, models, SimConfig(seed=s))
                cpu = time.process_time() - c0
                sm = r.summary
                row = {"policy": p, "workload": w, "seed": s, "avg_jct": sm["avg_jct"], "cpu_s": cpu,
                       "restarts": sm["restarts"], "n_finished": sm["n_finished"]}
                row |= {f"mean_{k}": float(r.jobs[k].mean()) for k in DECOMP if k in r.jobs}
                row |= {f"gpu_hours_{k}": v for k, v in sm.get("gpu_hours", {}).items()}
                rows.append(row)
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}),
                      flush=True)
    per: dict[str, Any] = {}
    for p in policies:
        mine = [r for r in rows if r["policy"] == p]
        by_seed = [np.mean([r["avg_jct"] for r in mine if r["seed"] == s]) for s in seeds]
        per[p] = {"mean_jct": float(np.mean(by_seed)), "mean_jct_by_seed": [float(x) for x in by_seed],
                  "spread": float(np.max(by_seed) - np.min(by_seed)),
                  "cpu_s_max": max(r["cpu_s"] for r in mine), "cpu_s_mean": float(np.mean([r["cpu_s"] for r in mine])),
                  "restarts_mean": float(np.mean([r["restarts"] for r in mine]))}
        per[p] |= {f"mean_{k}": float(np.mean([r[f"mean_{k}"] for r in mine])) for k in DECOMP
                   if all(f"mean_{k}" in r for r in mine)}
    if "tiresias" in per:
        for p in per:
            per[p]["cpu_ratio_to_tiresias"] = per[p]["cpu_s_mean"] / per["tiresias"]["cpu_s_mean"]
    return {"config": {"cluster": cluster, "workloads": workloads, "seeds": seeds, "version": __version__},
            "policies": per, "runs": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="tiresias,lyra,jabas,ones")
    ap.add_argument("--workloads", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--cluster", default="16x4:t4")
    ap.add_argument("--out", type=Path, default=Path("results/bench/seeds.json"))
    a = ap.parse_args()
    res = run([p for p in a.policies.split(",") if p], [int(w) for w in a.workloads.split(",")],
              [int(s) for s in a.seeds.split(",")], a.cluster)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=2))
    print(json.dumps(res["policies"], indent=2))


if __name__ == "__main__":
    main()
