"""`elastisched reproduce jabas`: the registered `jabas` policy in the event simulator vs adaptive-batching
baselines on heterogeneous GPUs (JABAS, EuroSys '25, the abstract's time and cost claims; ``docs/jabas.md``).

Set-up (issue 5's, now through ``elastisched.sim``): one training job per Pollux/Sia application, alone on half
of Sia's cluster (3×4 T4, 2×4 A100, 3×4 RTX 2080Ti; the types its application is profiled on), submitted at
0 with its smallest validated batch, elastic up to every GPU.  Per application and strategy one simulation:

* ``jabas-time`` / ``jabas-cost`` — ``JabasPolicy`` (registered as ``jabas``), time (release) or cost (ours)
  objective;
* ``static`` — ``JabasPolicy(adaptive=False, autoscale=False)``: JABAS's first plan at the initial batch, kept;
* ``even split`` — adaptive batching with the same SimiGrad rule, one worker per GPU with ``GBS/N`` samples
  each on every server (the simulator's own rule: the slowest GPU sets the pace); the reference baseline;
* ``fastest type`` — the same on the servers of the GPU type with the best even-split throughput.

Readings (ours, ``docs/jabas.md``): a batch change on the same GPUs is applied in place (``reconfigure_cost``,
0 s; the release re-solves IIDP without a restart) and a change of GPUs costs the application's restart;
progress counts Pollux statistical efficiency for every strategy alike (the simulator's work unit).  Price per
GPU-hour = $3.06 × TFLOPS / 14.13 (the release's cost model); cost = Σ price × GPUs held × time, restarts
included.  The runs have no random input: every seed gives the same figures (``by_seed_time_reduction``
records them, ``seed_spread`` is their range).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from elastisched.core.errors import ConfigError
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobSpec, JobView, NodeView
from elastisched.experiments.base import (
    Experiment,
    ExperimentResult,
    ProgressFactory,
    Table,
    Verdict,
    register_experiment,
)
from elastisched.models.application import POLLUX_EPOCHS, Application
from elastisched.models.iidp.config import ServerSpec
from elastisched.models.profiles import load_pollux_bundled, load_sia, merge
from elastisched.models.registry import PerfModels
from elastisched.policies.base import Policy, PolicyContext
from elastisched.policies.jabas.autoscale import GPU_TFLOPS, type_price
from elastisched.policies.jabas.policy import JabasPolicy
from elastisched.sim import SimConfig, Simulator
from elastisched.workloads.schema import Workload

#: Half of Sia's 24 T4 + 16 A100 + 24 RTX 2080Ti, in 4-GPU servers (Sia cluster; issue 5).
SIA_MIX: tuple[tuple[str, int], ...] = (("t4", 3), ("a100", 2), ("rtx", 3))
SIA_APPS: tuple[str, ...] = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
STRATEGIES: tuple[str, ...] = ("jabas-time", "jabas-cost", "static", "even split", "fastest type")
BASELINE = "even split"
PAPER = {"time_reduction": 0.333, "cost_reduction": 0.542}


def default_profiles() -> Path | None:
    """``$ELASTISCHED_PEER_DATA/sia/traces``, else ``<checkout>/../shared/peer-data/sia/traces``, if present."""
    root = os.environ.get("ELASTISCHED_PEER_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[3] / ".." / "shared" / "peer-data"
    p = base / "sia" / "traces"
    return p if p.is_dir() else None


@dataclass(frozen=True)
class JabasConfig:
    profiles: Path | None = None  # Sia traces directory (per-GPU-type profiles); None = default_profiles()
    apps: tuple[str, ...] = SIA_APPS
    gamma: float = 0.1  # similarity target γ
    epochs: int | None = None  # cap on each application's epochs (quick runs); None = the Pollux artifact's
    reconfigure_cost: float = 0.0  # seconds for a batch change on the same GPUs (in place)
    seeds: tuple[int, ...] = (0, 1, 2)  # the project's headline seeds; the runs have no random input


class EvenSplitPolicy(JabasPolicy):
    """Baseline: the same SimiGrad batch schedule on fixed GPUs, one worker per GPU with ``GBS/N`` samples each
    (no IIDP: the allocation carries only the global batch, and the simulator runs it at the slowest type)."""

    name = "even-split"

    def __init__(self, gpu_types: tuple[str, ...] = (), similarity_target: float = 0.1) -> None:
        super().__init__(similarity_target=similarity_target, autoscale=False)
        self.gpu_types = gpu_types

    def plan(self, job: JobView, app: Application, nodes: Sequence[NodeView], avail: Mapping[str, int],
             ntype: Mapping[str, str], share: int, deadline: float | None = None) -> Allocation | None:
        """One candidate (every free GPU of the allowed types), so the budget's `deadline` has nothing to cut."""
        gbs, _, _ = self.batch_now(job, app)
        self._jobs[job.spec.job_id]["target"] = gbs
        placement = tuple((n.node_id, avail[n.node_id]) for n in nodes
                          if avail.get(n.node_id, 0) > 0 and (not self.gpu_types or n.gpu_type in self.gpu_types)
                          and n.gpu_type in app.gpu_types)
        if not placement:
            return None
        return Allocation(placement=placement, batch_size=max(gbs, sum(g for _, g in placement)))

    def reconfigure(self, job: JobView, app: Application, ntype: Mapping[str, str]) -> Allocation | None:
        gbs, _, _ = self.batch_now(job, app)
        new = max(gbs, job.allocation.gpus)
        if new == job.allocation.batch_size:
            return None
        return Allocation(placement=job.allocation.placement, batch_size=new)


