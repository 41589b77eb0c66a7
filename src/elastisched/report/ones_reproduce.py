"""`elastisched reproduce ones`: the ONES artifact experiment in the simulator (docs/ones.md "Reproduction").

The first 50 jobs of `trace_1.csv` on 16x4 T4 for ones, tiresias, optimus and fifo; writes `ones.json`
(per-policy mean / median / p90 JCT, mean execution and queuing time, `jct_ratio_vs_tiresias`,
`jct_ratio_vs_optimus` = baseline mean ÷ ONES mean, and the artifact's own figures from `out/*_profile.csv`),
box plots and CDFs of JCT / execution / queuing time (as the artifact's `measurement.py`), and report.html.
Execution time = time holding GPUs (restarts included); queuing time = JCT − execution (artifact definition).

Costs (the same for every policy): a launch or resume pays `restart_cost` (30 s, the simulator's default); an
in-place resize that keeps some of the job's GPUs pays `resize_cost` (`SimConfig.resize_cost`). ONES's
artifact resizes in memory (ones.md §4: pause vote, new workers launched, parameter broadcast, regroup); the
code does not measure that cost, so we use 8 s, the cold-start rescale downtime our own training library
measured (docs/train.md "Benchmarks": median 7.9 s; the artifact launches fresh workers on scale-out, it
has no warm pool), with 1 s (our warm-pool figure) as a sensitivity run in docs/ones.md.

`ones` runs with `ones_options` (default `TUNED`: deviation D1, new jobs start at their request within one
node, the best of the ablation in docs/ones.md); the row `ones-faithful` runs the faithful configuration
(every deviation off) beside it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import pandas as pd
import typer

from elastisched import __version__
from elastisched.core.cluster import parse_cluster
from elastisched.core.errors import ConfigError
from elastisched.core.types import NodeView
from elastisched.models.application import packed_shape
from elastisched.models.registry import PerfModels
from elastisched.policies.base import make_policy
from elastisched.policies.ones import OnesPolicy, job_batch
from elastisched.report import html
from elastisched.report.compare import write_files
from elastisched.sim import SimConfig, SimResult, simulate
from elastisched.workloads.ones import load_ones_csv
from elastisched.workloads.schema import Workload

POLICIES = ("ones", "tiresias", "optimus", "fifo", "ones-faithful")
ARTIFACT = {"ones": "ONES", "tiresias": "TIRESIAS", "optimus": "OPTIMUS", "drl": "DRL"}
DEFAULT_RESTART_COST = 30.0  # seconds per launch / resume, for every policy (the simulator's default)
DEFAULT_RESIZE_COST = 8.0  # seconds per in-place resize, for every policy (module docstring)
#: deviations from the artifact used by default in the reproduction (docs/ones.md D1–D4)
TUNED: dict[str, Any] = {"start": "node"}
#: the faithful configuration (artifact behaviour plus the four bug fixes)
FAITHFUL: dict[str, Any] = {}


def default_data_dir() -> Path:
    """`$ELASTISCHED_ONES_DATA`, else `<repo>/../shared/peer-data/ones`."""
    env = os.environ.get("ELASTISCHED_ONES_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / ".." / "shared" / "peer-data" / "ones"


def stats(jct: np.ndarray, exe: np.ndarray) -> dict[str, float]:
    q = jct - exe
    return {"mean_jct": float(jct.mean()), "median_jct": float(np.median(jct)),
            "p90_jct": float(np.percentile(jct, 90)), "max_jct": float(jct.max()), "mean_exec": float(exe.mean()),
            "mean_queue": float(q.mean()), "n": int(jct.size)}


def artifact_results(data: Path) -> dict[str, dict[str, float]]:
    """The artifact's per-scheduler figures from `out/<NAME>_profile.csv` (JCT = completion_time)."""
    out: dict[str, dict[str, float]] = {}
    for ours, name in ARTIFACT.items():
        f = data / "out" / f"{name}_profile.csv"
        if f.is_file():
            df = pd.read_csv(f)
            out[ours] = stats(df["completion_time"].to_numpy(float), df["execution_time"].to_numpy(float))
    return out


