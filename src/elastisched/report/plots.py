"""Matplotlib figures of simulation results (headless: the Agg backend, PNG bytes)."""

from __future__ import annotations

import io
from collections.abc import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from elastisched.sim.metrics import SimResult


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def jct_cdf(results: Mapping[str, SimResult]) -> bytes:
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, r in results.items():
        x = np.sort(r.jobs["jct"].to_numpy(float)) / 3600.0
        if len(x):
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=f"{name} (avg {x.mean():.2f} h)")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT distribution")
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def utilisation_timeline(results: Mapping[str, SimResult], loaned: bool = False) -> bytes:
    rows = 2 if loaned else 1
    fig, axes = plt.subplots(rows, 1, figsize=(7, 3.2 * rows), squeeze=False, sharex=True)
    ax = axes[0][0]
    for name, r in results.items():
        tl = r.timeline
        if len(tl):
            ax.step(tl["t"] / 3600.0, tl["busy_gpus"] / tl["total_gpus"].clip(lower=1), where="post",
                    label=name, alpha=0.8)
    ax.set_ylabel("busy GPUs / available GPUs")
    ax.set_ylim(0, 1.05)
    ax.set_title("cluster utilisation")
    ax.grid(alpha=0.3)
    ax.legend()
    if loaned:
        ax2 = axes[1][0]
        for name, r in results.items():
            tl = r.timeline
            if len(tl):
                ax2.step(tl["t"] / 3600.0, tl["loaned_servers"], where="post", label=name)
        ax2.set_ylabel("loaned servers")
        ax2.grid(alpha=0.3)
    axes[-1][0].set_xlabel("time (hours)")
    return _png(fig)


def bar(values: Mapping[str, float], title: str, ylabel: str, reference: Mapping[str, float] | None = None,
        xlabel: str = "", reference_label: str = "reference") -> bytes:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(values)
    x = np.arange(len(names))
    w = 0.4 if reference else 0.6
    ax.bar(x - (w / 2 if reference else 0), [values[n] for n in names], w, label="elastisched")
    if reference:
        ax.bar(x + w / 2, [reference.get(n, np.nan) for n in names], w, label=reference_label)
        ax.legend()
    ax.set_xticks(x, names, rotation=30, ha="right")
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    return _png(fig)
