"""JABAS epoch-level auto-scaling: candidate server sets, next-epoch time estimate, best set, cost.

At the end of an epoch JABAS forecasts the next epoch's GBS trajectory (see ``batch_forecast``), estimates
the epoch time on every candidate allocation and moves to the fastest [code: JABAS
``jabas/train/trainer.py`` ``_estimate_efficient_resource``, ``jabas/config/configurator.py``
``AutoScalingConfigurator.estimate_epoch_time``, ``jabas/cluster/cluster_manager.py``; digest §2(c)]::

    traj = [GBS_cur] + forecast;  rem = |D|;  T = 0
    for k, g in enumerate(traj):
        steps = p;  k == 0: steps = p − sync_step % p;  k == last: steps = rem // g + 1
        g == GBS_cur: LBS_cur only, W = g // LBS_cur (current LBS/GBS survive the restart)
        else: per LBS, W = round(g/b) rounded to even toward the move (non-strict), keep min t_iter·steps
        steps = rem // g_eff + 1 if rem < g_eff·steps;  rem −= g_eff·steps;  T += t_iter·steps

Candidates are all non-empty combinations of resource units (``resource_alloc_unit``, default a whole
server), deduplicated by the multiset of server names; the minimum T wins, ties to the later candidate
(more units).  Iteration times come from the exact solver's bottleneck curves, computed once per
(candidate, LBS) for every W the trajectory needs, so the 511 sets of a 9-server cluster take well under
a second.

Readings / deviations (``docs/jabas.md``): forecasts are rounded to integers (the release passes floats
and silently loses candidates); the epoch ends when ``rem ≤ 0`` and a candidate that cannot run some
trajectory point before that is infeasible (the release keeps its partial sum, which can make an
infeasible set look fast); the **cost-aware objective is our addition** (the release only measures cost):
price per GPU-hour = $3.06 × TFLOPS / 14.13 [code: ``jabas/utils/cost_utils.py``].
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from elastisched.models.iidp.config import IIDPConfig, IIDPSolver, directional_workers
from elastisched.models.iidp.profiles import ServerSpec
from elastisched.models.iidp.release import IIDPModel
from elastisched.models.iidp.solver import bottleneck_curve, solve_workers

__all__ = [
    "BASE_GPU_PRICE",
    "BASE_TFLOPS",
    "GPU_TFLOPS",
    "AutoScaleDecision",
    "CurveCache",
    "EpochEstimate",
    "best_server_set",
    "candidate_server_sets",
    "count_candidates",
    "epoch_cost",
    "estimate_epoch",
    "estimate_epoch_time",
    "gpu_price_per_hour",
    "type_price",
]

#: AWS p3.8xlarge (4×V100) $12.24/h ÷ 4, and the V100 TFLOPS it is anchored to [code: cost_utils.py].
BASE_GPU_PRICE = 3.06
BASE_TFLOPS = 14.13

Objective = Literal["time", "cost"]
#: FP32 peak TFLOPS per Pollux/Sia GPU type (vendor spec sheets; V100 = the release's 14.13 anchor).
#: Used only for the release's price model ($3.06/h × TFLOPS/14.13) — our assumption for these types.
GPU_TFLOPS: dict[str, float] = {"t4": 8.14, "v100": 14.13, "a100": 19.5, "rtx": 13.45, "rtx6000": 16.3}


def gpu_price_per_hour(tflops: float) -> float:
    """USD per GPU-hour, proportional to TFLOPS (the release's cost model)."""
    return BASE_GPU_PRICE * tflops / BASE_TFLOPS


def type_price(gpu_type: str) -> float:
    """USD per GPU-hour of a Pollux/Sia GPU type (unknown types priced as a V100)."""
    return gpu_price_per_hour(GPU_TFLOPS.get(gpu_type, BASE_TFLOPS))


def epoch_cost(cluster: Sequence[ServerSpec], seconds: float) -> float:
    """USD for running ``cluster`` for ``seconds`` (Σ price·GPUs·hours)."""
    return sum(gpu_price_per_hour(s.tflops) * s.num_gpus for s in cluster) * seconds / 3600.0


def candidate_server_sets(servers: Sequence[ServerSpec], alloc_unit: int | None = None) -> list[tuple[ServerSpec, ...]]:
    """All non-empty unit combinations, one per multiset of server names, fewest units first.

    ``alloc_unit`` GPUs per resource unit (None = whole servers); it must divide every server's count.
    A server used with ``j`` units appears as ``server.with_gpus(j·alloc_unit)``.
    """
    choices: list[list[ServerSpec | None]] = []
    for s in servers:
        unit = alloc_unit or s.num_gpus
        if unit <= 0 or s.num_gpus % unit:
            raise ValueError(f"resource unit of {unit} GPUs does not divide server {s.name!r} ({s.num_gpus})")
        choices.append([None] + [s.with_gpus(j * unit) for j in range(1, s.num_gpus // unit + 1)])
    out = [tuple(x for x in combo if x is not None) for combo in itertools.product(*choices)]
    out = [c for c in out if c]
    order = {s.name: i for i, s in enumerate(servers)}
    out.sort(key=lambda c: (sum(s.num_gpus for s in c), [order[s.name] for s in c]))
    return out


class CurveCache:
    """Bottleneck curves per (candidate, LBS), grown on demand and shared across trajectory points;
    per-class unit curves are shared across candidates of the same size."""

    def __init__(self, model: IIDPModel, *, unit_gpus: int = 2) -> None:
        self.model = model
        self.unit_gpus = unit_gpus
        self._curves: dict[tuple[tuple[tuple[str, int], ...], int], np.ndarray] = {}
        self._powers: dict[tuple, np.ndarray] = {}
        self._hint: dict[int, int] = {}

    def reserve(self, lbs: int, s: int) -> None:
        """Compute curves of at least ``s + 1`` entries for ``lbs`` (avoids regrowing)."""
        self._hint[lbs] = max(self._hint.get(lbs, 0), s)

    def curve(self, cluster: Sequence[ServerSpec], lbs: int, s: int) -> np.ndarray:
        key = (tuple((x.name, x.num_gpus) for x in cluster), lbs)
        c = self._curves.get(key)
        if c is None or len(c) <= s:
            size = max(s, self._hint.get(lbs, 0), 2 * (len(c) - 1) if c is not None else 0)
            c = bottleneck_curve(self.model, cluster, lbs, size, unit_gpus=self.unit_gpus, power_cache=self._powers)
            self._curves[key] = c
        return c

    def iter_time(self, cluster: Sequence[ServerSpec], lbs: int, num_workers: int) -> float:
        if num_workers % self.unit_gpus:
            return float("inf")
        s = num_workers // self.unit_gpus
        return float(self.curve(cluster, lbs, s)[s])


@dataclass(frozen=True, slots=True)
class EpochEstimate:
    """Predicted next epoch on one candidate: ``time_s`` = inf when infeasible."""

    servers: tuple[str, ...]
    num_gpus: int
    time_s: float
    cost_usd: float
    steps: int
    gbs_trajectory: tuple[int, ...]
    lbs_trajectory: tuple[int, ...]

    @property
    def feasible(self) -> bool:
        return bool(np.isfinite(self.time_s))


@dataclass(frozen=True, slots=True)
class AutoScaleDecision:
    """Chosen candidate, its configuration at the current (GBS, LBS), and every estimate."""

    best: EpochEstimate
    cluster: tuple[ServerSpec, ...]
    config: IIDPConfig | None
    estimates: tuple[EpochEstimate, ...]


def _lbs_options(model: IIDPModel, cluster: Sequence[ServerSpec], upper_bound: int | None) -> list[int]:
    total = sum(s.num_gpus for s in cluster)
    return [
        b
        for b in model.lbs_grid()
        if all(model.supports(s.gpu_type, b) for s in cluster) and (upper_bound is None or upper_bound // b >= total)
    ]


def estimate_epoch_time(
    model: IIDPModel,
    cluster: Sequence[ServerSpec],
    trajectory: Sequence[float],
    *,
    current_gbs: int,
    current_lbs: int,
    dataset_size: int,
    interval: int = 100,
    sync_step: int = 0,
    upper_bound: int | None = None,
    unit_gpus: int = 2,
    cache: CurveCache | None = None,
) -> EpochEstimate:
    """Predicted time of the next epoch on ``cluster`` for the GBS ``trajectory`` (``[GBS_cur] + forecast``).

    ``sync_step`` is the global step count at the decision (only ``sync_step % interval`` matters);
    ``upper_bound`` is the GBS upper bound (an LBS needs ``upper_bound // b ≥ #GPUs``).
    """
    cache = cache or CurveCache(model, unit_gpus=unit_gpus)
    total = sum(s.num_gpus for s in cluster)
    names = tuple(s.name for s in cluster)
    lbs_opts = _lbs_options(model, cluster, upper_bound)
    traj = [round(g) for g in trajectory]
    rem, t_sum, n_steps = dataset_size, 0.0, 0
    gbs_seen: list[int] = []
    lbs_seen: list[int] = []
    infeasible = EpochEstimate(names, total, float("inf"), float("inf"), 0, (), ())
    for k, g in enumerate(traj):
        if rem <= 0:
            break
        steps = interval - (sync_step % interval) if k == 0 else interval
        if k == len(traj) - 1:
            steps = rem // g + 1
        best: tuple[float, int, int, int] | None = None  # (duration, g_eff, steps, lbs)
        if g == current_gbs:
            b, w = current_lbs, g // current_lbs
            if b in lbs_opts and w >= total:
                t = cache.iter_time(cluster, b, w)
                st = rem // g + 1 if rem - g * steps < 0 else steps
                if np.isfinite(t):
                    best = (t * st, g, st, b)
        else:
            for b in lbs_opts:
                w = directional_workers(g, b, current_gbs, unit_gpus=unit_gpus, strict=False)
                if w is None or w < total:
                    continue
                t = cache.iter_time(cluster, b, w)
                if not np.isfinite(t):
                    continue
                ge = b * w
                st = rem // ge + 1 if rem - ge * steps < 0 else steps
                if best is None or t * st < best[0]:
                    best = (t * st, ge, st, b)
        if best is None:
            return infeasible
        dur, ge, st, b = best
        rem -= ge * st
        t_sum += dur
        n_steps += st
        gbs_seen.append(ge)
        lbs_seen.append(b)
    return EpochEstimate(names, total, t_sum, epoch_cost(cluster, t_sum), n_steps, tuple(gbs_seen), tuple(lbs_seen))


def best_server_set(
    model: IIDPModel,
    candidates: Sequence[Sequence[ServerSpec]],
    trajectory: Sequence[float],
    *,
    current_gbs: int,
    current_lbs: int,
    dataset_size: int,
    interval: int = 100,
    sync_step: int = 0,
    upper_bound: int | None = None,
    unit_gpus: int = 2,
    objective: Objective = "time",
    time_slack: float | None = None,
    cache: CurveCache | None = None,
) -> AutoScaleDecision | None:
    """Estimate every candidate and pick one; ``None`` if none is feasible.

    ``objective="time"`` (the release): min epoch time, ties to the later candidate.  ``"cost"`` (our
    addition): min epoch cost, restricted to candidates within ``(1 + time_slack)×`` the fastest time
    when ``time_slack`` is given; ties to the faster candidate.
    """
    if objective not in ("time", "cost"):
        raise ValueError(f"objective must be 'time' or 'cost', got {objective!r}")
    cache = cache or CurveCache(model, unit_gpus=unit_gpus)
    for b in model.lbs_grid():  # size every curve once for the largest W the trajectory can ask for
        ws = [directional_workers(g, b, current_gbs, unit_gpus=unit_gpus, strict=False) for g in trajectory]
        ws.append(current_gbs // b)
        cache.reserve(b, max(w for w in ws if w is not None) // unit_gpus)
    ests = [
        estimate_epoch_time(
            model,
            c,
            trajectory,
            current_gbs=current_gbs,
            current_lbs=current_lbs,
            dataset_size=dataset_size,
            interval=interval,
            sync_step=sync_step,
            upper_bound=upper_bound,
            unit_gpus=unit_gpus,
            cache=cache,
        )
        for c in candidates
    ]
    feas = [i for i, e in enumerate(ests) if e.feasible and e.time_s > 0]
    if not feas:
        return None
    if objective == "time":
        pick = min(feas, key=lambda i: (ests[i].time_s, -i))
    else:
        fastest = min(ests[i].time_s for i in feas)
        pool = [i for i in feas if time_slack is None or ests[i].time_s <= (1.0 + time_slack) * fastest]
        pick = min(pool, key=lambda i: (ests[i].cost_usd, ests[i].time_s, -i))
    cluster = tuple(candidates[pick])
    cfg = solve_workers(model, cluster, current_lbs, current_gbs // current_lbs, unit_gpus=unit_gpus)
    return AutoScaleDecision(ests[pick], cluster, cfg, tuple(ests))


def estimate_epoch(
    solver: IIDPSolver, cluster: Sequence[ServerSpec], trajectory: Sequence[int], *, current_gbs: int,
    dataset: int, interval: int = 100, sync_step: int = 0, upper: int | None = None,
) -> tuple[float, list[IIDPConfig]]:
    """Next-epoch time on ``cluster`` for a GBS ``trajectory`` with any :class:`IIDPSolver` (the
    :func:`estimate_epoch_time` rules: ``p`` steps per point, the first the rest of the interval, the last
    finishes the epoch; each point's configuration from ``solver.best``); inf if some point has none."""
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