def isolated_bound(wl: Workload, models: PerfModels, nodes: Sequence[NodeView], launch_cost: float,
                   batch: str = "ones") -> np.ndarray:
    """Per job, a lower bound on its JCT under any scheduler in this simulator: the job alone on the cluster
    from its submission, at the best GPU count (1..all, packed node by node) separately for every epoch,
    with free resizes, plus one launch. `batch`: "ones" = the ONES batch rule (`job_batch`), "fixed" = the
    job's requested global batch (Tiresias / Optimus). Homogeneous clusters only (the first node's type)."""
    capacity, per_node, gpu_type = sum(n.num_gpus for n in nodes), nodes[0].num_gpus, nodes[0].gpu_type
    out = np.empty(len(wl.jobs))
    for i, spec in enumerate(wl.jobs):
        app = models.app(spec.application)
        best = np.full(len(app.epoch_end) - 1, np.inf)
        for n in range(1, capacity + 1):
            cfg = app.batch_config(n, job_batch(spec, n) if batch == "ones" else spec.batch_size)
            t_iter = app.iteration_time(gpu_type, packed_shape(n, per_node), cfg)
            gains = app.efficiency.gains(cfg.global_batch)[: len(best)]
            best = np.minimum(best, np.diff(app.epoch_end) / gains * t_iter * spec.work_scale)
        out[i] = float(best.sum()) + launch_cost
    return out


def _series(r: SimResult) -> dict[str, np.ndarray]:
    jct = r.jobs["jct"].to_numpy(float)
    exe = r.jobs["run_time"].to_numpy(float)
    return {"JCT": jct, "execution time": exe, "queuing time": jct - exe}


def _plots(results: Mapping[str, SimResult]) -> dict[str, bytes]:
    from elastisched.report.plots import _png, plt

    files: dict[str, bytes] = {}
    series = {p: _series(r) for p, r in results.items()}
    for metric in ("JCT", "execution time", "queuing time"):
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        a1.boxplot([series[p][metric] for p in series])
        a1.set_xticks(range(1, len(series) + 1), list(series))
        a1.set_ylabel(f"{metric} (s)")
        a1.set_title(f"{metric}: box plot")
        for p, s in series.items():
            x = np.sort(s[metric])
            a2.step(np.maximum(x, 1e-3), np.arange(1, x.size + 1) / max(x.size, 1), where="post", label=p)
        if metric != "queuing time":
            a2.set_xscale("log")
        a2.set_xlabel(f"{metric} (s)")
        a2.set_ylabel("fraction of jobs")
        a2.set_title(f"{metric}: CDF")
        a2.legend()
        a2.grid(alpha=0.3)
        files[f"{metric.split()[0].lower()}.png"] = _png(fig)
    return files


