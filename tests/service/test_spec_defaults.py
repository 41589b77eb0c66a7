"""A submission's defaults are decided once (`service/spec_defaults.py`): the spec the API stores and the
`JobSpec` the daemon reads back agree on size range, elasticity and batch."""

from __future__ import annotations

import pytest

from elastisched.core.types import Allocation
from elastisched.service.api_models import SubmitRequest
from elastisched.service.spec_defaults import DEFAULT_BATCH_SIZE, gpu_bounds, stored_spec
from elastisched.service.submission import job_spec


@pytest.mark.parametrize(("gpus", "lo", "hi", "want"), [(2, None, None, (2, 2)), (2, 1, None, (1, 2)),
                                                        (2, None, 4, (2, 4)), (4, 4, 8, (4, 8))])
def test_the_size_range_rule(gpus: int, lo: int | None, hi: int | None, want: tuple[int, int]) -> None:
    assert gpu_bounds(gpus, lo, hi) == want


def test_the_stored_spec_reads_back_as_the_same_job() -> None:
    req = SubmitRequest(script="x.py", gpus=2, min_gpus=1)
    assert req.batch_size == DEFAULT_BATCH_SIZE
    s = stored_spec(gpus=req.gpus, min_gpus=req.min_gpus, max_gpus=req.max_gpus, batch_size=req.batch_size,
                    adaptive=None, gpu_type="t4", duration=None, application=None, work_scale=None)
    assert (s["min_gpus"], s["max_gpus"], s["elastic"]) == (1, 2, True)
    spec = job_spec("j", "name", 0.0, s)
    assert (spec.num_gpus, spec.min_gpus, spec.max_gpus, spec.elastic, spec.batch_size) == (2, 1, 2, True, 64)
    assert spec.gpu_types == ("t4",)
    # a spec written without the derived fields decides them by the same rule
    bare = job_spec("j", "name", 0.0, {"num_gpus": 2, "max_gpus": 4})
    assert (bare.min_gpus, bare.max_gpus, bare.elastic, bare.batch_size) == (2, 4, True, DEFAULT_BATCH_SIZE)


def test_an_allocation_without_a_batch_runs_at_the_jobs() -> None:
    spec = job_spec("j", "name", 0.0, {"num_gpus": 1, "batch_size": 128})
    assert spec.batch_for(Allocation(placement=(("n", 1),))) == 128
    assert spec.batch_for(Allocation(placement=(("n", 1),), batch_size=256)) == 256
