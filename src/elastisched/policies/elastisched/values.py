"""From candidates to the assignment problem: who must keep running, and what each (type, count) is worth.

- **Value** of holding k GPUs of type t: the job's speed-up `T(ref) / T(t, k)` weighted by its rank by
  predicted remaining time (`value="rank"`, the default): ranks counted from the longest job (1) to the
  shortest (n), weight `(rank / n)^rank_power`. heSRPT (Berg, Vesilo, Harchol-Balter, SIGMETRICS'20) shows that
  with concave speed-ups the least mean response time gives every job a share that depends on its rank by
  remaining size, not on the sizes themselves, with the shortest job's share the largest. `value="rate"` is
  the completion rate `τ / T(t, k)` (Lyra's "rate" value, lyra.md §7 row 8; AFS, NSDI'21), whose weight
  `1 / T(ref)` follows the sizes: with a few very long jobs it starves them of the GPUs short jobs barely use
  (docs/elastisched.md has the measurements behind the default).
- **Restarts** (the anti-thrash rules; ours unless named): a running job's option other than what it holds pays
  `restart_penalty × restart cost` seconds on its time and keeps `1 − restart cost / horizon` of its value (a
  change only pays if it holds long enough to recover the stall), times Sia's restart factor (SOSP'23 §4.2:
  `max(age − restarts·rc, 0) / (age + rc)`, so a young job and one that restarted often stay put); a waiting
  job pays `launch_penalty × restart cost` (it must start some day anyway); a restart in progress is charged to
  staying. A job that (re)started less than `pin × restart cost` seconds ago stays on its GPU type.
- **Protection** (SRPT with a bounded preemption factor and a minimum run time): a running job may be stopped
  only once it has run `min_run` seconds since its last (re)start, and only by a waiting job whose remaining
  time (its SRPT key) is at least `preempt` times shorter. A protected job keeps at least its fewest GPUs (on
  any type it may use); it may still shrink, grow or move.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from elastisched.policies.elastisched.assign import NEG, Problem
from elastisched.policies.elastisched.candidates import Candidate

TAU = 3600.0  # scales rate values to about 1 (a job one hour from done is worth 1)
VALUES = ("rank", "rate")


@dataclass(frozen=True, slots=True)
class ValueRule:
    """How options are valued (module docstring); the policy's options of the same names."""

    value: str = "rank"
    rank_power: float = 2.0
    restart_penalty: float = 4.0
    launch_penalty: float = 0.0
    horizon: float = 900.0
    sia_discount: bool = True
    pin: float = 5.0


def young(c: Candidate, now: float, seconds: float) -> bool:
    """Whether a running job got its GPUs less than `seconds` ago."""
    return c.moved_at is not None and now - c.moved_at < seconds


def protected(cands: Sequence[Candidate], now: float, preempt: float, min_run: float) -> list[bool]:
    """Which candidates must keep running this round (module docstring)."""
    waiting = [c.key for c in cands if not c.cur_gpus and c.times]
    shortest = min(waiting, default=math.inf)
    return [bool(c.cur_gpus) and (young(c, now, min_run) or not shortest * preempt < c.key) for c in cands]


def build_problem(cands: Sequence[Candidate], capacity: Mapping[str, int], keep: Sequence[bool],
                  rule: ValueRule, now: float) -> Problem:
    """Values per type (rows = candidates) for lo ≤ k ≤ hi, −inf elsewhere; column 0 is 0, or −inf for a
    protected candidate."""
    types = tuple(t for t, c in capacity.items() if c > 0)
    most = max((c.hi for c in cands), default=0)
    scale = _scales(cands, rule)
    values = []
    for t in types:
        width = min(capacity[t], most) + 1
        v = np.full((len(cands), width), NEG)
        v[:, 0] = np.where(np.asarray(keep, dtype=bool), NEG, 0.0) if len(cands) else 0.0
        for j, c in enumerate(cands):
            ts = c.times.get(t)
            top = -1 if ts is None else min(width - 1, c.hi, len(ts) - 1)
            pinned = rule.pin > 0 and c.cur_type not in (None, t) and c.cur_type in c.times and not c.disturbed \
                and young(c, now, rule.pin * c.restart_cost)
            if ts is not None and top >= c.lo and not pinned:
                v[j, c.lo: top + 1] = _row(c, t, ts[c.lo: top + 1], scale[j], rule, now)
        values.append(v)
    index = {t: i for i, t in enumerate(types)}
    current = (np.array([index.get(c.cur_type, -1) if c.cur_type and not c.disturbed else -1 for c in cands],
                        dtype=np.int64), np.array([c.cur_gpus for c in cands], dtype=np.int64))
    return Problem(types, tuple(values), tuple(capacity[t] for t in types), current)


def _row(c: Candidate, t: str, times: np.ndarray, scale: float, rule: ValueRule, now: float) -> np.ndarray:
    """One candidate's values of c.lo.. GPUs of type t (module docstring)."""
    stay = c.cur_type == t and not c.disturbed and c.lo <= c.cur_gpus < c.lo + len(times)
    cost = times + (rule.restart_penalty if c.cur_gpus else rule.launch_penalty) * c.restart_cost
    if stay:
        cost[c.cur_gpus - c.lo] = times[c.cur_gpus - c.lo] + c.restart_left
    finite = np.isfinite(cost)
    row = np.where(finite, scale / np.where(finite, cost, 1.0), NEG)
    if c.cur_gpus:
        kept = row[c.cur_gpus - c.lo] if stay else None
        factor = max(0.0, 1.0 - c.restart_cost / rule.horizon)
        if rule.sia_discount:
            factor *= _restart_discount(c, now)
        row = np.where(finite, row * factor, NEG)
        if kept is not None:
            row[c.cur_gpus - c.lo] = kept
    return row


def _scales(cands: Sequence[Candidate], rule: ValueRule) -> np.ndarray:
    """The numerator of each candidate's value: τ (rate values), or its rank weight × its reference time."""
    if rule.value == "rate":
        return np.full(len(cands), TAU)
    n = len(cands)
    # longest first; among equal predictions the later submission counts as the longer (first come, first served)
    order = sorted(range(n), key=lambda j: (-cands[j].key if math.isfinite(cands[j].key) else -1e300,
                                            -cands[j].view.spec.submit_time))
    w = np.empty(n)
    for r, j in enumerate(order, start=1):
        w[j] = (r / n) ** rule.rank_power * min(cands[j].key, 1e12)
    return w


def _restart_discount(c: Candidate, now: float) -> float:
    """Sia's restart factor (module docstring): age = seconds since the job's first start."""
    v = c.view
    age = now - v.start_time if v.start_time is not None else 0.0
    return max(age - v.num_restarts * c.restart_cost, 0.0) / (age + c.restart_cost)
