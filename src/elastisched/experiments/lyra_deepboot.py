"""`reproduce lyra-deepboot`: our lyra and tiresias on DeepBoot's `small.csv` set-up, beside the figures
DeepBoot's own simulator measured (peer-data/deepboot/README); also run by `reproduce lyra --peer`.

Facts from DeepBoot's simulator (czq693497091/DeepBoot @ cc85a24: `simulator.py`, `tiresias.py`, `aryl.py`,
`infer_scheduler.py`, `applications.py`, `experiment/cmd/16node-4gpu/small/*.sh`) and the reading we take
of each:
- Cluster: `--min-nodes 16 --num-gpus 4`, one pool of 64 GPUs shared by training and inference; rounds every
  60 s (`--interval 60`), the inference scheduler in between. In its Aryl runs (`ARYL=1`) inference is
  placed on the upper 8 nodes only and any training worker on a node that hosts inference is removed
  (`aryl_remove`): inference is served first. We model exactly that split: 8 training servers plus 8
  inference servers that lend every idle server (headroom 0, notice 0: a reclaim is immediate) after `hold`
  (600 s) idle. Our tiresias runs on the same split and loan plan (the simulator returns the most recently
  lent servers when a policy does not choose; DeepBoot's Tiresias instead loses `#inference` GPUs anywhere).
- Inference: every task holds one GPU (`Job.__init__` forces `target_num_replicas = 1`) for its `duration`
  plus a start-up delay (`APPLICATIONS_DELAY['infer-*']`, 4–8 s) and a keep-alive of 30–120 s after it
  (ATS-I `PROTECT` state, `calculate_protect_time`); we add a fixed 36 s (`pod_overhead`). The load it
  leaves is reported in the result (`inference.mean_busy_servers`).
- Training jobs: `num_replicas` and `batch_size` of the CSV. DeepBoot's Tiresias runs each job at exactly
  `num_replicas` GPUs and its batch size (`target_num_replicas`, `target_batch_size`); its Aryl treats a job
  as elastic between 0 (not running) and `num_replicas` (`get_afs_job_info`: `min_replicas=0`,
  `max_replicas=target_num_replicas`) at the fixed batch size. So our lyra gets min 1, max = request
  (`max_factor=1`), and our tiresias the request.
- Restart cost: DeepBoot stalls a training job `APPLICATIONS_DELAY[app]` seconds on every reallocation
  (bert 103, cifar10 24, ncf 25, deepspeech2 18, yolov3 26, imagenet 35); we use the same per-app figures.
- Measure: DeepBoot's JCT is `completion_time − submission_time`; its `summary.json` `avgs` averages it over
  training jobs and inference tasks together. The figures we compare with (Aryl 42,310 s, Tiresias 2,618 s,
  peer-data README) are the averages over the 160 training jobs only; so is ours.
- Job run times come from our Pollux-derived models, which DeepBoot's simulator shares (its
  `applications.py` is Pollux's), so the figures are comparable but not identical.
- Other policies (`policies`): besides the named configurations below (`POLICIES`), any registered policy runs
  on the same split and loan plan, on the elastic reading of the jobs (min 1, max = request) when the policy
  is elastic, else at the CSV's `num_replicas`. Per run the report gives what reclaims cost it
  (`_loaning_common.reclaim_losses`, its definition beside the table).
- Verdict: our lyra's training-job average JCT below DeepBoot's Tiresias figure (the better of its two).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastisched.core.errors import ConfigError
from elastisched.experiments._loaning_common import (
    LOSS_DEFINITION,
    lyra,
    make_elastic,
    nodes_of,
    reclaim_losses,
    run_sim,
    run_summary,
    runs_table,
)
from elastisched.experiments.base import (
    Experiment,
    ExperimentResult,
    ProgressFactory,
    Table,
    Verdict,
    register_experiment,
)
from elastisched.loaning.demand import from_inference_tasks
from elastisched.loaning.timeline import loan_plan
from elastisched.models.profiles import load_pollux_bundled
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy, is_registered, make_policy, unknown_policy_hint
from elastisched.report.loan_figures import fig_cdfs, fig_loans
from elastisched.workloads import load_workload
from elastisched.workloads.schema import Workload

#: DeepBoot's per-application restart delay (its `applications.py` `APPLICATIONS_DELAY`, seconds), paid on
#: every reallocation of a training job in its simulator.
DEEPBOOT_RESTART = {"bert": 103.0, "cifar10": 24.0, "ncf": 25.0, "deepspeech2": 18.0, "yolov3": 26.0,
                    "imagenet": 35.0}
#: Training jobs' average JCT on `small.csv` measured with DeepBoot's simulator (peer-data README).
DEEPBOOT_FIGURES = {"aryl": 42310.0, "tiresias": 2618.0}
DEFAULT_WORKLOAD = Path("../shared/peer-data/deepboot/workload/small.csv")
POLICIES = ("lyra", "tiresias", "lyra_jct_value", "lyra_inelastic", "fifo")


@dataclass(frozen=True)
class DeepBootConfig:
    """DeepBoot's `16node-4gpu/small` set-up in our terms (module docstring)."""

    workload: Path = DEFAULT_WORKLOAD  # DeepBoot workload CSV (default relative to the working directory)
    servers: int = 16  # servers in DeepBoot's cluster (training + inference)
    gpus_per_server: int = 4  # GPUs per server
    inference_servers: int = 8  # the upper half, where DeepBoot's Aryl mode places inference
    pod_overhead: float = 36.0  # seconds added to each inference task: start-up (4-8 s) + first keep-alive (30 s)
    hold: float = 600.0  # seconds an inference server must be idle before it is lent
    notice: float = 0.0  # seconds of reclaim notice
    headroom: int = 0  # idle inference servers never lent
    min_request: bool = False  # elastic min = request (our earlier reading); default min 1 (DeepBoot's Aryl)
    max_factor: int = 1  # elastic max = factor x request (DeepBoot's Aryl: the request is the max)
    deepboot_restart: bool = True  # DeepBoot's per-app restart delays instead of our models' own 30 s
    seed: int = 0  # random seed
    policies: tuple[str, ...] = ("lyra", "tiresias", "lyra_jct_value")  # runs: lyra_inelastic, any registered policy


