"""`elastisched reproduce lyra`: Lyra's headline comparison on a Philly-derived 15-day workload (lyra.md §3, §6).

Set-up (every choice is a field of `LyraConfig`, hence an option of the command):
- Workload: the bundled Philly trace, days [start_day, start_day + days), `sample` jobs drawn uniformly
  (seeded; `load_raw_trace`). A seeded `elastic_fraction` of the jobs becomes elastic with
  `min_gpus = max(1, ⌊min_fraction × num_gpus⌋)` (default: the request itself, so elasticity only adds
  GPUs) and `max_gpus = max_factor × num_gpus` (lyra.md §5 "substitutes").
- Training cluster: 4-GPU T4 servers (plus one smaller server for a remainder); the GPU count is chosen by
  bisection so that the baseline's average queuing delay is `target_queue` (3,000 s, the production figure
  of lyra.md §1.1) within ±`tolerance` (whole servers are too coarse a step; docs/lyra.md).
- Inference cluster: `inference_ratio` × training servers (1.0: the paper's inference clusters are at
  least as large as its training clusters, lyra.md §1.1), diurnal demand (`demand.diurnal`: peak 0.75,
  trough 0.10; its low stretches are reported in the result), lent beyond `headroom` servers with a
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
- Verdicts: jct_reduction and queue_reduction (FIFO baseline ÷ full Lyra, averages) against the bars of
  issue 10 (≥ 1.48, ≥ 1.53; the paper's headline is 1.53× queuing and 1.48× JCT, lyra.md §6).
- Plots: `cdf.png` (queuing delay and JCT CDFs per configuration), `loans.png` (inference utilisation and
  loanable servers; servers on loan and reclaimed in the lyra run; busy GPUs).

DeepBoot comparison: `experiments/lyra_deepboot.py` (`reproduce lyra-deepboot`, or `reproduce lyra --peer`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elastisched.core.errors import ConfigError
from elastisched.experiments._loaning_common import lyra, make_elastic, nodes_of, run_sim, run_summary, runs_table
from elastisched.experiments.base import (
    Experiment,
    ExperimentResult,
    ProgressFactory,
    Table,
    Verdict,
    register_experiment,
)
from elastisched.experiments.lyra_deepboot import DeepBootConfig, deepboot_compare, jct_table
from elastisched.loaning.demand import DAY, DemandSeries, diurnal, low_stretches
from elastisched.loaning.timeline import LoanPlan, loan_plan
from elastisched.models.registry import PerfModels
from elastisched.policies._reclaim import METHODS
from elastisched.policies.base import Policy, make_policy
from elastisched.report.loan_figures import fig_cdfs, fig_loans
from elastisched.sim import SimResult
from elastisched.workloads.schema import Workload
from elastisched.workloads.traces import load_raw_trace

VARIANTS = ("deepboot", "random", "milp", "greedy-swap")
JCT_BAR, QUEUE_BAR = 1.48, 1.53


@dataclass(frozen=True)
class LyraConfig:
    days: float = 15.0  # trace days simulated
    start_day: float = 20.0  # first day of the Philly trace used
    sample: int | None = 2000  # jobs drawn uniformly from those days (None: all)
    seed: int = 0  # random seed (sampling, elastic marking, inference demand, simulator)
    elastic_fraction: float = 0.5  # fraction of jobs made elastic
    min_fraction: float = 1.0  # elastic min GPUs = max(1, floor(min_fraction x request))
    max_factor: int = 3  # elastic max GPUs = max_factor x request
    target_queue: float = 3000.0  # FIFO average queuing delay (s) the training cluster is sized for
    tolerance: float = 0.2  # accepted relative distance of the baseline's queue from target_queue
    inference_ratio: float = 1.0  # inference servers per training server
    gpus_per_server: int = 4  # GPUs per server (training and inference)
    headroom: int = 1  # idle inference servers never lent
    notice: float = 300.0  # seconds of reclaim notice
    hold: float = 1800.0  # seconds an inference server must be idle before it is lent
    peak: float = 0.75  # diurnal inference utilisation at the daily peak
    trough: float = 0.10  # diurnal inference utilisation at the daily trough
    variants: tuple[str, ...] = VARIANTS  # extra full-Lyra runs, one per other reclaim method
    max_bisect: int = 10  # calibration steps at most
    fixed_servers: int | None = None  # training servers (skips the calibration)
    train_gpu_type: str = "t4"  # training servers' GPU type (v100 etc. need --profiles)
    loan_gpu_type: str = "t4"  # inference (loaned) servers' GPU type
    profiles: Path | None = None  # Sia per-GPU-type traces directory (adds V100/A100/RTX profiles)
    peer: Path | None = None  # DeepBoot workload CSV: also run the lyra-deepboot comparison


def philly_workload(models: PerfModels, cfg: LyraConfig) -> Workload:
    lo = cfg.start_day * DAY
    wl = load_raw_trace(None, models, seed=cfg.seed, start=lo, end=lo + cfg.days * DAY, sample=cfg.sample,
                        gpus_per_node=cfg.gpus_per_server)
    return make_elastic(wl, cfg.elastic_fraction, cfg.max_factor, cfg.seed,
                        lambda g: max(1, int(g * cfg.min_fraction)))


def calibrate(wl: Workload, models: PerfModels, cfg: LyraConfig, progress: ProgressFactory | None = None
              ) -> tuple[int, SimResult, list[dict[str, float]]]:
    """Training GPUs (1-GPU steps) for which FIFO's average queuing delay is closest to the target (bisection
    on the GPU count until within a quarter of `tolerance`); `tolerance` is the acceptance band."""
    g = cfg.gpus_per_server

    def fifo(n: int) -> SimResult:
        return run_sim(wl, make_policy("fifo"), nodes_of(n, g, cfg.train_gpu_type), models, None, cfg.seed,
                       progress, f"calibrate fifo {n} GPUs")

    if cfg.fixed_servers is not None:
        n = cfg.fixed_servers * g
        res = fifo(n)
        return n, res, [{"gpus": n, "avg_queue": res.summary["avg_queue"]}]
    lo = max(1, max(s.num_gpus for s in wl.jobs))
    work = sum((s.duration or 0.0) * s.num_gpus for s in wl.jobs)
    span = max(s.submit_time for s in wl.jobs) - min(s.submit_time for s in wl.jobs) or DAY
    hi = max(lo + 1, math.ceil(3 * work / span))
    tries: list[dict[str, float]] = []
    best: tuple[float, int, SimResult] | None = None
    for _ in range(cfg.max_bisect):
        mid = (lo + hi) // 2
        res = fifo(mid)
        q = float(res.summary["avg_queue"])
        tries.append({"gpus": mid, "avg_queue": q})
        err = abs(q / cfg.target_queue - 1.0)
        if best is None or err < best[0]:
            best = (err, mid, res)
        if err <= cfg.tolerance / 4 or hi - lo <= 1:  # aim close to the target, accept the closest
            break
        if q > cfg.target_queue:
            lo = mid
        else:
            hi = mid
    if best is None:
        raise ConfigError("max_bisect", cfg.max_bisect, "must be >= 1 (or set fixed_servers)")
    return best[1], best[2], tries


def busy_gpu_hours(res: SimResult, horizon: float) -> tuple[float, float, float]:
    """(busy GPU-hours, available GPU-hours, loaned-server hours) over [0, horizon) from the run's timeline."""
    tl = res.timeline
    t = np.append(tl["t"].to_numpy(float), horizon).clip(max=horizon)
    dt = np.diff(t).clip(min=0)
    return (float(np.sum(dt * tl["busy_gpus"].to_numpy(float))) / 3600,
            float(np.sum(dt * tl["total_gpus"].to_numpy(float))) / 3600,
            float(np.sum(dt * tl["loaned_servers"].to_numpy(float))) / 3600)


