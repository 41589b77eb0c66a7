"""`elastisched plan`: how many GPUs does a workload need? A sweep over cluster sizes for the user's own
trace, with queueing, JCT and GPU-hours against capacity, the smallest size that meets a p95-queue target,
and the knee of the JCT curve (the point of diminishing returns).

The knee is the Kneedle rule on the normalised curve (Satopää et al., ICDCS-W 2011): the size whose point
lies farthest below the straight line from the smallest to the largest size. Sizes run on whole nodes of
one GPU type; the sweep itself is `sweep.run_sweep` (process pool or Ray).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

from elastisched.core.errors import ConfigError
from elastisched.sim.sweep import CellResult, aggregate

PANELS = (("p95_queue", "p95 queueing delay (h)", 3600.0), ("avg_jct", "average JCT (h)", 3600.0),
          ("gpu_hours", "GPU-hours used (finished jobs)", 1.0))


def cluster_specs(sizes: Sequence[int], gpus_per_node: int, gpu_type: str) -> dict[str, int]:
    """Cluster spec per size (GPUs), e.g. 32 → '8x4:t4'; a size must be a positive multiple of the node."""
    out: dict[str, int] = {}
    for n in sizes:
        if n <= 0 or n % gpus_per_node:
            raise ConfigError("--cluster-sizes", n, f"must be a positive multiple of --gpus-per-node={gpus_per_node}")
        out[f"{n // gpus_per_node}x{gpus_per_node}:{gpu_type}"] = n
    return out


def never_fit(jobs: Sequence[Any], sizes: Mapping[str, int]) -> dict[int, list[str]]:
    """Per cluster size (GPUs): the jobs that ask for more GPUs than it has (an elastic job: its fewest). They
    never run there, so that size's p95 queue, JCT and GPU-hours cover the other jobs only."""
    out: dict[int, list[str]] = {}
    for gpus in sorted(set(sizes.values())):
        big = [j.job_id for j in jobs if (j.min_gpus if j.elastic else j.num_gpus) > gpus]
        if big:
            out[gpus] = big
    return out


def never_fit_note(unfit: Mapping[int, list[str]], jobs: Sequence[Any]) -> str:
    """One sentence per size with jobs that cannot fit (empty when every job fits every size)."""
    need = {j.job_id: (j.min_gpus if j.elastic else j.num_gpus) for j in jobs}
    return " ".join(f"At {g} GPUs, {len(ids)} job(s) can never run (they ask for up to {max(need[i] for i in ids)} "
                    f"GPUs, e.g. {ids[0]}): its figures cover the other jobs only." for g, ids in unfit.items())


def knee(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Kneedle on a decreasing curve: the x farthest below the chord of the normalised points."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]
    if len(pts) < 3:
        return None
    (x0, y0), (x1, y1) = pts[0], pts[-1]
    if x1 == x0 or y0 == y1:
        return None
    best, arg = 0.0, None
    for x, y in pts[1:-1]:
        u, v = (x - x0) / (x1 - x0), (y - y1) / (y0 - y1)  # both in [0, 1] for a decreasing curve
        gap = (1 - u) - v  # chord from (0, 1) to (1, 0) minus the curve
        if gap > best:
            best, arg = gap, x
    return arg


def analyse(results: Sequence[CellResult], sizes: Mapping[str, int], target_p95_queue: float) -> dict[str, Any]:
    """Per policy: the curves, the smallest size meeting the target, and the knee."""
    rows = aggregate(results)
    out: dict[str, Any] = {}
    for pol in dict.fromkeys(r["policy"] for r in rows):
        mine = sorted((r for r in rows if r["policy"] == pol), key=lambda r: sizes[r["cluster"]])
        gpus = [sizes[r["cluster"]] for r in mine]
        meets = [g for g, r in zip(gpus, mine, strict=True) if math.isfinite(r["p95_queue"])
                 and r["p95_queue"] <= target_p95_queue]
        out[pol] = {"gpus": gpus, "needed_gpus": min(meets) if meets else None,
                    "knee_gpus": knee(gpus, [r["avg_jct"] for r in mine]),
                    **{m: [r[m] for r in mine] for m, _, _ in PANELS}, "finished": [r["n_finished"] for r in mine],
                    "failed": sum(r["failed"] for r in mine)}
    return out


def plan_plot(plan: Mapping[str, Any], target_p95_queue: float, title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, (metric, label, scale) in zip(axes, PANELS, strict=True):
        for pol, p in plan.items():
            ys = [v / scale for v in p[metric]]
            (line,) = ax.plot(p["gpus"], ys, marker="o", label=pol)
            if metric == "avg_jct" and p["knee_gpus"] is not None:
                k = p["gpus"].index(p["knee_gpus"])
                ax.plot([p["knee_gpus"]], [ys[k]], marker="*", markersize=14, color=line.get_color())
            if metric == "p95_queue" and p["needed_gpus"] is not None:
                ax.axvline(p["needed_gpus"], color=line.get_color(), linestyle=":", linewidth=1)
        if metric == "p95_queue":
            ax.axhline(target_p95_queue / scale, color="grey", linestyle="--", linewidth=1, label="target")
        ax.set_xlabel("cluster size (GPUs)")
        ax.set_ylabel(label)
        ax.set_title(label + (" — ★ knee" if metric == "avg_jct" else " — ┆ smallest meeting target"
                              if metric == "p95_queue" else ""), fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].legend(title="policy", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()
