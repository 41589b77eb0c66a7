"""One fact, one place (issue 20): the node set, the "same GPUs?" rule and the service's vocabularies."""

from __future__ import annotations

import json

from elastisched.backends.base import OUTCOMES
from elastisched.core.cluster import parse_cluster
from elastisched.core.enums import Cause, ChangeKind, GenerationOutcome, GenerationState, LoanState
from elastisched.core.nodes import _SETS, node_set
from elastisched.core.types import Allocation, ClusterSnapshot, canonical_placement, same_gpus
from elastisched.engine.jobstate import change_kind


def test_node_set_is_built_once_per_tuple_and_holds_every_fact() -> None:
    _SETS.clear()  # (the cache keeps a few dozen recent sets: earlier tests must not make it drop this one)
    nodes = parse_cluster("2x4:t4,1x8:a100")
    ns = node_set(nodes)
    assert node_set(nodes) is ns  # found again by the tuple's identity
    assert node_set(tuple(nodes)) is ns  # tuple(t) is t
    assert node_set(parse_cluster("2x4:t4,1x8:a100")) is not ns  # another tuple, another set
    assert dict(ns.position) == {"t4-0": 0, "t4-1": 1, "a100-0": 2}
    assert dict(ns.gpu_type) == {"t4-0": "t4", "t4-1": "t4", "a100-0": "a100"}
    assert dict(ns.capacity) == {"t4": 8, "a100": 8} and ns.total_gpus == 16 and len(ns) == 3
    assert ns.derived("k", lambda s: [s.total_gpus]) is ns.derived("k", lambda s: [0])  # computed once
    snap = ClusterSnapshot(0.0, nodes, {})
    assert snap.node_set is ns and snap.total_gpus == 16 and snap.capacity_by_type() == {"t4": 8, "a100": 8}


def test_same_gpus_ignores_order_and_splitting_but_not_counts_or_nodes() -> None:
    a = Allocation(placement=(("n1", 2), ("n0", 1)))
    assert a.same_gpus(Allocation(placement=(("n0", 1), ("n1", 2))))
    assert same_gpus(a.placement, (("n1", 1), ("n0", 1), ("n1", 1)))  # split entries, same GPUs
    assert not a.same_gpus(Allocation(placement=(("n1", 1), ("n0", 2))))
    assert not a.same_gpus(Allocation(placement=(("n1", 2), ("n2", 1))))
    assert canonical_placement([("b", 1), ("a", 2), ("b", 3)]) == (("a", 2), ("b", 4))
    assert a.placement == (("n1", 2), ("n0", 1))  # the stored order is kept (outputs record it)


def test_change_kind_uses_the_same_rule() -> None:
    old = Allocation(placement=(("n0", 2), ("n1", 2)))
    assert change_kind(old, Allocation(placement=(("n1", 2), ("n0", 2)), batch_size=64)) is ChangeKind.RECONFIGURE
    assert change_kind(old, Allocation(placement=(("n1", 2),))) is ChangeKind.RESIZE
    assert change_kind(old, Allocation(placement=(("n2", 4),))) is ChangeKind.RESTART
    assert change_kind(Allocation(), old) is ChangeKind.LAUNCH and change_kind(old, Allocation()) is ChangeKind.STOP


def test_vocabularies_write_the_same_text() -> None:
    assert OUTCOMES == ("succeeded", "failed", "launch_failed", "interrupted", "lost", "stopped", "cancelled")
    assert json.dumps({"c": Cause.RESUME, "o": GenerationOutcome.LOST}) == '{"c": "resume", "o": "lost"}'
    assert f"{GenerationState.EXITED}|{LoanState.RETURNED}" == "EXITED|RETURNED"
    assert ChangeKind.RECONFIGURE == "reconfigure"
