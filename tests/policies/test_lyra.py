"""The `lyra` policy (lyra.md §2) on hand-built snapshots with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from elastisched.core.types import (
    Allocation,
    ClusterSnapshot,
    JobPhase,
    JobSpec,
    JobView,
    NodeView,
    PendingReason,
    Pool,
)
from elastisched.engine import Engine
from elastisched.engine.invariants import check
from elastisched.engine.placer import place
from elastisched.policies.base import PolicyContext, make_policy
from elastisched.policies.lyra.policy import LyraPolicy


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
    assert list(d.allocations) == ["tiny"]
    assert d.reasons == {"short": PendingReason.RESOURCES, "long": PendingReason.RESOURCES}
    assert all(isinstance(r, PendingReason) for r in d.reasons.values())
    s2 = snap(nodes(1, 0), view(spec("big", 8, 10.0)), view(spec("small", 2, 900.0)))
    d2 = LyraPolicy().schedule(s2, CTX)
    assert list(d2.allocations) == ["small"]  # "big" can never fit one 4-GPU server; "small" runs
    assert d2.reasons == {"big": PendingReason.INFEASIBLE}
    s3 = snap(nodes(2, 0), view(spec("half", 4, 10.0), (("t0", 4),)), view(spec("wide", 8, 10.0)),
              view(spec("small", 2, 900.0)))
    d3 = LyraPolicy().schedule(s3, CTX)
    assert set(d3.allocations) == {"half", "small"}  # "wide" fits the cluster, not the free GPUs: it waits
    assert d3.reasons == {"wide": PendingReason.RESOURCES}


@pytest.mark.parametrize(("value", "winner"), [("jct", "A"), ("rate", "B")])
def test_phase2_knapsack_gives_extras_by_item_value(value: str, winner: str) -> None:
    # 8 GPUs: A (min 2, max 6, 6000 GPU·s of work left) and B (min 2, max 6, 600 GPU·s) both at base;
    # 4 free GPUs. "jct": the exact optimum gives all 4 extras to A (T: 3000 → 1000 s saves 2000 s, B only
    # 200 s). "rate": B's completion rate gains 1/100 − 1/300 per s, A's only 1/1000 − 1/3000: all 4 to B.
    a, b = spec("A", 2, 3000.0, lo=2, hi=6), spec("B", 2, 300.0, lo=2, hi=6)
    d = LyraPolicy(value=value).schedule(snap(nodes(2, 0), view(a), view(b)), CTX)
    loser = "B" if winner == "A" else "A"
    assert sum(gpus(d, winner).values()) == 6 and sum(gpus(d, loser).values()) == 2


@pytest.mark.parametrize(("penalty", "extras_to"), [(1.0, "B"), (0.0, "A")])
def test_rate_value_charges_the_restart_through_the_remaining_time(penalty: float, extras_to: str) -> None:
    # One 6-GPU server: B runs with base 2 + 2 extras, A (a hair shorter) waits; after both bases 2 GPUs are
    # free. Without a penalty A's completion-rate gain is (barely) larger, so the extras move to A; with it,
    # taking B's extras stalls B 30 s, which its rate loses (1/(T+30) − 1/T), so B keeps them.
    b = view(spec("B", 2, 3000.0, lo=2, hi=4), (("t0", 4),), progress=0.5)
    a = view(spec("A", 2, 3000.0, lo=2, hi=4), progress=0.5001)
    d = LyraPolicy(value="rate", rescale_penalty=penalty).schedule(snap(nodes(1, 0, gpus=6), a, b), CTX)
    other = "A" if extras_to == "B" else "B"
    assert sum(gpus(d, extras_to).values()) == 4 and sum(gpus(d, other).values()) == 2


def test_unknown_value_is_rejected() -> None:
    with pytest.raises(ValueError, match="value="):
        LyraPolicy(value="speed")


@pytest.mark.parametrize(("colocate", "expect"), [(False, {"t0": 2, "l0": 4}), (True, {"t0": 4, "l0": 2})])
def test_extras_go_to_loaned_servers_and_base_to_training(colocate: bool, expect: dict[str, int]) -> None:
    # base on the training server; extras loaned-first, except (colocate) the free GPUs beside the base
    d = LyraPolicy(colocate=colocate).schedule(snap(nodes(1, 1), view(spec("E", 2, 1000.0, lo=2, hi=6))), CTX)
    assert gpus(d, "E") == expect


def test_colocation_room_is_shared_and_predicted(models: object) -> None:
    # Two running 1-GPU cifar10 jobs (max 3) on one 4-GPU training server with 2 free GPUs, a free loaned
    # server beside. Each may hold its own GPU plus half the free ones there (local = 2): one extra each,
    # beside its base. Extras on the loaned server would be slower than none (T4: 1+2 on two servers is
    # 0.81× one GPU), so without colocation neither grows.
    ns = nodes(1, 1)
    a = JobView(JobSpec("A", 0.0, "cifar10", 1, 128, min_gpus=1, max_gpus=3, elastic=True), JobPhase.RUNNING,
                Allocation((("t0", 1),)), progress=0.0, total_work=1e6)
    b = JobView(JobSpec("B", 0.0, "cifar10", 1, 128, min_gpus=1, max_gpus=3, elastic=True), JobPhase.RUNNING,
                Allocation((("t0", 1),)), progress=0.0, total_work=1e6)
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    d = LyraPolicy(colocate=True).schedule(snap(ns, a, b), ctx)
    assert gpus(d, "A") == {"t0": 2} and gpus(d, "B") == {"t0": 2}
    d0 = LyraPolicy(colocate=False).schedule(snap(ns, a, b), ctx)
    assert gpus(d0, "A") == {"t0": 1} and gpus(d0, "B") == {"t0": 1}


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


def test_base_prefers_the_training_servers_type_over_a_larger_loaned_type() -> None:
    # V100 training server (4 GPUs) beside two loaned T4 servers (8 GPUs): the base goes to the V100 server
    # while it fits there, although T4 has more free GPUs; a base too big for it takes the T4 servers.
    ns = (NodeView("v0", "v100", 4, Pool.TRAIN, 0), NodeView("l0", "t4", 4, Pool.LOANABLE, 1),
          NodeView("l1", "t4", 4, Pool.LOANABLE, 2))
    d = LyraPolicy().schedule(snap(ns, view(spec("J", 2, 100.0))), CTX)
    assert gpus(d, "J") == {"v0": 2}
    d2 = LyraPolicy().schedule(snap(ns, view(spec("K", 8, 100.0))), CTX)
    assert gpus(d2, "K") == {"l0": 4, "l1": 4}


@pytest.mark.parametrize(("short_progress", "preempt", "runs"), [
    (0.9, 2.0, "short"),  # 10x shorter than the running job's remaining time: displaces it
    (0.4, 2.0, "long"),  # 1.67x shorter: below the factor 2, the running job keeps its GPUs
    (0.9, 0.0, "long"),  # preempt off: non-preemptive SJF, as before issue 13
])
def test_running_inelastic_job_is_displaced_only_by_a_much_shorter_one(models: object, short_progress: float,
                                                                       preempt: float, runs: str) -> None:
    s = snap(nodes(1, 0), view(spec("long", 4, 1000.0), (("t0", 4),)),
             view(spec("short", 4, 1000.0, t=5.0), progress=short_progress))
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    d = LyraPolicy(preempt=preempt).schedule(s, ctx)
    assert set(d.allocations) == {runs}
    other = "long" if runs == "short" else "short"
    assert d.reasons[other] == (PendingReason.PREEMPTED if other == "long" else PendingReason.RESOURCES)


def test_scale_all_reads_unmarked_jobs_as_elastic_from_one_gpu() -> None:
    # One 4-GPU server; two unmarked 4-GPU jobs (min = max = 4). Paper reading ("off"): the shorter one runs
    # on all 4, the other waits. "request": both start at base 1 and the knapsack hands out the 2 free GPUs,
    # never past a job's request (linear model: every extra pays).
    s = snap(nodes(1, 0), view(spec("A", 4, 100.0)), view(spec("B", 4, 1000.0)))
    d = LyraPolicy().schedule(s, CTX)
    assert gpus(d, "A") == {"t0": 4} and "B" not in d.allocations
    d2 = LyraPolicy(scale_all="request").schedule(s, CTX)
    a, b = sum(gpus(d2, "A").values()), sum(gpus(d2, "B").values())
    assert a >= 1 and b >= 1 and a + b == 4 and a <= 4 and b <= 4
    assert a == 3  # "rate" value: the shorter job's completion rate gains most from the extras
    with pytest.raises(ValueError, match="scale_all='all'"):
        LyraPolicy(scale_all="all")


def test_scale_all_cap_grows_past_the_request_and_worker_batch_scales(models: object) -> None:
    # An unmarked 1-GPU cifar10 job (batch 128) alone on a 4-GPU server. "request" keeps it at 1 GPU;
    # "cap" may grow it to the profile cap where the model says extras pay, and with batch="worker" its
    # global batch is 128 per GPU; with "fixed" the allocation keeps the job's own batch.
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    j = JobView(JobSpec("J", 0.0, "cifar10", 1, 128), JobPhase.PENDING, Allocation(), progress=0.0,
                total_work=1e6)
    s = snap(nodes(1, 0), j)
    assert gpus(LyraPolicy(scale_all="request", batch="worker").schedule(s, ctx), "J") == {"t0": 1}
    d = make_policy("lyra_scaled").schedule(s, ctx)
    n = sum(gpus(d, "J").values())
    assert n > 1
    assert d.allocations["J"].batch_size == 128 * n
    d2 = LyraPolicy(scale_all="cap", batch="fixed").schedule(s, ctx)
    assert d2.allocations["J"].batch_size is None
