"""One training run with adaptive batching, time-stepped per adjustment interval (``docs/jabas.md`` "Reproduction").

Strategies (issue 5): ``jabas`` (SimiGrad GBS + IIDP configuration + epoch auto-scaling, time or cost
objective), ``static`` ((a) the initial GBS on the initial allocation, fixed), ``uniform`` ((b) the same
SimiGrad GBS rule on every server, one worker per GPU with ``GBS/N`` samples each: the slowest GPU sets the
pace), ``homogeneous`` ((c) the same rule on the servers of the fastest GPU type only, one worker per GPU).
Work = the application's epochs (JABAS keeps accuracy at equal epochs, digest §3); an epoch ends when
Σ GBS reaches the dataset size (digest §1).  Decisions come from the model code: ``similarity.adaptive_step``
for the GBS, ``iidp_solver`` / ``jabas_autoscale`` (ResNet-50 on JABAS profiles) or ``policies.jabas``
(``PolluxIIDP``, ``estimate_epoch``) for configurations and auto-scaling.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

import numpy as np

from elastisched.models.batch_forecast import fit_gp, fit_ses, prediction_steps
from elastisched.models.iidp import IIDPModel
from elastisched.models.iidp_profiles import ServerSpec
from elastisched.models.iidp_solver import directional_workers
from elastisched.models.jabas_autoscale import CurveCache, best_server_set, candidate_server_sets, epoch_cost
from elastisched.models.similarity import (
    AdaptiveBatchingConfig,
    AdaptiveBatchingState,
    PolluxGradTrace,
    adaptive_step,
    expected_cosine_similarity,
    steps_to_next_adjustment,
)
from elastisched.policies.jabas import PolluxIIDP, count_candidates, estimate_epoch

Strategy = Literal["jabas", "static", "uniform", "homogeneous"]
Cluster = tuple[ServerSpec, ...]


@dataclass(frozen=True, slots=True)
class Cfg:
    """A configuration: local batch, global batch, seconds per iteration."""

    lbs: int
    gbs: int
    iter_time: float


class Backend(Protocol):
    """Performance side of one model on one heterogeneous cluster."""

    name: str
    servers: Cluster
    dataset: int
    epochs: int
    restart_cost: float
    trace: PolluxGradTrace
    ab: AdaptiveBatchingConfig
    unit_gpus: int

    def configure(self, cluster: Cluster, target: float, current: int | None) -> Cfg | None: ...

    def uniform_time(self, cluster: Cluster, gbs: float) -> float: ...

    def autoscale(self, cluster_now: Cluster, traj: Sequence[int], cur: Cfg, step: int,
                  objective: str) -> Choice: ...


@dataclass(frozen=True, slots=True)
class Choice:
    """An auto-scaling decision: the chosen set and the predicted next-epoch times (chosen, current, fastest)."""

    cluster: Cluster
    time_s: float
    now_s: float
    fastest_s: float


def _key(cluster: Cluster) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((s.name, s.num_gpus) for s in cluster))


def _groups(cluster: Cluster) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {}
    for s in cluster:
        out[s.gpu_type] = (*out.get(s.gpu_type, ()), s.num_gpus)
    return out


@dataclass
class PolluxBackend:
    """A Pollux/Sia application: IIDP over its per-type throughput profiles (``policies.jabas.PolluxIIDP``)."""

    name: str
    perf: PolluxIIDP
    servers: Cluster
    dataset: int
    epochs: int
    restart_cost: float
    trace: PolluxGradTrace
    ab: AdaptiveBatchingConfig
    unit_gpus: int = 1
    cost_slack: float | None = None

    def candidates(self) -> list[Cluster]:
        """GPU counts per type (``policies.jabas.count_candidates``), packed onto the servers in order."""
        free: dict[str, int] = {}
        for s in self.servers:
            free[s.gpu_type] = free.get(s.gpu_type, 0) + s.num_gpus
        out = []
        for counts in count_candidates(free):
            cl: list[ServerSpec] = []
            for s in self.servers:
                k = min(counts[s.gpu_type], s.num_gpus)
                if k > 0:
                    cl.append(s.with_gpus(k))
                    counts[s.gpu_type] -= k
            out.append(tuple(cl))
        return out

    def configure(self, cluster: Cluster, target: float, current: int | None) -> Cfg | None:
        c = self.perf.best(_groups(cluster), target, current, upper=self.ab.upper_bound)
        return None if c is None else Cfg(c.lbs, c.gbs, c.iter_time)

    def uniform_time(self, cluster: Cluster, gbs: float) -> float:
        return self.perf.uniform_time(_groups(cluster), gbs)

    def autoscale(self, cluster_now: Cluster, traj: Sequence[int], cur: Cfg, step: int,
                  objective: str) -> Choice:
        """Best candidate (``best_server_set`` rules on ``estimate_epoch``)."""
        ests: list[tuple[float, float, int, Cluster]] = []
        now_t = math.inf
        names_now = _key(cluster_now)
        for i, cand in enumerate(self.candidates()):
            t, _ = estimate_epoch(self.perf, _groups(cand), traj, current_gbs=cur.gbs, dataset=self.dataset,
                                  interval=self.ab.adjust_interval, sync_step=step, upper=self.ab.upper_bound)
            if _key(cand) == names_now:
                now_t = t
            if math.isfinite(t) and t > 0:
                ests.append((t, epoch_cost(cand, t), i, cand))
        if not ests:
            return Choice(cluster_now, math.inf, now_t, math.inf)
        fastest = min(e[0] for e in ests)
        if objective == "time":  # ties to the later candidate (release)
            pick = min(ests, key=lambda e: (e[0], -e[2]))
        else:
            pool = [e for e in ests if self.cost_slack is None or e[0] <= (1.0 + self.cost_slack) * fastest]
            pick = min(pool, key=lambda e: (e[1], e[0], -e[2]))
        return Choice(pick[3], pick[0], now_t, fastest)


@dataclass
class IIDPBackend:
    """ResNet-50 on the JABAS profiles: ``iidp_solver`` curves and ``jabas_autoscale.best_server_set``."""

    name: str
    model: IIDPModel
    servers: Cluster
    dataset: int
    epochs: int
    restart_cost: float
    trace: PolluxGradTrace
    ab: AdaptiveBatchingConfig
    unit_gpus: int = 2
    cost_slack: float | None = None
    cache: CurveCache = field(init=False)

    def __post_init__(self) -> None:
        self.cache = CurveCache(self.model, unit_gpus=self.unit_gpus)

    def _lbs(self, cluster: Cluster) -> list[int]:
        n = sum(s.num_gpus for s in cluster)
        return [b for b in self.model.lbs_grid() if all(self.model.supports(s.gpu_type, b) for s in cluster)
                and self.ab.upper_bound // b >= n]

    def configure(self, cluster: Cluster, target: float, current: int | None) -> Cfg | None:
        """Best-throughput (LBS, W) near ``target`` (``solve_placement`` rules when moving from ``current``),
        preferring GBS within ±10 % of the target like ``PolluxIIDP.best``."""
        n = sum(s.num_gpus for s in cluster)
        found: list[tuple[bool, float, float, Cfg]] = []
        for b in self._lbs(cluster):
            if current is None or target == current:
                w: int | None = round(target / b / self.unit_gpus) * self.unit_gpus
            else:
                w = directional_workers(target, b, current, unit_gpus=self.unit_gpus)
            if w is None or w < n or b * w > self.ab.upper_bound:
                continue
            t = self.cache.iter_time(cluster, b, w)
            if math.isfinite(t):
                dev = abs(b * w - target) / target
                found.append((dev > 0.1, dev if dev > 0.1 else 0.0, -b * w / t, Cfg(b, b * w, t)))
        return min(found, key=lambda f: f[:3])[3] if found else None

    def uniform_time(self, cluster: Cluster, gbs: float) -> float:
        """One worker per GPU at ``gbs/N`` (m = 1; GA beyond the largest LBS): base/step lines fitted over
        the profiled LBS grid of each type (our interpolation of the IIDP model in the local batch)."""
        n = sum(s.num_gpus for s in cluster)
        multi = len({s.name for s in cluster}) > 1
        local, worst = gbs / n, 0.0
        for s in cluster:
            grid = [b for b in self.model.lbs_grid(s.gpu_type)]
            bw = s.inter_bandwidth if multi else s.intra_bandwidth
            co = np.array([[c[0] for c in self.model.unit_coeffs(s.gpu_type, b, bandwidth=bw, total_gpus=n,
                                                                   multi_server=multi)] for b in grid])
            a = max(math.ceil(local / grid[-1] - 1e-9) - 1, 0)
            micro = local / (a + 1)
            base = np.polyval(np.polyfit(grid, co[:, 0], 1), micro)
            step = np.polyval(np.polyfit(grid, co[:, 1], 1), micro)
            worst = max(worst, float(base + a * step))
        return worst

    def autoscale(self, cluster_now: Cluster, traj: Sequence[int], cur: Cfg, step: int,
                  objective: str) -> Choice:
        """``jabas_autoscale.best_server_set`` over every unit subset."""
        d = best_server_set(self.model, candidate_server_sets(self.servers), traj, current_gbs=cur.gbs,
                            current_lbs=cur.lbs, dataset_size=self.dataset, interval=self.ab.adjust_interval,
                            sync_step=step, upper_bound=self.ab.upper_bound, unit_gpus=self.unit_gpus,
                            objective=objective,  # type: ignore[arg-type]
                            time_slack=self.cost_slack if objective == "cost" else None, cache=self.cache)
        if d is None:
            return Choice(cluster_now, math.inf, math.inf, math.inf)
        now = [e.time_s for e in d.estimates if sorted(e.servers) == sorted(s.name for s in cluster_now)]
        fastest = min(e.time_s for e in d.estimates)
        return Choice(d.cluster, d.best.time_s, now[0] if now else math.inf, fastest)


@dataclass
class RunResult:
    """Outcome of one training run: totals, GBS trajectory and allocation timeline."""

    strategy: str
    time_s: float
    cost_usd: float
    restarts: int
    gbs: list[tuple[float, int]]  # (time s, GBS) at each adjustment
    allocation: list[tuple[float, int, str]]  # (time s, GPUs, servers) at each epoch start

    def summary(self) -> dict[str, float | int | str]:
        return {"strategy": self.strategy, "time_h": self.time_s / 3600.0, "cost_usd": self.cost_usd,
                "restarts": self.restarts, "mean_gpus": _mean_gpus(self)}


def _mean_gpus(r: RunResult) -> float:
    pts = [*r.allocation, (r.time_s, 0, "")]
    tot = sum((b[0] - a[0]) * a[1] for a, b in itertools.pairwise(pts))
    return tot / r.time_s if r.time_s > 0 else 0.0


def forecast(points: Sequence[tuple[int, int]], history: Sequence[int], gbs: int, step: int, be: Backend,
             restarts: int) -> list[int]:
    """``[GBS] + GP/SES ensemble`` for the next epoch (``batch_forecast``; ``restarts`` GP restarts)."""
    steps = prediction_steps(step, be.dataset, gbs, be.ab.adjust_interval)
    if not steps:
        return [gbs]
    hist = list(history) or [gbs]
    ses = fit_ses(hist).forecast(len(steps))
    if len({g for _, g in points}) > 1:
        gp = fit_gp(*zip(*points, strict=True), n_restarts=restarts).predict(steps)
    else:  # constant or no data: the GP predicts its mean exactly (normalised targets are all zero)
        gp = np.full(len(steps), float(points[0][1])) if points else ses
    pred = np.clip(0.5 * gp + 0.5 * ses, be.ab.lower_bound, be.ab.upper_bound)
    return [gbs] + [max(1, round(float(v))) for v in pred]


def fastest_homogeneous(be: Backend) -> Cluster:
    """Servers of the GPU type with the highest one-worker-per-GPU throughput at a mid-range GBS."""
    gbs = math.sqrt(be.ab.lower_bound * be.ab.upper_bound)
    by_type: dict[str, Cluster] = {}
    for s in be.servers:
        by_type[s.gpu_type] = (*by_type.get(s.gpu_type, ()), s)
    return max(by_type.values(), key=lambda c: (gbs / be.uniform_time(c, gbs), sum(s.num_gpus for s in c)))


def initial_cluster(be: Backend, objective: str) -> Cluster:
    """Where JABAS starts: the auto-scaler's choice for a flat trajectory at the lower bound."""
    g0 = be.ab.lower_bound
    return be.autoscale(be.servers[:1], [g0], Cfg(g0, g0, 1.0), 0, objective).cluster


