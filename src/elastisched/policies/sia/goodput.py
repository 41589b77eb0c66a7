"""Sia's per-job, per-GPU-type goodput model (SOSP'23 §4.1; artifact siasosp23/artifacts `sia-simulator/`).

Read, not copied, from the artifact's `goodput.py` (the Pollux model it builds on), `speedup.py`, `job.py`
(`update_params`, `update_local_bsz`), `cluster.py` (`compute_throughput_ratios`) and `sia.py`
(`populate_valid_configs`, `_compute_goodputs_v2`).

- **Throughput model per GPU type.** A job starts with no model on any type. Each observation on a type —
  (nodes, replicas, micro-batch) → measured (step, sync) seconds — is added to that type's profile and the
  Pollux step-time model `T = ((α_c + β_c·b)^γ + T_net^γ)^(1/γ)` is refitted (RMS log error of compute and
  step time, `1e-3 (γ−1)²` and `1e-2 ((β_n/α_n)² + (β_r/α_r)²)` regularisers). Parameters the observations
  cannot identify are pinned as in the artifact's `fit_perf_params`: one micro-batch size seen → α_c fixed to
  half the mean compute time; no multi-node point → α_n, β_n at their lower bound (then raised to 1.1 × the
  intra-node ones); no single-node multi-GPU point → α_r, β_r pinned; no point above 2 replicas → β_n, β_r
  pinned. This model is optimistic about scaling until the job has run bigger, which is why Sia lets a job
  grow at most to twice its largest observed size per round (`max_replicas`).
- **Bootstrapping to other types.** A type the job has never run on borrows the goodput of a type it has run
  on, times the ratio of the two types' 1-GPU throughputs at the largest profiled micro-batch (the artifact's
  "seed profiles": `placements-<type>.csv` rows with one replica, `local_bsz.max() / step_time.max()`).
- **Statistical efficiency** from the job's latest gradient statistics (sqr, var), Pollux form.
- **Batch search**: 50 global batches in geometric space between `max(init batch, min micro × replicas)` and
  the cap; micro-batch and accumulation as in the artifact; configurations outside the micro-batch range
  score 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from elastisched.models.lbfgsb import minimize_bounded
from elastisched.models.profiles import ThroughputProfile
from elastisched.models.throughput import PolluxParams, artifact_fit_start

_LO = 1e-8
_EPS = 1e-8


def sia_configs(gpus_per_node: int, num_nodes: int, max_gpus: int = 64) -> tuple[tuple[int, int], ...]:
    """(nodes, GPUs) allocation shapes on one GPU type: powers of two below a node, then whole nodes.

    Artifact `CONFIGS_4GPU` / `CONFIGS_8GPU` (1, 2, 4[, 8] GPUs on one node, then k full nodes up to 64 GPUs),
    generalised to any node size."""
    out: list[tuple[int, int]] = []
    g = 1
    while g < gpus_per_node and g <= max_gpus:
        out.append((1, g))
        g *= 2
    for k in range(1, num_nodes + 1):
        if k * gpus_per_node > max_gpus:
            break
        out.append((k, k * gpus_per_node))
    return tuple(out)


_PROFILE_CACHE: dict[int, tuple[ThroughputProfile, float, tuple[int, int]]] = {}


def _profile_facts(profile: ThroughputProfile) -> tuple[float, tuple[int, int]]:
    hit = _PROFILE_CACHE.get(id(profile))
    if hit is None or hit[0] is not profile:
        pl = profile.placements
        df = pl[pl["num_replicas"] == 1]
        if df.empty:
            df = pl
        x1 = float(df["local_bsz"].max()) / float(df["step_time"].max())
        if len(_PROFILE_CACHE) > 256:
            _PROFILE_CACHE.clear()
        hit = _PROFILE_CACHE[id(profile)] = (profile, x1, (int(pl["local_bsz"].min()), int(pl["local_bsz"].max())))
    return hit[1], hit[2]


def one_gpu_throughput(profile: ThroughputProfile) -> float:
    """Seed-profile throughput on one GPU: largest profiled micro-batch / slowest 1-replica step (samples/s)."""
    return _profile_facts(profile)[0]


def micro_batch_range(profile: ThroughputProfile) -> tuple[int, int]:
    """Smallest and largest profiled micro-batch on this GPU type."""
    return _profile_facts(profile)[1]


def _loss_grad(p: np.ndarray, nodes: np.ndarray, reps: np.ndarray, bsz: np.ndarray, log_compute: np.ndarray,
               log_step: np.ndarray) -> tuple[float, np.ndarray]:
    """The artifact's fitting objective and its exact gradient (7 parameters)."""
    ac, bc, an, bn, ar, br, g = p
    retro = np.maximum(reps - 2, _LO)
    inter = nodes > 1
    intra = ~inter & (reps > 1)
    c = ac + bc * bsz
    n = np.where(inter, an + bn * retro, np.where(intra, ar + br * retro, _LO + _LO * retro))
    lc, ln = np.log(c), np.log(n)
    big = np.logaddexp(g * lc, g * ln)
    lpred = big / g
    wc, wn = np.exp(g * lc - big), np.exp(g * ln - big)
    m = len(c)
    d1, d2 = lc - log_compute, lpred - log_step
    e1, e2 = float(np.sqrt(np.mean(d1**2))), float(np.sqrt(np.mean(d2**2)))
    k1 = d1 / (c * m * e1) if e1 > 0 else np.zeros(m)
    k2 = d2 / (m * e2) if e2 > 0 else np.zeros(m)
    dl_dc, dl_dn = wc / c, wn / n
    dl_dg = (wc * lc + wn * ln - lpred) / g
    gc = k1 + k2 * dl_dc  # d(e1 + e2)/dc per point
    gn = k2 * dl_dn
    grad = np.array([
        gc.sum(), (gc * bsz).sum(),
        gn[inter].sum(), (gn * retro)[inter].sum(), gn[intra].sum(), (gn * retro)[intra].sum(),
        (k2 * dl_dg).sum(),
    ])
    reg = 1e-3 * (g - 1) ** 2 + 1e-2 * ((bn / an) ** 2 + (br / ar) ** 2)
    grad += np.array([0.0, 0.0, -2e-2 * bn**2 / an**3, 2e-2 * bn / an**2, -2e-2 * br**2 / ar**3,
                      2e-2 * br / ar**2, 2e-3 * (g - 1)])
    return e1 + e2 + reg, grad


