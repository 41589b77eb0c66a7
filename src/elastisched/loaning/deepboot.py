"""Lyra beside a peer on its own workload (issue 3): our lyra and tiresias on DeepBoot's `small.csv` set-up
(`elastisched reproduce lyra-deepboot --workload small.csv`, or `reproduce lyra --peer`).

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
  (ATS-I `PROTECT` state, `calculate_protect_time`); we add a fixed 36 s (`pod_overhead`). The load is
  light: ≈ 0.3 GPUs busy on average, ≈ 2.3 with the keep-alive.
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
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastisched.loaning.demand import from_inference_tasks
from elastisched.loaning.figures import fig_cdfs, fig_loans
from elastisched.loaning.reproduce import Runner, _lyra, make_elastic, nodes_of, run_summary
from elastisched.loaning.timeline import loan_plan
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy, make_policy
from elastisched.workloads import load_workload
from elastisched.workloads.schema import Workload

#: DeepBoot's per-application restart delay (its `applications.py` `APPLICATIONS_DELAY`, seconds), paid on
#: every reallocation of a training job in its simulator.
DEEPBOOT_RESTART = {"bert": 103.0, "cifar10": 24.0, "ncf": 25.0, "deepspeech2": 18.0, "yolov3": 26.0,
                    "imagenet": 35.0}
#: Training jobs' average JCT on `small.csv` measured with DeepBoot's simulator (peer-data README).
DEEPBOOT_FIGURES = {"aryl": 42310.0, "tiresias": 2618.0}


@dataclass(frozen=True)
class DeepBootSetup:
    """DeepBoot's `16node-4gpu/small` set-up in our terms (module docstring, "DeepBoot comparison")."""

    servers: int = 16
    gpus_per_server: int = 4
    inference_servers: int = 8  # the upper half, where DeepBoot's Aryl mode places inference
    pod_overhead: float = 36.0  # start-up (4–8 s) + first keep-alive (30 s) per inference task
    hold: float = 600.0
    notice: float = 0.0
    headroom: int = 0
    min_request: bool = False  # True: min_gpus = request (our earlier reading); False: min 1 (DeepBoot's)
    max_factor: int = 1  # max_gpus = max_factor × request (DeepBoot: the request is the max)
    deepboot_restart: bool = True  # DeepBoot's per-app restart delays instead of our models' own
    seed: int = 0
    policies: tuple[str, ...] = ("lyra", "tiresias", "lyra_jct_value")


