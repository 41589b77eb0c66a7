"""Our `pollux` policy against the Pollux artifact's own results on its eight workloads (16 × 4 T4).

Reference: petuum/adaptdl `osdi21-artifact`, `simulator/results-jobload/pollux-<load>/summary.json` (copied to
`peer-data/adaptdl-pollux/reference-results/`): the average JCT per workload of one artifact run per load.
Workloads: `workloads/workload-N.csv` at 1.0× load (bundled), `workloads-<load>/` for the other loads, read
from peer-data. Pollux is stochastic (the artifact's own runs vary by about ±5 %), so ours is averaged over
seeds. Bars (issue 14): 1.0× mean within ±5 %, every 1.0× workload within ±10 %, the 0.5× and 2.0× means
within ±10 %.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from elastisched.core.errors import ConfigError
from elastisched.experiments.base import (
    Experiment,
    ExperimentResult,
    ProgressFactory,
    Table,
    Verdict,
    register_experiment,
)
from elastisched.policies.pollux.policy import PATIENCE

WORKLOADS = tuple(f"workload-{i}" for i in range(1, 9))
BARS = {"mean": 0.05, "workload": 0.10, "other_load": 0.10}


def default_peer_dir() -> Path:
    """`$ELASTISCHED_PEER_DATA/adaptdl-pollux`, else `<repo>/../shared/peer-data/adaptdl-pollux`."""
    root = os.environ.get("ELASTISCHED_PEER_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[3] / ".." / "shared" / "peer-data"
    return base / "adaptdl-pollux"


def reference(peer: Path, load: str) -> dict[str, float]:
    path = peer / "reference-results" / "results-jobload" / f"pollux-{load}" / "summary.json"
    if not path.exists():
        raise ConfigError("peer_data", str(peer), f"missing {path.relative_to(peer)} (Pollux artifact results)")
    return {k: float(v) for k, v in json.loads(path.read_text())["avgs"].items()}


def workload_path(peer: Path, load: str, name: str) -> Path:
    folder = "workloads" if load == "1.0" else f"workloads-{load}"
    path = peer / folder / f"{name}.csv"
    if not path.exists():
        raise ConfigError("peer_data", str(peer), f"missing {folder}/{name}.csv")
    return path


def run_one(args: tuple[str, str, int, str, int, int, int | None]) -> dict[str, Any]:
    """One simulation (a process-pool task): our pollux on one workload file, one seed."""
    from elastisched.policies.base import make_policy
    from elastisched.sim import SimConfig, simulate
    from elastisched.sim.runner import setup

    path, cluster, seed, name, generations, pop, patience = args
    s = setup(path, cluster)
    t0 = time.process_time()
    policy = make_policy("pollux", generations=generations, pop_size=pop, patience=patience)
    r = simulate(s.workload, policy, s.nodes, s.models, SimConfig(seed=seed))
    return {"workload": name, "seed": seed, "avg_jct": float(r.summary["avg_jct"]),
            "p95_jct": float(r.summary["p95_jct"]), "makespan": float(r.summary["makespan"]),
            "restarts": int(r.summary["restarts"]), "rounds": int(r.summary["rounds"]),
            "cpu_s": time.process_time() - t0}


@dataclass(frozen=True)
class PolluxPolicyConfig:
    seeds: tuple[int, ...] = (0, 1, 2)
    workloads: tuple[str, ...] = WORKLOADS
    loads: tuple[str, ...] = ("1.0", "0.5", "2.0")
    cluster: str = "16x4:t4"
    peer_data: Path | None = None  # default: default_peer_dir()
    workers: int = 1
    generations: int = 100
    pop_size: int = 100
    patience: int | None = PATIENCE


@register_experiment
class PolluxPolicyExperiment(Experiment):
    name = "pollux-policy"
    title = "Our Pollux policy vs the Pollux artifact (eight workloads, 16x4 T4, loads 0.5x/1.0x/2.0x)"
    paper = ("Qiao et al., Pollux, OSDI'21, §5.3 Fig. 8 (job load); artifact petuum/adaptdl osdi21-artifact "
             "simulator/results-jobload/pollux-*/summary.json")
    Config = PolluxPolicyConfig

    def run(self, config: PolluxPolicyConfig, progress: ProgressFactory | None = None) -> ExperimentResult:
        peer = config.peer_data or default_peer_dir()
        refs = {load: reference(peer, load) for load in config.loads}
        tasks = [(str(workload_path(peer, load, w)), config.cluster, seed, f"{load}/{w}", config.generations,
                  config.pop_size, config.patience)
                 for load in config.loads for w in config.workloads for seed in config.seeds]
        cb = progress("pollux-policy") if progress else None
        runs: list[dict[str, Any]] = []
        if config.workers > 1:
            with ProcessPoolExecutor(config.workers) as pool:
                for i, r in enumerate(pool.map(run_one, tasks)):
                    runs.append(r)
                    if cb:
                        cb(0.0, i + 1, len(tasks))
        else:
            for i, t in enumerate(tasks):
                runs.append(run_one(t))
                if cb:
                    cb(0.0, i + 1, len(tasks))
        return summarise(config, refs, runs)


def summarise(config: PolluxPolicyConfig, refs: dict[str, dict[str, float]],
              runs: list[dict[str, Any]]) -> ExperimentResult:
    """Per-workload means over seeds, errors against the artifact, verdicts, tables, a figure."""
    import numpy as np

    from elastisched.report import plots

    verdicts: list[Verdict] = []
    tables: list[Table] = []
    loads: dict[str, Any] = {}
    figures: dict[str, bytes] = {}
    for load in config.loads:
        rows = []
        ours: dict[str, float] = {}
        for w in config.workloads:
            vals = [r["avg_jct"] for r in runs if r["workload"] == f"{load}/{w}"]
            ours[w] = float(np.mean(vals))
            ref = refs[load][w]
            rows.append({"workload": w, "ours": ours[w], "min": min(vals), "max": max(vals), "artifact": ref,
                         "error": ours[w] / ref - 1,
                         "cpu_s": float(np.mean([r["cpu_s"] for r in runs if r["workload"] == f"{load}/{w}"]))})
        mean_ours = float(np.mean(list(ours.values())))
        mean_ref = float(np.mean([refs[load][w] for w in config.workloads]))
        err = mean_ours / mean_ref - 1
        worst = max((r["error"] for r in rows), key=abs)
        mine = [r for r in runs if r["workload"].startswith(f"{load}/")]
        seed_means = [float(np.mean([r["avg_jct"] for r in mine if r["seed"] == s])) for s in config.seeds]
        loads[load] = {"ours": ours, "reference": {w: refs[load][w] for w in config.workloads}, "mean": mean_ours,
                       "reference_mean": mean_ref, "mean_error": err, "worst_error": worst,
                       "seed_means": seed_means}
        rows.append({"workload": "mean", "ours": mean_ours, "min": min(seed_means), "max": max(seed_means),
                     "artifact": mean_ref, "error": err, "cpu_s": float(np.mean([r["cpu_s"] for r in rows]))})
        tables.append(Table({"workload": "workload", "ours": "ours, mean over seeds (s)",
                             "min": "min over seeds (s)", "max": "max over seeds (s)",
                             "artifact": "Pollux artifact (s)",
                             "error": "error (fraction)", "cpu_s": "CPU per run (s)"}, rows,
                            f"pollux avg JCT at {load}x load"))
        bar = BARS["mean"] if load == "1.0" else BARS["other_load"]
        verdicts.append(Verdict(f"{load}x load: mean avg JCT vs artifact (error)", err, f"within ±{bar:.0%}",
                                abs(err) <= bar))
        if load == "1.0":
            verdicts.append(Verdict("1.0x load: worst per-workload error", worst,
                                    f"within ±{BARS['workload']:.0%}", abs(worst) <= BARS["workload"]))
        figures[f"pollux_{load}.png"] = plots.bar(ours, f"pollux avg JCT, {load}x load (ours vs artifact)",
                                                  "avg JCT (s)", reference=refs[load], xlabel="Pollux workload",
                                                  reference_label="Pollux artifact")
    cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(config).items()}
    return ExperimentResult(PolluxPolicyExperiment.name, PolluxPolicyExperiment.title, cfg, verdicts, tables,
                            figures, {"loads": loads, "runs": runs})
