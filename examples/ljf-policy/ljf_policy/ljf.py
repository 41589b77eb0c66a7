"""Largest job first: the waiting job asking for the most GPUs starts first, non-preemptive, with backfilling.

A complete elastisched policy outside the package: it subclasses `Policy`, reads only the snapshot, and
declares its one option by its constructor's signature (`-p ljf:smallest_first=true` turns it into smallest
job first). Copy this file anywhere and run it with `elastisched sim run -p path/to/ljf.py:LJF`, or install
the package around it and name it `ljf`.
"""

from __future__ import annotations

from typing import ClassVar

from elastisched.core.types import Allocation, ClusterSnapshot, Decision, PendingReason
from elastisched.policies.base import Policy, PolicyContext


class LJF(Policy):
    name = "ljf"
    description = "Largest job first (most GPUs asked), non-preemptive, backfilling (an example plug-in)."
    interval = None  # rounds on arrivals and completions only
    needs_progress = False
    option_help: ClassVar[dict[str, str]] = {"smallest_first": "start the job asking for the fewest GPUs first "
                                                                "instead (smallest job first)"}

    def __init__(self, smallest_first: bool = False) -> None:
        self.smallest_first = smallest_first

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        free = snap.free_by_type()
        capacity = snap.capacity_by_type()
        allocations = {jid: job.allocation for jid, job in snap.running_jobs().items()}
        reasons: dict[str, PendingReason] = {}
        sign = 1 if self.smallest_first else -1
        waiting = sorted(snap.pending_jobs().items(), key=lambda kv: (sign * kv[1].spec.num_gpus,
                                                                      kv[1].spec.submit_time, kv[0]))
        for jid, job in waiting:
            need, types = job.spec.num_gpus, job.spec.gpu_types or tuple(capacity)
            if not any(capacity.get(t, 0) >= need for t in types):
                reasons[jid] = PendingReason.INFEASIBLE
                continue
            gpu_type = next((t for t in types if free.get(t, 0) >= need), None)
            if gpu_type is None:
                reasons[jid] = PendingReason.RESOURCES
                continue
            allocations[jid] = Allocation(num_gpus=need, gpu_type=gpu_type)
            free[gpu_type] -= need
        return Decision(allocations, reasons)
