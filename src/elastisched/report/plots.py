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


def _legend_outside(ax: plt.Axes, title: str | None = None) -> None:
    """Legend to the right of the axes, never on the data."""
    ax.legend(title=title, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def jct_cdf(results: Mapping[str, SimResult]) -> bytes:
    fig, ax = plt.subplots(figsize=(8.5, 4))
    for name, r in results.items():
        x = np.sort(r.jobs["jct"].to_numpy(float)) / 3600.0
        if len(x):
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=f"{name} (avg {x.mean():.2f} h)")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT distribution (CDF)")
    ax.grid(alpha=0.3)
    _legend_outside(ax, "policy")
    return _png(fig)


def binned_mean(t: np.ndarray, v: np.ndarray, end: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted mean of the step function v (value v[i] from t[i] to t[i+1], the last until `end`) over
    `bins` equal bins of [t[0], end]: bin centres and means."""
    if len(t) == 0 or end <= t[0]:
        return np.zeros(0), np.zeros(0)
    edges = np.linspace(t[0], end, bins + 1)
    cum = np.concatenate([[0.0], np.cumsum(v[:-1] * np.diff(t))])  # integral up to each t[i]
    j = np.clip(np.searchsorted(t, edges, side="right") - 1, 0, len(t) - 1)
    at_edges = cum[j] + v[j] * (edges - t[j])
    return (edges[:-1] + edges[1:]) / 2, np.diff(at_edges) / np.diff(edges)


def utilisation_timeline(results: Mapping[str, SimResult], loaned: bool = False, bins: int = 120) -> bytes:
    """Utilisation averaged over `bins` equal time bins per policy (raw step lines of several policies on one
    axes are unreadable), and the loaned servers when there are any."""
    rows = 2 if loaned else 1
    fig, axes = plt.subplots(rows, 1, figsize=(8.5, 3.2 * rows), squeeze=False, sharex=True)
    ax = axes[0][0]
    end = max((float(r.timeline["t"].max()) for r in results.values() if len(r.timeline)), default=0.0)
    for name, r in results.items():
        tl = r.timeline
        if len(tl) > 1:
            util = (tl["busy_gpus"] / tl["total_gpus"].clip(lower=1)).to_numpy(float)
            x, y = binned_mean(tl["t"].to_numpy(float), util, end, bins)
            ax.plot(x / 3600.0, 100 * y, label=name, linewidth=1.4)
    ax.set_ylabel("GPU utilisation (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"Cluster utilisation (busy / available GPUs, mean over {bins} time bins)")
    ax.grid(alpha=0.3)
    _legend_outside(ax, "policy")
    if loaned:
        ax2 = axes[1][0]
        for name, r in results.items():
            tl = r.timeline
            if len(tl):
                ax2.step(tl["t"] / 3600.0, tl["loaned_servers"], where="post", label=name)
        ax2.set_ylabel("loaned servers")
        ax2.set_title("Inference servers on loan to training")
        ax2.grid(alpha=0.3)
        _legend_outside(ax2, "policy")
    axes[-1][0].set_xlabel("time since the first arrival (hours)")
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
    ax.legend()  # also with one series: every plot names what it shows
    ax.set_xticks(x, names, rotation=30, ha="right")
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    return _png(fig)