def run_ones_reproduction(out: Path, data: Path | None = None, num_jobs: int = 50, seed: int = 0,
                          restart_cost: float = DEFAULT_RESTART_COST, policies: Sequence[str] = POLICIES,
                          ones_options: Mapping[str, Any] | None = None,
                          resize_cost: float | None = DEFAULT_RESIZE_COST) -> dict[str, Any]:
    """Run the experiment and write ones.json, the plots and report.html into `out`; returns ones.json."""
    data = Path(data) if data is not None else default_data_dir()
    trace, history = data / "traces" / "trace_1.csv", data / "traces" / "job_history.csv"
    for f in (trace, history):
        if not f.is_file():
            raise ConfigError("--data", str(data), f"missing {f.name}; point --data at the ONES artifact folder")
    if "ones" not in policies:
        raise ConfigError("--policies", ",".join(policies), "must include ones")
    models = PerfModels.load()
    wl = load_ones_csv(trace, history, models, num_jobs)
    nodes = parse_cluster("16x4:t4")
    opts = dict(TUNED if ones_options is None else ones_options)
    if opts == FAITHFUL:  # `ones` is already the faithful configuration
        policies = [p for p in policies if p != "ones-faithful"]
    results: dict[str, SimResult] = {}
    for name in policies:
        if name == "ones":
            pol = OnesPolicy(history=history, **opts)
        elif name == "ones-faithful":
            pol = OnesPolicy(history=history, **{**FAITHFUL, **({"refit": opts["refit"]} if "refit" in opts else {})})
        else:
            pol = make_policy(name)
        results[name] = simulate(wl, pol, nodes, models,
                                 SimConfig(seed=seed, restart_cost=restart_cost, resize_cost=resize_cost))
    ours = {p: {**stats(*(_series(r)[k] for k in ("JCT", "execution time"))),
                "restarts": int(r.summary["restarts"]), "gpu_utilization": float(r.summary["gpu_utilization"]),
                "finished": int(r.summary["n_finished"])} for p, r in results.items()}
    ref = artifact_results(data)
    ones_mean = ours["ones"]["mean_jct"]
    result: dict[str, Any] = {
        "workload": {"trace": str(trace), "digest": wl.digest, "jobs": len(wl)}, "cluster": "16x4:t4",
        "seed": seed, "restart_cost_s": restart_cost, "resize_cost_s": resize_cost, "version": __version__,
        "ones_options": opts, "policies": ours, "artifact": ref,
        "lower_bound_mean_jct": {b: float(isolated_bound(wl, models, nodes, restart_cost, b).mean())
                                 for b in ("ones", "fixed")},
        "jct_ratio_vs_tiresias": ours["tiresias"]["mean_jct"] / ones_mean if "tiresias" in ours else None,
        "jct_ratio_vs_optimus": ours["optimus"]["mean_jct"] / ones_mean if "optimus" in ours else None,
        "faithful_jct_ratio_vs_tiresias": ours["tiresias"]["mean_jct"] / ours["ones-faithful"]["mean_jct"]
        if {"tiresias", "ones-faithful"} <= ours.keys() else None,
        "faithful_jct_ratio_vs_optimus": ours["optimus"]["mean_jct"] / ours["ones-faithful"]["mean_jct"]
        if {"optimus", "ones-faithful"} <= ours.keys() else None,
        "artifact_jct_ratio_vs_tiresias": ref["tiresias"]["mean_jct"] / ref["ones"]["mean_jct"]
        if {"ones", "tiresias"} <= ref.keys() else None,
        "artifact_jct_ratio_vs_optimus": ref["optimus"]["mean_jct"] / ref["ones"]["mean_jct"]
        if {"ones", "optimus"} <= ref.keys() else None,
    }
    cols = ["policy", "mean_jct", "median_jct", "p90_jct", "mean_exec", "mean_queue", "artifact mean_jct",
            "artifact mean_exec", "artifact mean_queue", "restarts"]
    rows = [{"policy": p, **{k: v for k, v in s.items()}, **{f"artifact {k}": ref.get(p, {}).get(k, "")
                                                           for k in ("mean_jct", "mean_exec", "mean_queue")}}
            for p, s in ours.items()]
    rows += [{"policy": f"{p} (artifact only)", **{f"artifact {k}": ref[p][k] for k in ("mean_jct", "mean_exec",
                                                                                      "mean_queue")}}
             for p in ref if p not in ours]
    ratios = html.table([{"ratio": k, "elastisched": result[k], "artifact": result[f"artifact_{k}"]}
                         for k in ("jct_ratio_vs_tiresias", "jct_ratio_vs_optimus")]
                        + [{"ratio": f"{k} (ones-faithful)", "elastisched": result[f"faithful_{k}"],
                            "artifact": result[f"artifact_{k}"]}
                           for k in ("jct_ratio_vs_tiresias", "jct_ratio_vs_optimus")
                           if result[f"faithful_{k}"] is not None],
                        ["ratio", "elastisched", "artifact"])
    pngs = _plots(results)
    sections = [("Summary (seconds) beside the artifact's out/*_profile.csv", html.table(rows, cols)),
                ("Mean-JCT ratios (baseline ÷ ONES)", ratios)]
    sections += [(name[:-4], html.img(png, name)) for name, png in pngs.items()]
    files: dict[str, bytes | str] = {"ones.json": json.dumps(result, indent=2, default=str), **pngs,
                                     "report.html": html.page("ONES reproduction (trace_1, 50 jobs, 16x4 T4)",
                                                              sections, result)}
    for p, r in results.items():
        files[f"jobs-{p}.csv"] = r.jobs.to_csv(index=False)
    write_files(out, files)
    return result


