"""The `lyra` policy (lyra.md §2) on hand-built snapshots with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, NodeView, Pool
from elastisched.engine import Engine
from elastisched.engine.invariants import check
from elastisched.engine.placer import place
from elastisched.policies.base import PolicyContext, make_policy
from elastisched.policies.lyra import LyraPolicy


def nodes(train: int, loan: int, gpus: int = 4) -> tuple[NodeView, ...]:
    out = [NodeView(f"t{i}", "t4", gpus, Pool.TRAIN, i) for i in range(train)]
    out += [NodeView(f"l{i}", "t4", gpus, Pool.LOANABLE, train + i) for i in range(loan)]
    return tuple(out)


def spec(jid: str, gpus: int, duration: float, t: float = 0.0, lo: int | None = None, hi: int | None = None
         ) -> JobSpec:
    el = lo is not None
    return JobSpec(jid, t, "cifar10", gpus, 128 * gpus, min_gpus=lo if el else gpus,
                   max_gpus=hi if el else gpus, elastic=el, duration=duration)


def view(s: JobSpec, placement: tuple[tuple[str, int], ...] = (), progress: float = 0.0) -> JobView:
    return JobView(s, JobPhase.RUNNING if placement else JobPhase.PENDING, Allocation(placement),
                   progress=progress, total_work=1.0)


def snap(ns: tuple[NodeView, ...], *views: JobView, reclaim: int = 0) -> ClusterSnapshot:
    return ClusterSnapshot(100.0, ns, {v.job_id: v for v in views}, reclaim)


CTX = PolicyContext(perf=None, rng=np.random.default_rng(0))  # linear model: T(n) = duration·num_gpus/n


def gpus(d: object, jid: str) -> dict[str, int]:
    return dict(d.allocations[jid].placement) if jid in d.allocations else {}  # type: ignore[attr-defined]


def test_registered_and_elastic() -> None:
    assert isinstance(make_policy("lyra"), LyraPolicy) and LyraPolicy.elastic


def test_phase1_is_shortest_job_first_with_backfill() -> None:
    s = snap(nodes(1, 0), view(spec("long", 4, 9000.0, t=0.0)), view(spec("short", 4, 100.0, t=5.0)),
             view(spec("tiny", 4, 50.0, t=9.0)))
    d = LyraPolicy().schedule(s, CTX)
    assert list(d.allocations) == ["tiny"] and d.reasons == {"short": "Resources", "long": "Resources"}
    s2 = snap(nodes(1, 0), view(spec("big", 8, 10.0)), view(spec("small", 2, 900.0)))
    d2 = LyraPolicy().schedule(s2, CTX)
    assert list(d2.allocations) == ["small"]  # "big" does not fit; "small" backfills behind it


def test_phase2_knapsack_gives_extras_by_jct_reduction() -> None:
    # 8 GPUs: A (min 2, max 6, 6000 GPU·s of work left) and B (min 2, max 6, 600 GPU·s) both at base;
    # 4 free GPUs: the exact optimum gives all 4 extras to A (T: 3000 → 1000 s) rather than B.
    a, b = spec("A", 2, 3000.0, lo=2, hi=6), spec("B", 2, 300.0, lo=2, hi=6)
    d = LyraPolicy().schedule(snap(nodes(2, 0), view(a), view(b)), CTX)
    assert sum(gpus(d, "A").values()) == 6 and sum(gpus(d, "B").values()) == 2


def test_extras_go_to_loaned_servers_and_base_to_training() -> None:
    d = LyraPolicy().schedule(snap(nodes(1, 1), view(spec("E", 2, 1000.0, lo=2, hi=6))), CTX)
    assert gpus(d, "E") == {"t0": 2, "l0": 4}


def test_inelastic_jobs_keep_their_request_and_running_jobs_stay() -> None:
    run = view(spec("R", 2, 500.0), (("t0", 2),), progress=0.5)
    d = LyraPolicy().schedule(snap(nodes(1, 1), run, view(spec("P", 4, 100.0))), CTX)
    assert gpus(d, "R") == {"t0": 2} and sum(gpus(d, "P").values()) == 4


def test_reclaim_returns_the_server_holding_only_extra_workers() -> None:
    e = view(spec("E", 2, 10_000.0, lo=2, hi=6), (("t0", 2), ("l0", 4)), progress=0.1)
    i = view(spec("I", 4, 10_000.0), (("l1", 4),), progress=0.1)
    pol = LyraPolicy()
    d = pol.schedule(snap(nodes(1, 2), e, i, reclaim=1), CTX)
    assert d.reclaim == ("l0",)
    # E scales in off l0 and regrows on the training node's 2 free GPUs; I is untouched
    assert gpus(d, "E") == {"t0": 4} and gpus(d, "I") == {"l1": 4}
    assert pol.reclaim_log[-1]["preempted"] == 0 and pol.reclaim_log[-1]["scaled_in"] == 1


@pytest.mark.parametrize("method, expect", [("deepboot", ("l1",)), ("greedy", ("l0",))])
def test_reclaim_variants(method: str, expect: tuple[str, ...]) -> None:
    e = view(spec("E", 2, 10_000.0, lo=2, hi=6), (("t0", 2), ("l0", 4)), progress=0.1)
    i = view(spec("I", 1, 10_000.0), (("l1", 1),), progress=0.1)
    d = LyraPolicy(reclaim=method).schedule(snap(nodes(1, 2), e, i, reclaim=1), CTX)
    assert d.reclaim == expect


def test_small_gains_do_not_trigger_a_rescale() -> None:
    # E runs at 3 GPUs (1 extra) with 30 s of work left; one more GPU would save < 30 s (the restart cost)
    e = view(spec("E", 2, 45.0, lo=2, hi=6), (("t0", 3),), progress=0.0)
    d = LyraPolicy().schedule(snap(nodes(2, 0), e), CTX)
    assert gpus(d, "E") == {"t0": 3}
    d2 = LyraPolicy(rescale_penalty=0.0).schedule(snap(nodes(2, 0), e), CTX)
    assert sum(gpus(d2, "E").values()) == 6


def test_loaning_only_ablation_treats_jobs_as_inelastic() -> None:
    d = LyraPolicy(elastic_scaling=False).schedule(snap(nodes(1, 1), view(spec("E", 3, 100.0, lo=2, hi=6))), CTX)
    assert sum(gpus(d, "E").values()) == 3


def test_with_models_decision_passes_engine_invariants(models: object) -> None:
    ns = nodes(2, 2)
    jobs = [view(JobSpec(f"j{k}", float(k), app, g, bs * g, min_gpus=1, max_gpus=3 * g, elastic=k % 2 == 0))
            for k, (app, g, bs) in enumerate([("cifar10", 1, 128), ("imagenet", 4, 100), ("bert", 2, 12),
                                              ("ncf", 1, 256), ("deepspeech2", 2, 20)])]
    s = snap(ns, *jobs)
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    res = Engine(LyraPolicy(), ctx).round(s)
    check(place(res.decision.allocations, s), s, True)
    assert sum(a.gpus for a in res.allocations.values()) <= 16
    assert res.allocations, "something must run on an empty cluster"


def test_mckp_check_log_records_heuristic_and_exact(models: object) -> None:
    pol = LyraPolicy(check_mckp=True)
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    jobs = [view(JobSpec(f"j{k}", 0.0, "cifar10", 1, 128, min_gpus=1, max_gpus=8, elastic=True)) for k in range(3)]
    pol.schedule(snap(nodes(2, 1), *jobs), ctx)
    log = pol.mckp_log[-1]
    assert log["greedy"] <= log["exact"] + 1e-9 and log["groups"] == 3
