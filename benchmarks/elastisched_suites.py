"""The elastisched policy on the suites of issue 21, beside the policies it must beat; writes one JSON and figures.

Suites (each cell one simulation; a pool of `--workers` fresh processes, BLAS on one thread):
- `pollux`: the eight Pollux workloads on `16x4:t4` (30 s restarts, batch changes in place);
- `saturn`: Saturn workloads 1–5 on Sia's cluster with `reproduce sia`'s set-up (`experiments.sia.run_one`: Sia's
  per-type profiles, restart costs and calibration; sia with its experiment options, `retune_batch=True`);
- `robustness`: elastisched on the Pollux workloads with declared lengths `lognormal:SIGMA` and `none`
  (`sim.length_estimate`), beside tiresias (which reads no length);
- `deepboot`: DeepBoot's small.csv set-up (`experiments.lyra_deepboot`: 8 training + 8 inference servers), training
  jobs' average JCT.
Per policy and suite: the mean over workloads of each workload's average JCT (and p95 JCT), averaged over the seeds,
with the spread (max − min of the per-seed means); the JCT decomposition (`sim.metrics`), restarts, CPU seconds.
`python benchmarks/elastisched_suites.py --out docs` writes `elastisched-bench.json`, `elastisched-tables.md` (the
tables of docs/elastisched.md) and `elastisched-robustness.png`; each finished cell is appended to
`elastisched-cells.jsonl` first, so a run stopped half-way resumes where it stopped (delete it to start afresh).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

SIA_ROOT = Path(__file__).resolve().parents[1] / ".." / "shared" / "peer-data" / "sia"
DEEPBOOT = Path(__file__).resolve().parents[1] / ".." / "shared" / "peer-data" / "deepboot" / "workload" / "small.csv"
DECOMP = ("queued", "restarting", "running", "best", "loss_gpus", "loss_batch")
SUITES: dict[str, tuple[str, ...]] = {"pollux": ("tiresias", "lyra_scaled", "elastisched"),
                                      "saturn": ("sia", "elastisched"),
                                      "robustness": ("tiresias", "elastisched"),
                                      "deepboot": ("lyra", "tiresias", "elastisched")}
ESTIMATES = ("exact", "lognormal:0.25", "lognormal:0.5", "lognormal:0.75", "lognormal:1", "lognormal:1.5", "none")
Cell = tuple[str, int, str, int, str]  # suite, workload, policy, seed, length estimate


def _pollux(w: int, policy: str, seed: int, estimate: str) -> Any:
    from elastisched.core.cluster import parse_cluster
    from elastisched.models import PerfModels
    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, simulate
    from elastisched.sim.length_estimate import LengthEstimate
    from elastisched.workloads import load_workload

    models = PerfModels.load()
    cfg = SimConfig(seed=seed, length_estimate=LengthEstimate.parse(estimate))
    return simulate(load_workload(f"pollux:workload-{w}", models), make_policy(policy), parse_cluster("16x4:t4"),
                    models, cfg)


def _saturn(w: int, policy: str, seed: int) -> Any:
    from elastisched.experiments import sia

    models = sia.sia_models(SIA_ROOT / "traces")
    wl = sia.saturn_workload(SIA_ROOT / "workloads" / "saturn" / f"workload-{w}.csv", models)
    opts = {"retune_batch": True} if policy == "sia" else {}  # as `reproduce sia` runs it
    return sia.run_one(policy, wl, models, seed, {**sia.POLICY_OPTIONS.get(policy, {}), **opts})


def _deepboot(policy: str, seed: int) -> Any:
    """DeepBoot's set-up as `reproduce lyra-deepboot` builds it, any policy: the elastic reading for the
    loan-aware ones (lyra, elastisched), the trace's requests for the others."""
    from elastisched.experiments._loaning_common import lyra, make_elastic, nodes_of, run_sim
    from elastisched.experiments.lyra_deepboot import DEEPBOOT_RESTART, DeepBootConfig
    from elastisched.loaning.demand import from_inference_tasks
    from elastisched.loaning.timeline import loan_plan
    from elastisched.models.profiles import load_pollux_bundled
    from elastisched.models.registry import PerfModels
    from elastisched.policies.base import make_policy
    from elastisched.workloads import load_workload

    cfg = DeepBootConfig(workload=DEEPBOOT, seed=seed)
    models = PerfModels(load_pollux_bundled(), restart_cost=DEEPBOOT_RESTART)
    wl = load_workload(str(cfg.workload), models)
    g = cfg.gpus_per_server
    demand = from_inference_tasks(wl.inference, servers=cfg.inference_servers, gpus_per_server=g,
                                  overhead=cfg.pod_overhead, gpus_per_task=1)
    plan = loan_plan(demand, gpus_per_server=g, hold=cfg.hold, notice=cfg.notice, headroom=cfg.headroom)
    elastic = make_elastic(wl, 1.0, cfg.max_factor, cfg.seed, lambda n: 1)
    pol = lyra() if policy == "lyra" else make_policy(policy)
    w = elastic if policy in ("lyra", "elastisched") else wl
    return run_sim(w, pol, nodes_of((cfg.servers - cfg.inference_servers) * g, g), models, plan, seed, None, policy)


