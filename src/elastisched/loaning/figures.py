"""Figures of `reproduce lyra` and `reproduce lyra-deepboot`: loans over time and per-run CDFs (PNG, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from elastisched.loaning.demand import DemandSeries
from elastisched.loaning.timeline import LoanPlan


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def fig_loans(path: Path, runs: dict[str, Any], plan: LoanPlan, demand: DemandSeries | None = None) -> None:
    """Inference utilisation and loanable servers; servers on loan and reclaimed in the lyra run; busy GPUs."""
    plt = _plt()
    fig, ax = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    t = np.array([s[0] for s in plan.steps]) / 3600
    if demand is not None:
        ax[0].step(np.array(demand.times) / 3600, np.array(demand.busy) / demand.servers, where="post",
                   lw=0.6, color="tab:red", label="inference utilisation")
        ax[0].axhline(0.4, ls=":", color="grey", lw=0.8)
        ax[0].set_ylabel("utilisation")
        tw = ax[0].twinx()
        tw.step(t, [s[1] for s in plan.steps], where="post", lw=0.6, label="loanable servers")
        tw.set_ylabel("loanable servers")
    else:
        ax[0].step(t, [s[1] for s in plan.steps], where="post", label="loanable servers")
        ax[0].set_ylabel("loanable servers")
    ax[0].legend(fontsize=7, loc="upper left")
    for name, res in runs.items():
        if name == "baseline":
            continue
        tl = res.timeline
        ax[1].step(tl["t"] / 3600, tl["loaned_servers"], where="post", lw=0.7, label=f"{name}: on loan")
        rc = getattr(res, "reclaims", None) or []
        if rc:
            ax[1].vlines([r["time"] / 3600 for r in rc], 0, [-len(r["servers"]) for r in rc], color="tab:red",
                         lw=0.6, label=f"{name}: reclaimed (down)")
    ax[1].set_ylabel("servers")
    ax[1].legend(fontsize=7, loc="upper left")
    for name, res in runs.items():
        tl = res.timeline
        ax[2].step(tl["t"] / 3600, tl["busy_gpus"], where="post", label=name, lw=0.7)
    ax[2].set_ylabel("busy GPUs")
    ax[2].set_xlim(0, 1.05 * max(float(r.summary["makespan"]) for r in runs.values()) / 3600)
    ax[2].set_xlabel("hours")
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_cdfs(path: Path, runs: dict[str, Any], marks: dict[str, float] | None = None) -> None:
    """Per-run CDFs of queuing delay and JCT (log x); `marks` draws vertical reference lines on the JCT axis."""
    plt = _plt()
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for name, res in runs.items():
        for a, col in zip(ax, ("queue", "jct"), strict=True):
            x = np.sort(res.jobs[col].to_numpy(float).clip(min=1.0))
            a.step(x, np.arange(1, len(x) + 1) / max(len(x), 1), where="post", lw=0.9, label=name)
    for label, v in (marks or {}).items():
        ax[1].axvline(v, ls="--", color="grey", lw=0.8, label=label)
    for a, col in zip(ax, ("queuing delay (s)", "JCT (s)"), strict=True):
        a.set_xscale("log")
        a.set_xlabel(col)
        a.set_ylabel("fraction of jobs")
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
