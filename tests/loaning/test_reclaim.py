"""Reclaim choice (lyra.md §2.1) on hand-built cases whose right answer is known."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, NodeView, Pool
from elastisched.policies._reclaim import Holding, choose, evaluate, greedy, holdings_from_snapshot, milp

S = [f"s{i}" for i in range(4)]


def h(job: str, gpus: dict[str, int], total: int | None = None, keep: int | None = None) -> Holding:
    t = total if total is not None else sum(gpus.values())
    return Holding(job, gpus, t, t if keep is None else keep)


def test_idle_servers_go_first() -> None:
    hs = [h("a", {"s0": 4}), h("b", {"s2": 2})]
    assert set(greedy(S, hs, 2)) == {"s1", "s3"}
    assert not choose("greedy", S, hs, 2).preempted


def test_elastic_extra_workers_scale_in_at_no_preemption() -> None:
    # a: elastic, 8 GPUs, min 4, its 4 extras on s0; b: inelastic on s1; c: inelastic on s2; s3 busy with d
    hs = [h("a", {"s0": 4}, total=8, keep=4), h("b", {"s1": 2}), h("c", {"s2": 4}), h("d", {"s3": 1})]
    c = choose("greedy", S, hs, 1)
    assert c.servers == ("s0",)
    assert not c.preempted and dict(c.scaled_in) == {"a": 4}


def test_job_spanning_servers_makes_its_other_server_free() -> None:
    # a spans s0+s1; b on s2; c on s3.  r=2: returning s0,s1 preempts 1 job, any other pair preempts 2.
    hs = [h("a", {"s0": 4, "s1": 4}), h("b", {"s2": 4}), h("c", {"s3": 4})]
    for method in ("greedy", "greedy-swap", "milp"):
        c = choose(method, S, hs, 2)
        assert set(c.servers) == {"s0", "s1"}, method
        assert c.preempted == {"a"}


def test_deepboot_rule_picks_fewest_training_gpus_and_can_preempt_more() -> None:
    # s0 has 3 GPUs of three 1-GPU jobs, s1 has 4 GPUs of one job: fewest GPUs = s0 (3 preemptions), greedy = s1
    hs = [h("x", {"s0": 1}), h("y", {"s0": 1}), h("z", {"s0": 1}), h("w", {"s1": 4})]
    assert choose("deepboot", S[:2], hs, 1).servers == ("s0",)
    assert len(choose("deepboot", S[:2], hs, 1).preempted) == 3
    assert choose("greedy", S[:2], hs, 1).servers == ("s1",)
    assert len(choose("greedy", S[:2], hs, 1).preempted) == 1


def test_elastic_job_below_min_is_preempted() -> None:
    hs = [h("a", {"s0": 4, "s1": 4}, total=8, keep=6)]  # may lose 2 GPUs only
    assert evaluate(["s0"], hs).preempted == {"a"}
    hs2 = [h("a", {"s0": 2, "s1": 4}, total=8, keep=6)]
    assert not evaluate(["s0"], hs2).preempted


def test_random_is_seeded_and_returns_r_distinct_servers() -> None:
    a = choose("random", S, [], 3, np.random.default_rng(5)).servers
    b = choose("random", S, [], 3, np.random.default_rng(5)).servers
    assert a == b and len(set(a)) == 3


def test_unknown_method_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown reclaim method"):
        choose("nope", S, [], 1)


def _random_instance(rng: np.random.Generator) -> tuple[list[str], list[Holding], int]:
    servers = [f"s{i}" for i in range(int(rng.integers(3, 9)))]
    free = dict.fromkeys(servers, 4)
    hs = []
    for j in range(int(rng.integers(1, 10))):
        need, gp = int(rng.choice([1, 2, 4, 6])), {}
        for s in rng.permutation(servers):
            if need == 0:
                break
            k = min(free[s], need, int(rng.integers(1, 5)))
            if k:
                free[s] -= k
                gp[str(s)] = gp.get(str(s), 0) + k
                need -= k
        if gp:
            total = sum(gp.values()) + int(rng.integers(0, 3))
            keep = total if rng.random() < 0.5 else int(rng.integers(1, total + 1))
            hs.append(Holding(f"j{j}", gp, total, keep))
    return servers, hs, int(rng.integers(1, len(servers)))


def test_milp_is_exact_and_greedy_close_on_random_instances() -> None:
    rng = np.random.default_rng(3)
    tot = {"greedy": 0, "greedy-swap": 0, "milp": 0, "deepboot": 0, "random": 0}
    for it in range(60):
        servers, hs, r = _random_instance(rng)
        brute = min(len(evaluate(c, hs).preempted) for c in itertools.combinations(servers, r))
        got = {m: len(choose(m, servers, hs, r, np.random.default_rng(it)).preempted) for m in tot}
        assert got["milp"] == brute
        assert all(len(choose(m, servers, hs, r).servers) == r for m in ("greedy", "milp", "deepboot"))
        for m in tot:
            tot[m] += got[m]
    assert tot["greedy-swap"] <= tot["greedy"] <= tot["deepboot"]
    assert tot["greedy"] < tot["random"]
    assert tot["greedy-swap"] <= 1.05 * tot["milp"]


def test_milp_returns_r_servers_when_nothing_is_at_stake() -> None:
    assert len(milp(S, [], 3)) == 3


def test_holdings_from_snapshot_only_counts_loaned_servers() -> None:
    nodes = (NodeView("t0", "t4", 4), NodeView("l0", "t4", 4, Pool.LOANABLE, 1))
    el = JobSpec("e", 0.0, "cifar10", 4, 128, min_gpus=2, max_gpus=8, elastic=True)
    inel = JobSpec("i", 0.0, "cifar10", 2, 128, min_gpus=2, max_gpus=2)
    jobs = {"e": JobView(el, JobPhase.RUNNING, Allocation((("t0", 2), ("l0", 2)))),
            "i": JobView(inel, JobPhase.RUNNING, Allocation((("t0", 2),)))}
    servers, hs = holdings_from_snapshot(ClusterSnapshot(0.0, nodes, jobs, 1))
    assert servers == ("l0",)
    assert hs == (Holding("e", {"l0": 2}, 4, 2),)
    assert not choose("greedy", servers, hs, 1).preempted
