"""JABAS model-level speed benchmark: configuration solve on 64 heterogeneous GPUs (target ≤ 50 ms) and
an auto-scaling decision over all candidate server sets of the 9-server example cluster (target ≤ 2 s).

Unprofiled GPU types of the example cluster are derived from the V100 ResNet-50 profile by TFLOPS ratio
(``iidp_profiles.derive_cluster_types``).  Writes ``<out>/jabas_solver.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from elastisched.models.iidp.profiles import derive_cluster_types, load_cluster_info, load_jabas_resnet50
from elastisched.models.iidp.release import IIDPModel
from elastisched.models.iidp.solver import solve_batch, solve_placement
from elastisched.policies.jabas.autoscale import best_server_set, candidate_server_sets
from elastisched.policies.jabas.batch_forecast import next_epoch_trajectory

IMAGENET = 1_281_167
V100 = "Tesla V100-PCIE-16GB"


def _time(fn: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    out: object = None
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples), max(samples), out


def _growing(start: int, cap: int, n: int) -> list[int]:
    traj, g = [start], float(start)
    for _ in range(n):
        g = min(g * 1.1, cap)
        traj.append(round(g))
    return traj


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    cluster9 = load_cluster_info()
    model = IIDPModel.from_profile(derive_cluster_types(load_jabas_resnet50(), cluster9, V100, 14.13))
    gpus64 = [replace(cluster9[i % 9], name=f"s{i}") for i in range(16)]  # 16 servers × 4 GPUs, 8 types
    result: dict[str, object] = {"python": platform.python_version(), "machine": platform.machine()}

    solve = {}
    for gbs in (4096, 16384):
        med, worst, cfg = _time(lambda g=gbs: solve_placement(model, gpus64, g * 1.1, g, upper_bound=32768),
                                args.repeats)
        med_b, worst_b, _ = _time(lambda g=gbs: solve_batch(model, gpus64, g, upper_bound=32768), args.repeats)
        solve[str(gbs)] = {
            "solve_placement_ms_median": med * 1e3, "solve_placement_ms_max": worst * 1e3,
            "solve_batch_ms_median": med_b * 1e3, "solve_batch_ms_max": worst_b * 1e3,
            "new_gbs": cfg.gbs, "lbs": cfg.lbs, "throughput": cfg.throughput,  # type: ignore[union-attr]
        }
    result["solve_64_gpus"] = solve
    result["solve_64_gpus_ok"] = all(v["solve_placement_ms_median"] <= 50 for v in solve.values())

    cands = candidate_server_sets(cluster9)
    scen = {}
    for name, gbs, traj in (
        ("resnet50_256_to_2048", 256, _growing(256, 2048, (IMAGENET // 256) // 100)),
        ("resnet50_2048_to_16384", 2048, _growing(2048, 16384, (IMAGENET // 2048) // 100 + 40)),
    ):
        med, worst, d = _time(lambda g=gbs, t=traj: best_server_set(
            model, cands, t, current_gbs=g, current_lbs=32, dataset_size=IMAGENET, upper_bound=32768),
            args.repeats)
        medc, worstc, dc = _time(lambda g=gbs, t=traj: best_server_set(
            model, cands, t, current_gbs=g, current_lbs=32, dataset_size=IMAGENET, upper_bound=32768,
            objective="cost", time_slack=0.25), args.repeats)
        scen[name] = {
            "candidates": len(cands), "feasible": sum(e.feasible for e in d.estimates),  # type: ignore[union-attr]
            "decision_s_median": med, "decision_s_max": worst,
            "cost_decision_s_median": medc, "cost_decision_s_max": worstc,
            "best_time": list(d.best.servers), "best_time_epoch_s": d.best.time_s,  # type: ignore[union-attr]
            "best_cost": list(dc.best.servers), "best_cost_epoch_s": dc.best.time_s,  # type: ignore[union-attr]
        }
    result["autoscale_9_servers"] = scen
    result["autoscale_ok"] = all(v["decision_s_median"] <= 2.0 for v in scen.values())

    pts = [(100 * i, 256 * 1.1**i) for i in range(1, 40)]
    med, worst, _ = _time(lambda: next_epoch_trajectory(
        4096, pts, [p[1] for p in pts], sync_step=4000, dataset_size=IMAGENET), args.repeats)
    result["forecast_s_median"], result["forecast_s_max"] = med, worst

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "jabas_solver.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