_KNOWN_FITS: set[tuple[tuple[int, int, float, float, float], ...]] = set()


def _fit_known(points: tuple[tuple[int, int, float, float, float], ...]) -> bool:
    """Whether `fit_observed(points)` is memoised (answering costs nothing)."""
    return points in _KNOWN_FITS


@lru_cache(maxsize=8192)
def fit_observed(points: tuple[tuple[int, int, float, float, float], ...]) -> PolluxParams:
    """Fit the Pollux step-time model to observed (nodes, replicas, micro-batch, step, sync) points, pinning
    what they cannot identify (artifact `fit_perf_params`). Memoised: jobs of one application on one type
    tend to observe the same configurations in the same order."""
    arr = np.asarray(points, dtype=float)
    nodes, reps, bsz, step, sync = arr.T
    log_compute = np.log(np.maximum(step - sync, 1e-6))
    compute = np.exp(log_compute)
    x0, lo, hi = (np.array(v) for v in artifact_fit_start(nodes, reps, bsz, compute))
    x = minimize_bounded(_loss_grad, x0, lo, hi, (nodes, reps, bsz, log_compute, np.log(step)), tol=1e-5)
    p = np.clip(x, lo, hi)
    if not np.any(nodes > 1):
        p[2], p[3] = max(p[2], p[4] * 1.1), max(p[3], p[5] * 1.1)
    if len(_KNOWN_FITS) >= 8192:  # as the lru_cache: a bound on what is remembered
        _KNOWN_FITS.clear()
    _KNOWN_FITS.add(points)
    return PolluxParams(*map(float, p))


