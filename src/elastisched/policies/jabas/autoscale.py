"""JABAS epoch-level auto-scaling as the policy uses it: candidate allocations, next-epoch time, price.

At the end of an epoch JABAS forecasts the next epoch's GBS trajectory, estimates the epoch time on every
candidate allocation and moves to the fastest [code: JABAS ``jabas/train/trainer.py``
``_estimate_efficient_resource``, ``jabas/config/configurator.py``
``AutoScalingConfigurator.estimate_epoch_time``, ``jabas/cluster/cluster_manager.py``; digest §2(c)]::

    traj = [GBS_cur] + forecast;  rem = |D|;  T = 0
    for k, g in enumerate(traj):
        steps = p;  k == 0: steps = p − sync_step % p;  k == last: the steps that finish the epoch
        each point's configuration from the IIDP solver (current LBS/GBS survive the restart)
        rem −= gbs·steps;  T += t_iter·steps

Candidates (:func:`count_candidates`) are GPUs per type — 0, powers of two and all of each type's free
GPUs — the server-type reading of the release's unit subsets.  The **cost-aware objective is our
addition** (the release only measures cost): price per GPU-hour = $3.06 × TFLOPS / 14.13 [code:
``jabas/utils/cost_utils.py``].
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Protocol

from elastisched.models.iidp.config import IIDPConfig, IIDPSolver, ServerSpec

__all__ = [
    "BASE_GPU_PRICE",
    "BASE_TFLOPS",
    "GPU_TFLOPS",
    "FastSolver",
    "count_candidates",
    "epoch_time",
    "estimate_epoch",
    "gpu_price_per_hour",
    "servers_of",
    "type_price",
]

#: AWS p3.8xlarge (4×V100) $12.24/h ÷ 4, and the V100 TFLOPS it is anchored to [code: cost_utils.py].
BASE_GPU_PRICE = 3.06
BASE_TFLOPS = 14.13

#: FP32 peak TFLOPS per Pollux/Sia GPU type (vendor spec sheets; V100 = the release's 14.13 anchor).
#: Used only for the release's price model ($3.06/h × TFLOPS/14.13) — our assumption for these types.
GPU_TFLOPS: dict[str, float] = {"t4": 8.14, "v100": 14.13, "a100": 19.5, "rtx": 13.45, "rtx6000": 16.3}


def servers_of(placement: Sequence[tuple[str, int]], ntype: Mapping[str, str]) -> tuple[ServerSpec, ...]:
    """The placement as the solver's servers (bandwidths unused by the Pollux model)."""
    return tuple(ServerSpec(n, ntype[n], GPU_TFLOPS.get(ntype[n], 14.13), g, 0.0, 0.0) for n, g in placement)


def gpu_price_per_hour(tflops: float) -> float:
    """USD per GPU-hour, proportional to TFLOPS (the release's cost model)."""
    return BASE_GPU_PRICE * tflops / BASE_TFLOPS


def type_price(gpu_type: str) -> float:
    """USD per GPU-hour of a Pollux/Sia GPU type (unknown types priced as a V100)."""
    return gpu_price_per_hour(GPU_TFLOPS.get(gpu_type, BASE_TFLOPS))


def estimate_epoch(
    solver: IIDPSolver, cluster: Sequence[ServerSpec], trajectory: Sequence[int], *, current_gbs: int,
    dataset: int, interval: int = 100, sync_step: int = 0, upper: int | None = None,
) -> tuple[float, list[IIDPConfig]]:
    """Next-epoch time on ``cluster`` for a GBS ``trajectory`` with any :class:`IIDPSolver` (``p`` steps
    per point, the first the rest of the interval, the last finishes the epoch; each point's configuration
    from ``solver.best``); inf if some point has none."""
    rem, total, used = dataset, 0.0, []
    for k, g in enumerate(trajectory):
        if rem <= 0:
            break
        steps = interval - (sync_step % interval) if k == 0 else interval
        cfg = solver.best(cluster, g, None if g == current_gbs else current_gbs, upper)
        if cfg is None:
            return math.inf, used
        if k == len(trajectory) - 1 or rem < cfg.gbs * steps:
            steps = math.ceil(rem / cfg.gbs)
        rem -= cfg.gbs * steps
        total += cfg.iter_time * steps
        used.append(cfg)
    return total, used


class FastSolver(IIDPSolver, Protocol):
    """A solver that also gives (GBS, seconds per step) of `best` without building its per-server units."""

    def iter_time(self, cluster: Sequence[ServerSpec], target: float, current: int | None = None,
                  upper: int | None = None) -> tuple[int, float] | None: ...


def epoch_time(solver: FastSolver, cluster: Sequence[ServerSpec], trajectory: Sequence[int], *, current_gbs: int,
               dataset: int, interval: int = 100, sync_step: int = 0, upper: int | None = None) -> float:
    """`estimate_epoch`'s time alone, by the same steps (what the policy ranks candidates by); inf if some point
    has no configuration or the trajectory is empty."""
    rem, total = dataset, 0.0
    if not trajectory:
        return math.inf
    for k, g in enumerate(trajectory):
        if rem <= 0:
            break
        steps = interval - (sync_step % interval) if k == 0 else interval
        got = solver.iter_time(cluster, g, None if g == current_gbs else current_gbs, upper)
        if got is None:
            return math.inf
        gbs, it = got
        if k == len(trajectory) - 1 or rem < gbs * steps:
            steps = math.ceil(rem / gbs)
        rem -= gbs * steps
        total += it * steps
    return total


def count_candidates(free: Mapping[str, int], lo: int = 1, hi: int | None = None,
                     limit: int | None = None) -> list[dict[str, int]]:
    """Candidate allocations as GPUs per type: 0, powers of two and all of each type's free GPUs, with a
    total in ``lo..hi``; fewest GPUs first (the server-type reading of the release's unit subsets)."""
    opts = []
    for f in free.values():
        o = {0, f} | {2**i for i in range(int(math.log2(f)) + 1)} if f > 0 else {0}
        opts.append(sorted(o))
    out = [dict(zip(free, c, strict=True)) for c in itertools.product(*opts)
           if lo <= sum(c) <= (hi if hi is not None else sum(c)) and sum(c) > 0]
    out.sort(key=lambda d: (sum(d.values()), tuple(d.values())))
    return out[:limit] if limit is not None else out