def run_cell(cell: Cell) -> dict[str, Any]:
    suite, w, policy, seed, estimate = cell
    c0 = time.process_time()
    if suite in ("pollux", "robustness"):
        r = _pollux(w, policy, seed, estimate)
    elif suite == "saturn":
        r = _saturn(w, policy, seed)
    else:
        r = _deepboot(policy, seed)
    cpu = time.process_time() - c0
    s, jobs = r.summary, r.jobs
    row = {"suite": suite, "workload": w, "policy": policy, "seed": seed, "estimate": estimate,
           "avg_jct": float(jobs["jct"].mean()), "p95_jct": float(s["p95_jct"]), "restarts": int(s["restarts"]),
           "cpu_s": cpu, "n_finished": int(s["n_finished"]), "n_jobs": int(s["n_jobs"]),
           "decision_ms_p99": float(s["decision_ms_p99"]), "reclaim_preemptions": int(s["reclaim_preemptions"]),
           "batch_vs_request": float(s["mean_batch_vs_request"])}
    return row | {k: float(jobs[k].mean()) for k in DECOMP if k in jobs}


def _key(row: dict[str, Any]) -> Cell:
    return row["suite"], row["workload"], row["policy"], row["seed"], row["estimate"]


def cells(suites: list[str], seeds: list[int]) -> list[Cell]:
    out: list[Cell] = []
    for suite in suites:
        ws = {"pollux": range(1, 9), "robustness": range(1, 9), "saturn": range(1, 6), "deepboot": [0]}[suite]
        for policy in SUITES[suite]:
            ests = ESTIMATES if (suite == "robustness" and policy == "elastisched") else ("exact",)
            if suite == "robustness" and policy != "elastisched":
                continue  # tiresias reads no length: its pollux-suite rows stand for every estimate
            out += [(suite, w, policy, s, e) for e in ests for w in ws for s in seeds]
    return out


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (suite, policy, estimate): per-seed means over workloads, their mean and spread; decomposition means."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["suite"], r["policy"], r["estimate"]), []).append(r)
    out = []
    for (suite, policy, est), rs in sorted(groups.items()):
        seeds = sorted({r["seed"] for r in rs})
        per_seed = [statistics.fmean(r["avg_jct"] for r in rs if r["seed"] == s) for s in seeds]
        p95 = [statistics.fmean(r["p95_jct"] for r in rs if r["seed"] == s) for s in seeds]
        out.append({"suite": suite, "policy": policy, "estimate": est, "seeds": seeds,
                    "mean_avg_jct": statistics.fmean(per_seed), "per_seed": per_seed,
                    "spread": max(per_seed) - min(per_seed), "mean_p95_jct": statistics.fmean(p95),
                    "restarts_per_workload": statistics.fmean(r["restarts"] for r in rs),
                    "cpu_s_mean": statistics.fmean(r["cpu_s"] for r in rs), "cpu_s_max": max(r["cpu_s"] for r in rs),
                    "finished": f"{sum(r['n_finished'] for r in rs)}/{sum(r['n_jobs'] for r in rs)}",
                    "reclaim_preemptions": statistics.fmean(r["reclaim_preemptions"] for r in rs),
                    "batch_vs_request": statistics.fmean(r["batch_vs_request"] for r in rs),
                    "decomposition": {k: statistics.fmean(r[k] for r in rs) for k in DECOMP if k in rs[0]}})
    return out