def optimize_batch(params: PolluxParams, grad: tuple[float, float], init_batch: int, nodes: np.ndarray,
                   reps: np.ndarray, max_batch: float, micro_range: tuple[int, int], tune: bool = True
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Best (goodput, micro-batch, accumulation) per (nodes, replicas) column, over 50 geometric batch sizes
    (artifact `GoodputFunction.optimize` with accumulation). Goodput is in reference samples per second."""
    nodes = np.asarray(nodes, dtype=float)
    reps = np.asarray(reps, dtype=float)
    lo_micro, hi_micro = micro_range
    if tune:
        lo_b = np.maximum(init_batch, lo_micro * reps)
        batch = np.geomspace(lo_b, np.full_like(lo_b, max_batch), num=50)
    else:
        batch = np.full((1, len(reps)), float(max_batch))
    local = batch / reps
    accum = np.ceil(local / hi_micro - _EPS) - 1
    accum = np.where((reps == 1) & (local > init_batch + _EPS), np.maximum(accum, 1), accum)
    micro = np.ceil(local / (accum + 1) - _EPS)
    c = params.compute_time(micro)
    optim = params.step_time(c, params.network_time(nodes, reps, "artifact"), "artifact")
    b = reps * micro * (accum + 1)
    sqr, var = grad
    scale = b / init_batch
    denom = var / scale + sqr
    gain = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)
    good = gain / (accum * c + optim) * init_batch  # = throughput · efficiency
    good = np.where((micro >= lo_micro) & (micro <= hi_micro), good, 0.0)
    best = np.argmax(good, axis=0)
    cols = np.arange(good.shape[1])
    return good[best, cols], micro[best, cols].astype(int), accum[best, cols].astype(int)


def optimize_batch_many(queries: list[tuple[PolluxParams, tuple[float, float], int, np.ndarray, np.ndarray, float,
                                           tuple[int, int]]]) -> list[np.ndarray]:
    """`optimize_batch`'s goodputs for many (params, grad, init batch, nodes, replicas, max batch, micro range)
    queries at once, by the same arithmetic element by element (a round's new goodput rows in one call)."""
    if not queries:
        return []
    sizes = [len(q[4]) for q in queries]

    def per_config(values: list[float]) -> np.ndarray:
        return np.repeat(np.array(values, dtype=float), sizes)

    fields = [per_config([getattr(q[0], f) for q in queries]) for f in
              ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")]
    params = PolluxParams(*fields)  # array-valued fields: the one formula, broadcast over every configuration
    sqr, var = per_config([q[1][0] for q in queries]), per_config([q[1][1] for q in queries])
    init, max_batch = per_config([q[2] for q in queries]), per_config([q[5] for q in queries])
    lo_micro, hi_micro = per_config([q[6][0] for q in queries]), per_config([q[6][1] for q in queries])
    nodes = np.concatenate([np.asarray(q[3], dtype=float) for q in queries])
    reps = np.concatenate([np.asarray(q[4], dtype=float) for q in queries])
    batch = np.geomspace(np.maximum(init, lo_micro * reps), max_batch, num=50)
    local = batch / reps
    accum = np.ceil(local / hi_micro - _EPS) - 1
    accum = np.where((reps == 1) & (local > init + _EPS), np.maximum(accum, 1), accum)
    micro = np.ceil(local / (accum + 1) - _EPS)
    c = params.compute_time(micro)
    optim = params.step_time(c, params.network_time(nodes, reps, "artifact"), "artifact")  # type: ignore[arg-type]
    scale = reps * micro * (accum + 1) / init
    denom = var / scale + sqr
    gain = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)
    good = gain / (accum * c + optim) * init
    good = np.where((micro >= lo_micro) & (micro <= hi_micro), good, 0.0)
    best = good[np.argmax(good, axis=0), np.arange(good.shape[1])]
    return np.split(best, np.cumsum(sizes)[:-1])


@dataclass
class SiaJobModel:
    """What Sia knows about one job: observed step times per GPU type and its latest gradient statistics."""

    observed: dict[str, dict[tuple[int, int, int], tuple[float, float]]] = field(default_factory=dict)
    grad: tuple[float, float] | None = None
    _params: dict[str, PolluxParams] = field(default_factory=dict)
    _stale: dict[str, PolluxParams] = field(default_factory=dict)  # the fit before the latest observation
    #: memo for the caller's goodput rows; cleared whenever the model or the gradient statistics change
    cache: dict[tuple[object, ...], np.ndarray] = field(default_factory=dict)

    def observe(self, gpu_type: str, nodes: int, replicas: int, micro: int, step: float, sync: float,
                grad: tuple[float, float]) -> None:
        """Record one measurement (artifact `Job.update_params`: a new point refits that type's model)."""
        if grad != self.grad:
            self.grad = grad
            self.cache.clear()
        prof = self.observed.setdefault(gpu_type, {})
        key = (int(nodes), int(replicas), int(micro))
        if key in prof:
            return
        prof[key] = (float(step), float(sync))
        old = self._params.pop(gpu_type, None)
        if old is not None:
            self._stale[gpu_type] = old
        self.cache.clear()

    def params(self, gpu_type: str, fit: bool = True) -> PolluxParams | None:
        """The type's fit to everything observed on it; with `fit=False` (a round out of budget) a fit not yet
        made is not made: the fit before the latest observation stands in (`stale` tells), or None."""
        prof = self.observed.get(gpu_type)
        if not prof:
            return None
        p = self._params.get(gpu_type)
        if p is None:
            pts = tuple(sorted((k[0], k[1], float(k[2]), v[0], v[1]) for k, v in prof.items()))
            if not fit and not _fit_known(pts):
                return self._stale.get(gpu_type)
            p = self._params[gpu_type] = fit_observed(pts)
        return p

    def stale(self, gpu_type: str) -> bool:
        """Whether `params(gpu_type, fit=False)` would answer with a stand-in."""
        return bool(self.observed.get(gpu_type)) and gpu_type not in self._params

    def max_profiled_replicas(self, gpu_type: str) -> int:
        return max((k[1] for k in self.observed.get(gpu_type, {})), default=0)

    @property
    def types_seen(self) -> tuple[str, ...]:
        return tuple(t for t, prof in self.observed.items() if prof)