def _inference_summary(demand: DemandSeries, plan: LoanPlan, n_inf: int, horizon: float) -> dict[str, Any]:
    """The inference side over the trace window: utilisation, its low stretches, what was lent and reclaimed."""
    stretches = low_stretches(demand, 0.4, until=horizon)
    return {"servers": n_inf, "mean_utilisation": demand.mean_utilisation(until=horizon),
            "fraction_below_40pct": sum(e - s for s, e in stretches) / horizon,
            "longest_below_40pct_hours": max((e - s for s, e in stretches), default=0.0) / 3600,
            "loaned_server_hours": plan.loaned_server_seconds(horizon) / 3600,
            "reclaim_events": len([r for r in plan.reclaims() if r[0] < horizon])}


def _preemptions(runs: dict[str, SimResult], full: Policy, configs: list[tuple[str, Policy, LoanPlan | None]]
                 ) -> dict[str, Any]:
    """Reclaim preemptions: every method on the very same reclaims (the full Lyra run's log), the MILP against
    greedy where the MILP solved, and per run as the simulator and each policy counted them."""
    rl = full.reclaim_log  # type: ignore[attr-defined]
    same = {m: int(sum(r.get(f"preempted_{m}", 0) for r in rl)) for m in ("greedy", *VARIANTS)}
    solvable = [r for r in rl if "preempted_milp" in r]
    g_s, m_s = sum(r["preempted_greedy"] for r in solvable), sum(r["preempted_milp"] for r in solvable)
    per_policy = {"lyra": sum(r["preempted"] for r in rl)}
    for name, pol, _ in configs:
        if name.startswith("lyra_"):
            per_policy[name] = sum(r["preempted"] for r in pol.reclaim_log)  # type: ignore[attr-defined]
    return {"same_instances": same, "milp_instances": len(solvable), "greedy_on_milp_instances": g_s,
            "milp_on_milp_instances": m_s,
            "greedy_over_milp": (g_s / m_s) if m_s else (1.0 if g_s == 0 else math.inf),
            "per_run_simulator": {k: v.summary.get("reclaim_preemptions") for k, v in runs.items()
                                  if k == "lyra" or k.startswith("lyra_")},
            "per_run_policy": per_policy}


