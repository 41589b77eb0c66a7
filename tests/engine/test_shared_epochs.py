"""`engine.epochs`: jobs of one application and length share their epoch arrays, and a fresh job's run time is
summed once per pair of arrays; each job's bounds, epoch work and predicted finish are bit for bit those it
makes alone (Philly jobs, whose lengths repeat)."""

from __future__ import annotations

import numpy as np

from elastisched.core.types import Allocation
from elastisched.engine.epochs import Bounds
from elastisched.engine.jobstate import new_state
from elastisched.models import PerfModels
from elastisched.workloads import load_workload


def test_shared_bounds_and_whole_runs_are_each_jobs_own(models: PerfModels) -> None:
    wl = load_workload("philly:sample=400,seed=7", models)
    shared: dict[tuple[str, float], Bounds] = {}
    for k, spec in enumerate(wl.jobs):
        app = models.app(spec.application)
        alone, both = new_state(spec, app, 10.0), new_state(spec, app, 10.0, shared)
        assert alone.bounds == both.bounds and alone.bounds_arr.tobytes() == both.bounds_arr.tobytes()
        assert alone.epoch_work.tobytes() == both.epoch_work.tobytes()
        gpus = spec.num_gpus
        alloc = Allocation((("n0", min(gpus, 4)),) + ((("n1", gpus - 4),) if gpus > 4 else ()), 0, "t4")
        for job in (alone, both):
            job.apply(alloc, 10.0 + k, {"n0": "t4", "n1": "t4"} if gpus > 4 else {"n0": "t4"}, 30.0)
        assert both.rates is not None
        direct = max(both.updated, both.restart_until) + float(np.add.reduce(both.epoch_work / both.rates))
        assert alone.finish_time() == both.finish_time() == direct  # (later jobs of a length read the sum made once)
    assert len(shared) < len(wl.jobs)  # lengths repeat: the comparison covered shared arrays
