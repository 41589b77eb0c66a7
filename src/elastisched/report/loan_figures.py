"""Figures of the loaning experiments (`reproduce lyra`, `reproduce lyra-deepboot`): loans over time and
per-run CDFs of queuing delay and JCT, as titled, labelled PNG bytes (Agg backend)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from elastisched.loaning.demand import DemandSeries
from elastisched.loaning.timeline import LoanPlan
from elastisched.report.plots import _png, plt
from elastisched.sim.metrics import SimResult


def fig_loans(runs: Mapping[str, SimResult], plan: LoanPlan, demand: DemandSeries | None = None,
              title: str = "Capacity loaning over time") -> bytes:
    """Inference utilisation and loanable servers; servers on loan and reclaimed per run; busy GPUs."""
    fig, ax = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    t = np.array([s[0] for s in plan.steps]) / 3600
    if demand is not None:
        ax[0].step(np.array(demand.times) / 3600, np.array(demand.busy) / demand.servers, where="post",
                   lw=0.6, color="tab:red", label="inference utilisation")
        ax[0].axhline(0.4, ls=":", color="grey", lw=0.8, label="40 % utilisation")
    else:
        ax[0].step(t, [s[1] / max(plan.servers, 1) for s in plan.steps], where="post", label="loanable fraction")
    ax[0].set_ylabel("inference utilisation (fraction)")
    ax[0].set_title(f"{title}: inference side")
    ax[0].legend(fontsize=7, loc="upper left")
    ax[1].step(t, [s[1] for s in plan.steps], where="post", lw=0.6, color="grey", label="loanable servers")
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
    ax[1].set_title("loanable servers, servers on loan (up) and reclaimed (down)")
    ax[1].legend(fontsize=7, loc="upper left")
    for name, res in runs.items():
        tl = res.timeline
        ax[2].step(tl["t"] / 3600, tl["busy_gpus"], where="post", label=name, lw=0.7)
    ax[2].set_ylabel("busy GPUs")
    ax[2].set_title("busy GPUs (training and loaned servers)")
    ax[2].set_xlim(0, 1.05 * max(float(r.summary["makespan"]) for r in runs.values()) / 3600)
    ax[2].legend(fontsize=7)
    for a in ax:
        a.set_xlabel("time (hours)")
    return _png(fig)


def fig_cdfs(runs: Mapping[str, SimResult], marks: Mapping[str, float] | None = None,
             title: str = "Queuing delay and JCT per configuration") -> bytes:
    """Per-run CDFs of queuing delay and JCT (log x); `marks` draws vertical reference lines on the JCT axis."""
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for name, res in runs.items():
        for a, col in zip(ax, ("queue", "jct"), strict=True):
            x = np.sort(res.jobs[col].to_numpy(float).clip(min=1.0))
            a.step(x, np.arange(1, len(x) + 1) / max(len(x), 1), where="post", lw=0.9, label=name)
    for label, v in (marks or {}).items():
        ax[1].axvline(v, ls="--", color="grey", lw=0.8, label=label)
    for a, col in zip(ax, ("queuing delay (s, log scale)", "JCT (s, log scale)"), strict=True):
        a.set_xscale("log")
        a.set_xlabel(col)
        a.set_ylabel("fraction of jobs")
        a.set_title(f"{title}: {col.split(' (')[0]}")
        a.legend(fontsize=7)
    return _png(fig)
