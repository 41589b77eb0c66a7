"""What `sim.young_gc_only` saves: the same simulation with and without full garbage collections.

`simulate()` runs a simulation with the oldest generation's collection switched off (`sim.young_gc_only`): the
job states and views of a long replay live for the whole run, and each full collection walks all of them again.
This benchmark runs each case both ways in one process, alternating the order between repetitions (the machine
is shared: compare the ratio, not the seconds), checks that both give the same results, and writes the CPU
seconds and their ratio: `OPENBLAS_NUM_THREADS=1 python benchmarks/gc_effect.py --out DIR` (`--reps N`,
`--cases fifo:64x4:t4,tiresias:64x4:t4`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--cases", default="fifo:64x4:t4,tiresias:64x4:t4")
    a = ap.parse_args()
    from elastisched.core.cluster import parse_cluster
    from elastisched.models import PerfModels
    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, Simulator, young_gc_only
    from elastisched.workloads.traces import load_raw_trace

    models = PerfModels.load()
    wl = load_raw_trace(None, models)
    rows: list[dict[str, Any]] = []
    for case in a.cases.split(","):
        policy, cluster = case.split(":", 1)
        nodes = parse_cluster(cluster)
        cpu: dict[str, list[float]] = {"young_only": [], "default": []}
        jct: dict[str, float] = {}
        for rep in range(a.reps):
            for mode in ("young_only", "default") if rep % 2 == 0 else ("default", "young_only"):
                sim = Simulator(wl, make_policy(policy), nodes, models, SimConfig())
                c0 = time.process_time()
                if mode == "young_only":
                    with young_gc_only():
                        res = sim.run()
                else:
                    res = sim.run()
                cpu[mode].append(time.process_time() - c0)
                jct[mode] = res.summary["avg_jct"]
                print(json.dumps({"case": case, "rep": rep, "mode": mode, "cpu_s": round(cpu[mode][-1], 3)}),
                      flush=True)
        assert jct["young_only"] == jct["default"], f"{case}: results differ ({jct})"
        rows.append({"policy": policy, "cluster": cluster, "jobs": len(wl.jobs), "cpu_seconds": cpu,
                     "ratio_default_over_young_only": sum(cpu["default"]) / sum(cpu["young_only"]),
                     "avg_jct": jct["young_only"]})
    a.out.mkdir(parents=True, exist_ok=True)
    out = {"cases": rows, "load_average": list(os.getloadavg()), "reps": a.reps}
    (a.out / "gc_effect.json").write_text(json.dumps(out, indent=2))
    print(json.dumps([{k: r[k] for k in ("policy", "cluster", "ratio_default_over_young_only")} for r in rows]))


if __name__ == "__main__":
    main()