def deepboot_compare(cfg: DeepBootConfig, progress: ProgressFactory | None = None) -> tuple[dict[str, Any],
                                                                                          dict[str, bytes]]:
    """Training jobs' average JCT of our runs on DeepBoot's workload and set-up, beside DeepBoot's figures;
    returns (data, figures)."""
    if not cfg.workload.is_file():
        raise ConfigError("workload", str(cfg.workload), "no such file; point --workload at DeepBoot's "
                          "workload CSV (peer-data/deepboot/workload/small.csv)")
    for name in cfg.policies:
        if name not in POLICIES and not is_registered(name):
            raise ConfigError("policies", name, f"{unknown_policy_hint(name)}; or one of {', '.join(POLICIES)}")
    models = (PerfModels(load_pollux_bundled(), restart_cost=DEEPBOOT_RESTART) if cfg.deepboot_restart
              else PerfModels.load())
    wl = load_workload(str(cfg.workload), models)
    g = cfg.gpus_per_server
    train_servers = cfg.servers - cfg.inference_servers
    elastic = make_elastic(wl, 1.0, cfg.max_factor, cfg.seed, (lambda n: n) if cfg.min_request else (lambda n: 1))
    demand = from_inference_tasks(wl.inference, servers=cfg.inference_servers, gpus_per_server=g,
                                  overhead=cfg.pod_overhead, gpus_per_task=1)
    plan = loan_plan(demand, gpus_per_server=g, hold=cfg.hold, notice=cfg.notice, headroom=cfg.headroom)
    nodes = nodes_of(train_servers * g, g)
    makers: dict[str, Callable[[], tuple[Workload, Policy]]] = {
        "lyra": lambda: (elastic, lyra()), "lyra_jct_value": lambda: (elastic, lyra(value="jct")),
        "lyra_inelastic": lambda: (wl, lyra(elastic_scaling=False)),
        "tiresias": lambda: (wl, make_policy("tiresias")), "fifo": lambda: (wl, make_policy("fifo"))}
    runs: dict[str, Any] = {}
    for name in cfg.policies:
        w, pol = makers[name]() if name in makers else _registered(name, wl, elastic)
        runs[name] = run_sim(w, pol, nodes, models, plan, cfg.seed, progress, f"deepboot {name}")
    horizon = max(float(r.summary["makespan"]) for r in runs.values())
    data: dict[str, Any] = {
        "workload": str(cfg.workload), "setup": dataclasses.asdict(cfg),
        "training_servers": train_servers, "inference_servers": cfg.inference_servers,
        "restart_cost_s": DEEPBOOT_RESTART if cfg.deepboot_restart else "models' own",
        "inference": {"tasks": len(wl.inference), "mean_busy_servers": demand.mean_utilisation(until=horizon)
                      * cfg.inference_servers,
                      "loaned_server_hours": plan.loaned_server_seconds(horizon) / 3600,
                      "reclaim_events": len([r for r in plan.reclaims() if r[0] < horizon])},
        "training_jobs": len(wl.jobs),
        "avg_jct_training": {k: float(v.jobs["jct"].mean()) for k, v in runs.items()},
        "deepboot_figures": {f"deepboot_{k}": v for k, v in DEEPBOOT_FIGURES.items()},
        "runs": {k: run_summary(v, reclaim_losses(v, wl, models)) for k, v in runs.items()},
        "loss_definition": LOSS_DEFINITION,
    }
    if "lyra" in runs:
        ly = data["avg_jct_training"]["lyra"]
        data["lyra_beats"] = {k: ly < v for k, v in DEEPBOOT_FIGURES.items()}
        if "tiresias" in runs:
            data["lyra_beats"]["our_tiresias"] = ly < data["avg_jct_training"]["tiresias"]
    figs = {"deepboot_cdf.png": fig_cdfs(runs, {"DeepBoot Tiresias avg JCT": DEEPBOOT_FIGURES["tiresias"]},
                                         title="DeepBoot small.csv")}
    if "lyra" in runs:
        figs["deepboot_loans.png"] = fig_loans({"lyra": runs["lyra"]}, plan, demand, title="DeepBoot small.csv")
    return data, figs