def simulate(be: Backend, strategy: Strategy, *, objective: str = "time", gp_restarts: int = 0,
             max_epochs: int | None = None, move_horizon: int | None = 1) -> RunResult:
    """Simulate the whole training run of ``be`` under ``strategy``.

    JABAS moves to the auto-scaler's choice only when its predicted saving over ``move_horizon`` epochs (None =
    all epochs left) covers the restart cost (ours; the release moves regardless and pays the restart).
    """
    ab = be.ab
    g0 = ab.lower_bound
    if strategy in ("jabas", "static"):
        cluster = initial_cluster(be, objective)
    elif strategy == "uniform":
        cluster = be.servers
    else:
        cluster = fastest_homogeneous(be)
    ngpu = sum(s.num_gpus for s in cluster)
    iidp = strategy in ("jabas", "static")
    if iidp:
        cfg = be.configure(cluster, g0, None)
        if cfg is None:
            raise ValueError(f"{be.name}: no configuration for GBS {g0} on {[s.name for s in cluster]}")
    else:
        g = max(g0, ngpu)
        cfg = Cfg(g // ngpu, g, be.uniform_time(cluster, g))
    price = epoch_cost(cluster, 3600.0)
    t = cost = 0.0
    restarts = 0
    state = AdaptiveBatchingState(cfg.gbs, cfg.lbs)
    gbs_pts: list[tuple[float, int]] = [(0.0, cfg.gbs)]
    alloc: list[tuple[float, int, str]] = []
    history: list[int] = []
    last_points: list[tuple[int, int]] = []
    epochs = be.epochs if max_epochs is None else min(be.epochs, max_epochs)
    for e in range(epochs):
        ep = min(e, be.trace.num_epochs - 1)
        points: list[tuple[int, int]] = []
        if strategy == "jabas" and e > 0:
            traj = forecast(last_points, history, state.gbs, state.sim_step, be, gp_restarts)
            ch = be.autoscale(cluster, traj, cfg, state.sim_step, objective)
            new, t_new, t_now = ch.cluster, ch.time_s, ch.now_s
            # move only when the saving, over the epochs left, covers the restart (ours; the release ignores it)
            left = epochs - e if move_horizon is None else min(move_horizon, epochs - e)
            if objective == "time":
                worth = t_new + be.restart_cost / left < t_now
            else:  # cheaper, or the current set fell out of the time slack
                slack = getattr(be, "cost_slack", None)
                worth = epoch_cost(new, t_new + be.restart_cost / left) < epoch_cost(cluster, t_now) or (
                    slack is not None and t_now > (1.0 + slack) * ch.fastest_s)
            if _key(new) != _key(cluster) and worth:
                moved = be.configure(new, cfg.gbs, None)
                if moved is not None:
                    t += be.restart_cost
                    cost += price * be.restart_cost / 3600.0
                    restarts += 1
                    cluster, cfg = new, moved
                    price = epoch_cost(cluster, 3600.0)
                    state = replace(state, gbs=cfg.gbs, lbs=cfg.lbs)
        alloc.append((t, sum(s.num_gpus for s in cluster), "+".join(s.name for s in cluster)))
        done = 0.0
        while done < be.dataset:
            k = steps_to_next_adjustment(state, ab)
            left = math.ceil((be.dataset - done) / cfg.gbs)
            n = min(k, left)
            t += n * cfg.iter_time
            cost += price * n * cfg.iter_time / 3600.0
            done += n * cfg.gbs
            if n < k or strategy == "static":
                state = replace(state, sim_step=state.sim_step + n)
                continue
            state = replace(state, sim_step=state.sim_step + k - 1)
            cfg, state = _adjust(be, strategy, cluster, cfg, state, ep)
            points.append((state.sim_step - 1, cfg.gbs))
            history.append(cfg.gbs)
            gbs_pts.append((t, cfg.gbs))
        last_points = points
    return RunResult(strategy if strategy != "jabas" else f"jabas-{objective}", t, cost, restarts, gbs_pts, alloc)


def _adjust(be: Backend, strategy: str, cluster: Cluster, cfg: Cfg, state: AdaptiveBatchingState,
            epoch: int) -> tuple[Cfg, AdaptiveBatchingState]:
    """One SimiGrad adjustment step (``similarity.adaptive_step``) with the strategy's re-solve."""
    ngpu = sum(s.num_gpus for s in cluster)
    solved: dict[int, Cfg] = {}

    def sim(b: int) -> float:
        return expected_cosine_similarity(be.trace.stats(b, epoch), b)

    def resolve(target: float, cur: int) -> tuple[int, int] | None:
        if abs(target - cur) < 0.01 * cur:
            return None  # ours: a sub-1 % move (a target clamped at a bound) is skipped; with a coarse LBS grid
            # the only strict move can be thousands of GA steps at a tiny LBS
        if strategy == "jabas":
            c = be.configure(cluster, target, cur)
        else:  # one worker per GPU, GBS/N samples each (uneven by at most one sample): the target itself
            g = round(target)
            c = None if g < ngpu or g == cur else Cfg(max(g // ngpu, 1), g, be.uniform_time(cluster, g))
        if c is None:
            return None
        solved[c.gbs] = c
        return c.lbs, c.gbs

    new = adaptive_step(state, be.ab, sim, resolve, world_size=ngpu if strategy == "jabas" else None)
    new = replace(new, trajectory=())
    return solved.get(new.gbs, cfg), new
