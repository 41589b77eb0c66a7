"""What ONES keeps about one active job (ones.md §2.3), typed; `state_dict` writes it as a plain dict.

The artifact's epoch clock (`ones.artifact`: `ce`, `origin`, `stamp`) and the once-per-epoch doubling gate
(`doubled_at`) exist only once that rule has run, so they are None until then and left out of the saved dict,
which keeps the shape a saved state had when this was a dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from elastisched.policies.ones.progress_predictor import features

#: one progress-log row: (predictor features, samples done at that epoch)
LogRow = tuple[list[float], float]
_OPTIONAL = ("doubled_at", "ce", "origin", "stamp")


@dataclass(slots=True)
class OnesJobState:
    """Per-job ONES state; sizes in GPUs, clocks in epochs done (`e`)."""

    max_size: int  # the largest size the job may be given now (doubles on scale-up, §2.7)
    resume: int = 0  # size to resume at after a stop (0 = never stopped)
    last_change: float = 0.0  # epochs done at the last size change (scale-up gate)
    last_placed: float = 0.0  # epochs done at the last (re)placement (δ clock)
    ran: bool = False
    logged: int = 0  # whole epochs already in `log`
    log: list[LogRow] = field(default_factory=list)
    epoch_size: float | None = None  # samples per epoch (None: the Pollux traces)
    fold: int = 0  # held-out fold of a `FoldedHistory`
    e: float = 0.0  # epochs done
    run_time: float = 0.0
    samples: float = 0.0
    total_epochs: float = 0.0  # read at completion only (learning the predictor)
    doubled_at: int | None = None
    ce: int | None = None
    origin: float | None = None
    stamp: int | None = None

    def log_epochs(self, attrs: Mapping[str, Any], upto: int) -> None:
        """Append the loss/accuracy rows of epochs `logged + 1 .. upto` from the trace's curves."""
        acc, loss = attrs.get("acc_curve"), attrs.get("loss_curve")
        il = float(attrs.get("initial_loss", 0.0))
        es = float(attrs.get("epoch_size") or 1.0)
        for kk in range(self.logged + 1, upto + 1):
            ac = float(acc[min(kk, len(acc)) - 1]) if acc else 0.0
            lo = float(loss[min(kk, len(loss)) - 1]) if loss else il
            self.log.append((features(es, il, kk, lo, ac).tolist(), kk * es))
        self.logged = upto

    def to_dict(self) -> dict[str, Any]:
        """Plain values (the optional rule fields only once set)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["log"] = list(self.log)
        for name in _OPTIONAL:
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OnesJobState:
        """Inverse of `to_dict` (log rows back to (list, samples) tuples)."""
        known = {f.name for f in fields(cls)}
        st = cls(**{k: v for k, v in d.items() if k in known})
        st.log = [(list(r[0]), r[1]) for r in d.get("log", ())]
        return st
