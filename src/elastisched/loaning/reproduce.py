"""`elastisched reproduce lyra`: Lyra's headline comparison on a Philly-derived 15-day workload (lyra.md §3, §6).

Set-up (every choice is an option of `LyraExperiment`):
- Workload: the bundled Philly trace, days [start_day, start_day + days), `sample` jobs drawn uniformly
  (seeded; `load_raw_trace`). A seeded `elastic_fraction` of the jobs becomes elastic with
  `min_gpus = max(1, ⌊min_fraction × num_gpus⌋)` (default: the request itself, so elasticity only adds
  GPUs) and `max_gpus = max_factor × num_gpus` (lyra.md §5 "substitutes").
- Training cluster: 4-GPU T4 servers (plus one smaller server for a remainder); the GPU count is chosen by
  bisection so that the baseline's average queuing delay is `target_queue` (3,000 s, the production figure
  of lyra.md §1.1) within ±`tolerance` (servers alone are too coarse: one server moves it by ±30 %).
- Inference cluster: `inference_ratio` × training servers (1.0: the paper's inference clusters are at
  least as large as its training clusters, lyra.md §1.1), diurnal demand (`demand.diurnal`: peak 0.75,
  trough 0.10, utilisation below 40 % for about half of every day), lent beyond `headroom` servers with a
  `notice`-second reclaim notice, a server lent only after `hold` seconds idle (`timeline.loan_plan`).
  By default both sides are T4 (the only bundled profiles). Heterogeneous: `train_gpu_type="v100"` with Sia's
  per-type profiles loaded (`reproduce lyra --profiles …/sia/traces --train-gpu v100`) makes the training
  servers V100 and leaves the loaned inference servers T4; the calibration then sizes the V100 cluster. A job
  runs on one type, so loaned T4 servers serve jobs that start there (bases only when the V100 servers are
  full) and the extras of jobs already on T4.
- Configurations: baseline = FIFO, no loaning, no elasticity; `sjf_only` = lyra without loaning or elastic
  scaling; `loaning_only` = lyra without elastic scaling; `elastic_only` = lyra without loaning; `lyra` = full
  Lyra (greedy reclaim), plus one full-Lyra run per other reclaim method. The full run also evaluates every
  reclaim method on each of its own reclaim instances (`compare_reclaim`) and checks phase 2 greedy vs
  exact on every round (`check_mckp`).
- Plots: `cdf.png` (queuing delay and JCT CDFs per configuration), `loans.png` (inference utilisation and
  loanable servers; servers on loan and reclaimed in the lyra run; busy GPUs), linked from `report.html`.

DeepBoot comparison: `loaning/deepboot.py` (`reproduce lyra-deepboot`, or `reproduce lyra --peer`).

The simulator is injected (`Runner`): this package may not import `elastisched.sim` (DESIGN.md dependency
rule), so the CLI passes a function that builds `SimConfig(seed, loans=LoanTimeline(plan.steps, ...))`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from elastisched.core.types import NodeView, Pool
from elastisched.loaning.demand import DAY, diurnal, low_stretches
from elastisched.loaning.figures import fig_cdfs, fig_loans
from elastisched.loaning.timeline import LoanPlan, loan_plan
from elastisched.models.registry import PerfModels
from elastisched.policies import lyra as _lyra_policy  # noqa: F401  (registers "lyra" for make_policy)
from elastisched.policies.base import Policy, make_policy
from elastisched.workloads.schema import Workload
from elastisched.workloads.traces import load_raw_trace

#: (workload, policy, training nodes, models, loan plan or None, seed) -> an object with `.summary` (dict),
#: `.jobs` (DataFrame with `queue`, `jct`), `.timeline` (DataFrame with `t`, `loaned_servers`), `.reclaims`.
Runner = Callable[[Workload, Policy, tuple[NodeView, ...], PerfModels, LoanPlan | None, int], Any]
VARIANTS = ("deepboot", "random", "milp", "greedy-swap")


@dataclass(frozen=True)
class LyraExperiment:
    days: float = 15.0
    start_day: float = 20.0
    sample: int | None = 2000
    seed: int = 0
    elastic_fraction: float = 0.5
    min_fraction: float = 1.0
    max_factor: int = 3
    target_queue: float = 3000.0
    tolerance: float = 0.2
    inference_ratio: float = 1.0
    gpus_per_server: int = 4
    headroom: int = 1
    notice: float = 300.0
    hold: float = 1800.0
    peak: float = 0.75
    trough: float = 0.10
    variants: tuple[str, ...] = VARIANTS
    max_bisect: int = 10
    fixed_servers: int | None = None  # skip the calibration
    train_gpu_type: str = "t4"  # e.g. "v100" with Sia's profiles loaded (heterogeneous set-up)
    loan_gpu_type: str = "t4"
    extra: dict[str, Any] = field(default_factory=dict)


def nodes_of(gpus: int, per_server: int, gpu_type: str = "t4") -> tuple[NodeView, ...]:
    """`gpus` GPUs as full `per_server`-GPU servers plus one smaller server for the remainder."""
    full, rest = divmod(gpus, per_server)
    sizes = [per_server] * full + ([rest] if rest else [])
    return tuple(NodeView(f"{gpu_type}-{i}", gpu_type, n, Pool.TRAIN, i) for i, n in enumerate(sizes))


def make_elastic(wl: Workload, fraction: float, max_factor: int, seed: int, min_of: Callable[[int], int]
                 ) -> Workload:
    rng = np.random.default_rng(seed + 7919)
    jobs = []
    for s in wl.jobs:
        if rng.random() < fraction:
            s = dataclasses.replace(s, elastic=True, min_gpus=min_of(s.num_gpus), max_gpus=max_factor * s.num_gpus)
        jobs.append(s)
    return dataclasses.replace(wl, jobs=tuple(jobs))


def philly_workload(models: PerfModels, exp: LyraExperiment) -> Workload:
    lo = exp.start_day * DAY
    wl = load_raw_trace(None, models, seed=exp.seed, start=lo, end=lo + exp.days * DAY, sample=exp.sample,
                        gpus_per_node=exp.gpus_per_server)
    return make_elastic(wl, exp.elastic_fraction, exp.max_factor, exp.seed,
                        lambda g: max(1, int(g * exp.min_fraction)))


def calibrate(run: Runner, wl: Workload, models: PerfModels, exp: LyraExperiment
              ) -> tuple[int, Any, list[dict[str, float]]]:
    """Training GPUs (1-GPU steps) for which FIFO's average queuing delay is closest to the target (bisection
    on the GPU count until within a quarter of `tolerance`); `tolerance` is the acceptance band."""
    g = exp.gpus_per_server
    if exp.fixed_servers is not None:
        n = exp.fixed_servers * g
        res = run(wl, make_policy("fifo"), nodes_of(n, g, exp.train_gpu_type), models, None, exp.seed)
        return n, res, [{"gpus": n, "avg_queue": res.summary["avg_queue"]}]
    lo = max(1, max(s.num_gpus for s in wl.jobs))
    work = sum((s.duration or 0.0) * s.num_gpus for s in wl.jobs)
    span = max(s.submit_time for s in wl.jobs) - min(s.submit_time for s in wl.jobs) or DAY
    hi = max(lo + 1, math.ceil(3 * work / span))
    tries: list[dict[str, float]] = []
    best: tuple[float, int, Any] | None = None
    for _ in range(exp.max_bisect):
        mid = (lo + hi) // 2
        res = run(wl, make_policy("fifo"), nodes_of(mid, g, exp.train_gpu_type), models, None, exp.seed)
        q = float(res.summary["avg_queue"])
        tries.append({"gpus": mid, "avg_queue": q})
        err = abs(q / exp.target_queue - 1.0)
        if best is None or err < best[0]:
            best = (err, mid, res)
        if err <= exp.tolerance / 4 or hi - lo <= 1:  # aim close to the target, accept the closest
            break
        if q > exp.target_queue:
            lo = mid
        else:
            hi = mid
    assert best is not None
    return best[1], best[2], tries


def _lyra(**opts: Any) -> Policy:
    return make_policy("lyra", **opts)


def busy_gpu_hours(res: Any, horizon: float) -> tuple[float, float, float]:
    """(busy GPU-hours, available GPU-hours, loaned-server hours) over [0, horizon) from the run's timeline."""
    tl = res.timeline
    t = np.append(tl["t"].to_numpy(float), horizon).clip(max=horizon)
    dt = np.diff(t).clip(min=0)
    return (float(np.sum(dt * tl["busy_gpus"].to_numpy(float))) / 3600,
            float(np.sum(dt * tl["total_gpus"].to_numpy(float))) / 3600,
            float(np.sum(dt * tl["loaned_servers"].to_numpy(float))) / 3600)


