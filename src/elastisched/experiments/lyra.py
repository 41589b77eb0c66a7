"""`elastisched reproduce lyra`: Lyra's headline comparison on a Philly-derived 15-day workload (lyra.md §3, §6).

Set-up (every choice is a field of `LyraConfig`, hence an option of the command):
- Workload: the bundled Philly trace, days [start_day, start_day + days), `sample` jobs drawn uniformly
  (seeded; `load_raw_trace`). A seeded `elastic_fraction` of the jobs becomes elastic with
  `min_gpus = max(1, ⌊min_fraction × num_gpus⌋)` (default: the request itself, so elasticity only adds
  GPUs) and `max_gpus = max_factor × num_gpus` (lyra.md §5 "substitutes").
- Training cluster: 4-GPU T4 servers (plus one smaller server for a remainder); the GPU count is chosen by
  bisection so that the baseline's average queuing delay is `target_queue` (3,000 s, the production figure
  of lyra.md §1.1) within ±`tolerance` (whole servers are too coarse a step; docs/lyra.md).
- Regime (`regime`, `experiments/_lyra_regimes.py`): the baseline the training cluster is sized for and Lyra
  is compared against, and what the inference side lends. `paper` (default): Lyra's own scheduler without
  loaning or elastic scaling as the baseline, an inference cluster as large as training with diurnal demand
  0.20–0.75 that keeps 40 % of its servers in reserve. `abundant`: the set-up before issue 21 (FIFO baseline,
  inference 0.10–0.75 with a one-server reserve). `inference_ratio`, `reserve_fraction` (or `headroom`, a
  server count), `peak`, `trough`, `notice` and `hold` override the regime's value when given. The demand
  is `demand.diurnal`, lent by `timeline.loan_plan` (its low stretches are reported in the result). By
  default both sides are T4 (the only bundled profiles). Heterogeneous: `train_gpu_type="v100"` with Sia's
  per-type profiles loaded (`--profiles …/sia/traces --train-gpu v100`) makes the training servers V100 and
  leaves the loaned inference servers T4; a job runs on one type, so loaned T4 servers serve jobs that start
  there.
- Configurations (per seed, same cluster): the baseline; a reference run (FIFO in the paper regime, `sjf_only`
  in the abundant one); `loaning_only` = lyra without elastic scaling; `elastic_only` = lyra without loaning;
  `lyra` = full Lyra (greedy reclaim); one full-Lyra run per other reclaim method (`variants`); and every
  registered policy named in `policies`, with the same loans (the comparison the new policies are judged
  by); `length_estimate` sets what jobs declare about their length to the policies that read it (lyra, FIFO
  and the baseline do not). The full run also evaluates every reclaim method on each of its own reclaim instances
  (`compare_reclaim`) and checks phase 2 greedy vs exact on every round (`check_mckp`).
- Per run: avg / p95 JCT and queue, and what reclaims cost it (`_loaning_common.reclaim_losses`: jobs evicted,
  shrunk, moved, GPU-hours lost; the definition is printed with the table).
- Verdicts: the mean over `seeds` of queue_reduction and jct_reduction (baseline average ÷ Lyra's) against the
  regime's band (paper: within ±20 % of 1.53× / 1.48×, lyra.md §0; abundant: issue 10's ≥ 1.53 / ≥ 1.48).
- Plots (first seed): `cdf.png` (queuing delay and JCT CDFs per configuration), `loans.png` (inference
  utilisation and loanable servers; servers on loan and reclaimed in the lyra run; busy GPUs).

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
from elastisched.experiments._loaning_common import (
    lyra,
    make_elastic,
    nodes_of,
    reclaim_losses,
    run_sim,
    run_summary,
)
from elastisched.experiments._lyra_regimes import REGIMES, Regime, band_text, regime, rival_verdicts
from elastisched.experiments._lyra_tables import over_seeds, tables
from elastisched.experiments.base import (
    Experiment,
    ExperimentResult,
    ProgressFactory,
    Verdict,
    register_experiment,
)
from elastisched.experiments.lyra_deepboot import DeepBootConfig, deepboot_compare, jct_table
from elastisched.loaning.demand import DAY, DemandSeries, diurnal, low_stretches
from elastisched.loaning.timeline import LoanPlan, loan_plan
from elastisched.models.registry import PerfModels
from elastisched.policies._reclaim import METHODS
from elastisched.policies.base import Policy, is_registered, make_policy, unknown_policy_hint
from elastisched.report.loan_figures import fig_cdfs, fig_loans
from elastisched.sim import SimResult
from elastisched.sim.length_estimate import LengthEstimate
from elastisched.workloads.schema import Workload
from elastisched.workloads.traces import load_raw_trace

VARIANTS = ("deepboot", "random", "milp", "greedy-swap")
BASELINES = {"fifo": "FIFO (no loaning, no elasticity, no backfill)",
             "sjf_only": "Lyra's scheduler without loaning or elastic scaling"}


@dataclass(frozen=True)
class LyraConfig:
    regime: str = "paper"  # set-up: paper (Lyra's regime, default) or abundant (before issue 21); _lyra_regimes
    days: float = 15.0  # trace days simulated
    start_day: float = 20.0  # first day of the Philly trace used
    sample: int | None = 2000  # jobs drawn uniformly from those days (None: all)
    seeds: tuple[int, ...] = (0, 1, 2)  # random seeds (sampling, elastic marking, demand, simulator); verdict: mean
    elastic_fraction: float = 0.5  # fraction of jobs made elastic
    min_fraction: float = 1.0  # elastic min GPUs = max(1, floor(min_fraction x request))
    max_factor: int = 3  # elastic max GPUs = max_factor x request
    target_queue: float = 3000.0  # the baseline's average queuing delay (s) the training cluster is sized for
    tolerance: float = 0.2  # accepted relative distance of the baseline's queue from target_queue
    queue_at_least: bool | None = None  # size for a baseline queue at or above target_queue (default: the regime's)
    policies: tuple[str, ...] = ()  # other registered policies run beside lyra with the same cluster and loans
    length_estimate: str = "exact"  # what jobs declare to policies that read it: exact, lognormal:SIGMA, none
    inference_ratio: float | None = None  # inference servers per training server (default: the regime's)
    gpus_per_server: int = 4  # GPUs per server (training and inference)
    reserve_fraction: float | None = None  # fraction of inference servers never lent (default: the regime's)
    headroom: int | None = None  # idle inference servers never lent, a count (overrides reserve_fraction)
    notice: float | None = None  # seconds of reclaim notice (default: the regime's)
    hold: float | None = None  # seconds an inference server must be idle before it is lent (default: the regime's)
    peak: float | None = None  # diurnal inference utilisation at the daily peak (default: the regime's)
    trough: float | None = None  # diurnal inference utilisation at the daily trough (default: the regime's)
    variants: tuple[str, ...] = VARIANTS  # extra full-Lyra runs, one per other reclaim method
    max_bisect: int = 10  # calibration steps at most
    fixed_servers: int | None = None  # training servers (skips the calibration)
    train_gpu_type: str = "t4"  # training servers' GPU type (v100 etc. need --profiles)
    loan_gpu_type: str = "t4"  # inference (loaned) servers' GPU type
    profiles: Path | None = None  # Sia per-GPU-type traces directory (adds V100/A100/RTX profiles)
    peer: Path | None = None  # DeepBoot workload CSV: also run the lyra-deepboot comparison


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


def inference_setup(cfg: LyraConfig, reg: Regime, training_servers: int) -> dict[str, Any]:
    """The inference side's parameters for a training cluster of `training_servers`: the regime's, overridden
    by the fields the user gave."""
    n_inf = max(1, round(_pick(cfg.inference_ratio, reg.inference_ratio) * training_servers))
    if cfg.reserve_fraction is not None:
        reg = dataclasses.replace(reg, reserve_fraction=cfg.reserve_fraction)
    return {"servers": n_inf, "headroom": _pick(cfg.headroom, reg.headroom(n_inf)),
            "peak": _pick(cfg.peak, reg.peak), "trough": _pick(cfg.trough, reg.trough),
            "notice": _pick(cfg.notice, reg.notice), "hold": _pick(cfg.hold, reg.hold)}


def baseline_policy(name: str) -> Policy:
    return make_policy("fifo") if name == "fifo" else lyra(elastic_scaling=False)


def check_config(cfg: LyraConfig) -> Regime:
    """The regime, after checking the fields that name things (clear errors before minutes of simulation)."""
    reg = regime(cfg.regime)
    bad = [m for m in cfg.variants if m not in METHODS or m == "greedy"]
    if bad:
        raise ConfigError("variants", ",".join(bad), f"unknown reclaim method; known: {', '.join(VARIANTS)}")
    for name in cfg.policies:
        if not is_registered(name):
            raise ConfigError("policies", name, unknown_policy_hint(name))
    if not cfg.seeds:
        raise ConfigError("seeds", "", "give at least one seed")
    LengthEstimate.parse(cfg.length_estimate, "length_estimate")
    if cfg.reserve_fraction is not None and not 0 <= cfg.reserve_fraction <= 1:
        raise ConfigError("reserve_fraction", cfg.reserve_fraction, "must lie in [0, 1]")
    if cfg.inference_ratio is not None and cfg.inference_ratio <= 0:
        raise ConfigError("inference_ratio", cfg.inference_ratio, "must be > 0")
    return reg


def philly_workload(models: PerfModels, cfg: LyraConfig, seed: int) -> Workload:
    lo = cfg.start_day * DAY
    wl = load_raw_trace(None, models, seed=seed, start=lo, end=lo + cfg.days * DAY, sample=cfg.sample,
                        gpus_per_node=cfg.gpus_per_server)
    return make_elastic(wl, cfg.elastic_fraction, cfg.max_factor, seed,
                        lambda g: max(1, int(g * cfg.min_fraction)))


def calibrate(wl: Workload, models: PerfModels, cfg: LyraConfig, seed: int, baseline: str = "fifo",
              progress: ProgressFactory | None = None, at_least: bool = False
              ) -> tuple[int, SimResult, list[dict[str, float]]]:
    """Training GPUs (1-GPU steps) for which the baseline's average queuing delay is closest to the target
    (bisection on the GPU count until within a quarter of `tolerance`; with `at_least`, closest from above);
    `tolerance` is the acceptance band."""
    g = cfg.gpus_per_server

    def base(n: int) -> SimResult:
        return run_sim(wl, baseline_policy(baseline), nodes_of(n, g, cfg.train_gpu_type), models, None, seed,
                       progress, f"calibrate {baseline} {n} GPUs (seed {seed})",
                       LengthEstimate.parse(cfg.length_estimate, "length_estimate"))

    if cfg.fixed_servers is not None:
        n = cfg.fixed_servers * g
        res = base(n)
        return n, res, [{"gpus": n, "avg_queue": res.summary["avg_queue"]}]
    lo = max(1, max(s.num_gpus for s in wl.jobs))
    work = sum((s.duration or 0.0) * s.num_gpus for s in wl.jobs)
    span = max(s.submit_time for s in wl.jobs) - min(s.submit_time for s in wl.jobs) or DAY
    hi = max(lo + 1, math.ceil(3 * work / span))
    tries: list[dict[str, float]] = []
    best: tuple[float, int, SimResult] | None = None
    for _ in range(cfg.max_bisect):
        mid = (lo + hi) // 2
        res = base(mid)
        q = float(res.summary["avg_queue"])
        tries.append({"gpus": mid, "avg_queue": q})
        err = _queue_error(q, cfg.target_queue, at_least)
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


def _queue_error(queue: float, target: float, at_least: bool) -> float:
    """How far a baseline's average queue is from the target; with `at_least`, a queue below the target ranks
    after every queue above it (the paper's "over 3,000 s"), nearest first."""
    err = abs(queue / target - 1.0)
    return err + 1e6 if at_least and queue < target else err


def busy_gpu_hours(res: SimResult, horizon: float) -> tuple[float, float, float]:
    """(busy GPU-hours, available GPU-hours, loaned-server hours) over [0, horizon) from the run's timeline."""
    tl = res.timeline
    t = np.append(tl["t"].to_numpy(float), horizon).clip(max=horizon)
    dt = np.diff(t).clip(min=0)
    return (float(np.sum(dt * tl["busy_gpus"].to_numpy(float))) / 3600,
            float(np.sum(dt * tl["total_gpus"].to_numpy(float))) / 3600,
            float(np.sum(dt * tl["loaned_servers"].to_numpy(float))) / 3600)


def _inference_summary(demand: DemandSeries, plan: LoanPlan, side: dict[str, Any], horizon: float,
                       training_gpus: int) -> dict[str, Any]:
    """The inference side over the trace window: utilisation, its low stretches, what was lent and reclaimed."""
    stretches = low_stretches(demand, 0.4, until=horizon)
    loaned = plan.loaned_server_seconds(horizon) / 3600
    return {**side, "mean_utilisation": demand.mean_utilisation(until=horizon),
            "fraction_below_40pct": sum(e - s for s, e in stretches) / horizon,
            "longest_below_40pct_hours": max((e - s for s, e in stretches), default=0.0) / 3600,
            "loaned_server_hours": loaned,
            "loaned_fraction_of_training": loaned * plan.gpus_per_server / (training_gpus * horizon / 3600),
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
        if name.startswith("lyra_") and hasattr(pol, "reclaim_log"):
            per_policy[name] = sum(r["preempted"] for r in pol.reclaim_log)
    return {"same_instances": same, "milp_instances": len(solvable), "greedy_on_milp_instances": g_s,
            "milp_on_milp_instances": m_s,
            "greedy_over_milp": (g_s / m_s) if m_s else (1.0 if g_s == 0 else math.inf),
            "per_run_simulator": {k: v.summary.get("reclaim_preemptions") for k, v in runs.items()
                                  if k == "lyra" or k.startswith("lyra_")},
            "per_run_policy": per_policy}


def _configs(cfg: LyraConfig, reg: Regime, plan: LoanPlan, full: Policy) -> list[tuple[str, Policy, LoanPlan | None]]:
    """Every run beside the baseline: the reference, the ablation, the reclaim variants, the named policies."""
    reference = ("sjf_only", lyra(elastic_scaling=False)) if reg.baseline == "fifo" else ("fifo", make_policy("fifo"))
    configs: list[tuple[str, Policy, LoanPlan | None]] = [
        (*reference, None), ("loaning_only", lyra(elastic_scaling=False), plan), ("elastic_only", lyra(), None),
        ("lyra", full, plan)]
    configs += [(f"lyra_{m}", lyra(reclaim=m), plan) for m in cfg.variants]
    taken = {name for name, _, _ in configs} | {"baseline"}
    for p in dict.fromkeys(cfg.policies):  # lyra runs already; a reference name runs again, with loans
        if p != "lyra":
            configs.append((f"{p}_with_loans" if p in taken else p, make_policy(p), plan))
    return configs


def run_seed(cfg: LyraConfig, reg: Regime, seed: int, progress: ProgressFactory | None = None
             ) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Every configuration on one seed; returns (that seed's data, its figures)."""
    models = PerfModels.load(cfg.profiles)
    wl = philly_workload(models, cfg, seed)
    gpus, base, tries = calibrate(wl, models, cfg, seed, reg.baseline, progress,
                                  _pick(cfg.queue_at_least, reg.queue_at_least))
    nodes = nodes_of(gpus, cfg.gpus_per_server, cfg.train_gpu_type)
    side = inference_setup(cfg, reg, len(nodes))
    demand = diurnal(side["servers"], days=cfg.days + 15, peak=side["peak"], trough=side["trough"], seed=seed)
    plan = loan_plan(demand, headroom=side["headroom"], notice=side["notice"], hold=side["hold"],
                     gpus_per_server=cfg.gpus_per_server, gpu_type=cfg.loan_gpu_type)
    runs: dict[str, SimResult] = {"baseline": base}
    full = lyra(compare_reclaim=True, check_mckp=True)
    configs = _configs(cfg, reg, plan, full)
    estimate = LengthEstimate.parse(cfg.length_estimate, "length_estimate")
    for name, pol, p in configs:
        runs[name] = run_sim(wl, pol, nodes, models, p, seed, progress, f"{name} (seed {seed})", estimate)
    horizon = cfg.days * DAY
    data = _seed_data(runs, full, configs, wl, models, horizon)
    data.update({"seed": seed, "workload": {"name": wl.name, "jobs": len(wl.jobs), "digest": wl.digest},
                 "training_gpus": gpus, "training_servers": len(nodes), "gpus_per_server": cfg.gpus_per_server,
                 "calibration": tries, "baseline_in_band": abs(base.summary["avg_queue"] / cfg.target_queue - 1)
                 <= cfg.tolerance, "inference": _inference_summary(demand, plan, side, horizon, gpus)})
    title = f"Philly 15-day slice, seed {seed}"
    figs = {"cdf.png": fig_cdfs(runs, title=title),
            "loans.png": fig_loans({k: runs[k] for k in ("baseline", "lyra")}, plan, demand, title=title)}
    return data, figs


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


def _seed_data(runs: dict[str, SimResult], full: Policy, configs: list[tuple[str, Policy, LoanPlan | None]],
               wl: Workload, models: PerfModels, horizon: float) -> dict[str, Any]:
    """One seed's figures: reductions vs the baseline and vs FIFO, usage, ablation, reclaims, per-run rows."""
    b, ly = runs["baseline"].summary, runs["lyra"].summary
    fifo = runs["fifo"].summary if "fifo" in runs else b
    mk = [r for r in full.mckp_log if r["exact"] > 1e-9]  # type: ignore[attr-defined]
    busy = {k: busy_gpu_hours(v, horizon) for k, v in runs.items()}
    return {
        "baseline_avg_queue": b["avg_queue"], "baseline_p95_queue": b["p95_queue"],
        "queue_reduction": _ratio(b["avg_queue"], ly["avg_queue"]), "jct_reduction": b["avg_jct"] / ly["avg_jct"],
        "vs_fifo": {"queue_reduction": _ratio(fifo["avg_queue"], ly["avg_queue"]),
                    "jct_reduction": fifo["avg_jct"] / ly["avg_jct"]},
        "gpu_usage_gain": busy["lyra"][0] / max(busy["baseline"][0], 1e-9) - 1,
        "usage_definition": "allocated GPU-hours in the trace window [0, days): lyra / baseline - 1",
        "usage": {k: dict(zip(("busy_gpu_hours", "available_gpu_hours", "loaned_server_hours"), v, strict=True))
                  for k, v in busy.items()},
        "ablation": {k: {"queue_reduction": _ratio(b["avg_queue"], v.summary["avg_queue"]),
                         "jct_reduction": b["avg_jct"] / v.summary["avg_jct"]} for k, v in runs.items()},
        "preemptions": _preemptions(runs, full, configs),
        "mckp_optimality": min((r["greedy"] / r["exact"] for r in mk), default=1.0), "mckp_rounds_checked": len(mk),
        "runs": {k: run_summary(v, reclaim_losses(v, wl, models)) for k, v in runs.items()},
    }


def run_all(cfg: LyraConfig, progress: ProgressFactory | None = None) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Every configuration on every seed; returns (data for lyra.json, the first seed's figures)."""
    reg = check_config(cfg)
    per_seed: dict[str, dict[str, Any]] = {}
    figs: dict[str, bytes] = {}
    for seed in cfg.seeds:
        data, f = run_seed(cfg, reg, seed, progress)
        per_seed[str(seed)] = data
        figs = figs or f
    out = over_seeds(per_seed)
    out.update({"regime": dataclasses.asdict(reg), "baseline": BASELINES[reg.baseline],
                "regimes_known": sorted(REGIMES), "per_seed": per_seed})
    return out, figs


@register_experiment
class Lyra(Experiment):
    name = "lyra"
    title = "Lyra: capacity loaning and elastic scaling on a Philly 15-day slice"
    paper = "Lyra (EuroSys'23) §6 headline (1.53x queuing delay, 1.48x JCT); lyra.md §0, §3, §6"
    Config = LyraConfig

    def run(self, config: LyraConfig, progress: ProgressFactory | None = None) -> ExperimentResult:
        data, figs = run_all(config, progress)
        reg = regime(config.regime)
        seeds = ", ".join(str(s) for s in config.seeds)
        verdicts = []
        for key, what, band in (("jct_reduction", "JCT", reg.jct_band), ("queue_reduction", "queuing-delay",
                                                                        reg.queue_band)):
            mean = data["headline"][key]["mean"]
            verdicts.append(Verdict(f"{what} reduction: baseline ({data['baseline']}) avg ÷ Lyra avg, mean over "
                                    f"seeds {seeds} ({config.regime} regime)", mean, band_text(band),
                                    band[0] <= mean <= band[1], "x"))
        verdicts += [Verdict(*v, "x") for v in rival_verdicts(data["policies"], seeds)]
        tabs = tables(data)
        if config.peer is not None:
            peer, peer_figs = deepboot_compare(DeepBootConfig(workload=config.peer, seed=config.seeds[0]), progress)
            data["deepboot_peer"] = peer
            figs.update(peer_figs)
            tabs.append(jct_table(peer))
        return ExperimentResult(self.name, self.title, dataclasses.asdict(config), verdicts, tabs, figs, data)
