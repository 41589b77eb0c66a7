"""ONES's Beta-regression progress predictor in numpy (ones.md §2.5, docs/ones.md "Progress predictor").

ρ = fraction of a job's total training samples already done is modelled as ρ ~ Beta(α, β) with α = epochs done
(feature 2, passed through) and β = ReLU(MLP(features)) + 1, MLP 5→64 (tanh)→1, trained by Adam on the Beta
negative log-likelihood. Features, from the last evaluated epoch:
`[log(epoch_size), min(initial_loss, 100), epochs_done, 1 − loss/initial_loss, val_acc]`.

Readings and deviations (docs/ones.md):
- bug fix 1 (A3): `log(epoch_size)` at both fit and predict time (the artifact passes the raw size at predict);
- features are standardised with the training set's mean/std before the MLP (the artifact feeds raw features;
  with tanh units and Adam at lr 1e-4 that leaves β nearly untrained, see the fit test);
- weights are re-initialised N(0, 1/fan_in) at every refit, output bias 1 (unspecified "normal" in the code);
- default learning rate 1e-3 (artifact 1e-4), other settings as the artifact: weight decay 1e-4, batch 8,
  60 epochs, ≤ 2000 subsampled rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

HIDDEN = 64
MAX_ROWS = 2000
#: training rows kept (the most recent): a fit subsamples MAX_ROWS of them, and a live service must not keep
#: every epoch of every job it ever ran (our bound; below it, fits are exactly the unbounded ones)
MAX_STORED_ROWS = 25 * MAX_ROWS
LOSS_CLIP = 100.0
RHO_EPS = 1e-4
#: the predictor's training data: (features rows, ρ per row), as `history_table` reads it
HistoryTable = tuple[np.ndarray, np.ndarray]


def features(epoch_size: float, initial_loss: float, epochs_done: float, loss: float, acc: float) -> np.ndarray:
    """The 5 predictor inputs of one job after its last evaluated epoch (log epoch size: bug fix 1)."""
    il = min(float(initial_loss), LOSS_CLIP)
    rel = 1.0 - float(loss) / il if il > 0 else 0.0
    return np.array([np.log(max(float(epoch_size), 1.0)), il, float(epochs_done), rel, float(acc)])


def history_table(path: str | Path) -> HistoryTable:
    """(features, ρ) rows from the artifact's `job_history.csv` (one row per evaluated epoch)."""
    import pandas as pd  # here, not at module level: every policy module is imported by `elastisched sim run`

    h = pd.read_csv(path)
    need = ["epoch_size", "num_samples", "total_workload", "initial_loss", "loss", "acc"]
    missing = [c for c in need if c not in h.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}")
    x = np.stack([features(r.epoch_size, r.initial_loss, r.num_samples / r.epoch_size, r.loss, r.acc)
                  for r in h.itertuples()]) if len(h) else np.zeros((0, 5))
    rho = (h["num_samples"] / h["total_workload"]).to_numpy(float)
    return x, rho