def run_summary(res: Any) -> dict[str, Any]:
    keys = ("avg_jct", "median_jct", "p95_jct", "avg_queue", "p95_queue", "makespan", "gpu_utilization",
            "restarts", "preemptions", "reclaims", "reclaim_preemptions", "n_finished", "n_jobs",
            "decision_ms_p50", "decision_ms_p99", "wall_seconds")
    return {k: res.summary.get(k) for k in keys}


def run_experiment(run: Runner, models: PerfModels, exp: LyraExperiment, out: Path,
                   peer: Path | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every configuration, write `lyra.json`, `loans.png` and `report.html` into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    wl = philly_workload(models, exp)
    log(f"workload: {len(wl.jobs)} jobs over {exp.days:g} days; calibrating the training cluster")
    gpus, base, tries = calibrate(run, wl, models, exp)
    nodes = nodes_of(gpus, exp.gpus_per_server, exp.train_gpu_type)
    n_inf = max(1, round(exp.inference_ratio * gpus / exp.gpus_per_server))
    demand = diurnal(n_inf, days=exp.days + 15, peak=exp.peak, trough=exp.trough, seed=exp.seed)
    plan = loan_plan(demand, headroom=exp.headroom, notice=exp.notice, hold=exp.hold,
                     gpus_per_server=exp.gpus_per_server, gpu_type=exp.loan_gpu_type)
    log(f"training: {gpus} GPUs on {len(nodes)} servers (FIFO avg queue {base.summary['avg_queue']:.0f} s); "
        f"inference: {n_inf} servers")
    runs: dict[str, Any] = {"baseline": base}
    full = _lyra(compare_reclaim=True, check_mckp=True)
    configs: list[tuple[str, Policy, LoanPlan | None]] = [
        ("sjf_only", _lyra(elastic_scaling=False), None), ("loaning_only", _lyra(elastic_scaling=False), plan),
        ("elastic_only", _lyra(), None), ("lyra", full, plan)]
    configs += [(f"lyra_{m}", _lyra(reclaim=m), plan) for m in exp.variants]
    for name, pol, p in configs:
        log(f"running {name}")
        runs[name] = run(wl, pol, nodes, models, p, exp.seed)
    b, ly = runs["baseline"].summary, runs["lyra"].summary
    rl = full.reclaim_log  # type: ignore[attr-defined]
    same = {m: int(sum(r.get(f"preempted_{m}", 0) for r in rl)) for m in ("greedy", *VARIANTS)}
    solvable = [r for r in rl if "preempted_milp" in r]
    g_s, m_s = sum(r["preempted_greedy"] for r in solvable), sum(r["preempted_milp"] for r in solvable)
    mk = [r for r in full.mckp_log if r["exact"] > 1e-9]  # type: ignore[attr-defined]
    horizon = exp.days * DAY
    stretches = low_stretches(demand, 0.4, until=horizon)
    result: dict[str, Any] = {
        "experiment": dataclasses.asdict(exp), "workload": {"name": wl.name, "jobs": len(wl.jobs),
                                                            "digest": wl.digest},
        "training_gpus": gpus, "training_servers": len(nodes), "gpus_per_server": exp.gpus_per_server,
        "calibration": tries,
        "baseline_avg_queue": b["avg_queue"], "baseline_p95_queue": b["p95_queue"],
        "baseline_queue_in_band": abs(b["avg_queue"] / exp.target_queue - 1) <= exp.tolerance,
        "inference": {"servers": n_inf, "mean_utilisation": demand.mean_utilisation(until=horizon),
                      "fraction_below_40pct": sum(e - s for s, e in stretches) / horizon,
                      "longest_below_40pct_hours": max((e - s for s, e in stretches), default=0.0) / 3600,
                      "loaned_server_hours": plan.loaned_server_seconds(horizon) / 3600,
                      "reclaim_events": len([r for r in plan.reclaims() if r[0] < horizon])},
        "queue_reduction": b["avg_queue"] / ly["avg_queue"] if ly["avg_queue"] else math.inf,
        "jct_reduction": b["avg_jct"] / ly["avg_jct"],
        "gpu_usage_gain": busy_gpu_hours(runs["lyra"], horizon)[0] / max(busy_gpu_hours(base, horizon)[0], 1e-9) - 1,
        "usage_definition": "allocated GPU-hours in the trace window [0, days): lyra / baseline - 1",
        "usage": {k: dict(zip(("busy_gpu_hours", "available_gpu_hours", "loaned_server_hours"),
                              busy_gpu_hours(v, horizon), strict=True)) for k, v in runs.items()},
        "ablation": {k: {"queue_reduction": b["avg_queue"] / max(v.summary["avg_queue"], 1e-9),
                         "jct_reduction": b["avg_jct"] / v.summary["avg_jct"]} for k, v in runs.items()},
        "preemptions": {
            "same_instances": same, "milp_instances": len(solvable), "greedy_on_milp_instances": g_s,
            "milp_on_milp_instances": m_s,
            "greedy_over_milp": (g_s / m_s) if m_s else (1.0 if g_s == 0 else math.inf),
            "per_run_simulator": {k: v.summary.get("reclaim_preemptions") for k, v in runs.items()
                                  if k == "lyra" or k.startswith("lyra_")},
            "per_run_policy": {"lyra": sum(r["preempted"] for r in rl)}},
        "mckp_optimality": min((r["greedy"] / r["exact"] for r in mk), default=1.0), "mckp_rounds_checked": len(mk),
        "runs": {k: run_summary(v) for k, v in runs.items()},
    }
    for name, pol, _ in configs:
        if name.startswith("lyra_"):
            result["preemptions"]["per_run_policy"][name] = sum(r["preempted"] for r in pol.reclaim_log)  # type: ignore[attr-defined]
    if peer is not None and peer.exists():
        log("running the DeepBoot peer workload")
        from elastisched.loaning.deepboot import DeepBootSetup, deepboot_compare  # it imports this module

        result["deepboot_peer"] = deepboot_compare(run, peer, DeepBootSetup(seed=exp.seed), out, log)
    (out / "lyra.json").write_text(json.dumps(result, indent=2, default=float))
    fig_loans(out / "loans.png", {k: runs[k] for k in ("baseline", "lyra")}, plan, demand)
    fig_cdfs(out / "cdf.png", runs)
    rows = "".join(f"<tr><td>{k}</td>" + "".join(f"<td>{v:.4g}</td>" if isinstance(v, float) else f"<td>{v}</td>"
                                                  for v in s.values()) + "</tr>" for k, s in result["runs"].items())
    head = "".join(f"<th>{k}</th>" for k in next(iter(result["runs"].values())))
    (out / "report.html").write_text(
        f"<html><body><h1>reproduce lyra</h1><p>queue_reduction {result['queue_reduction']:.3f}, jct_reduction "
        f"{result['jct_reduction']:.3f}, gpu_usage_gain {result['gpu_usage_gain']}</p><table border=1><tr><th>run"
        f"</th>{head}</tr>{rows}</table><h2>queuing delay and JCT per configuration</h2><img src='cdf.png'>"
        f"<h2>inference utilisation, loaned and reclaimed servers, busy GPUs</h2><img src='loans.png'>"
        + ("<h2>DeepBoot workload</h2><img src='deepboot_cdf.png'><img src='deepboot_loans.png'>"
           if "deepboot_peer" in result else "")
        + "</body></html>")
    return result


def register(app: Any, runner: Runner | None = None) -> None:
    """Add the `lyra` and `lyra-deepboot` commands to a Typer app (the `reproduce` sub-command); `runner`
    drives the simulator."""
    import typer

    @app.command("lyra")
    def lyra_cmd(out: Path = typer.Option(Path("results/lyra"), "--out", help="output folder"),
                 days: float = typer.Option(15.0, help="trace days"),
                 sample: int = typer.Option(2000, help="jobs sampled from those days"),
                 seed: int = typer.Option(0),
                 servers: int | None = typer.Option(None, help="training servers (skip the calibration)"),
                 profiles: Path | None = typer.Option(None, help="Sia artifact dir (per-GPU-type profiles)"),
                 train_gpu: str = typer.Option("t4", help="training servers' GPU type (v100 needs --profiles)"),
                 loan_gpu: str = typer.Option("t4", help="inference (loaned) servers' GPU type"),
                 peer: Path | None = typer.Option(None, help="DeepBoot workload CSV (e.g. peer-data/deepboot/"
                                                              "workload/small.csv)")) -> None:
        """Lyra vs FIFO on a Philly-derived workload with a diurnal inference cluster; writes lyra.json."""
        if runner is None:
            raise typer.BadParameter("no simulator runner was registered with this command")
        exp = LyraExperiment(days=days, sample=sample, seed=seed, fixed_servers=servers, train_gpu_type=train_gpu,
                             loan_gpu_type=loan_gpu)
        res = run_experiment(runner, PerfModels.load(profiles), exp, out, peer, log=typer.echo)
        typer.echo(json.dumps({k: res[k] for k in ("queue_reduction", "jct_reduction", "gpu_usage_gain",
                                                   "baseline_avg_queue", "mckp_optimality")}, indent=2))

    from elastisched.loaning.deepboot import register as register_deepboot  # it imports this module

    register_deepboot(app, runner)
