"""What a simulated job declares about its length (issue 21 item 2): exact, a noisy estimate, or nothing.

A user submits a job with a number of epochs or steps; how well that predicts the work the job really does
varies (early stopping, a target accuracy reached sooner or later). The simulator's truth (`JobView.total_work`)
always drives completion; what a policy that plans with the declared length sees (`JobView.declared_work`) is:

- `exact`: the truth (what the bundled workloads imply: an application's epochs are its length);
- `lognormal:SIGMA`: the truth × exp(SIGMA · z), z standard normal, drawn once per job from the run's seed and
  the job's id (so a job's estimate does not depend on which policy runs or on arrival order). The median
  estimate is the truth (our reading: "multiplicative log-normal" without a bias term; the mean is
  exp(SIGMA²/2) × the truth);
- `none`: no declared length (a policy then falls back on attained service, as Tiresias does).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from statistics import NormalDist

from elastisched.core.errors import ConfigError

KINDS = ("exact", "lognormal", "none")
MAX_SIGMA = 5.0
_NORMAL = NormalDist()


@dataclass(frozen=True, slots=True)
class LengthEstimate:
    """How declared lengths relate to the truth in one run (module docstring)."""

    kind: str = "exact"
    sigma: float = 0.0

    def __str__(self) -> str:
        return f"lognormal:{self.sigma:g}" if self.kind == "lognormal" else self.kind

    @classmethod
    def parse(cls, text: str, field: str = "--length-estimate") -> LengthEstimate:
        """`exact`, `none` or `lognormal:SIGMA` (SIGMA in [0, 5]); anything else is a ConfigError naming it."""
        kind, _, arg = text.strip().partition(":")
        if kind not in KINDS or (kind != "lognormal") == bool(arg):
            raise ConfigError(field, text, "expected exact, none or lognormal:SIGMA (e.g. lognormal:0.5)")
        if kind != "lognormal":
            return cls(kind)
        try:
            sigma = float(arg)
        except ValueError:
            raise ConfigError(field, text, f"SIGMA {arg!r} is not a number") from None
        if not (0.0 <= sigma <= MAX_SIGMA):
            raise ConfigError(field, text, f"SIGMA must be in [0, {MAX_SIGMA:g}]")
        return cls(kind, sigma)

    @property
    def is_exact(self) -> bool:
        return self.kind == "exact" or (self.kind == "lognormal" and self.sigma == 0.0)

    def declared(self, truth: float, job_id: str, seed: int) -> float | None:
        """The work job `job_id` declares when it will really do `truth`."""
        if self.kind == "none":
            return None
        if self.is_exact:
            return truth
        return truth * math.exp(self.sigma * _standard_normal(seed, job_id))


def _standard_normal(seed: int, job_id: str) -> float:
    """A standard normal draw fixed by (seed, job id): a hash, not a stream, so it is the same for a job whatever
    else the run draws, and costs microseconds (a generator per job would cost a million-job replay seconds)."""
    h = hashlib.blake2b(f"{seed}\0{job_id}".encode(), digest_size=8).digest()
    u = (int.from_bytes(h, "big") + 0.5) / 2.0**64  # in (0, 1)
    return _NORMAL.inv_cdf(u)
