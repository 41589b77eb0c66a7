"""Turning inference demand into a loanable-server timeline (lyra.md §1.1, §6.1, §7 rows 1–2).

The inference scheduler, not Lyra, decides how many servers are idle and loanable and when some must come
back (lyra.md §1.1 [S]). Our inference side lends every server that is idle beyond a safety `headroom`, and
— because inference is never delayed by training — announces a reclaim `notice` seconds before the demand
rises: the number on loan at time t is

    loaned(t) = max(0, min over τ in [t − hold, t + notice] of (servers − headroom − busy(τ)))

so the r servers to return are requested at the start of the notice period and are back before the
inference side needs them (the simulator returns them in the round the request arrives, which is within
the notice period). `hold` makes a server loanable only after it has been idle for `hold` seconds, so that
short dips of demand (seconds-long inference tasks, DeepBoot rows) do not make loans flicker and elastic
jobs thrash. `max_loan` caps the loan (an operator limit). A drop of r in `loaned` is a reclaim of
r servers; a rise is a new loan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elastisched.core.errors import ConfigError
from elastisched.loaning.demand import DemandSeries


@dataclass(frozen=True, slots=True)
class LoanPlan:
    """Servers on loan to training over time: `(time, servers available to training)` steps, the loaned
    servers' shape, and (when derived from demand by `loan_plan`) the inference cluster it came from. The one
    loan timeline: the simulator (`SimConfig.loans`), the experiments and the figures all take it.

    `servers` is the inference cluster's size (0 = not known: a hand-written timeline; `max_servers` stands in).
    """

    steps: tuple[tuple[float, int], ...]
    gpu_type: str = "t4"
    gpus_per_server: int = 4
    servers: int = 0
    headroom: int = 0
    notice: float = 0.0
    hold: float = 0.0

    @property
    def max_servers(self) -> int:
        return max((n for _, n in self.steps), default=0)

    def at(self, t: float) -> int:
        n = 0
        for ts, k in self.steps:
            if ts > t:
                break
            n = k
        return n

    def reclaims(self) -> list[tuple[float, int]]:
        """`(time, servers to return)` for every drop of the loan."""
        out: list[tuple[float, int]] = []
        prev = 0
        for t, n in self.steps:
            if n < prev:
                out.append((t, prev - n))
            prev = n
        return out

    def loaned_server_seconds(self, until: float) -> float:
        total = 0.0
        for (t, n), nxt in zip(self.steps, [*(s[0] for s in self.steps[1:]), until], strict=True):
            total += n * max(0.0, min(nxt, until) - t)
        return total


def loan_plan(demand: DemandSeries, *, headroom: int = 0, notice: float = 0.0, hold: float = 0.0,
              gpu_type: str = "t4", gpus_per_server: int = 4, max_loan: int | None = None) -> LoanPlan:
    """The loanable-server timeline implied by `demand` (formula in the module docstring)."""
    if headroom < 0 or notice < 0 or hold < 0:
        raise ConfigError("headroom/notice/hold", (headroom, notice, hold), "must be >= 0")
    if gpus_per_server <= 0:
        raise ConfigError("gpus_per_server", gpus_per_server, "must be > 0")
    times = np.asarray(demand.times, dtype=float)
    idle = demand.servers - headroom - np.asarray(demand.busy, dtype=int)
    if max_loan is not None:
        idle = np.minimum(idle, max_loan)
    idle = idle.clip(min=0)
    # the loan can only change where the demand changes, `notice` seconds before or `hold` seconds after
    cand = np.unique(np.concatenate([times, (times - notice).clip(min=times[0]), times + hold]))
    steps: list[tuple[float, int]] = []
    for t in cand:
        lo = int(np.searchsorted(times, t - hold, side="right")) - 1  # the segment holding t − hold
        hi = int(np.searchsorted(times, t + notice, side="right"))  # segments starting up to t + notice
        n = int(idle[max(lo, 0):hi].min())
        if not steps or steps[-1][1] != n:
            steps.append((float(t), n))
    return LoanPlan(tuple(steps), gpu_type, gpus_per_server, servers=demand.servers, headroom=headroom, notice=notice,
                    hold=hold)