def run_all(cfg: LyraConfig, progress: ProgressFactory | None = None) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Every configuration on one seed; returns (data for lyra.json, figures)."""
    bad = [m for m in cfg.variants if m not in METHODS or m == "greedy"]
    if bad:
        raise ConfigError("variants", ",".join(bad), f"unknown reclaim method; known: {', '.join(VARIANTS)}")
    models = PerfModels.load(cfg.profiles)
    wl = philly_workload(models, cfg)
    gpus, base, tries = calibrate(wl, models, cfg, progress)
    nodes = nodes_of(gpus, cfg.gpus_per_server, cfg.train_gpu_type)
    n_inf = max(1, round(cfg.inference_ratio * gpus / cfg.gpus_per_server))
    demand = diurnal(n_inf, days=cfg.days + 15, peak=cfg.peak, trough=cfg.trough, seed=cfg.seed)
    plan = loan_plan(demand, headroom=cfg.headroom, notice=cfg.notice, hold=cfg.hold,
                     gpus_per_server=cfg.gpus_per_server, gpu_type=cfg.loan_gpu_type)
    runs: dict[str, SimResult] = {"baseline": base}
    full = lyra(compare_reclaim=True, check_mckp=True)
    configs: list[tuple[str, Policy, LoanPlan | None]] = [
        ("sjf_only", lyra(elastic_scaling=False), None), ("loaning_only", lyra(elastic_scaling=False), plan),
        ("elastic_only", lyra(), None), ("lyra", full, plan)]
    configs += [(f"lyra_{m}", lyra(reclaim=m), plan) for m in cfg.variants]
    for name, pol, p in configs:
        runs[name] = run_sim(wl, pol, nodes, models, p, cfg.seed, progress, name)
    b, ly = runs["baseline"].summary, runs["lyra"].summary
    mk = [r for r in full.mckp_log if r["exact"] > 1e-9]  # type: ignore[attr-defined]
    horizon = cfg.days * DAY
    data: dict[str, Any] = {
        "workload": {"name": wl.name, "jobs": len(wl.jobs), "digest": wl.digest},
        "training_gpus": gpus, "training_servers": len(nodes), "gpus_per_server": cfg.gpus_per_server,
        "calibration": tries,
        "baseline_avg_queue": b["avg_queue"], "baseline_p95_queue": b["p95_queue"],
        "baseline_queue_in_band": abs(b["avg_queue"] / cfg.target_queue - 1) <= cfg.tolerance,
        "inference": _inference_summary(demand, plan, n_inf, horizon),
        "queue_reduction": b["avg_queue"] / ly["avg_queue"] if ly["avg_queue"] else math.inf,
        "jct_reduction": b["avg_jct"] / ly["avg_jct"],
        "gpu_usage_gain": busy_gpu_hours(runs["lyra"], horizon)[0] / max(busy_gpu_hours(base, horizon)[0], 1e-9) - 1,
        "usage_definition": "allocated GPU-hours in the trace window [0, days): lyra / baseline - 1",
        "usage": {k: dict(zip(("busy_gpu_hours", "available_gpu_hours", "loaned_server_hours"),
                              busy_gpu_hours(v, horizon), strict=True)) for k, v in runs.items()},
        "ablation": {k: {"queue_reduction": b["avg_queue"] / max(v.summary["avg_queue"], 1e-9),
                         "jct_reduction": b["avg_jct"] / v.summary["avg_jct"]} for k, v in runs.items()},
        "preemptions": _preemptions(runs, full, configs),
        "mckp_optimality": min((r["greedy"] / r["exact"] for r in mk), default=1.0), "mckp_rounds_checked": len(mk),
        "runs": {k: run_summary(v) for k, v in runs.items()},
    }
    figs = {"cdf.png": fig_cdfs(runs, title="Philly 15-day slice"),
            "loans.png": fig_loans({k: runs[k] for k in ("baseline", "lyra")}, plan, demand,
                                   title="Philly 15-day slice")}
    return data, figs


def tables(data: dict[str, Any]) -> list[Table]:
    abl = Table({"run": "configuration", "queue_reduction": "queue reduction vs FIFO (x)",
                 "jct_reduction": "JCT reduction vs FIFO (x)"},
                [{"run": k, **v} for k, v in data["ablation"].items()], "Ablation (baseline average ÷ run average)")
    pre = data["preemptions"]
    rc = Table({"method": "reclaim method", "same": "jobs preempted on the lyra run's instances (count)",
                "run": "jobs preempted in its own full-Lyra run (count)"},
               [{"method": m, "same": v, "run": pre["per_run_policy"].get("lyra" if m == "greedy" else f"lyra_{m}", "")}
                for m, v in pre["same_instances"].items()], "Reclaim preemptions by method")
    cal = Table({"gpus": "training GPUs", "avg_queue": "FIFO avg queue (s)"}, list(data["calibration"]),
                "Calibration of the training cluster (bisection)")
    inf = data["inference"]
    side = Table({"servers": "inference servers (count)", "util": "mean utilisation (fraction)",
                  "low": "time below 40 % utilisation (fraction)", "longest": "longest stretch below 40 % (h)",
                  "loaned": "loaned server-hours (h)", "reclaims": "reclaim events (count)",
                  "gain": "GPU usage gain, lyra vs FIFO (fraction)", "mckp": "MCKP greedy / exact, worst round"},
                 [{"servers": inf["servers"], "util": inf["mean_utilisation"], "low": inf["fraction_below_40pct"],
                   "longest": inf["longest_below_40pct_hours"], "loaned": inf["loaned_server_hours"],
                   "reclaims": inf["reclaim_events"], "gain": data["gpu_usage_gain"],
                   "mckp": data["mckp_optimality"]}], "Inference side")
    return [runs_table(data["runs"], "Runs (training cluster of "
                       f"{data['training_gpus']} GPUs on {data['training_servers']} servers)"), abl, rc, cal, side]


@register_experiment
class Lyra(Experiment):
    name = "lyra"
    title = "Lyra: capacity loaning and elastic scaling vs FIFO on a Philly 15-day slice"
    paper = "Lyra (EuroSys'23) §6 headline (1.53x queuing delay, 1.48x JCT); lyra.md §3, §6"
    Config = LyraConfig

    def run(self, config: LyraConfig, progress: ProgressFactory | None = None) -> ExperimentResult:
        data, figs = run_all(config, progress)
        verdicts = [Verdict("JCT reduction: FIFO avg JCT ÷ Lyra avg JCT", data["jct_reduction"], f"≥ {JCT_BAR}",
                            data["jct_reduction"] >= JCT_BAR, "x"),
                    Verdict("queuing-delay reduction: FIFO avg queue ÷ Lyra avg queue", data["queue_reduction"],
                            f"≥ {QUEUE_BAR}", data["queue_reduction"] >= QUEUE_BAR, "x")]
        tabs = tables(data)
        if config.peer is not None:
            peer, peer_figs = deepboot_compare(DeepBootConfig(workload=config.peer, seed=config.seed), progress)
            data["deepboot_peer"] = peer
            figs.update(peer_figs)
            tabs.append(jct_table(peer))
        return ExperimentResult(self.name, self.title, dataclasses.asdict(config), verdicts, tabs, figs, data)
