"""`JobState.make_view` builds the view positionally (speed, issue 22): each field must land in its own place."""

from __future__ import annotations

import dataclasses

from elastisched.core.types import Allocation, JobPhase, JobSpec, JobView
from elastisched.engine.jobstate import new_state
from elastisched.models import PerfModels


def test_every_view_field_is_the_state_it_names(models: PerfModels) -> None:
    app = models.app("cifar10")
    spec = JobSpec("j", 5.0, "cifar10", 2, 256, work_scale=0.5)
    job = new_state(spec, app, 5.0)
    job.declared = 123.0
    job.grad_stats = (1.5, 2.5)
    job.apply(Allocation((("n0", 2),)), 10.0, {"n0": "t4"}, 30.0)
    job.advance(100.0)
    job.launches, job.last_resize = 3, 50.0
    v = job.make_view(100.0)
    expected = {"spec": spec, "phase": JobPhase.RUNNING, "allocation": job.allocation, "progress": job.progress,
                "total_work": job.total, "epoch": job.epoch, "attained_service": job.attained,
                "run_time": job.run_time, "updated_at": 100.0, "start_time": 10.0, "last_resize_time": 50.0,
                "num_restarts": 2, "batch_size": 256, "observed_throughput": {2: job.samples_per_s},
                "samples_done": job.samples, "model": app, "grad_stats": (1.5, 2.5), "declared_work": 123.0}
    assert [f.name for f in dataclasses.fields(JobView)] == list(expected)  # a new field: add it to both
    for name, want in expected.items():
        assert getattr(v, name) == want, name
    assert job.make_view(200.0) is v  # unchanged state: the same view
    job.apply(Allocation((("n0", 1),)), 100.0, {"n0": "t4"}, 30.0)
    assert dict(job.make_view(100.0).observed_throughput) == {2: v.observed_throughput[2], 1: job.samples_per_s}
