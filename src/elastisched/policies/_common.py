"""Small helpers shared by the rule-based policies: free GPUs per type, the type of a node, a job's own
performance model (with its fallback), and whether a job can ever fit the cluster as it is now."""

from __future__ import annotations

from collections.abc import Mapping

from elastisched.core.errors import ConfigError
from elastisched.core.types import Allocation, ClusterSnapshot, JobView, PendingReason
from elastisched.models.application import Application
from elastisched.policies.base import PolicyContext


def job_model(job: JobView, ctx: PolicyContext) -> Application | None:
    """The job's own performance model: `JobView.model` when the body filled it, else the application's entry
    in `ctx.perf`, else None (the caller then uses its model-free fallback for this job alone)."""
    if job.model is not None:
        return job.model  # type: ignore[no-any-return]
    perf = ctx.perf
    if perf is not None and job.spec.application in perf:
        return perf.app(job.spec.application)
    return None


def require_model(job: JobView, ctx: PolicyContext, policy: str) -> Application:
    """`job_model` for a policy that has no model-free fallback: a missing model is a configuration error
    naming the job and its application (the live service refuses such submissions for these policies)."""
    app = job_model(job, ctx)
    if app is None:
        raise ConfigError("application", job.spec.application,
                          f"job {job.job_id}: policy {policy} needs a performance model and none is loaded "
                          "for this application (add its profile or pick a policy with a model-free fallback)")
    return app


def can_ever_fit(capacity: Mapping[str, int], types: tuple[str, ...], need: int) -> bool:
    """True when some GPU type the job may use (all when `types` is empty) has `need` GPUs in the whole
    cluster (`capacity`: GPUs per type, busy or not). A job that cannot is INFEASIBLE, not queued: it must
    not block the jobs behind it (a job runs on one GPU type)."""
    return any(c >= need for t, c in capacity.items() if not types or t in types)


def take(free: dict[str, int], snap: ClusterSnapshot, a: Allocation) -> None:
    """Subtract an allocation's GPUs from the free count of their types."""
    types = node_types(snap)
    for n, g in a.placement:
        t = types.get(n)
        if t is not None:
            free[t] -= g


def node_types(snap: ClusterSnapshot) -> Mapping[str, str]:
    """node id -> GPU type (read-only), from the snapshot's one node set (`core.nodes`)."""
    return snap.node_set.gpu_type


def fits(free: dict[str, int], types: tuple[str, ...], need: int) -> str | None:
    """GPU type with enough free GPUs for a whole job (jobs run on one type), most free first."""
    best = None
    for t, f in free.items():
        if (not types or t in types) and f >= need and (best is None or f > free[best]):
            best = t
    return best


def start_type(job: JobView, types: Mapping[str, str], free: dict[str, int]) -> tuple[int, str | None]:
    """Optimus's start: the job's first size (its minimum when elastic, else 1) and the GPU type to give it:
    its current type while that has room and is allowed, else the type that fits best (None when none does)."""
    spec, cur = job.spec, job.allocation
    first = spec.min_gpus if spec.elastic else 1
    t = types[cur.placement[0][0]] if cur.placement else None
    if t is None or free.get(t, 0) < first or (spec.gpu_types and t not in spec.gpu_types):
        t = fits(free, spec.gpu_types, first)
    return first, t


def wait_reason(capacity: Mapping[str, int], types: tuple[str, ...], need: int) -> PendingReason:
    """Why a job that fits no free GPU type waits: RESOURCES, or INFEASIBLE when no type could ever hold it."""
    return PendingReason.RESOURCES if can_ever_fit(capacity, types, need) else PendingReason.INFEASIBLE
