"""A deliberately broken policy: it puts every waiting job on the first server, whatever that server holds.

`elastisched policies check ljf_policy.broken:OverCommit` fails it, naming the broken invariant (capacity).
"""

from __future__ import annotations

from elastisched.core.types import Allocation, ClusterSnapshot, Decision
from elastisched.policies.base import Policy, PolicyContext


class OverCommit(Policy):
    name = "overcommit"
    description = "Broken on purpose: every waiting job on the first server (over its capacity)."

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        first = snap.nodes[0].node_id
        allocations = {jid: job.allocation for jid, job in snap.running_jobs().items()}
        for jid, job in snap.pending_jobs().items():
            allocations[jid] = Allocation(((first, job.spec.num_gpus),))
        return Decision(allocations)