def run_pollux_workloads(out: Path, seed: int = 0, workloads: Sequence[str] = tuple(
        f"workload-{i}" for i in range(1, 9))) -> dict[str, Any]:
    """`ones` on the Pollux workloads (16x4 T4) beside the foundation baselines' avg JCT; writes pollux.json.
    These traces carry no loss/accuracy log, so the predictor sees epochs only (docs/ones.md)."""
    from elastisched.report.fidelity import reference
    from elastisched.runner import setup

    res: dict[str, Any] = {"cluster": "16x4:t4", "seed": seed, "workloads": {}}
    for w in workloads:
        s = setup(f"pollux:{w}", "16x4:t4")
        row: dict[str, Any] = {}
        for name in ("ones", "tiresias", "optimus", "fifo"):
            pol = OnesPolicy() if name == "ones" else make_policy(name)
            row[name] = simulate(s.workload, pol, s.nodes, s.models, SimConfig(seed=seed)).summary["avg_jct"]
        row["artifact"] = {p: reference(p).get(w) for p in ("tiresias", "optimus", "pollux")}
        res["workloads"][w] = row
    write_files(out, {"pollux.json": json.dumps(res, indent=2, default=str)})
    return res


def register(app: typer.Typer) -> None:
    """Add the `ones` command to a Typer app (the CLI's `reproduce` group)."""
    @app.command("ones")
    def reproduce_ones(
        out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
        data: Annotated[Path | None, typer.Option(help="ONES artifact folder (traces/, out/).")] = None,
        jobs: Annotated[int, typer.Option(help="First N jobs of trace_1.csv.")] = 50,
        seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
        restart_cost: Annotated[float, typer.Option(help="Seconds per launch/resume, all policies.")]
        = DEFAULT_RESTART_COST,
        resize_cost: Annotated[float | None, typer.Option(
            help="Seconds per in-place resize, all policies (default 8; pass the restart cost for one cost).")]
        = DEFAULT_RESIZE_COST,
        faithful: Annotated[bool, typer.Option(help="Run `ones` without deviations (artifact behaviour).")]
        = False,
        pollux: Annotated[bool, typer.Option(help="Also run ones on the 8 Pollux workloads (slow).")] = False,
    ) -> None:
        """ONES vs tiresias/optimus/fifo on the ONES trace; writes ones.json, plots and report.html."""
        try:
            r = run_ones_reproduction(out, data, jobs, seed, restart_cost,
                                      ones_options=FAITHFUL if faithful else None, resize_cost=resize_cost)
            if pollux:
                pw = run_pollux_workloads(out, seed)["workloads"]
                for w, v in pw.items():
                    typer.echo(f"{w}: avg JCT ones {v['ones']:.1f} s, tiresias {v['tiresias']:.1f}, "
                               f"optimus {v['optimus']:.1f}, fifo {v['fifo']:.1f}")
        except ConfigError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        for p, s in r["policies"].items():
            typer.echo(f"{p}: mean JCT {s['mean_jct']:.1f} s (exec {s['mean_exec']:.1f}, queue {s['mean_queue']:.1f})")
        typer.echo(f"jct_ratio_vs_tiresias {r['jct_ratio_vs_tiresias']:.2f} (artifact "
                   f"{r['artifact_jct_ratio_vs_tiresias']}), jct_ratio_vs_optimus {r['jct_ratio_vs_optimus']:.2f} "
                   f"(artifact {r['artifact_jct_ratio_vs_optimus']}) → {out / 'ones.json'}")
        if r["faithful_jct_ratio_vs_tiresias"] is not None:
            typer.echo(f"ones-faithful: jct_ratio_vs_tiresias {r['faithful_jct_ratio_vs_tiresias']:.2f}, "
                       f"jct_ratio_vs_optimus {r['faithful_jct_ratio_vs_optimus']:.2f}; isolated lower bound on "
                       f"mean JCT {r['lower_bound_mean_jct']['ones']:.1f} s (ONES batch rule)")
