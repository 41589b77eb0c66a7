r"""Gradient similarity of two half-batch means, and the JABAS/SimiGrad adaptive-batching step rule.

**Statistic.**  JABAS splits the ranks by parity into two halves holding the same number of decoupled
workers (``W/2`` each, so ``B/2`` samples each for a global batch ``B``), and compares the two half-batch
mean gradients by cosine similarity every ``p`` steps [code: JABAS ``jabas/ddp_comm_hooks/
similarity_allreduce.py``, ``jabas/train/trainer.py`` ``_compute_cosine_similarity``; digest §2(a)].

**Derivation (ours).**  Per-sample gradients are i.i.d. with mean ``G`` and covariance ``Σ``.  A half mean is
``g_i = G + ε_i`` with ``E ε_i = 0``, ``Cov ε_i = Σ/(B/2)``, ``ε_0 ⟂ ε_1``.  Then
``E⟨g_0, g_1⟩ = |G|²`` and ``E|g_i|² = |G|² + 2 tr(Σ)/B``.  Taking the ratio of expectations (exact in
the limit where the dot product and norms concentrate, i.e. many parameters — the regime of DNNs),

.. math::  E[\cos] ≈ \frac{|G|^2}{|G|^2 + 2\,tr(Σ)/B} = \frac{1}{1 + 2 B_{noise}/B},
           \qquad B_{noise} = tr(Σ)/|G|^2

(McCandlish et al.'s simple noise scale).  Inverting, the batch at which the expected similarity equals
the target γ is ``B* = 2 B_noise γ/(1−γ)``; the ±10 % controller oscillates around it.

**Pollux statistics.**  The ``validation-<bsz>.csv`` traces of the Pollux artifact carry ``grad_sqr`` and
``grad_var``.  Pollux (adaptdl ``GradientNoiseScale``) estimates ``grad_sqr = |G|²`` and
``grad_var = tr(Σ)/B_0``: the variance of the gradient mean at the job's *initial* batch size ``B_0``
(``var = (E|g_local|² − |g_total|²)·scale/(count−1)`` with ``scale = local_bsz/B_0``), and its simulator
uses them as ``gain = (var + sqr)/(var/scale + sqr)`` with ``scale = B / init_batch_size`` and
``init_batch_size = min(validation batch sizes)`` [adaptdl ``simulator/simulator.py``,
``simulator/applications.py``].  So ``tr(Σ) = grad_var · B_0``.  We follow the simulator: ``B_0`` = the
smallest validation batch size of the application, and the statistics at batch ``B`` are the Pollux
interpolation between the two bracketing files.  The values of different files have the same magnitude
(e.g. cifar10 epoch 1: 5.1 at 128 and 11.8 at 4096), which would not hold if each were normalised to its
own file's batch size; that reading stays available via ``reference_batch``.

**Step rule** (SimiGrad on IIDP): every ``p`` sync steps (``sim_step`` starts at 1), if ``cos < γ`` the target
is ``B·(1+rate)``, if ``cos > γ`` it is ``B·(1−rate)`` (only while ``B > 1``), clamped to the bounds; the
configuration is re-solved (``IIDPSolver.best`` in the direction of the move) and applied when a solution exists with
``W ≥ #GPUs``; then ``lr_modifier = sqrt(B/B_0)`` with ``B_0`` = the lower bound (elastic mode)
[code: ``_adjust_adaptive_global_batch_size``, ``_change_batch_size_for_iidp``, ``_scale_lr``].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from elastisched.models.application import Application

__all__ = [
    "AdaptiveBatchingConfig",
    "AdaptiveBatchingState",
    "GradStats",
    "PolluxGradTrace",
    "adaptive_step",
    "batch_for_similarity",
    "bundled_pollux_grad_trace",
    "dataset_size",
    "expected_cosine_similarity",
    "gbs_schedule",
    "grad_trace",
    "load_pollux_grad_trace",
    "lr_modifier",
    "similarity_target_batch",
    "simulate_adjustments",
    "steps_to_next_adjustment",
    "trajectory_series",
]


@dataclass(frozen=True, slots=True)
class GradStats:
    """Gradient statistics: ``grad_sqr = |G|²``, ``grad_var = tr(Σ)/reference_batch`` (Pollux convention)."""

    grad_sqr: float
    grad_var: float
    reference_batch: float

    @property
    def trace_cov(self) -> float:
        """Per-sample covariance trace ``tr(Σ)``."""
        return self.grad_var * self.reference_batch

    @property
    def noise_scale(self) -> float:
        """Simple noise scale ``B_noise = tr(Σ)/|G|²`` (inf when ``|G|² ≤ 0``)."""
        return math.inf if self.grad_sqr <= 0 else self.trace_cov / self.grad_sqr


def expected_cosine_similarity(stats: GradStats, batch_size: float) -> float:
    """Expected cosine similarity of the two half-batch gradient means at global batch ``batch_size``."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    sqr = max(stats.grad_sqr, 0.0)
    noise = 2.0 * max(stats.trace_cov, 0.0) / batch_size
    if sqr + noise == 0.0:
        return 1.0
    return sqr / (sqr + noise)