def deepboot_compare(run: Runner, path: Path, setup: DeepBootSetup = DeepBootSetup(),
                     out: Path | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Training jobs' average JCT of our lyra and our tiresias on DeepBoot's workload and set-up, beside the
    figures DeepBoot's simulator measured (module docstring). Writes `deepboot.json`, `deepboot_cdf.png` and
    `deepboot_loans.png` into `out`."""
    from elastisched.models.profiles import load_pollux_bundled

    models = (PerfModels(load_pollux_bundled(), restart_cost=DEEPBOOT_RESTART) if setup.deepboot_restart
              else PerfModels.load())
    wl = load_workload(str(path), models)
    g = setup.gpus_per_server
    train_servers = setup.servers - setup.inference_servers
    elastic = make_elastic(wl, 1.0, setup.max_factor, setup.seed,
                           (lambda n: n) if setup.min_request else (lambda n: 1))
    demand = from_inference_tasks(wl.inference, servers=setup.inference_servers, gpus_per_server=g,
                                  overhead=setup.pod_overhead, gpus_per_task=1)
    plan = loan_plan(demand, gpus_per_server=g, hold=setup.hold, notice=setup.notice, headroom=setup.headroom)
    nodes = nodes_of(train_servers * g, g)
    makers: dict[str, Callable[[], tuple[Workload, Policy]]] = {
        "lyra": lambda: (elastic, _lyra()),
        "lyra_jct_value": lambda: (elastic, _lyra(value="jct")),
        "lyra_inelastic": lambda: (wl, _lyra(elastic_scaling=False)),
        "tiresias": lambda: (wl, make_policy("tiresias")),
        "fifo": lambda: (wl, make_policy("fifo")),
    }
    runs: dict[str, Any] = {}
    for name in setup.policies:
        log(f"deepboot: running {name}")
        w, pol = makers[name]()
        runs[name] = run(w, pol, nodes, models, plan, setup.seed)
    horizon = max(float(r.summary["makespan"]) for r in runs.values())
    result: dict[str, Any] = {
        "workload": str(path), "setup": dataclasses.asdict(setup),
        "training_servers": train_servers, "inference_servers": setup.inference_servers,
        "restart_cost_s": DEEPBOOT_RESTART if setup.deepboot_restart else "models' own",
        "inference": {"tasks": len(wl.inference), "mean_busy_servers": demand.mean_utilisation(until=horizon)
                      * setup.inference_servers,
                      "loaned_server_hours": plan.loaned_server_seconds(horizon) / 3600,
                      "reclaim_events": len([r for r in plan.reclaims() if r[0] < horizon])},
        "training_jobs": len(wl.jobs),
        "avg_jct_training": {k: float(v.jobs["jct"].mean()) for k, v in runs.items()},
        "deepboot_figures": {f"deepboot_{k}": v for k, v in DEEPBOOT_FIGURES.items()},
        "runs": {k: run_summary(v) for k, v in runs.items()},
    }
    if "lyra" in runs:
        ly = result["avg_jct_training"]["lyra"]
        result["lyra_beats"] = {k: ly < v for k, v in DEEPBOOT_FIGURES.items()}
        if "tiresias" in runs:
            result["lyra_beats"]["our_tiresias"] = ly < result["avg_jct_training"]["tiresias"]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "deepboot.json").write_text(json.dumps(result, indent=2, default=float))
        fig_cdfs(out / "deepboot_cdf.png", runs, {"DeepBoot Tiresias avg": DEEPBOOT_FIGURES["tiresias"]})
        if "lyra" in runs:
            fig_loans(out / "deepboot_loans.png", {"lyra": runs["lyra"]}, plan, demand)
    return result


def register(app: Any, runner: Runner | None = None) -> None:
    """Add the `lyra-deepboot` command to a Typer app (the `reproduce` sub-command)."""
    import typer

    @app.command("lyra-deepboot")
    def lyra_deepboot_cmd(
            workload: Path = typer.Option(..., "--workload", help="DeepBoot workload CSV (peer-data/deepboot/"
                                                                    "workload/small.csv)"),
            out: Path = typer.Option(Path("results/lyra-deepboot"), "--out", help="output folder"),
            seed: int = typer.Option(0),
            hold: float = typer.Option(600.0, help="seconds an inference server must be idle before it is lent"),
            min_request: bool = typer.Option(False, help="elastic min = request (default: 1, DeepBoot's Aryl)"),
            max_factor: int = typer.Option(1, help="elastic max = factor × request (DeepBoot's Aryl: 1)"),
            models_restart: bool = typer.Option(False, help="our models' restart costs, not DeepBoot's delays"),
    ) -> None:
        """Our lyra and tiresias on DeepBoot's workload and 16×4 set-up beside DeepBoot's figures (deepboot.json)."""
        if runner is None:
            raise typer.BadParameter("no simulator runner was registered with this command")
        setup = DeepBootSetup(seed=seed, hold=hold, min_request=min_request, max_factor=max_factor,
                              deepboot_restart=not models_restart)
        res = deepboot_compare(runner, workload, setup, out, log=typer.echo)
        typer.echo(json.dumps({"avg_jct_training": res["avg_jct_training"], "deepboot": res["deepboot_figures"],
                               "lyra_beats": res.get("lyra_beats")}, indent=2))