def robustness_figure(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = {r["estimate"]: r for r in summary if r["suite"] == "robustness"}
    tir = next((r for r in summary if r["suite"] == "pollux" and r["policy"] == "tiresias"), None)
    labels = [e.replace("lognormal:", "σ=") for e in ESTIMATES if e in rows]
    ys = [rows[e]["mean_avg_jct"] for e in ESTIMATES if e in rows]
    err = [rows[e]["spread"] / 2 for e in ESTIMATES if e in rows]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.errorbar(range(len(ys)), ys, yerr=err, marker="o", capsize=3, label="elastisched (seeds 0–2, ± half spread)")
    if tir is not None:
        ax.axhline(tir["mean_avg_jct"], color="tab:red", ls="--", label="tiresias (reads no length)")
    ax.axhline(2751.1, color="tab:green", ls=":", label="Pollux artifact, published (2,751 s)")
    ax.set_xticks(range(len(ys)), labels)
    ax.set_xlabel("declared length (truth × log-normal factor; none = no length declared)")
    ax.set_ylabel("mean avg JCT, Pollux workloads 1–8 (s)")
    ax.set_title("elastisched when jobs misdeclare their length")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(summary: list[dict[str, Any]]) -> str:
    """The tables of docs/elastisched.md, one per suite (seconds; decomposition columns per job)."""
    head = ("| policy | declared length | mean avg JCT (s) | per seed | spread | mean p95 JCT (s) | queued "
            "| restarting | running | best | loss GPUs | loss batch | restarts / workload | batch / request "
            "| CPU s / run mean (max) |")
    out = []
    for suite in SUITES:
        rows = [r for r in summary if r["suite"] == suite]
        if not rows:
            continue
        out += [f"### {suite}", "", head, "|" + "---|" * 15]
        for r in rows:
            d = r["decomposition"]
            seeds = " / ".join(f"{x:,.0f}" for x in r["per_seed"])
            out.append(f"| {r['policy']} | {r['estimate']} | {r['mean_avg_jct']:,.0f} | {seeds} | {r['spread']:,.0f} "
                       f"| {r['mean_p95_jct']:,.0f} | " + " | ".join(f"{d.get(k, float('nan')):,.0f}" for k in DECOMP)
                       + f" | {r['restarts_per_workload']:,.0f} | {r['batch_vs_request']:.2f} "
                       f"| {r['cpu_s_mean']:.2f} ({r['cpu_s_max']:.2f}) |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default=",".join(SUITES), help=f"comma-separated of {', '.join(SUITES)}")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    a = ap.parse_args(argv)
    todo = cells([s for s in a.suites.split(",") if s], [int(x) for x in a.seeds.split(",")])
    t0 = time.time()
    a.out.mkdir(parents=True, exist_ok=True)
    log = a.out / "elastisched-cells.jsonl"  # one line per finished cell: a crashed run resumes where it stopped
    rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    done = {_key(r) for r in rows}
    todo = [c for c in todo if c not in done]
    with ProcessPoolExecutor(a.workers) as pool, log.open("a") as sink:
        for i, row in enumerate(pool.map(run_cell, todo), 1):
            rows.append(row)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            print(f"[{i}/{len(todo)}] {row['suite']} w{row['workload']} {row['policy']} s{row['seed']} "
                  f"{row['estimate']}: {row['avg_jct']:.0f} s ({row['cpu_s']:.1f} s CPU)", flush=True)
    summary = aggregate(rows)
    (a.out / "elastisched-bench.json").write_text(json.dumps(
        {"summary": summary, "cells": rows, "wall_s": time.time() - t0,
         "env": {"OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"), "cpus": os.cpu_count()}},
        indent=1) + "\n")
    if any(r["suite"] == "robustness" for r in summary):
        robustness_figure(summary, a.out / "elastisched-robustness.png")
    (a.out / "elastisched-tables.md").write_text(markdown(summary) + "\n")
    print(markdown(summary))


if __name__ == "__main__":
    main()
