"""No leakage in ONES's progress predictor: a job is predicted only by a model that never saw its history run,
and a finished job teaches only the other folds' models."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import peer_data
from elastisched.policies.ones import predict as ones_predict
from elastisched.policies.ones.history import folded_history, held_out_error, run_key
from elastisched.policies.ones.policy import OnesPolicy

needs_data = peer_data.needs("ones", "traces", "job_history.csv")


def _rows() -> pd.DataFrame:
    """Two runs of 3 epochs each (ids 7 and 9), as job_history.csv lays them out."""
    return pd.DataFrame({"id": [7, 7, 7, 9, 9, 9], "epoch": [1, 2, 3, 1, 2, 3], "epoch_size": [100] * 3 + [200] * 3,
                         "num_samples": [100, 200, 300, 200, 400, 600], "total_workload": [300] * 3 + [600] * 3,
                         "initial_loss": [2.0] * 6, "loss": [1.5, 1.0, 0.8, 1.8, 1.2, 0.9],
                         "acc": [0.3, 0.5, 0.6, 0.2, 0.4, 0.5]})


def test_folds_split_by_run_and_train_excludes_the_fold() -> None:
    h = folded_history(_rows(), k=2)
    assert h.fold_of == {"7:100": 0, "9:200": 1}
    assert h.fold.tolist() == [0, 0, 0, 1, 1, 1]
    x0, r0 = h.train(0)  # the model for fold 0 sees run 9 only
    assert np.allclose(r0, [1 / 3, 2 / 3, 1.0]) and np.allclose(x0[:, 0], np.log(200))
    assert h.fold_of_job({"history_run": (9, 200)}) == 1 and h.fold_of_job({}) == 0
    assert run_key([7, 100]) == "7:100"
    with pytest.raises(ValueError, match="k=1"):
        folded_history(_rows(), k=1)


def test_a_finished_job_teaches_only_the_other_fold() -> None:
    from elastisched.policies.ones.progress_predictor import BetaProgressPredictor
    preds = [BetaProgressPredictor(), BetaProgressPredictor()]
    from elastisched.policies.ones.jobstate import OnesJobState
    st = OnesJobState(1, log=[([5.0, 2.0, 1.0, 0.2, 0.3], 100.0)], epoch_size=100, total_epochs=4.0, fold=1)
    ones_predict.learn(preds, st, refit=False)
    assert preds[0].x.shape[0] == 1 and preds[1].x.shape[0] == 0
    assert preds[0].rho.tolist() == [0.25]


def test_policy_uses_one_model_per_fold() -> None:
    h = folded_history(_rows(), k=2)
    pol = OnesPolicy("faithful", history=h)
    from elastisched.policies.base import PolicyContext
    pol._ensure(PolicyContext(seed=0))
    assert len(pol.preds) == 2 and all(p.params for p in pol.preds)
    # fold 0's model was trained on run 9's rows only
    assert pol.preds[0].x.shape[0] == 3 and np.allclose(pol.preds[0].x[:, 0], np.log(200))


@needs_data
def test_held_out_error_is_reported_and_worse_than_in_sample() -> None:
    h = folded_history(pd.read_csv(peer_data.ONES_HISTORY), k=2)
    assert len(h.fold_of) == 21 and set(h.fold_of.values()) == {0, 1}
    err = held_out_error(h, 0)
    assert err["rows"] == h.x.shape[0] and 0 < err["in_sample_mae"] < err["held_out_mae"] < 0.5
