"""What ONES learns across jobs is bounded (policies/base.py's hook contract): the run times of finished jobs
and the progress predictor's training rows keep the most recent ones only."""

from __future__ import annotations

import numpy as np
import pytest

from elastisched.policies.ones import policy as ones_policy
from elastisched.policies.ones import progress_predictor
from elastisched.policies.ones.jobstate import OnesJobState
from elastisched.policies.ones.progress_predictor import BetaProgressPredictor


def test_finished_run_times_keep_the_most_recent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ones_policy, "FINISHED_RUN_TIMES_KEPT", 3)
    pol = ones_policy.OnesPolicy()
    for i in range(5):
        pol.js[f"j{i}"] = OnesJobState(max_size=1, run_time=float(i))
        pol.on_finish(f"j{i}", float(i))
    assert pol.finished_run_times == [2.0, 3.0, 4.0]
    assert pol.js == {} and pol.state_dict()["jobs"] == {}
    pol.on_finish("j4", 9.0)  # idempotent: an end seen twice adds nothing
    assert pol.finished_run_times == [2.0, 3.0, 4.0]


def test_predictor_rows_keep_the_most_recent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_predictor, "MAX_STORED_ROWS", 4)
    p = BetaProgressPredictor()
    for k in range(3):
        p.add(np.full((2, 5), float(k)), np.full(2, 0.5))
    assert p.x.shape == (4, 5) and list(p.x[:, 0]) == [1.0, 1.0, 2.0, 2.0]
    assert p.rho.shape == (4,)