def batch_for_similarity(stats: GradStats, gamma: float) -> float:
    """Global batch at which the expected similarity equals ``gamma`` (``2·B_noise·γ/(1−γ)``)."""
    if not 0.0 < gamma < 1.0:
        raise ValueError(f"similarity target must be in (0, 1), got {gamma}")
    return 2.0 * stats.noise_scale * gamma / (1.0 - gamma)


# ------------------------------------------------------------------------------------ Pollux traces
@dataclass(frozen=True, slots=True)
class PolluxGradTrace:
    """Per-epoch ``(grad_sqr, grad_var)`` of one application, per validation batch size."""

    app: str
    batch_sizes: tuple[int, ...]
    grad_sqr: Mapping[int, tuple[float, ...]]
    grad_var: Mapping[int, tuple[float, ...]]
    reference_batch: float

    @property
    def num_epochs(self) -> int:
        return min(len(v) for v in self.grad_sqr.values())

    def stats(self, batch_size: float, epoch: int) -> GradStats:
        """Pollux's ``get_grad_stats``: linear interpolation between the bracketing batch sizes
        (clamped to the validated range — Pollux asserts instead)."""
        if not 0 <= epoch < self.num_epochs:
            raise ValueError(f"epoch {epoch} outside 0..{self.num_epochs - 1} for {self.app}")
        bs = np.asarray(self.batch_sizes, dtype=float)
        b = float(np.clip(batch_size, bs[0], bs[-1]))
        sqr = float(np.interp(b, bs, [self.grad_sqr[k][epoch] for k in self.batch_sizes]))
        var = float(np.interp(b, bs, [self.grad_var[k][epoch] for k in self.batch_sizes]))
        return GradStats(sqr, var, self.reference_batch)


def load_pollux_grad_trace(app_dir: str | Path, *, reference_batch: float | None = None) -> PolluxGradTrace:
    """Read ``validation-<bsz>.csv`` files of a Pollux trace directory (``progress,iteration,metric,
    grad_sqr,grad_var``).  ``reference_batch`` defaults to the smallest validation batch size."""
    import pandas as pd

    d = Path(app_dir)
    files = sorted(d.glob("validation-*.csv"))
    if not files:
        raise ValueError(f"{d}: no validation-<batch>.csv files")
    sqr: dict[int, tuple[float, ...]] = {}
    var: dict[int, tuple[float, ...]] = {}
    for f in files:
        try:
            bsz = int(f.stem.split("-")[-1])
        except ValueError as exc:
            raise ValueError(f"{f}: cannot read the batch size from the file name") from exc
        df = pd.read_csv(f)
        missing = {"grad_sqr", "grad_var"} - set(df.columns)
        if missing:
            raise ValueError(f"{f}: missing column(s) {sorted(missing)}")
        sqr[bsz] = tuple(float(x) for x in df["grad_sqr"])
        var[bsz] = tuple(float(x) for x in df["grad_var"])
    sizes = tuple(sorted(sqr))
    ref = float(sizes[0]) if reference_batch is None else float(reference_batch)
    return PolluxGradTrace(d.name, sizes, sqr, var, ref)


