"""Sweep speed (issue 12): one sweep of 8 Pollux workloads × 4 policies × 3 seeds, timed three ways in one
run — 1 local worker, 2 local workers, and a 2-node local Ray cluster (`ray.cluster_utils.Cluster`, one
CPU per node) — with the results of each checked against the serial run. Writes sweep_speed.json with
wall seconds and the ratios to the serial run, the load average before and after each timing (the machine
may be shared: ratios from a loaded machine say little), and the config (cells, seeds, cluster spec).

Run: `python benchmarks/sweep_speed.py --out results/bench` (`--quick`: 2 workloads × 2 policies × 2 seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from elastisched.sim.sweep import CellResult, expand, make_cells, run_sweep

VOLATILE = {"wall_seconds", "decision_ms_p50", "decision_ms_p99", "decision_ms_max"}


def _stable(rs: list[CellResult]) -> list[Any]:
    return [(r.cell, r.error, {k: v for k, v in (r.summary or {}).items() if k not in VOLATILE}) for r in rs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    wls = expand("pollux:workload-1..2" if a.quick else "pollux:workload-1..8")
    pols = ["fifo", "tiresias"] if a.quick else ["fifo", "srtf", "tiresias", "optimus"]
    seeds, spec = [0, 1] if a.quick else [0, 1, 2], "16x4:t4"
    cells = make_cells(wls, pols, seeds, [spec])
    out: dict[str, Any] = {"cells": len(cells), "workloads": wls, "policies": pols, "seeds": seeds, "cluster": spec,
                           "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    load: dict[str, list[tuple[float, ...]]] = {}
    out["load_average_per_run"] = load

    t, load["serial"] = time.perf_counter(), [os.getloadavg()]
    serial = run_sweep(cells, workers=1)
    out["serial_s"] = time.perf_counter() - t
    load["serial"].append(os.getloadavg())
    t, load["two_workers"] = time.perf_counter(), [os.getloadavg()]
    two = run_sweep(cells, workers=2)
    out["two_workers_s"] = time.perf_counter() - t
    load["two_workers"].append(os.getloadavg())
    out["two_workers_identical"] = _stable(two) == _stable(serial)

    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        t, load["ray_two_nodes"] = time.perf_counter(), [os.getloadavg()]
        on_ray = run_sweep(cells, ray_address=cluster.address)
        out["ray_two_nodes_s"] = time.perf_counter() - t
        load["ray_two_nodes"].append(os.getloadavg())
        out["ray_identical"] = _stable(on_ray) == _stable(serial)
    finally:
        ray.shutdown()
        cluster.shutdown()
    out["failed_cells"] = sum(not r.ok for r in serial)
    out["speedup_two_workers"] = out["serial_s"] / out["two_workers_s"]
    out["speedup_ray_two_nodes"] = out["serial_s"] / out["ray_two_nodes_s"]
    out["load_average"] = os.getloadavg()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "sweep_speed.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
