"""Statistical efficiency from measured gradient statistics (Pollux OSDI'21 §3.1).

The validation files record, per epoch, `grad_sqr` (|g|², the squared norm of the true gradient) and
`grad_var` (the per-sample gradient variance trace, scaled to the file's reference batch size M₀ = the
smallest profiled batch). With scale s = M / M₀ the progress made by one step of batch M, in reference
steps, is

    gain(M) = (var + sqr) / (var / s + sqr)         ∈ [1, s]

i.e. efficiency E(M) = gain / s = (φ + M₀) / (φ + M) with gradient noise scale φ = M₀·var/sqr. A larger batch
therefore needs more samples for the same progress — exactly the Pollux artifact's `Job.step` rule.
Statistics at batch sizes between profiled ones are interpolated linearly (as the artifact does); outside
they are clamped to the nearest profiled batch (the artifact asserts instead).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


def interp_rows(x: float, xp: np.ndarray, table: np.ndarray) -> np.ndarray:
    """`np.interp(x, xp, column)` for every column of `table` (rows = xp) at once, with numpy's arithmetic
    (slope · (x − xp[j]) + fp[j]; the end values outside and at the last point), so bit-identical."""
    if not x > xp[0]:
        return table[0].copy() if x <= xp[0] else np.full(table.shape[1], np.nan)
    if x >= xp[-1]:
        return table[-1].copy()
    j = int(np.searchsorted(xp, x, side="right")) - 1
    slope = (table[j + 1] - table[j]) / (xp[j + 1] - xp[j])
    out = slope * (x - xp[j]) + table[j]
    bad = np.isnan(out)  # numpy's fallback from the right end of the segment (infinite slopes)
    if bad.any():
        out[bad] = (slope * (x - xp[j + 1]) + table[j + 1])[bad]
    return out


class EfficiencyModel:
    def __init__(self, validation: Mapping[int, Mapping[str, np.ndarray]], max_epochs: int) -> None:
        """`validation`: global batch -> columns (`AppProfile.validation_columns`)."""
        self.batches = np.array(sorted(validation), dtype=float)
        n = max_epochs
        self._sqr = np.stack([np.asarray(validation[b]["grad_sqr"], dtype=float)[:n] for b in sorted(validation)])
        self._var = np.stack([np.asarray(validation[b]["grad_var"], dtype=float)[:n] for b in sorted(validation)])
        self.init_batch = int(self.batches[0])
        self._gains: dict[float, np.ndarray] = {}

    def _interp(self, table: np.ndarray, batch: float, epoch: int) -> float:
        e = min(max(epoch, 0), table.shape[1] - 1)
        return float(np.interp(batch, self.batches, table[:, e]))

    def grad_stats(self, batch: float, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) during `epoch` at global batch `batch`."""
        return self._interp(self._sqr, batch, epoch), self._interp(self._var, batch, epoch)

    def gains(self, batch: float) -> np.ndarray:
        """`gain(batch, e)` for every epoch e, vectorised (memoised per batch)."""
        g = self._gains.get(batch)
        if g is None:
            sqr = interp_rows(batch, self.batches, self._sqr)
            var = interp_rows(batch, self.batches, self._var)
            scale = batch / self.init_batch
            denom = var / scale + sqr
            g = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)
            self._gains[batch] = g
        return g

    def gain(self, batch: float, epoch: int) -> float:
        """Reference steps of progress per step at this batch (Pollux `gain`)."""
        sqr, var = self.grad_stats(batch, epoch)
        scale = batch / self.init_batch
        denom = var / scale + sqr
        return (var + sqr) / denom if denom > 0 else 1.0

    def efficiency(self, batch: float, epoch: int) -> float:
        return self.gain(batch, epoch) / (batch / self.init_batch)

    def noise_scale(self, batch: float, epoch: int) -> float:
        """Gradient noise scale φ in samples."""
        sqr, var = self.grad_stats(batch, epoch)
        return self.init_batch * var / sqr if sqr > 0 else float("inf")
