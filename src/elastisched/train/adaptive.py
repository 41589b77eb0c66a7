"""Gradient statistics, adaptive global-batch rules and learning-rate scaling rules.

Everything here is pure arithmetic over already-reduced gradient sums, so it is the same on every rank
(all ranks hold the identical all-reduced buffers) and every rank takes the same decision without an
extra broadcast.

Statistics come from two halves of one step's micro-batches (even and odd global micro-batch index):
- JABAS / SimiGrad: cosine similarity of the mean gradients of the two halves.
- Pollux: gradient noise scale from the same halves, |g|² ("grad_sqr") and tr(Σ) ("grad_var"), using the
  small-batch / big-batch estimator of McCandlish et al.; grad_var is reported at the base batch B0
  (tr(Σ)/B0), as AdaptDL reports it, so Pollux's goodput model can read it unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True, slots=True)
class GradStats:
    """Statistics of one measured step (raw, before smoothing)."""

    similarity: float
    sqr: float  # |E g|², unbiased estimate
    var: float  # tr(Σ) per sample
    n_even: int
    n_odd: int


def halves_stats(even_sum: torch.Tensor, odd_sum: torch.Tensor, n_even: int, n_odd: int) -> GradStats | None:
    """Stats from the per-sample gradient sums of the two halves; None if a half is empty."""
    if n_even < 1 or n_odd < 1:
        return None
    e = even_sum.double() / n_even
    o = odd_sum.double() / n_odd
    denom = float(e.norm() * o.norm())
    sim = float(torch.dot(e, o)) / denom if denom > 0 else 0.0
    big = n_even + n_odd
    g_big = (even_sum.double() + odd_sum.double()) / big
    sqr_big = float(g_big.dot(g_big))
    # Small batch: the two halves, weighted to their own sizes (harmonic batch size is exact for 1/b).
    b_small = 2.0 / (1.0 / n_even + 1.0 / n_odd)
    sqr_small = 0.5 * (float(e.dot(e)) + float(o.dot(o)))
    if big <= b_small:
        return GradStats(sim, sqr_big, 0.0, n_even, n_odd)
    var = (sqr_small - sqr_big) / (1.0 / b_small - 1.0 / big)
    sqr = (big * sqr_big - b_small * sqr_small) / (big - b_small)
    return GradStats(sim, sqr, var, n_even, n_odd)


class NoiseEstimate:
    """Bias-corrected exponential moving averages of grad_sqr and grad_var (Pollux smooths the same way)."""

    def __init__(self, theta: float = 0.9) -> None:
        self.theta = theta
        self.sqr = 0.0
        self.var = 0.0
        self.weight = 0.0
        self.similarity: float | None = None

    def update(self, s: GradStats) -> None:
        self.sqr = self.theta * self.sqr + (1 - self.theta) * s.sqr
        self.var = self.theta * self.var + (1 - self.theta) * max(s.var, 0.0)
        self.weight = self.theta * self.weight + (1 - self.theta)
        self.similarity = s.similarity

    @property
    def ready(self) -> bool:
        return self.weight > 0

    def grad_sqr(self) -> float:
        return max(self.sqr / self.weight, 1e-30) if self.ready else 0.0

    def grad_var(self) -> float:
        """tr(Σ) per sample."""
        return self.var / self.weight if self.ready else 0.0

    def noise_scale(self) -> float | None:
        """B_noise = tr(Σ)/|g|² (McCandlish); the batch size where the noise matches the signal."""
        return self.grad_var() / self.grad_sqr() if self.ready else None

    def state_dict(self) -> dict[str, Any]:
        return {"theta": self.theta, "sqr": self.sqr, "var": self.var, "weight": self.weight,
                "similarity": self.similarity}

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.theta, self.sqr, self.var = st["theta"], st["sqr"], st["var"]
        self.weight, self.similarity = st["weight"], st["similarity"]


def gain(scale: float, noise: NoiseEstimate, base_batch: int) -> float:
    """AdaScale gain r = (σ²+|g|²)/(σ²/s+|g|²), with σ² the variance at the base batch; 1 when unknown."""
    if not noise.ready or scale <= 0:
        return 1.0
    var0 = noise.grad_var() / base_batch
    sqr = noise.grad_sqr()
    return (var0 + sqr) / (var0 / scale + sqr)


# ----------------------------------------------------------------------------- LR scaling rules


class ScalingRule(Protocol):
    """Multiplier of the user's learning rate when the global batch is `scale` × the base batch."""

    def factor(self, scale: float, noise: NoiseEstimate, base_batch: int) -> float: ...


