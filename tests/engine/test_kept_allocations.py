"""KeptAllocations (every running job keeps its allocation, plus added ones): a mapping equal to the plain dict
a policy would build, and the placer's fast path for it places, orders and reports changes exactly as the
general path does for that dict."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

from elastisched.core.errors import InvariantViolation
from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, KeptAllocations, NodeView
from elastisched.engine.placer import place_changes


def _snap() -> ClusterSnapshot:
    nodes = tuple(NodeView(f"n{i}", "t4", 4, index=i) for i in range(3))
    jobs: dict[str, JobView] = {}
    for i, placement in enumerate([(("n0", 2),), (("n1", 4),), (), (), (("n0", 1), ("n2", 1))]):
        spec = JobSpec(f"j{i}", float(i), "cifar10", max(1, sum(g for _, g in placement)), 128)
        phase = JobPhase.RUNNING if placement else JobPhase.PENDING
        jobs[spec.job_id] = JobView(spec, phase, Allocation(placement))
    running = {k: v for k, v in jobs.items() if v.allocation.gpus}
    used = np.array([3, 4, 1], dtype=np.int64)
    used.flags.writeable = False
    return ClusterSnapshot(0.0, nodes, MappingProxyType(jobs), running=MappingProxyType(running),
                           free=MappingProxyType({"t4": 4}), node_used=used)


def test_same_as_plain_dict() -> None:
    snap = _snap()
    added = {"j2": Allocation(num_gpus=3, gpu_type="t4"), "j3": Allocation((("n2", 1),))}
    kept = KeptAllocations(snap.running_jobs(), added)
    plain = {k: v.allocation for k, v in snap.running_jobs().items()} | added
    assert list(kept) == list(plain) and dict(kept.items()) == plain and kept == plain and len(kept) == 5
    assert "j0" in kept and "j2" in kept and "j9" not in kept and kept.get("j9") is None
    assert kept["j1"] is snap.jobs["j1"].allocation and kept.get("j3") is added["j3"]
    fast, free_fast, ch_fast = place_changes(kept, snap)
    slow, free_slow, ch_slow = place_changes(plain, snap)
    assert isinstance(fast, KeptAllocations) and not isinstance(slow, KeptAllocations)
    assert list(fast.items()) == list(slow.items())  # same placements, same order
    assert np.array_equal(free_fast, free_slow) and free_fast.tolist() == [0, 0, 0]
    assert ch_fast is not None and ch_slow is not None
    assert ch_fast.changed == ch_slow.changed == ["j3", "j2"] and ch_fast.released == ch_slow.released == []
    assert fast["j2"].placement == (("n2", 2), ("n0", 1))  # most free node first: n2 (2 after j3), then n0


def test_open_allocation_larger_than_free_names_what_is_free() -> None:
    snap = _snap()  # 4 GPUs free: 1 on n0, 3 on n2
    with pytest.raises(InvariantViolation, match=r"job j2: asks 5 GPUs of types any, only 4 free"):
        place_changes({k: v.allocation for k, v in snap.running_jobs().items()} | {"j2": Allocation(num_gpus=5)}, snap)
    with pytest.raises(InvariantViolation, match=r"only 4 free"):
        place_changes(KeptAllocations(snap.running_jobs(), {"j2": Allocation(num_gpus=5)}), snap)


def test_released_jobs_same_as_plain_dict() -> None:
    """A running job released (stopped: j1) or released and moved (j0, open allocation): the mapping equals the
    plain dict without them, and the placer frees their GPUs first, as its general path does."""
    snap = _snap()
    added = {"j0": Allocation(num_gpus=2, gpu_type="t4"), "j2": Allocation(num_gpus=4, gpu_type="t4")}
    kept = KeptAllocations(snap.running_jobs(), added, ["j1", "j0"])
    plain = {"j4": snap.jobs["j4"].allocation} | added
    assert list(kept) == list(plain) and dict(kept) == plain and len(kept) == 3
    assert "j1" not in kept and kept.get("j1") is None and "j0" in kept and kept["j0"] is added["j0"]
    with pytest.raises(KeyError):
        kept["j1"]
    fast, free_fast, ch_fast = place_changes(kept, snap)
    slow, free_slow, ch_slow = place_changes(plain, snap)
    assert dict(fast) == slow and list(fast) == list(slow)
    assert np.array_equal(free_fast, free_slow)
    assert ch_fast is not None and ch_slow is not None
    assert ch_fast.changed == ch_slow.changed and sorted(ch_fast.released) == sorted(ch_slow.released) == ["j0", "j1"]
    # j1's 4 GPUs on n1 and j0's 2 on n0 are free again before the open allocations are placed
    assert fast["j2"].placement == (("n1", 4),) and sum(g for _, g in fast["j0"].placement) == 2


def test_an_explicit_placement_over_capacity_is_caught_on_the_changed_nodes() -> None:
    """The capacity check after an incremental placement looks at the changed jobs' nodes only: a job placed
    explicitly on a full node (n1) is still refused, naming the node, on either path; one that fits passes."""
    from elastisched.engine.invariants import check

    snap = _snap()
    for decision in (KeptAllocations(snap.running_jobs(), {"j2": Allocation((("n1", 1),))}),
                     {k: v.allocation for k, v in snap.running_jobs().items()} | {"j2": Allocation((("n1", 1),))}):
        placed, free, changes = place_changes(decision, snap)
        assert free is not None and changes is not None and changes.changed == ["j2"]
        with pytest.raises(InvariantViolation, match=r"node n1: 5 GPUs allocated, capacity 4"):
            check(placed, snap, False, free, changes.changed)
    placed, free, changes = place_changes(KeptAllocations(snap.running_jobs(), {"j2": Allocation((("n2", 1),))}),
                                          snap)
    assert changes is not None
    check(placed, snap, False, free, changes.changed)
