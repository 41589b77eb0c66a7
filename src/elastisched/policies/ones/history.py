"""The ONES progress predictor's bootstrap data split by run, so no job is predicted by a model that saw it.

The simulated ONES jobs take their loss/accuracy curves from the runs of the artifact's `job_history.csv`
(`workloads.ones.HISTORY_RUN`). Fitting the predictor on the whole file and then predicting those jobs is
leakage: the model has seen the very curve it predicts. Here the runs (blocks of consecutive epochs keyed by
(id, epoch size), `workloads.ones.history_runs`' key) are dealt round-robin, in key order, into `k` folds. A
job whose run is in fold f is predicted by the model trained on the other folds; `held_out_error` measures
that model on fold f's rows. Reading: folds by run, not leave-one-out, so that a completion refits one model
per other fold (k − 1 fits) instead of one per run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from elastisched.policies.ones.progress_predictor import BetaProgressPredictor, HistoryTable, features


def run_key(key: Any) -> str:
    """A run key (id, epoch size) as the text a fold map uses (tuples and lists alike)."""
    return ":".join(str(int(v)) for v in key) if isinstance(key, Sequence) and not isinstance(key, str) else str(key)


@dataclass(frozen=True)
class FoldedHistory:
    """Rows (features, ρ) of `job_history.csv` with each row's fold; `fold_of` maps a run key to its fold."""

    x: np.ndarray
    rho: np.ndarray
    fold: np.ndarray
    fold_of: Mapping[str, int]
    k: int

    def train(self, f: int) -> HistoryTable:
        keep = self.fold != f
        return self.x[keep], self.rho[keep]

    def test(self, f: int) -> HistoryTable:
        keep = self.fold == f
        return self.x[keep], self.rho[keep]

    def fold_of_job(self, attrs: Mapping[str, Any]) -> int:
        """The fold of a job's history run; a job from no known run is held out of none (fold 0's model)."""
        run = attrs.get("history_run")
        return int(self.fold_of.get(run_key(run), 0)) if run is not None else 0


def folded_history(rows: Any, k: int = 2) -> FoldedHistory:
    """Split a `job_history.csv` frame (already read by the caller) into `k` folds by run."""
    if k < 2:
        raise ValueError(f"k={k}: need at least 2 folds to hold a run out")
    block = (rows["epoch"].diff() != 1).cumsum().to_numpy()
    keys = [run_key((int(i), int(e))) for i, e in zip(rows["id"], rows["epoch_size"], strict=True)]
    first: dict[int, str] = {}
    for b, key in zip(block, keys, strict=True):
        first.setdefault(int(b), key)
    runs = sorted(set(first.values()), key=lambda s: tuple(int(v) for v in s.split(":")))
    fold_of = {key: i % k for i, key in enumerate(runs)}
    x = np.stack([features(r.epoch_size, r.initial_loss, r.num_samples / r.epoch_size, r.loss, r.acc)
                  for r in rows.itertuples()]) if len(rows) else np.zeros((0, 5))
    rho = (rows["num_samples"] / rows["total_workload"]).to_numpy(float)
    fold = np.array([fold_of[first[int(b)]] for b in block], dtype=np.int64)
    return FoldedHistory(x, rho, fold, fold_of, k)


def held_out_error(history: FoldedHistory, seed: int = 0) -> dict[str, float]:
    """Mean |E[ρ] − ρ| of each fold's model on its held-out rows, and the same model family fitted on every row
    and scored in-sample (what the leaky set-up reported), for comparison."""
    err, n = 0.0, 0
    for f in range(history.k):
        p = BetaProgressPredictor(seed=seed)
        p.add(*history.train(f))
        p.fit()
        xt, rt = history.test(f)
        if xt.shape[0]:
            err += float(np.abs(p.mean(xt) - rt).sum())
            n += xt.shape[0]
    full = BetaProgressPredictor(seed=seed)
    full.add(history.x, history.rho)
    full.fit()
    return {"held_out_mae": err / max(n, 1), "in_sample_mae": float(np.abs(full.mean(history.x) - history.rho).mean()),
            "rows": int(history.x.shape[0]), "folds": history.k}
