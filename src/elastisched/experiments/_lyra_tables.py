"""`reproduce lyra`'s figures over seeds (mean, min, max) and the tables of its report."""

from __future__ import annotations

from typing import Any

import numpy as np

from elastisched.experiments._loaning_common import LOSS_DEFINITION
from elastisched.experiments.base import Table

#: per-run figures averaged over seeds (the comparison table and `data["policies"]`)
RUN_METRICS = ("avg_jct", "p95_jct", "avg_queue", "p95_queue", "reclaims", "reclaim_evictions", "reclaim_shrinks",
               "reclaim_moves", "reclaim_gpu_hours_lost", "restarts", "n_finished")


def stats(values: list[float]) -> dict[str, Any]:
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "min": float(a.min()), "max": float(a.max()), "spread": float(a.max() - a.min()),
            "per_seed": [float(v) for v in a]}


def over_seeds(per_seed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Headline figures, per-run metrics and ablation ratios over the seeds (mean and spread)."""
    seeds = list(per_seed.values())
    pick = {"queue_reduction": lambda d: d["queue_reduction"], "jct_reduction": lambda d: d["jct_reduction"],
            "vs_fifo_queue_reduction": lambda d: d["vs_fifo"]["queue_reduction"],
            "vs_fifo_jct_reduction": lambda d: d["vs_fifo"]["jct_reduction"],
            "gpu_usage_gain": lambda d: d["gpu_usage_gain"], "baseline_avg_queue": lambda d: d["baseline_avg_queue"],
            "baseline_p95_queue": lambda d: d["baseline_p95_queue"], "training_gpus": lambda d: d["training_gpus"],
            "loaned_fraction_of_training": lambda d: d["inference"]["loaned_fraction_of_training"],
            "mckp_optimality": lambda d: d["mckp_optimality"]}
    headline = {k: stats([f(d) for d in seeds]) for k, f in pick.items()}
    names = [k for k in seeds[0]["runs"] if all(k in d["runs"] for d in seeds)]
    policies = {k: {m: stats([float(d["runs"][k].get(m) or 0.0) for d in seeds]) for m in RUN_METRICS}
                for k in names}
    ablation = {k: {r: stats([d["ablation"][k][r] for d in seeds]) for r in ("queue_reduction", "jct_reduction")}
                for k in names}
    return {"seeds": [d["seed"] for d in seeds], "headline": headline,
            "queue_reduction": headline["queue_reduction"]["mean"], "jct_reduction": headline["jct_reduction"]["mean"],
            "gpu_usage_gain": headline["gpu_usage_gain"]["mean"], "policies": policies, "ablation": ablation,
            "loss_definition": LOSS_DEFINITION}


def _headline_table(data: dict[str, Any]) -> Table:
    cols = {"seed": "seed", "gpus": "training GPUs", "bq": "baseline avg queue (s)", "bp": "baseline p95 queue (s)",
            "qr": "queue reduction (x)", "jr": "JCT reduction (x)", "fq": "vs FIFO: queue reduction (x)",
            "fj": "vs FIFO: JCT reduction (x)", "gain": "GPU usage gain (fraction)",
            "lent": "loaned / training GPU-hours (fraction)"}
    keys = {"gpus": "training_gpus", "bq": "baseline_avg_queue", "bp": "baseline_p95_queue", "qr": "queue_reduction",
            "jr": "jct_reduction", "fq": "vs_fifo_queue_reduction", "fj": "vs_fifo_jct_reduction",
            "gain": "gpu_usage_gain", "lent": "loaned_fraction_of_training"}
    h = data["headline"]
    rows = [{"seed": s, **{c: h[k]["per_seed"][i] for c, k in keys.items()}} for i, s in enumerate(data["seeds"])]
    rows += [{"seed": f"{agg} over seeds", **{c: h[k][agg] for c, k in keys.items()}} for agg in ("mean", "spread")]
    return Table(cols, rows, f"Lyra vs its baseline ({data['baseline']}), {data['regime']['name']} regime")


def _policies_table(data: dict[str, Any]) -> Table:
    cols = {"run": "run", "avg_jct": "avg JCT (s)", "jct_spread": "avg JCT spread over seeds (s)",
            "p95_jct": "p95 JCT (s)", "avg_queue": "avg queue (s)", "reclaim_evictions": "jobs evicted by reclaims",
            "reclaim_shrinks": "jobs shrunk by reclaims", "reclaim_gpu_hours_lost": "GPU-hours lost to reclaims (h)",
            "vs_lyra": "avg JCT / lyra's (x)"}
    pol = data["policies"]
    ly = pol["lyra"]["avg_jct"]["mean"]
    rows = [{"run": k, **{m: v[m]["mean"] for m in cols if m in v}, "jct_spread": v["avg_jct"]["spread"],
             "vs_lyra": v["avg_jct"]["mean"] / ly} for k, v in pol.items()]
    return Table(cols, rows, f"Every run, mean over seeds {data['seeds']} (same cluster; the baseline and "
                             f"the reference run without loans). Reclaim losses: {LOSS_DEFINITION}")


def tables(data: dict[str, Any]) -> list[Table]:
    abl = Table({"run": "configuration", "q": "queue reduction vs baseline, mean (x)",
                 "j": "JCT reduction vs baseline, mean (x)", "js": "JCT reduction spread (x)"},
                [{"run": k, "q": v["queue_reduction"]["mean"], "j": v["jct_reduction"]["mean"],
                  "js": v["jct_reduction"]["spread"]} for k, v in data["ablation"].items()],
                "Ablation (baseline average ÷ run average), mean over seeds")
    same: dict[str, int] = {}
    for d in data["per_seed"].values():
        for m, v in d["preemptions"]["same_instances"].items():
            same[m] = same.get(m, 0) + v
    rc = Table({"method": "reclaim method", "same": "jobs preempted on the lyra runs' instances, all seeds (count)"},
               [{"method": m, "same": v} for m, v in same.items()], "Reclaim preemptions by method")
    cal = Table({"seed": "seed", "gpus": "training GPUs", "avg_queue": "baseline avg queue (s)"},
                [{"seed": d["seed"], **t} for d in data["per_seed"].values() for t in d["calibration"]],
                "Calibration of the training cluster (bisection on the baseline's queue)")
    side = Table({"seed": "seed", "servers": "inference servers (count)", "headroom": "reserve (servers)",
                  "util": "mean utilisation (fraction)", "low": "time below 40 % utilisation (fraction)",
                  "longest": "longest stretch below 40 % (h)", "loaned": "loaned server-hours (h)",
                  "reclaims": "reclaim events (count)", "mckp": "MCKP greedy / exact, worst round"},
                 [{"seed": d["seed"], "servers": d["inference"]["servers"], "headroom": d["inference"]["headroom"],
                   "util": d["inference"]["mean_utilisation"], "low": d["inference"]["fraction_below_40pct"],
                   "longest": d["inference"]["longest_below_40pct_hours"],
                   "loaned": d["inference"]["loaned_server_hours"], "reclaims": d["inference"]["reclaim_events"],
                   "mckp": d["mckp_optimality"]} for d in data["per_seed"].values()], "Inference side")
    return [_headline_table(data), _policies_table(data), abl, rc, cal, side]
