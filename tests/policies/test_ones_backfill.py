"""The tuned preset's work-conserving admission (src/elastisched/policies/ones/backfill.py, docs/ones.md D12)."""

from __future__ import annotations

from typing import Any

import numpy as np

from elastisched.core.cluster import parse_cluster
from elastisched.core.types import ClusterSnapshot, Decision
from elastisched.policies.base import PolicyContext
from elastisched.policies.ones import backfill as bf
from elastisched.policies.ones.policy import OnesPolicy
from elastisched.workloads import load_workload
from elastisched.workloads.schema import Workload

E = -1


def test_backfill_least_attained_first_on_the_best_fitting_node() -> None:
    node_of = np.repeat(np.arange(3), 4)
    # node 0 full (job 0); node 1 has 2 empty slots; node 2 is empty
    out = np.array([0, 0, 0, 0, 1, 1, E, E, E, E, E, E])
    waiting = np.array([False, False, True, True, True, True])
    size = np.array([4, 2, 4, 2, 1, 4])
    attained = np.array([9.0, 9.0, 50.0, 0.0, 0.0, 10.0])
    new, started = bf.backfill(out, node_of, waiting, size, attained)
    # job 3 (2 GPUs, 0 GPU-s) fits node 1 exactly; job 4 (1 GPU, 0 GPU-s) then takes node 2's best fit;
    # job 5 (4 GPUs, 10 GPU-s) gets the 3 GPUs left on node 2; job 2 (50 GPU-s) finds nothing left
    assert new.tolist() == [0, 0, 0, 0, 1, 1, 3, 3, 4, 5, 5, 5]
    assert started.tolist() == [False, False, False, True, True, True]


def test_backfill_spreads_a_job_larger_than_any_node_over_the_emptiest_nodes() -> None:
    node_of = np.repeat(np.arange(3), 4)
    out = np.array([0, 0, E, E, E, E, E, E, 0, E, E, E])
    new, _ = bf.backfill(out, node_of, np.array([False, True]), np.array([0, 6]), np.zeros(2))
    assert new.tolist() == [0, 0, E, E, 1, 1, 1, 1, 0, 1, 1, E]


def test_seed_rows_keeps_a_backfilled_job_in_every_row_that_has_room() -> None:
    pop = np.array([[0, 0, E, E], [0, 0, 0, E], [0, 1, E, E]])
    out = np.array([0, 0, 1, 1])
    got = bf.seed_rows(pop, out, np.array([False, True]))
    assert got.tolist() == [[0, 0, 1, 1], [0, 0, 0, E], [0, 1, E, E]]


class _Watch(OnesPolicy):
    """Counts decided rounds (not quiet repeats) that end with a job that was already waiting still waiting while
    GPUs stay idle (a job the round itself stops is the search's own preemption)."""

    idle_waits = 0

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        dec = super().schedule(snap, ctx)
        used = sum(g for a in dec.allocations.values() for _, g in a.placement)
        waiting = [j for j in snap.jobs.values() if not j.gpus and j.job_id not in dec.allocations]
        decided = self._quiet is not None and self._quiet["t"] == snap.now
        if decided and waiting and used < snap.total_gpus:
            self.idle_waits += 1
        return dec


def test_tuned_leaves_no_gpu_idle_while_a_pollux_job_waits(models: Any) -> None:
    # the first 40 jobs of Pollux workload-1 on 4 nodes: without D12 the hold / δ throttle left GPUs idle while
    # jobs the best individual placed elsewhere (or left out) waited; with it no round ends that way
    from elastisched.sim import SimConfig, simulate

    wl = load_workload("pollux:workload-1", models)
    wl = Workload(wl.name + "-first40", wl.jobs[:40], wl.source, wl.digest)
    nodes = parse_cluster("4x4:t4")
    runs = {}
    for on in (True, False):
        pol = _Watch("tuned") if on else _Watch("tuned", backfill=False)  # the preset has it on
        runs[on] = (pol, simulate(wl, pol, nodes, models, SimConfig(seed=0)).summary)
    assert runs[True][0].idle_waits == 0
    assert runs[False][0].idle_waits > 0
    assert runs[True][1]["n_finished"] == runs[False][1]["n_finished"] == 40


def test_hold_free_factor_applies_per_job() -> None:
    """D13: the growth hold takes one factor per job, so jobs without a progress log (`hold_free`) may grow on a
    smaller predicted gain than jobs with one (`hold_factor`)."""
    from elastisched.policies.ones import deploy as dep

    cur = np.array([0, 0, E, E, 1, 1, E, E])
    best = np.array([0, 0, 0, 0, 1, 1, 1, 1])  # both grow 2 -> 4 in place
    running = np.array([True, True])
    pts_n = np.array([[2.0, np.inf], [2.0, np.inf]])
    pts_x = np.array([[100.0, 0.0], [100.0, 0.0]])
    rem = np.array([3000.0, 3000.0])  # 30 s on 2 GPUs, 15 s on 4: a 15 s gain against an 8 s resize
    assert dep.hold(cur, best, running, rem, pts_n, pts_x, 8.0, np.array([1.0, 3.0])).tolist() == [False, True]
    assert dep.hold(cur, best, running, rem, pts_n, pts_x, 8.0, 3.0).tolist() == [True, True]
    tuned = OnesPolicy("tuned")
    assert (tuned.opts.hold_free_factor, tuned.opts.hold_factor) == (1.0, 3.0)
