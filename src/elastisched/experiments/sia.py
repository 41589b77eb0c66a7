"""Sia (SOSP'23) fidelity: sia, its Gavel and its (heterogeneity-unaware) Pollux on Sia's Saturn workloads.

Set-up of Sia's artifact (siasosp23/artifacts `sia-simulator/`, read, not copied): `simulator_config.py`
(cluster 6×4 T4 "aws" + 2×8 A100 "dgx-ext" + 3×8 RTX 2080Ti "rtx"; calibration `SLOWDOWNS`),
`applications.py` (epochs per application, `rescale_time` = restart cost per application),
`run_experiment.sh` (sia: p = −0.5, λ_n = 1.1, λ_a = 0.01, 60 s rounds; gavel: 360 s rounds) and
`multi_simulator.py` / `cluster.py` (Gavel jobs rigid at their requested size and batch; ncf batch 32,768
under Sia). Reference averages: Sia's artifact on `workloads/saturn/workload-1.csv` gives 2,091.1 s (sia),
6,474.2 s (gavel), 3,043.4 s (pollux) (`../shared/peer-data/README.md`).

Readings (docs/peers.md): the artifact slows every job's goodput by `1/SLOWDOWNS[app]` (a calibration
against its testbed); we multiply the job's work by the same factor (`JobSpec.work_scale`), which is the
same thing for progress and leaves restart delays alone, as there. Sia's per-type profiles are used for
every GPU type (not merged with the bundled Pollux T4 ones), with each trace's own micro-batch range (no
Pollux yolov3 override).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastisched.core.cluster import parse_cluster
from elastisched.core.errors import ConfigError
from elastisched.experiments.base import (
    Experiment,
    ExperimentResult,
    ProgressFactory,
    Table,
    Verdict,
    register_experiment,
)
from elastisched.models.profiles import load_sia
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy, make_policy, registered
from elastisched.sim import SimConfig, SimResult, simulate
from elastisched.workloads.pollux import load_pollux_csv
from elastisched.workloads.schema import Workload

SIA_CLUSTER = "6x4:t4,2x8:a100,3x8:rtx"
#: artifact `simulator_config.SLOWDOWNS`: real runs were this much slower than the simulator
SLOWDOWNS: dict[str, float] = {"cifar10": 1.8, "imagenet": 1.2, "yolov3": 1.2, "bert": 1.2, "deepspeech2": 1.2,
                               "ncf": 1.5, "gpt_pmp": 1.0}
#: artifact `applications.py` `rescale_time` (checkpoint-restore seconds per application)
RESCALE_TIME: dict[str, float] = {"cifar10": 50.0, "deepspeech2": 25.0, "bert": 120.0, "yolov3": 80.0,
                                  "imagenet": 250.0, "ncf": 15.0}
#: Sia's artifact on Saturn workload-1 (avg JCT, s)
REFERENCE: dict[str, float] = {"sia": 2091.1, "gavel": 6474.2, "pollux": 3043.4}
POLICY_OPTIONS: dict[str, dict[str, Any]] = {
    "sia": {},
    "gavel": {"interval": 360.0, "objective": "max_sum_throughput"},  # the artifact's gavel_default_policy
    "pollux": {},
}


def default_root() -> Path:
    return Path(__file__).resolve().parents[3] / ".." / "shared" / "peer-data" / "sia"


def sia_models(traces: Path) -> PerfModels:
    """Sia's per-type profiles, its restart costs, each trace's own micro-batch range."""
    models = PerfModels(load_sia(traces), restart_cost=dict(RESCALE_TIME))
    for app in models.apps.values():
        app.max_local_bsz = int(next(iter(app.profile.throughput.values())).placements["local_bsz"].max())
    return models


def saturn_workload(path: Path, models: PerfModels) -> Workload:
    """A Saturn CSV with each job's work scaled by the artifact's calibration slowdown."""
    wl = load_pollux_csv(path, models.apps)
    jobs = tuple(dataclasses.replace(j, work_scale=j.work_scale * SLOWDOWNS.get(j.application, 1.0))
                 for j in wl.jobs)
    return dataclasses.replace(wl, jobs=jobs)


def run_one(policy: str, workload: Workload, models: PerfModels, seed: int = 0,
            progress: Callable[[float, int, int], None] | None = None) -> SimResult:
    pol: Policy = make_policy(policy, **POLICY_OPTIONS.get(policy, {}))
    res = simulate(workload, pol, parse_cluster(SIA_CLUSTER), models, SimConfig(seed=seed, progress=progress))
    res.summary["cluster_spec"] = SIA_CLUSTER
    return res
