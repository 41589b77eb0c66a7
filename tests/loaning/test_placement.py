"""Loan-aware best-fit-decreasing placement (lyra.md §2.3) on hand-built clusters."""

from __future__ import annotations

from elastisched.core.types import NodeView, Pool
from elastisched.policies.lyra.placement import Want, place


def cluster(train: list[int], loan: list[int], t: str = "t4") -> tuple[NodeView, ...]:
    nodes = [NodeView(f"t{i}", t, g, Pool.TRAIN, i) for i, g in enumerate(train)]
    nodes += [NodeView(f"l{i}", t, g, Pool.LOANABLE, len(train) + i) for i, g in enumerate(loan)]
    return tuple(nodes)


def test_best_fit_picks_the_tightest_training_node() -> None:
    nodes = cluster([8, 4, 2], [8])
    out = place(nodes, [Want("a", 2, 2, "t4")])
    assert out == {"a": (("t2", 2),)}  # the 2-GPU node fits exactly; the loaned 8-GPU node is not used


def test_decreasing_order_places_the_big_job_first() -> None:
    nodes = cluster([4, 8], [])
    out = place(nodes, [Want("small", 4, 4, "t4"), Want("big", 8, 8, "t4")])
    assert out == {"small": (("t0", 4),), "big": (("t1", 8),)}  # smallest-first would split "big"


def test_base_on_training_extras_on_loaned() -> None:
    nodes = cluster([4, 4], [4, 4])
    out = place(nodes, [Want("e", 6, 2, "t4")])
    assert out["e"] == (("t0", 2), ("l0", 4))


def test_inelastic_job_spills_to_loaned_only_when_training_is_full() -> None:
    nodes = cluster([4], [4])
    out = place(nodes, [Want("a", 4, 4, "t4"), Want("b", 2, 2, "t4")])
    assert out == {"a": (("t0", 4),), "b": (("l0", 2),)}


def test_running_job_keeps_nodes_and_sheds_loaned_gpus_first() -> None:
    nodes = cluster([4], [4, 4])
    cur = (("t0", 2), ("l0", 2), ("l1", 4))
    out = place(nodes, [Want("e", 4, 2, "t4", cur)])
    assert dict(out["e"]) == {"t0": 2, "l1": 2}  # drops l0 (fewest GPUs among loaned) then half of l1


def test_growth_prefers_a_node_already_hosting_the_job() -> None:
    nodes = cluster([4], [4, 4])
    out = place(nodes, [Want("e", 4, 2, "t4", (("t0", 2), ("l1", 1)))])
    assert dict(out["e"]) == {"t0": 2, "l1": 2}


def test_excluded_nodes_and_other_types_are_never_used() -> None:
    nodes = (*cluster([4], [4]), NodeView("v0", "v100", 8, Pool.TRAIN, 9))
    out = place(nodes, [Want("a", 4, 4, "t4")], exclude={"t0"})
    assert out == {"a": (("l0", 4),)}
    assert place(nodes, [Want("b", 6, 6, "t4")], exclude={"t0"}) == {}


def test_multi_node_job_takes_fullest_nodes_first() -> None:
    nodes = cluster([4, 4, 2], [])
    out = place(nodes, [Want("a", 6, 6, "t4")])
    assert sorted(g for _, g in out["a"]) == [2, 4]  # two nodes, not three


def test_colocate_fills_the_jobs_own_server_before_loaned_ones() -> None:
    nodes = cluster([4, 4], [4])
    run = Want("e", 4, 1, "t4", (("t0", 1),))  # running 1-GPU job on t0 (2 GPUs there taken by "o")
    other = Want("o", 2, 2, "t4", (("t0", 2),))
    assert place(nodes, [other, run], colocate=True)["e"] == (("t0", 2), ("l0", 2))  # 1 free on t0, rest loaned
    assert place(nodes, [other, run])["e"] == (("t0", 1), ("l0", 3))  # without: all extras loaned-first


def test_colocated_extras_of_a_resized_job_yield_to_new_bases() -> None:
    """J (base 1) runs on t0:3 + l0:2 and is cut to 3; a new rigid P needs 4. J's base stays on t0, but its
    kept extras there come after P's base: P gets t0's other 3 GPUs and only 1 loaned, J's extras go loaned."""
    nodes = cluster([4], [4])
    j = Want("j", 3, 1, "t4", (("t0", 3), ("l0", 2)))
    p = Want("p", 4, 4, "t4")
    out = place(nodes, [j, p], colocate=True)
    assert dict(out["p"]) == {"t0": 3, "l0": 1}
    assert dict(out["j"]) == {"t0": 1, "l0": 2}
    # A job whose size does not change keeps its extras where they are (moving them would cost a restart).
    same = place(nodes, [Want("j", 3, 1, "t4", (("t0", 3),)), p], colocate=True)
    assert dict(same["j"]) == {"t0": 3} and dict(same["p"]) == {"t0": 1, "l0": 3}
