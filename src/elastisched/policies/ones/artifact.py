"""The `artifact` preset's δ clock: the ONES artifact's own epoch count (kurisusnowdeng/ones_sc21 @ 8535358,
read, not copied; docs/ones.md "The artifact preset").

The artifact throttles placement changes on `completed_epochs`, an integer the controller raises by one per
evaluated epoch run (`Controller.update_log`). `_update` changes a running job's placement only when
`completed_epochs ≥ last_epoch_scheduled + δ`, and `_wait_for_execution` stamps `last_epoch_scheduled =
completed_epochs` on every job of a newly deployed schedule. Readings:
- the count includes the initial evaluation (`training.train` evaluates epoch 0 before training). A fresh job is
  stamped before that evaluation (`_wait_for_execution` returns once each worker has called `setup`, which is
  before NCCL init and the evaluation), so its stamp is 0 and its count is 1 as soon as it runs: it may be moved
  again before it trains a full epoch. The evaluation takes no simulated time here;
- a job that keeps its GPUs through a restamp has only to finish the epoch it is in: the count rises at that
  epoch's end, not one full epoch after the stamp;
- a job whose own placement changes (scale-out, scale-in, stop) leaves its epoch early (`check_pause`). The
  partial epoch counts only if at least half of it was done (`num_samples·size·2 ≥ epoch_size`). The next epoch
  starts from the first sample (a new `DistributedSampler` loader), so it ends one full epoch after the change;
- epochs are the simulator's epochs of the job (progress ÷ `epoch_work`), as everywhere else in the policy;
- stamps are taken at the deployment. The artifact takes them when its blocking wait for the new workers ends;
  that wait is not modelled (its length is not known; docs/ones.md gives its sensitivity).

Per-job state lives in the policy's job dict: `ce` (the artifact's `completed_epochs`), `origin` (epochs done when
the current epoch run began), `stamp` (`last_epoch_scheduled`).
"""

from __future__ import annotations

import numpy as np

from elastisched.policies.ones.jobstate import OnesJobState

CLOCKS = ("progress", "epochs")  # `delta_clock`: epochs of progress since the last change, or the artifact's count


def advance(st: OnesJobState) -> None:
    """Count the whole epoch runs a started job finished since the last call (+1 per evaluated epoch)."""
    if st.ce is None:  # the clock's first use on this job
        st.ce, st.origin, st.stamp = 0, 0.0, 0
    if st.ce == 0 and st.ran:  # running but never started by this policy (a restored state): count its
        st.ce, st.origin = 1 + int(st.e + 1e-9), float(int(st.e + 1e-9))  # epochs, plus the evaluation
    k = int(st.e - st.origin + 1e-9)
    if k > 0 and st.ce > 0:  # ce 0: never started (no initial evaluation yet)
        st.ce += k
        st.origin += k


def since(sts: list[OnesJobState]) -> np.ndarray:
    """Per job, `completed_epochs − last_epoch_scheduled` now (what `_update` compares with δ)."""
    for st in sts:
        advance(st)
    return np.array([st.ce - st.stamp for st in sts], dtype=float)


def stamp(sts: list[OnesJobState], changed: np.ndarray, placed: np.ndarray, reset_all: bool) -> None:
    """After a deployment: each job whose own placement changed leaves its epoch (kept if ≥ half done) and starts
    a new one (a first start runs its initial evaluation, after the stamp); then every job of the new schedule
    (`reset_all`, the artifact) or only the changed ones is stamped with its count."""
    for i, st in enumerate(sts):
        advance(st)
        if changed[i]:
            if st.ce == 0:  # first start: stamped at 0, then the initial evaluation makes the count 1
                st.stamp, st.ce, st.origin = 0, 1, st.e
                continue
            if st.e - st.origin >= 0.5 - 1e-9:
                st.ce += 1
            st.origin = st.e
        if placed[i] and (changed[i] or reset_all):
            st.stamp = st.ce