class Recorder(Policy):
    """Passes every round to ``inner`` and records ``(time, placement, batch)`` of each job it decides."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]
        self.interval = inner.interval  # type: ignore[misc]
        self.elastic = inner.elastic  # type: ignore[misc]
        self.needs_progress = inner.needs_progress  # type: ignore[misc]
        self.log: list[tuple[float, tuple[tuple[str, int], ...], int | None]] = []

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        d = self.inner.schedule(snap, ctx)
        for jid in snap.jobs:
            a = d.allocations.get(jid)
            self.log.append((snap.now, a.placement if a else (), a.batch_size if a else None))
        return d


def load_models(cfg: JabasConfig) -> PerfModels:
    prof = cfg.profiles or default_profiles()
    if prof is None or not Path(prof).is_dir():
        raise ConfigError("profiles", str(prof), "Sia traces directory not found (peer-data/sia/traces)")
    profiles = merge(load_pollux_bundled(), load_sia(Path(prof)))
    epochs = {a: min(cfg.epochs, POLLUX_EPOCHS.get(a, cfg.epochs)) for a in profiles} if cfg.epochs else None
    return PerfModels(profiles, epochs=epochs)


def cluster_for(app: Application) -> tuple[NodeView, ...]:
    """The Sia half-mix restricted to the GPU types the application is profiled on."""
    out: list[NodeView] = []
    for t, k in SIA_MIX:
        if t in app.gpu_types:
            out += [NodeView(f"{t}{i}", t, 4, index=len(out)) for i in range(k)]
    return tuple(out)


def fastest_type(app: Application, nodes: Sequence[NodeView]) -> str:
    """GPU type whose servers give the best even-split throughput at a mid-range GBS (issue 5's (c))."""
    from elastisched.models.iidp.pollux import PolluxIIDP

    solver, gbs = PolluxIIDP(app), (app.init_batch_size * app.max_batch_size) ** 0.5
    types = sorted({n.gpu_type for n in nodes})

    def thr(t: str) -> tuple[float, int]:
        servers = [ServerSpec(n.node_id, t, GPU_TFLOPS.get(t, 14.13), n.num_gpus, 0.0, 0.0)
                   for n in nodes if n.gpu_type == t]
        return gbs / solver.uniform_time(servers, gbs), sum(s.num_gpus for s in servers)

    return max(types, key=thr)


def make_policy(strategy: str, app: Application, nodes: Sequence[NodeView], gamma: float) -> Policy:
    if strategy == "jabas-time":
        return JabasPolicy("time", similarity_target=gamma)
    if strategy == "jabas-cost":
        return JabasPolicy("cost", similarity_target=gamma)
    if strategy == "static":
        return JabasPolicy("time", similarity_target=gamma, adaptive=False, autoscale=False)
    if strategy == BASELINE:
        return EvenSplitPolicy(similarity_target=gamma)
    if strategy == "fastest type":
        return EvenSplitPolicy((fastest_type(app, nodes),), similarity_target=gamma)
    raise ConfigError("strategy", strategy, f"unknown; known: {', '.join(STRATEGIES)}")


def run_one(models: PerfModels, app_name: str, strategy: str, cfg: JabasConfig, seed: int = 0,
            progress: Callable[[float, int, int], None] | None = None) -> dict[str, Any]:
    """One job of ``app_name`` alone on its cluster under ``strategy``: time, cost, restarts, timelines."""
    app = models.app(app_name)
    nodes = cluster_for(app)
    total = sum(n.num_gpus for n in nodes)
    spec = JobSpec(f"{app_name}-0", 0.0, app_name, 1, app.init_batch_size, min_gpus=1, max_gpus=total,
                   elastic=True)
    digest = hashlib.sha256(repr((spec, nodes)).encode()).hexdigest()[:16]
    rec = Recorder(make_policy(strategy, app, nodes, cfg.gamma))
    sim = Simulator(Workload(f"jabas-{app_name}", (spec,), "experiments/jabas", digest), rec, nodes, models,
                    SimConfig(seed=seed, reconfigure_cost=cfg.reconfigure_cost, progress=progress))
    res = sim.run()
    if res.summary["n_finished"] != 1:
        raise RuntimeError(f"{app_name}/{strategy}: the job did not finish ({res.summary['unfinished']})")
    end = float(res.jobs["end"].iloc[0])
    ntype = {n.node_id: n.gpu_type for n in nodes}
    steps = _changes(rec.log)
    cost = gpu_s = 0.0
    for (t0, pl, _), (t1, _, _) in zip(steps, [*steps[1:], (end, (), None)], strict=True):
        cost += sum(type_price(ntype[n]) * g for n, g in pl) * (t1 - t0) / 3600.0
        gpu_s += sum(g for _, g in pl) * (t1 - t0)
    return {"strategy": strategy, "policy": type(rec.inner).__name__, "time_s": end, "time_h": end / 3600.0,
            "cost_usd": cost, "restarts": int(res.jobs["restarts"].iloc[0]), "mean_gpus": gpu_s / end if end else 0.0,
            "batch_changes": sum(1 for a, b in itertools.pairwise(steps) if a[2] != b[2]),
            "timeline": [(t, sum(g for _, g in pl), "+".join(f"{n}:{g}" for n, g in pl), b) for t, pl, b in steps],
            "wall_s": res.summary["wall_seconds"], "rounds": res.summary["rounds"]}


def _changes(log: Sequence[tuple[float, tuple[tuple[str, int], ...], int | None]]) -> list[tuple[float, Any, Any]]:
    out: list[tuple[float, Any, Any]] = []
    for t, pl, b in log:
        if not out or (sorted(pl), b) != (sorted(out[-1][1]), out[-1][2]):
            out.append((t, pl, b))
    return out


def summarize(runs: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """Per-model reductions of both JABAS variants vs the even-split baseline, and their means."""
    if not runs:
        raise ConfigError("apps", "", "no application was run")
    red: dict[str, dict[str, list[float]]] = {v: {"time": [], "cost": []} for v in ("jabas-time", "jabas-cost")}
    per_model: dict[str, dict[str, dict[str, float]]] = {}
    for m, r in runs.items():
        base = r[BASELINE]
        per_model[m] = {}
        for s, x in r.items():
            tr, cr = 1.0 - x["time_s"] / base["time_s"], 1.0 - x["cost_usd"] / base["cost_usd"]
            per_model[m][s] = {"time_reduction": tr, "cost_reduction": cr}
            if s in red:
                red[s]["time"].append(tr)
                red[s]["cost"].append(cr)
    mean = {v: {k: sum(d[k]) / len(d[k]) for k in ("time", "cost")} for v, d in red.items()}
    return {"time_reduction": mean["jabas-time"]["time"], "cost_reduction": mean["jabas-time"]["cost"],
            "cost_aware": {"time_reduction": mean["jabas-cost"]["time"], "cost_reduction": mean["jabas-cost"]["cost"]},
            "reductions": per_model, "paper": PAPER}


@register_experiment
class JabasExperiment(Experiment):
    name = "jabas"
    title = "JABAS: adaptive batching + IIDP + auto-scaling on heterogeneous GPUs (event simulator)"
    paper = "JABAS, EuroSys '25 (abstract: 33.3 % less time, 54.2 % less cost vs adaptive training baselines)"
    Config = JabasConfig

    def run(self, config: JabasConfig, progress: ProgressFactory | None = None) -> ExperimentResult:
        if not config.seeds:
            raise ConfigError("seeds", "", "give at least one seed")
        models = load_models(config)
        for a in config.apps:
            models.app(a)  # unknown application: ConfigError naming it, before any run
        runs: dict[str, dict[str, dict[str, Any]]] = {}
        by_seed: dict[int, float] = {}
        for seed in config.seeds:
            for a in config.apps:
                for s in STRATEGIES:
                    cb = progress(f"{a} / {s} (seed {seed})") if progress else None
                    r = run_one(models, a, s, config, seed, cb)
                    if cb is not None:
                        cb(r["time_s"], 1, 1)
                    runs.setdefault(a, {})[s] = r
            by_seed[seed] = summarize(runs)["time_reduction"]
        doc = summarize(runs)
        doc["by_seed_time_reduction"] = by_seed
        doc["seed_spread"] = max(by_seed.values()) - min(by_seed.values())
        return ExperimentResult(self.name, self.title, {k: (str(v) if isinstance(v, Path) else v)
                                                         for k, v in asdict(config).items()},
                                verdicts=_verdicts(doc), tables=_tables(runs, doc), figures=_plots(runs),
                                data={**doc, "runs": runs})


def _verdicts(doc: Mapping[str, Any]) -> list[Verdict]:
    t, c = doc["time_reduction"], doc["cost_reduction"]
    return [Verdict("mean training-time reduction of jabas (time objective) vs even split", t, "≥ 0.30", t >= 0.30),
            Verdict("mean cost reduction of jabas (time objective) vs even split", c, "≥ 0.50", c >= 0.50)]


def _tables(runs: Mapping[str, Mapping[str, Mapping[str, Any]]], doc: Mapping[str, Any]) -> list[Table]:
    cols = {"model": "model", "strategy": "strategy", "time_h": "training time (h)", "cost_usd": "cost (USD)",
            "restarts": "restarts (count)", "mean_gpus": "mean GPUs held (GPUs)",
            "time_reduction": "time reduction vs even split (fraction)",
            "cost_reduction": "cost reduction vs even split (fraction)"}
    rows = [{"model": m, "strategy": s, **{k: x[k] for k in ("time_h", "cost_usd", "restarts", "mean_gpus")},
             **doc["reductions"][m][s]} for m, r in runs.items() for s, x in r.items()]
    mean = [{"objective": "time (release)", "time_reduction": doc["time_reduction"],
             "cost_reduction": doc["cost_reduction"]},
            {"objective": "cost (ours)", **doc["cost_aware"]},
            {"objective": "paper (abstract)", **PAPER}]
    return [Table({"objective": "jabas objective", "time_reduction": "mean time reduction (fraction)",
                   "cost_reduction": "mean cost reduction (fraction)"}, mean, "Mean reduction vs even split"),
            Table(cols, rows, "Per model and strategy (one training run each)")]


def _plots(runs: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, bytes]:
    """Global batch and GPUs held over time, one panel per model, one line per strategy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: dict[str, bytes] = {}
    for key, idx, ylabel, title in (("gbs.png", 3, "global batch (samples)", "Global batch size over time"),
                                    ("allocation.png", 1, "GPUs held (GPUs)", "GPUs held over time")):
        fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.4 * len(runs) + 0.6), squeeze=False)
        for ax, (m, r) in zip(axes[:, 0], runs.items(), strict=True):
            for s, x in r.items():
                tl = [p for p in x["timeline"] if p[idx] is not None]
                if not tl:
                    continue
                xs = [p[0] / 3600.0 for p in tl] + [x["time_h"]]
                ys = [p[idx] for p in tl] + [tl[-1][idx]]
                ax.step(xs, ys, where="post", label=s)
            ax.set_title(m)
            ax.set_xlabel("time (h)")
            ax.set_ylabel(ylabel)
            if idx == 3:
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(title)
        buf = io.BytesIO()
        fig.tight_layout(rect=(0.0, 0.0, 1.0, 0.98))
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        out[key] = buf.getvalue()
    return out