class SqrtScale:
    """lr × sqrt(B/B0) (JABAS; Krizhevsky's rule for adaptive optimisers)."""

    def factor(self, scale: float, noise: NoiseEstimate, base_batch: int) -> float:
        return math.sqrt(scale)


class LinearScale:
    """lr × B/B0 (Goyal et al.; for SGD at moderate batch sizes)."""

    def factor(self, scale: float, noise: NoiseEstimate, base_batch: int) -> float:
        return scale


class AdaScale:
    """lr × gain(B/B0): between 1 (noise-free) and B/B0 (noise-dominated), from the measured noise."""

    def factor(self, scale: float, noise: NoiseEstimate, base_batch: int) -> float:
        return gain(scale, noise, base_batch)


class NoScale:
    """Leave the learning rate alone."""

    def factor(self, scale: float, noise: NoiseEstimate, base_batch: int) -> float:
        return 1.0


SCALING_RULES: dict[str, type] = {"sqrt": SqrtScale, "linear": LinearScale, "adascale": AdaScale,
                                  "none": NoScale}


def scaling_rule(name: str | ScalingRule | None) -> ScalingRule:
    """Resolve a rule given by name ('sqrt', 'linear', 'adascale', 'none') or instance."""
    if name is None:
        return SqrtScale()
    if isinstance(name, str):
        try:
            return SCALING_RULES[name.lower()]()
        except KeyError:
            raise ValueError(f"scaling_rule={name!r}; choose one of {sorted(SCALING_RULES)}") from None
    return name


# ----------------------------------------------------------------------------- batch-size rules


@dataclass(frozen=True, slots=True)
class StepTiming:
    """Measured timing of recent steps, for goodput-driven rules."""

    step_time: float  # seconds per optimizer step at `global_batch`
    sync_time: float  # seconds of it spent in the gradient all-reduce
    global_batch: int


class BatchRule(Protocol):
    """Proposes the next global batch from fresh statistics; called every `interval` steps."""

    name: str

    def propose(self, current: int, noise: NoiseEstimate, stats: GradStats, timing: StepTiming | None,
                lo: int, hi: int, base_batch: int) -> int: ...


@dataclass(frozen=True)
class SimilarityRule:
    """JABAS/SimiGrad: cos < γ (halves disagree, noisy) → batch ×(1+rate); cos > γ → ×(1−rate)."""

    gamma: float = 0.1
    rate: float = 0.1
    name: str = "similarity"

    def propose(self, current: int, noise: NoiseEstimate, stats: GradStats, timing: StepTiming | None,
                lo: int, hi: int, base_batch: int) -> int:
        if stats.similarity < self.gamma:
            target = current * (1 + self.rate)
            target = max(target, current + 1)
        elif stats.similarity > self.gamma:
            target = current * (1 - self.rate)
            target = min(target, current - 1)
        else:
            target = current
        return int(min(max(round(target), lo), hi))


@dataclass(frozen=True)
class GoodputRule:
    """Pollux: pick the batch that maximises throughput × statistical efficiency.

    Efficiency E(B) = gain(B/B0)/(B/B0) from the smoothed noise; throughput from the measured step:
    T(B) = sync + (T_obs − sync)·B/B_obs (compute grows linearly with the batch per rank).
    """

    candidates: int = 24
    name: str = "gns"

    def propose(self, current: int, noise: NoiseEstimate, stats: GradStats, timing: StepTiming | None,
                lo: int, hi: int, base_batch: int) -> int:
        if not noise.ready or timing is None or timing.step_time <= 0:
            return current
        compute = max(timing.step_time - timing.sync_time, 1e-9)
        grid = {current, lo, hi}
        if hi > lo:
            ratio = (hi / lo) ** (1.0 / (self.candidates - 1))
            grid |= {round(lo * ratio**i) for i in range(self.candidates)}

        def goodput(b: int) -> float:
            t = timing.sync_time + compute * b / timing.global_batch
            scale = b / base_batch
            return b / t * gain(scale, noise, base_batch) / scale

        return max(sorted(b for b in grid if lo <= b <= hi), key=goodput)


def batch_rule(rule: str | BatchRule) -> BatchRule:
    """Resolve 'similarity' (JABAS) or 'gns' (Pollux) or a rule instance."""
    if isinstance(rule, str):
        if rule == "similarity":
            return SimilarityRule()
        if rule in ("gns", "goodput", "pollux"):
            return GoodputRule()
        raise ValueError(f"rule={rule!r}; choose 'similarity' or 'gns'")
    return rule
