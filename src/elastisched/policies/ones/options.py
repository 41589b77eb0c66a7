"""The `ones` policy's options as one typed, validated value (docs/ones.md "Presets"; presets in `presets.py`).

Field names are the option names a user passes (`OnesPolicy(preset, **options)`, `ones_options` of the
experiment), so a preset is a plain mapping of overrides. Validation happens once, here, and names the bad
field and its value (`ConfigError`), so a typo fails at construction rather than mid-simulation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from elastisched.core.errors import ConfigError
from elastisched.policies.ones.artifact import CLOCKS

#: allowed values of the string-valued options
CHOICES: dict[str, tuple[str, ...]] = {
    "throttle": ("job", "global"),
    "start": ("one", "request", "node"),
    "growth": ("double", "cap"),
    "fitness": ("gpu_time", "time", "jct", "mixed"),
    "scale_in": ("passed_over", "every"),
    "delta_reset": ("changed", "all"),
    "delta_clock": CLOCKS,
    "queue_area": ("row", "resume"),
}
#: numeric options coerced to these types (a preset may write 1 for 1.0)
_INTS = ("population", "cap_factor", "big_start", "big_explore")
_FLOATS = ("xi", "theta", "delta_epochs", "scale_gate_epochs", "scale_down_factor", "interval", "min_gain",
           "restart_cost", "resize_cost", "quiet_s", "hold_factor", "preempt_factor", "prior_s", "resize_factor")
_BOOLS = ("artifact_scale_gate", "throughput_limit", "bootstrap", "samples", "require_history",
          "refresh_keep_first", "double_once_per_epoch", "restart_aware", "start_whole", "pack_nodes", "explore",
          "soak", "backfill")


@dataclass(frozen=True, slots=True)
class OnesOptions:
    """Every ONES option; the defaults are the "faithful" preset (the artifact with its bugs fixed)."""

    population: int = 16  # K individuals kept across rounds
    xi: float = 0.5  # crossover rate ξ
    theta: float = 0.3  # job-drop mutation rate θ
    delta_epochs: float = 1.0  # δ: epochs between placement changes of a job
    scale_gate_epochs: float = 2.0  # epochs at one size before the next scale-up (A4 fixed)
    artifact_scale_gate: bool = False  # A4 unfixed: the gate degraded to "≥ 1 epoch"
    scale_down_factor: float = 1.0
    cap_factor: int = 4  # growth cap in multiples of the request
    sample_rho: bool = True  # sample the predicted progress (else its mean)
    interval: float = 5.0  # seconds between rounds
    refit: bool = True  # refit the predictor on each finished job
    throttle: str = "global"
    throughput_limit: bool = True  # A16
    min_gain: float = 0.0
    bootstrap: bool = True  # bootstrap the predictor from a history table
    start: str = "one"  # D1
    growth: str = "double"  # D2
    samples: bool = False  # D3: remaining work in samples
    fitness: str = "gpu_time"  # D4, D5
    require_history: bool = False
    scale_in: str = "passed_over"
    delta_reset: str = "changed"
    refresh_keep_first: bool = False
    double_once_per_epoch: bool = False
    restart_aware: bool = False
    restart_cost: float = 30.0
    resize_cost: float = 8.0
    quiet_s: float = 0.0
    hold_factor: float = 1.0
    delta_clock: str = "progress"
    preempt_factor: float = 1.0
    prior_s: float = 60.0
    start_whole: bool = False  # D6
    resize_factor: float = 1.0
    pack_nodes: bool = False  # D7
    queue_area: str = "row"
    explore: bool = False  # D8
    big_start: int = 0  # D9: jobs requesting ≥ this many nodes start whole (0 = off)
    big_explore: int = 0  # D10
    soak: bool = True
    backfill: bool = False  # D12
    hold_free: float | None = None  # D13: hold factor of jobs without a progress log (None = hold_factor)

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ConfigError(name, value, f"must be one of {', '.join(allowed)}")
        for names, kind in ((_INTS, int), (_FLOATS, float), (_BOOLS, bool)):
            for name in names:
                value = getattr(self, name)
                try:
                    object.__setattr__(self, name, kind(value))
                except (TypeError, ValueError):
                    raise ConfigError(name, value, f"must be a {kind.__name__}") from None
        if self.population < 2:
            raise ConfigError("population", self.population, "must be at least 2 (crossover draws two parents)")
        if self.hold_free is not None:
            object.__setattr__(self, "hold_free", float(self.hold_free))

    @property
    def hold_free_factor(self) -> float:
        """Hold factor of a job without a progress log (D13; the common one unless set)."""
        return self.hold_factor if self.hold_free is None else self.hold_free

    @classmethod
    def of(cls, base: Mapping[str, Any], overrides: Mapping[str, Any]) -> OnesOptions:
        """`base` (a preset) with `overrides` on top; an unknown name is a ConfigError naming it."""
        known = {f.name for f in fields(cls)}
        for source in (base, overrides):
            unknown = sorted(set(source) - known)
            if unknown:
                raise ConfigError("ones option", unknown[0], f"unknown; known: {', '.join(sorted(known))}")
        return cls(**{**base, **overrides})

    def as_dict(self) -> dict[str, Any]:
        """Plain values, for reports and saved configurations."""
        return asdict(self)