# ------------------------------------------------------------------------------------ step rule
@dataclass(frozen=True, slots=True)
class AdaptiveBatchingConfig:
    """JABAS ``jabas_config`` keys: γ, GBS bounds, adjust rate and interval p; ``base_batch`` B0 for the
    √ LR rule (None = the lower bound, as in elastic mode)."""

    similarity_target: float
    lower_bound: int
    upper_bound: int
    adjust_rate: float = 0.1
    adjust_interval: int = 100
    base_batch: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.lower_bound <= self.upper_bound:
            raise ValueError(f"need 0 < lower_bound <= upper_bound, got {self.lower_bound}, {self.upper_bound}")
        if not 0 < self.adjust_rate < 1:
            raise ValueError(f"adjust_rate must be in (0, 1), got {self.adjust_rate}")
        if self.adjust_interval < 1:
            raise ValueError(f"adjust_interval must be >= 1, got {self.adjust_interval}")

    @property
    def b0(self) -> int:
        return self.base_batch if self.base_batch is not None else self.lower_bound


@dataclass(frozen=True, slots=True)
class AdaptiveBatchingState:
    """Controller state: current GBS/LBS, the similarity step counter (starts at 1) and the LR factor."""

    gbs: int
    lbs: int
    sim_step: int = 1
    lr_modifier: float = 1.0
    trajectory: tuple[tuple[int, int], ...] = ()  # (sim_step, GBS) recorded at each adjustment


def lr_modifier(gbs: float, cfg: AdaptiveBatchingConfig) -> float:
    """Square-root LR scaling ``sqrt(GBS / B0)``."""
    return math.sqrt(gbs / cfg.b0)


def similarity_target_batch(gbs: float, similarity: float, cfg: AdaptiveBatchingConfig) -> float:
    """The SimiGrad target before re-solving: ×(1+rate) below γ, ×(1−rate) above, clamped to bounds."""
    if similarity < cfg.similarity_target:
        target = gbs * (1.0 + cfg.adjust_rate)
    elif similarity > cfg.similarity_target and gbs > 1:
        target = gbs * (1.0 - cfg.adjust_rate)
    else:
        target = float(gbs)
    return min(max(target, cfg.lower_bound), cfg.upper_bound)


Resolver = Callable[[float, int], "tuple[int, int] | None"]