def _views(theta: np.ndarray, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Named views into one flat parameter vector (order: w1, b1, w2, b2)."""
    out, i = {}, 0
    for k, shp in shapes.items():
        size = int(np.prod(shp)) if shp else 1
        out[k] = theta[i:i + size].reshape(shp)
        i += size
    return out


class BetaProgressPredictor:
    """ρ ~ Beta(epochs_done, ReLU(MLP(x)) + 1); refit from scratch whenever a finished job's log is added."""

    def __init__(self, lr: float = 1e-3, weight_decay: float = 1e-4, batch_size: int = 8, epochs: int = 60,
                 max_rows: int = MAX_ROWS, seed: int = 0) -> None:
        self.lr, self.weight_decay, self.batch_size, self.epochs = lr, weight_decay, batch_size, epochs
        self.max_rows, self.seed = max_rows, seed
        self.x = np.zeros((0, 5))
        self.rho = np.zeros(0)
        self.params: dict[str, np.ndarray] = {}
        self.mu = np.zeros(5)
        self.sd = np.ones(5)
        self.fits = 0

    # ------------------------------------------------------------------ data
    def add(self, x: np.ndarray, rho: np.ndarray) -> None:
        """Append rows (features, ρ); ρ is clipped into (0, 1)."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        rho = np.clip(np.asarray(rho, dtype=float).reshape(-1), RHO_EPS, 1 - RHO_EPS)
        if x.shape[0] != rho.shape[0] or x.shape[1] != 5:
            raise ValueError(f"features {x.shape} and targets {rho.shape} do not match (N, 5) / (N,)")
        self.x = np.vstack([self.x, x])[-MAX_STORED_ROWS:]
        self.rho = np.concatenate([self.rho, rho])[-MAX_STORED_ROWS:]

    def add_job(self, epoch_rows: np.ndarray, samples: np.ndarray, total_samples: float) -> None:
        """A finished job's per-epoch features with samples done at each; ρ = samples / total."""
        if total_samples > 0 and len(samples):
            self.add(epoch_rows, np.asarray(samples, dtype=float) / total_samples)

    # ------------------------------------------------------------------ model
    def _beta(self, x: np.ndarray, p: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        z = (x - self.mu) / self.sd
        h = np.tanh(z @ p["w1"] + p["b1"])
        out = h @ p["w2"] + p["b2"]
        return np.maximum(out, 0.0) + 1.0, h, out

    def fit(self) -> float:
        """Re-initialise and train on (a ≤ max_rows subsample of) the data; returns the final mean NLL."""
        rng = np.random.default_rng(self.seed + self.fits)
        self.fits += 1
        x, rho = self.x, self.rho
        if x.shape[0] == 0:
            raise ValueError("no training rows: add history first")
        if x.shape[0] > self.max_rows:
            pick = rng.choice(x.shape[0], self.max_rows, replace=False)
            x, rho = x[pick], rho[pick]
        self.mu = x.mean(axis=0)
        self.sd = np.where(x.std(axis=0) > 1e-12, x.std(axis=0), 1.0)
        shapes = {"w1": (5, HIDDEN), "b1": (HIDDEN,), "w2": (HIDDEN,), "b2": ()}
        init = [rng.normal(0, 1 / np.sqrt(5), (5, HIDDEN)).ravel(), np.zeros(HIDDEN),
                rng.normal(0, 1 / np.sqrt(HIDDEN), HIDDEN), np.ones(1)]
        theta = np.concatenate(init)  # one flat vector: Adam is 4 numpy ops per step
        views = _views(theta, shapes)
        m = np.zeros_like(theta)
        v2 = np.zeros_like(theta)
        b1, b2, eps, t = 0.9, 0.999, 1e-8, 0
        z_all = (x - self.mu) / self.sd
        for _ in range(self.epochs):
            order = rng.permutation(x.shape[0])
            for s in range(0, x.shape[0], self.batch_size):
                idx = order[s:s + self.batch_size]
                g = self._grad_flat(z_all[idx], x[idx, 2], rho[idx], views) + self.weight_decay * theta
                t += 1
                m = b1 * m + (1 - b1) * g
                v2 = b2 * v2 + (1 - b2) * g * g
                theta -= self.lr * (m / (1 - b1 ** t)) / (np.sqrt(v2 / (1 - b2 ** t)) + eps)
        p = {k: np.array(v, copy=True) for k, v in views.items()}
        self.params = p
        return float(self.nll(self.x, self.rho))

    @staticmethod
    def _grad_flat(z: np.ndarray, alpha: np.ndarray, rho: np.ndarray, p: Mapping[str, np.ndarray]) -> np.ndarray:
        """Gradient of the mean Beta NLL = lnB(a, b) − (a−1) ln ρ − (b−1) ln(1−ρ) w.r.t. the flat parameters."""
        h = np.tanh(z @ p["w1"] + p["b1"])
        out = h @ p["w2"] + p["b2"]
        beta = np.maximum(out, 0.0) + 1.0
        a = np.maximum(alpha, RHO_EPS)
        from scipy.special import digamma

        dout = (digamma(beta) - digamma(a + beta) - np.log1p(-rho)) / z.shape[0] * (out > 0)
        dh = np.outer(dout, p["w2"]) * (1 - h * h)
        return np.concatenate([(z.T @ dh).ravel(), dh.sum(axis=0), h.T @ dout, [dout.sum()]])

    def nll(self, x: np.ndarray, rho: np.ndarray) -> float:
        """Mean Beta negative log-likelihood."""
        alpha = np.maximum(np.atleast_2d(x)[:, 2], RHO_EPS)
        beta = self.beta(x)
        r = np.clip(rho, RHO_EPS, 1 - RHO_EPS)
        from scipy.special import betaln

        return float(np.mean(betaln(alpha, beta) - (alpha - 1) * np.log(r) - (beta - 1) * np.log1p(-r)))

    def beta(self, x: np.ndarray) -> np.ndarray:
        if not self.params:
            raise RuntimeError("predictor not fitted")
        return self._beta(np.atleast_2d(np.asarray(x, dtype=float)), self.params)[0]

    def mean(self, x: np.ndarray) -> np.ndarray:
        """E[ρ] = α / (α + β) (A2 option: the mean instead of a sample)."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        a = np.maximum(x[:, 2], RHO_EPS)
        return a / (a + self.beta(x))

    def sample(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """ρ ~ Beta(α, β), one draw per row (the artifact samples, A2)."""
        x = np.atleast_2d(np.asarray(x, dtype=float))
        a = np.maximum(x[:, 2], RHO_EPS)
        return np.clip(rng.beta(a, self.beta(x)), RHO_EPS, 1 - RHO_EPS)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"x": self.x.tolist(), "rho": self.rho.tolist(), "fits": self.fits, "mu": self.mu.tolist(),
                "sd": self.sd.tolist(), "params": {k: np.asarray(v).tolist() for k, v in self.params.items()},
                "hyper": [self.lr, self.weight_decay, self.batch_size, self.epochs, self.max_rows, self.seed]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.x = np.asarray(state["x"], dtype=float).reshape(-1, 5)
        self.rho = np.asarray(state["rho"], dtype=float)
        self.fits = int(state["fits"])
        self.mu, self.sd = np.asarray(state["mu"], dtype=float), np.asarray(state["sd"], dtype=float)
        self.params = {k: np.asarray(v, dtype=float) for k, v in state["params"].items()}
        lr, wd, bs, ep, mr, seed = state["hyper"]
        self.lr, self.weight_decay, self.batch_size, self.epochs = float(lr), float(wd), int(bs), int(ep)
        self.max_rows, self.seed = int(mr), int(seed)
