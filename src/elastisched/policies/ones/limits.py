"""ONES elasticity limits (ones.md §2.7): the GA caps and `max_size` per job, set before each generation.

Per-job state is the policy's dict (`max_size`, `resume`, `e` epochs done, `last_change`, `doubled_at`); this
module mutates `max_size` / `doubled_at` exactly as the artifact's `Monitor.scale_up` does, and returns the
caps. `once_per_epoch` is the artifact preset's reading of "at most one doubling per epoch": a job doubles at
most once per completed epoch (the artifact's δ = 1 epoch between placement changes has the same effect on
the real cluster, where a job must be redeployed at `max_size` before it may double again).
"""

from __future__ import annotations

import numpy as np

from elastisched.core.types import JobSpec, JobView
from elastisched.policies.ones.jobstate import OnesJobState


def caps(jobs: list[JobView], sts: list[OnesJobState], executed: np.ndarray, c: int, med_pool: list[float],
         tp_limit: np.ndarray | None, *, cap_factor: int, artifact_gate: bool, scale_gate: float, growth: str,
         sd_factor: float, once_per_epoch: bool = False, soak: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """GA caps and max sizes after the scale-up / scale-down / scale-in limits (ones.md §2.7)."""
    j = len(jobs)
    out = np.zeros(j, dtype=np.int64)
    maxs = np.zeros(j, dtype=np.int64)
    for i, (job, st) in enumerate(zip(jobs, sts, strict=True)):
        n = job.gpus
        limit = min(c, cap_factor * job.spec.num_gpus)
        if n and executed[i]:
            gate = st.e >= 1.0 if artifact_gate else st.e - st.last_change >= scale_gate
            if gate:
                epoch = int(st.e + 1e-9)
                may = not once_per_epoch or epoch > (-1 if st.doubled_at is None else st.doubled_at)
                if may and n >= st.max_size and (tp_limit is None or st.max_size < tp_limit[i]):
                    grown = 2 * st.max_size if growth == "double" else max(2 * st.max_size, limit)
                    if min(c, grown) > st.max_size:
                        st.doubled_at = epoch
                    st.max_size = min(c, grown)
                out[i] = min(st.max_size, limit)
            else:
                out[i] = n
        elif n:
            out[i] = n
        elif executed[i]:
            out[i] = st.resume or st.max_size
        maxs[i] = max(st.max_size, out[i]) if soak else min(max(st.max_size, out[i]), limit)
        if tp_limit is not None and executed[i]:
            out[i], maxs[i] = min(out[i], tp_limit[i]), min(maxs[i], tp_limit[i])
        if job.spec.elastic:  # a job the workload marks elastic stays within its bounds
            out[i], maxs[i] = min(out[i], job.spec.gpu_cap), min(maxs[i], job.spec.gpu_cap)
    run = [i for i in range(j) if jobs[i].gpus and executed[i]]
    if run:
        big = max(run, key=lambda i: (jobs[i].gpus, -i))
        n, r = jobs[big].gpus, jobs[big].run_time
        med = float(np.median(med_pool)) if med_pool else 0.0
        if 2 * n >= c and med > 0 and r > med:
            new = max(1, int(2 * n / (sd_factor * r / med + 1)))
            out[big] = min(out[big], new + (new % 2))
    return out, maxs


def no_log(spec: JobSpec) -> bool:
    """True for a job without a loss/accuracy log (every Pollux job; no ONES-trace job)."""
    return not (spec.attrs.get("acc_curve") or spec.attrs.get("loss_curve"))


def big_jobs(specs: list[JobSpec], node_gpus: int, nodes: int) -> np.ndarray:
    """Jobs without a progress log that request at least `nodes` (> 0) nodes' worth of GPUs (D10)."""
    return np.array([nodes > 0 and node_gpus > 0 and s.num_gpus >= nodes * node_gpus and no_log(s)
                     for s in specs], dtype=bool)


def start_size(spec: JobSpec, start: str, node_gpus: int, idle: int = -1, nodes: int = 2) -> int:
    """GPUs a new job is admitted with: 1 (artifact), its request, or its request within one node (D1), within
    its elastic bounds. D9 (`idle` ≥ 0): a job without a progress log requesting ≥ `nodes` nodes' worth starts at
    its request rounded down to whole nodes when that many GPUs are idle: on T4 a block straddling two nodes
    measures slower than one node, so A16 would otherwise stop it at one node for good (an ablation: it lost)."""
    if start == "one":
        return 1
    n = max(1, spec.num_gpus)
    if start == "node" and node_gpus:
        whole = n // node_gpus * node_gpus
        big = idle >= 0 and n >= nodes * node_gpus and no_log(spec) and whole <= idle
        n = whole if big else min(n, node_gpus)
    return min(n, spec.gpu_cap) if spec.elastic else n
