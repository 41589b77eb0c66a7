"""The service's conversions, each in one place: a stored submission into the `JobSpec` a policy sees (with the
defaults of `spec_defaults`), a policy name into a policy, a policy's pending reason into the stored
vocabulary (`PendingReason`)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from elastisched.core.errors import UnknownPolicyError
from elastisched.core.types import JobSpec, PendingReason
from elastisched.engine.overrides import pin
from elastisched.policies.base import Policy, make_policy
from elastisched.service.spec_defaults import DEFAULT_BATCH_SIZE, gpu_bounds


def placement(p: Sequence[Sequence[Any]]) -> tuple[tuple[str, int], ...]:
    return tuple((str(n), int(k)) for n, k in p)


def job_spec(job_id: str, name: str, submit_time: float, s: dict[str, Any], resize_to: int | None = None) -> JobSpec:
    """The one conversion of a stored submission (the spec dict the API wrote) into the JobSpec a policy sees;
    the simulator's drift twin builds its jobs with it too. Its size range follows `gpu_bounds` and its batch
    defaults to `DEFAULT_BATCH_SIZE`; a spec that does not say whether it is elastic is so when that range is
    wider than one size. No duration stays None (a policy's model-free fallback owns that default). An admin
    resize pins the size."""
    n = int(s["num_gpus"])
    lo, hi = gpu_bounds(n, s.get("min_gpus"), s.get("max_gpus"))
    elastic = bool(s["elastic"]) if "elastic" in s else hi > lo
    spec = JobSpec(job_id=job_id, submit_time=submit_time, application=str(s.get("application") or name),
                   num_gpus=n, batch_size=int(s.get("batch_size") or DEFAULT_BATCH_SIZE), min_gpus=int(lo),
                   max_gpus=int(hi), elastic=elastic, gpu_types=tuple(s.get("gpu_types") or ()),
                   work_scale=float(s.get("work_scale") or 1.0),
                   duration=float(s["duration"]) if s.get("duration") else None)
    return pin(spec, int(resize_to)) if resize_to else spec


def policy_named(name: str) -> Policy:
    """A registered policy; a policy module not yet imported by `elastisched.policies` is imported by name; a
    spec with options or a plug-in's (`gavel:interval=120`, `file.py:Class`) is built by `policies.plugins`."""
    if ":" in name:
        from elastisched.policies.plugins import build

        return build(name).policy
    try:
        return make_policy(name)
    except UnknownPolicyError:
        if not name.isidentifier():
            raise
        try:
            importlib.import_module(f"elastisched.policies.{name}")
        except ImportError:
            raise UnknownPolicyError(f"unknown policy {name!r}") from None
        return make_policy(name)


def stored_reason(why: Any) -> str:
    """A pending reason as stored: a `PendingReason` value (none given: Priority, as in Slurm)."""
    if why is None:
        return PendingReason.PRIORITY.value
    try:
        return PendingReason(why).value
    except ValueError:  # a policy not yet on the typed vocabulary: its text, unchanged
        return str(why)
