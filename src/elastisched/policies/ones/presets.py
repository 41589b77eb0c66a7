"""Named configurations of the `ones` policy (docs/ones.md "Presets"): every option's value per preset.

- "faithful": the artifact's algorithm with the four bug fixes and A16 (the policy's defaults before presets);
- "artifact": what the artifact's code does, bugs included: the scale-up gate degraded to "≥ 1 epoch"
  (A4 unfixed), at most one doubling per epoch, no throughput limit (A16 off), scale-in that halves every
  preempted job's resume size in every unthrottled update, the δ clock reset for every job of a newly
  deployed schedule and kept on the artifact's integer epoch count (`ones.artifact`: a fresh job is stamped
  before its initial evaluation, a restamped one waits only for the end of its epoch), and `_refresh` keeping
  the first gene of a job whose cap is 0;
- "tuned" (default): restart-aware: new jobs start at their request within one node (D1); the fitness is
  "mixed": for a job with a loss/accuracy log (what the progress predictor reads) its predicted remaining time,
  a left-out job counted on one GPU (D4, so preempting it never looks like a gain); for a job without one (the
  Pollux traces) its predicted completion time with the wait behind the GPU-time the candidate serves (D5,
  `ones.jct`; with no prediction a job is taken to need max(attained GPU-s, `prior_s` = 1,800 s × its size)
  more: least attained service with a quantum); plus the restart cost of each stop and 3× the resize cost of
  each resize of a running job (`resize_factor`); a running job keeps its slots unless the predicted gain pays
  for the move (`ones.deploy.hold`; a growth must save 3× its resize cost, `hold_factor`); a (re)started job
  is packed onto as few nodes as the free GPUs allow (D7, `pack_nodes`); a round whose inputs did not change
  since the last (same jobs, placements, epochs done, δ and scale-up clocks; only random draws differ) is
  skipped for up to `quiet_s` = 300 s (one generation per event, and at least one per 5 minutes: a reading of
  A7); growth capped at the request (`cap_factor` 1) and δ = 1.5 epochs between placement changes; after the
  deployment, waiting jobs without a progress log start on the GPUs it leaves idle, least attained service first
  (D12, `backfill`, `ones.backfill`: the hold and the δ throttle otherwise left GPUs meant for a growth idle
  while jobs waited); a job without a progress log may grow when the predicted gain exceeds 1× the resize cost
  (`hold_free`, D13; jobs with one keep `hold_factor` 3, so the ONES trace is unchanged).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from elastisched.core.errors import ConfigError
from elastisched.policies.ones.options import OnesOptions

if TYPE_CHECKING:
    from elastisched.policies.options import Option

#: overrides of `OnesOptions`' defaults per preset ("faithful" is the defaults)
PRESETS: dict[str, dict[str, Any]] = {
    "faithful": {},
    "artifact": {"artifact_scale_gate": True, "throughput_limit": False, "scale_in": "every", "delta_reset": "all",
                 "refresh_keep_first": True, "double_once_per_epoch": True, "delta_clock": "epochs"},
    "tuned": {"start": "node", "fitness": "mixed", "restart_aware": True, "quiet_s": 300.0, "cap_factor": 1,
              "delta_epochs": 1.5, "hold_factor": 3.0, "resize_factor": 3.0, "prior_s": 1800.0, "pack_nodes": True,
              "backfill": True, "hold_free": 1.0},
}


def build(preset: str, **overrides: Any) -> OnesOptions:
    """The options of `preset` with `overrides` on top, validated."""
    if preset not in PRESETS:
        raise ConfigError("preset", preset, f"unknown; known: {', '.join(PRESETS)}")
    return OnesOptions.of(PRESETS[preset], overrides)


def declared_options() -> tuple[Option, ...]:
    """`preset`, then every `OnesOptions` field with its value under the default preset ("tuned"), typed as the
    field is, with its allowed values (`options.CHOICES`): what `-p ones:key=value` may set."""
    from dataclasses import fields

    from elastisched.policies.ones.options import CHOICES
    from elastisched.policies.options import SIMPLE, Option

    tuned = build("tuned").as_dict()
    out = [Option("preset", str, "tuned", "overrides applied before the options given here", tuple(PRESETS))]
    for f in fields(OnesOptions):
        parts = [p.strip() for p in str(f.type).split("|")]
        kind = SIMPLE[next(p for p in parts if p != "None")]
        out.append(Option(f.name, kind, tuned[f.name], "docs/ones.md \"Presets\" (ones/options.py)",
                          CHOICES.get(f.name, ()), "None" in parts))
    return tuple(out)
