"""`reproduce pollux`: fidelity against a peer — our Tiresias / Optimus on the eight Pollux workloads
(16x4 T4) vs the Pollux artifact's own average JCTs.

The artifact's results (`results-jobload/<policy>-1.0/summary.json`, bundled as
`workloads/data/pollux/reference/`) give the average JCT per workload for its simulator. Verdicts: the
mean over the eight workloads within ±5 % of the artifact's mean, every workload within ±10 %
(the bars `tests/sim/test_fidelity.py` enforces).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from importlib import resources
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
from elastisched.models.registry import PerfModels
from elastisched.policies.base import make_policy
from elastisched.report.plots import bar
from elastisched.sim import SimConfig, simulate
from elastisched.workloads import load_workload

WORKLOADS = tuple(f"workload-{i}" for i in range(1, 9))
MEAN_BAR, WORKLOAD_BAR = 0.05, 0.10


def reference(policy: str) -> dict[str, float]:
    """The Pollux artifact's average JCT per workload for `policy` (bundled summary)."""
    path = resources.files("elastisched.workloads") / "data" / "pollux" / "reference" / f"{policy}-1.0.json"
    if not path.is_file():
        raise ConfigError("policies", policy, "the Pollux artifact has no reference result for it")
    return {k: float(v) for k, v in json.loads(path.read_text())["avgs"].items()}


@dataclass(frozen=True)
class PolluxConfig:
    policies: tuple[str, ...] = ("tiresias", "optimus")  # policies with a reference result in the artifact
    workloads: tuple[str, ...] = WORKLOADS  # Pollux workloads (bundled)
    cluster: str = "16x4:t4"  # the artifact's cluster
    seed: int = 0  # random seed


@register_experiment
class PolluxFidelity(Experiment):
    name = "pollux"
    title = "Fidelity against the Pollux artifact: average JCT on the eight Pollux workloads (16x4 T4)"
    paper = "Pollux (OSDI'21) artifact, results-jobload/<policy>-1.0/summary.json"
    Config = PolluxConfig

    def run(self, config: PolluxConfig, progress: ProgressFactory | None = None) -> ExperimentResult:
        models, nodes = PerfModels.load(), parse_cluster(config.cluster)
        refs = {p: reference(p) for p in config.policies}
        data: dict[str, Any] = {"policies": {}}
        verdicts, tables, figures = [], [], {}
        for pol in config.policies:
            ref, ours = refs[pol], {}
            for w in config.workloads:
                wl = load_workload(f"pollux:{w}", models)
                cb = progress(f"{pol} {w}") if progress else None
                r = simulate(wl, make_policy(pol), nodes, models, SimConfig(seed=config.seed, progress=cb))
                ours[w] = float(r.summary["avg_jct"])
            err = {w: ours[w] / ref[w] - 1 for w in ours}
            mean_ours = sum(ours.values()) / len(ours)
            mean_ref = sum(ref[w] for w in ours) / len(ours)
            worst = max(err.values(), key=abs)
            data["policies"][pol] = {"avg_jct": ours, "reference": {w: ref[w] for w in ours}, "error": err,
                                     "mean_avg_jct": mean_ours, "reference_mean": mean_ref,
                                     "mean_error": mean_ours / mean_ref - 1, "worst_error": worst}
            verdicts += [Verdict(f"{pol}: mean avg JCT error vs the artifact", 100 * (mean_ours / mean_ref - 1),
                                 f"within ±{100 * MEAN_BAR:g}", abs(mean_ours / mean_ref - 1) <= MEAN_BAR, "%"),
                         Verdict(f"{pol}: worst workload's avg JCT error", 100 * worst,
                                 f"within ±{100 * WORKLOAD_BAR:g}", abs(worst) <= WORKLOAD_BAR, "%")]
            rows = [{"workload": w, "ours": ours[w], "ref": ref[w], "err": 100 * err[w]} for w in ours]
            rows.append({"workload": "mean", "ours": mean_ours, "ref": mean_ref,
                         "err": 100 * (mean_ours / mean_ref - 1)})
            tables.append(Table({"workload": "workload", "ours": "elastisched avg JCT (s)",
                                 "ref": "Pollux artifact avg JCT (s)", "err": "error (%)"}, rows,
                                f"{pol}: average JCT per workload"))
            figures[f"{pol}.png"] = bar(ours, f"{pol}: average JCT per Pollux workload, elastisched vs artifact",
                                        "average JCT (s)", reference={w: ref[w] for w in ours},
                                        xlabel="Pollux workload", reference_label="Pollux artifact")
        return ExperimentResult(self.name, self.title, dataclasses.asdict(config), verdicts, tables, figures, data)