def adaptive_step(
    state: AdaptiveBatchingState,
    cfg: AdaptiveBatchingConfig,
    similarity: float | Callable[[int], float],
    resolve: Resolver,
    *,
    world_size: int | None = None,
) -> AdaptiveBatchingState:
    """Advance by one sync step (pure).  On an adjustment step (``sim_step % p == 0``):

    ``similarity`` is the measured cosine (or a function of the current GBS, e.g.
    ``lambda b: expected_cosine_similarity(stats, b)``); ``resolve(target, gbs)`` returns the new
    ``(lbs, gbs)`` or ``None`` (e.g. from ``IIDPSolver.best``).  A solution with
    ``gbs // lbs < world_size`` is rejected, as in the release.
    """
    if state.sim_step % cfg.adjust_interval != 0:
        return replace(state, sim_step=state.sim_step + 1)
    cos = similarity(state.gbs) if callable(similarity) else float(similarity)
    gbs, lbs = state.gbs, state.lbs
    target = similarity_target_batch(gbs, cos, cfg)
    if target != gbs:
        sol = resolve(target, gbs)
        if sol is not None:
            new_lbs, new_gbs = sol
            if new_lbs > 0 and new_gbs > 0 and (world_size is None or new_gbs // new_lbs >= world_size):
                gbs, lbs = new_gbs, new_lbs
    return AdaptiveBatchingState(
        gbs=gbs,
        lbs=lbs,
        sim_step=state.sim_step + 1,
        lr_modifier=lr_modifier(gbs, cfg),
        trajectory=(*state.trajectory, (state.sim_step, gbs)),
    )


def steps_to_next_adjustment(state: AdaptiveBatchingState, cfg: AdaptiveBatchingConfig) -> int:
    """Sync steps until (and including) the next adjustment step; lets a simulator jump ahead."""
    return (-state.sim_step) % cfg.adjust_interval + 1


def simulate_adjustments(
    state: AdaptiveBatchingState,
    cfg: AdaptiveBatchingConfig,
    similarity_of: Callable[[int], float],
    resolve: Resolver,
    num_steps: int,
    *,
    world_size: int | None = None,
) -> AdaptiveBatchingState:
    """Apply ``num_steps`` sync steps, jumping straight between adjustment steps (same result as a loop
    of :func:`adaptive_step`, O(#adjustments))."""
    left = num_steps
    while left > 0:
        k = steps_to_next_adjustment(state, cfg)
        if k > left:
            return replace(state, sim_step=state.sim_step + left)
        state = replace(state, sim_step=state.sim_step + k - 1)
        state = adaptive_step(state, cfg, similarity_of, resolve, world_size=world_size)
        left -= k
    return state


def trajectory_series(points: Sequence[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """Split ``(sim_step, GBS)`` points into the forecaster's x and y lists."""
    return [p[0] for p in points], [p[1] for p in points]


def bundled_pollux_grad_trace(app: str) -> PolluxGradTrace:
    """Gradient statistics of a Pollux application bundled under ``models/profiles/pollux/<app>``."""
    from importlib import resources

    root = resources.files("elastisched.models").joinpath("profiles", "pollux", app)
    return load_pollux_grad_trace(Path(str(root)))


# ------------------------------------------------------------------- Pollux applications (the jabas policy)
def grad_trace(app: Application) -> PolluxGradTrace:
    """Per-epoch gradient statistics of an application (its ``validation-*.csv``), Pollux convention."""
    v = app.profile.validation
    sqr = {b: tuple(float(x) for x in df["grad_sqr"]) for b, df in v.items()}
    var = {b: tuple(float(x) for x in df["grad_var"]) for b, df in v.items()}
    return PolluxGradTrace(app.name, tuple(sorted(v)), sqr, var, float(min(v)))


def dataset_size(app: Application) -> int:
    """Samples per epoch: optimizer steps of one epoch × batch in the smallest-batch validation file."""
    b = min(app.profile.validation)
    it = app.profile.validation[b]["iteration"].to_numpy(float)
    steps = it[0] if len(it) < 2 else it[1] - it[0]
    return max(round(steps * b), b)


def gbs_schedule(
    trace: PolluxGradTrace, cfg: AdaptiveBatchingConfig, gbs: int, epoch: int, samples: float,
    sim_step: int = 1,
) -> tuple[int, int, list[tuple[float, int]]]:
    """Run the SimiGrad rule over ``samples`` of epoch ``epoch`` from ``gbs``, the target GBS itself
    (rounded, within the bounds) being taken at each adjustment.

    Returns ``(gbs, sim_step, [(samples done at the adjustment, GBS from then on), ...])``, one point per
    adjustment step (changed or not: the epoch-time estimator counts ``p`` steps per point); the caller
    realises each GBS (IIDP re-solve, or an even split).
    """
    ep = min(max(epoch, 0), trace.num_epochs - 1)

    def sim(b: int) -> float:
        return expected_cosine_similarity(trace.stats(b, ep), b)

    def resolve(target: float, cur: int) -> tuple[int, int] | None:
        new = math.ceil(target) if target > cur else math.floor(target)
        new = min(max(new, 1), cfg.upper_bound)
        return None if new == cur else (1, new)

    st = AdaptiveBatchingState(gbs=gbs, lbs=1, sim_step=sim_step)
    done, pts = 0.0, []
    while done < samples:
        k = (-st.sim_step) % cfg.adjust_interval + 1  # steps to the next adjustment (inclusive)
        n = min(k, max(1, math.ceil((samples - done) / st.gbs)))
        done += n * st.gbs
        if n < k:
            st = replace(st, sim_step=st.sim_step + n)
            break
        st = simulate_adjustments(st, cfg, sim, resolve, k)
        pts.extend((done, g) for _, g in st.trajectory)
        st = AdaptiveBatchingState(st.gbs, st.lbs, st.sim_step)
    return st.gbs, st.sim_step, pts
