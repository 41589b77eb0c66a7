"""ONES's progress predictions (ones.md §2.5): bootstrapping, learning from finished jobs, remaining samples.

One `BetaProgressPredictor` per held-out fold when the caller hands a `ones.history.FoldedHistory`
(a job is predicted only by a model that never saw its own run: no leakage), else one model. No I/O: the
tables arrive from the caller.
"""

from __future__ import annotations

import numpy as np

from elastisched.policies.ones.history import FoldedHistory
from elastisched.policies.ones.jobstate import OnesJobState
from elastisched.policies.ones.ops import bootstrap_state
from elastisched.policies.ones.progress_predictor import BetaProgressPredictor, HistoryTable


def bootstrap(preds: list[BetaProgressPredictor], table: HistoryTable | FoldedHistory,
              seed: int) -> list[BetaProgressPredictor]:
    """The models after fitting the bootstrap data: one per fold (trained on the other folds), or one."""
    if isinstance(table, FoldedHistory):
        if len(preds) != table.k:
            preds = [BetaProgressPredictor() for _ in range(table.k)]
        for f, p in enumerate(preds):
            if not p.params:
                p.load_state_dict(bootstrap_state(table.train(f), seed))
        return preds
    if not preds[0].params:
        preds[0].load_state_dict(bootstrap_state(table, seed))
    return preds


def learn(preds: list[BetaProgressPredictor], st: OnesJobState, refit: bool) -> None:
    """Add a finished job's log (ρ known now) to every model but the one that predicts its own run's fold."""
    if not (st.log and st.epoch_size):
        return
    total = st.total_epochs * st.epoch_size
    rows = np.array([r[0] for r in st.log])
    done = np.array([r[1] for r in st.log])
    own = st.fold
    for f, p in enumerate(preds):
        if len(preds) == 1 or f != own:
            p.add_job(rows, done, total)
            if refit:
                p.fit()


def remaining(sts: list[OnesJobState], executed: np.ndarray, preds: list[BetaProgressPredictor],
              use_samples: bool, sample_rho: bool, rng: np.random.Generator) -> np.ndarray:
    """Predicted remaining samples y(1/ρ − 1) of executed jobs (ρ sampled, A2); NaN for the others."""
    rem = np.full(len(sts), np.nan)
    idx = np.flatnonzero(executed)
    if not idx.size:
        return rem
    x = np.array([sts[i].log[-1][0] if sts[i].log else [0.0, 0.0, sts[i].e, 0.0, 0.0] for i in idx])
    x[:, 2] = [sts[i].e for i in idx]
    # y: epochs × epoch size (artifact), or the samples really processed (D3, and any job without an epoch size,
    # e.g. the Pollux traces: remaining work must be in samples, the unit of the throughput it is divided by)
    y = np.array([sts[i].samples if use_samples or not sts[i].epoch_size
                  else sts[i].e * float(sts[i].epoch_size) for i in idx])
    rho = np.full(idx.size, 0.5)  # no model yet: assume half done
    fold = np.array([sts[i].fold for i in idx])
    for f, p in enumerate(preds):
        sel = fold == f if len(preds) > 1 else np.ones(idx.size, dtype=bool)
        if p.params and sel.any():
            rho[sel] = p.sample(x[sel], rng) if sample_rho else p.mean(x[sel])
    rem[idx] = y * (1.0 / rho - 1.0)
    return rem