def _registered(name: str, wl: Workload, elastic: Workload) -> tuple[Workload, Policy]:
    """A registered policy and the jobs it sees: the elastic reading when it scales jobs, else the requests."""
    pol = make_policy(name)
    return (elastic if pol.elastic else wl), pol


def loan_table(data: dict[str, Any]) -> Table:
    """Per run: JCT, queue and what reclaims cost it."""
    cols = {"run": "run", "avg_jct": "training jobs' avg JCT (s)", "p95_jct": "p95 JCT (s)",
            "avg_queue": "avg queue (s)", "reclaim_evictions": "jobs evicted by reclaims",
            "reclaim_shrinks": "jobs shrunk by reclaims", "reclaim_gpu_hours_lost": "GPU-hours lost to reclaims (h)"}
    rows = [{"run": k, **{c: v.get(c) for c in cols if c != "run"}} for k, v in data["runs"].items()]
    return Table(cols, rows, f"Runs with loans on DeepBoot's small.csv. Reclaim losses: {LOSS_DEFINITION}")


def jct_table(data: dict[str, Any]) -> Table:
    rows = [{"run": f"our {k}", "jct": v} for k, v in data["avg_jct_training"].items()]
    rows += [{"run": f"DeepBoot's simulator: {k}", "jct": v} for k, v in DEEPBOOT_FIGURES.items()]
    return Table({"run": "run (same split, same loan plan)", "jct": "training jobs' avg JCT (s)"}, rows,
                 "Training jobs' average JCT on DeepBoot's small.csv")


@register_experiment
class LyraDeepBoot(Experiment):
    name = "lyra-deepboot"
    title = "Lyra and Tiresias on DeepBoot's small.csv beside DeepBoot's own figures"
    paper = "DeepBoot artifact (czq693497091/DeepBoot @ cc85a24, experiment/cmd/16node-4gpu/small); lyra.md §6"
    Config = DeepBootConfig

    def run(self, config: DeepBootConfig, progress: ProgressFactory | None = None) -> ExperimentResult:
        data, figs = deepboot_compare(config, progress)
        verdicts = []
        if "lyra" in data["avg_jct_training"]:
            verdicts.append(Verdict("our lyra: training jobs' avg JCT vs DeepBoot's Tiresias",
                                    data["avg_jct_training"]["lyra"], f"< {DEEPBOOT_FIGURES['tiresias']:,.0f}",
                                    data["avg_jct_training"]["lyra"] < DEEPBOOT_FIGURES["tiresias"], "s"))
        return ExperimentResult(self.name, self.title, dataclasses.asdict(config), verdicts,
                                [jct_table(data), loan_table(data), runs_table(data["runs"], "Runs (training jobs)")],
                                figs, data)
