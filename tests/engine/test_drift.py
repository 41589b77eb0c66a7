"""Sim and live cannot drift: one scripted event sequence through both bodies, compared round by round.

The script — arrivals, a job placed across two GPU types, a loan of two inference servers, an admin resize,
a reclaim the policy leaves to the engine's fallback, a failure, completions — runs through the simulator.
The same script is then replayed through the live service's engine loop (`Service.step`, SQLite store) with
an instant fake backend and a manual clock: each simulated round's events are injected at its time (a
completion is the backend reporting the job finished when the simulator finished it) and the service runs
its round. Every round's snapshot (each job's phase, placement, attained service, progress, restarts),
decision (placements, reasons, servers returned, actions) and the policy's saved state after it
(`state_dict`: what the stateful policies, Tiresias and ONES, learnt through their `on_submit` / `on_finish`
hooks, which the engine calls in both bodies) must be identical.

The two `*_is_caught` tests change one rule in the simulator only (the reclaim fallback, the progress rule
of a mixed-type placement) and check the comparison fails: the test can fail.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from elastisched.core.clock import SimClock
from elastisched.core.events import JobFailed, JobFinished
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, NodeView
from elastisched.engine import jobstate, loop
from elastisched.engine.loop import RoundResult
from elastisched.loaning import LoanPlan
from elastisched.models import PerfModels
from elastisched.policies.base import Policy, make_policy
from elastisched.policies.fifo import FifoPolicy
from elastisched.service.daemon import Service
from elastisched.service.store import Store
from elastisched.service.submission import job_spec
from elastisched.sim import SimConfig, Simulator
from elastisched.workloads.schema import Workload
from fake_backend import InstantBackend

SIA = Path(__file__).resolve().parents[2] / ".." / "shared" / "peer-data" / "sia" / "traces"

# fast type first: "the first node's type" and "the slowest type" differ for the 6-GPU job
NODES = (NodeView("fast-0", "a100", 4, index=0), NodeView("slow-0", "t4", 4, index=1))
SUBMIT = {"j0": 0.0, "j1": 10.0, "j2": 20.0, "j3": 30.0, "j4": 500.0, "j5": 510.0}
GPUS = {"j0": 6, "j1": 2, "j2": 2, "j3": 4, "j4": 2, "j5": 1}
LOAN_AT, LOANS, RECLAIM_AT = 100.0, 2, 300.0
RESIZE = (180.0, "j1", 1)  # admin: j1 from 2 GPUs to 1 (on the 60 s grid: it acts at once in both bodies)
FAIL = (400.0, "j2")
Summary = tuple[Any, ...]


class MixedFifo(FifoPolicy):
    """FIFO that, when no single GPU type fits a job, leaves the type open so that the engine's placer spreads
    it over several types (a mixed-type placement); reads progress every round. Not registered."""

    name = "fifo-mixed"
    needs_progress = True

    def schedule(self, snap: ClusterSnapshot, ctx: Any) -> Decision:
        d = super().schedule(snap, ctx)
        running = snap.running_jobs()
        head = next((j for jid, j in snap.jobs.items() if jid not in running and jid not in d.allocations), None)
        if head is None:
            return d
        free = sum(snap.free_by_type().values()) - sum(a.num_gpus for jid, a in d.allocations.items()
                                                       if jid not in running)
        if free < head.spec.num_gpus:
            return d
        allocs = {**d.allocations, head.job_id: Allocation(num_gpus=head.spec.num_gpus)}
        return Decision(allocs, {j: r for j, r in d.reasons.items() if j != head.job_id})


def _policy(name: str) -> Policy:
    return MixedFifo() if name == MixedFifo.name else make_policy(name)


def _spec_dict(jid: str) -> dict[str, Any]:
    return {"num_gpus": GPUS[jid], "min_gpus": GPUS[jid], "max_gpus": GPUS[jid], "batch_size": 128,
            "application": "cifar10", "work_scale": 0.15}


def _f(x: float) -> float:
    return round(x, 6)


def _canon(x: Any) -> Any:
    """A policy's `state_dict` as nested tuples (job ids stay strings, for `_rename`; floats rounded)."""
    if isinstance(x, dict):
        return ("dict", tuple((k, _canon(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_canon(v) for v in x)
    if isinstance(x, float):
        return _f(x)
    return x


def _summary(snap: ClusterSnapshot, res: RoundResult, policy: Policy) -> Summary:
    jobs = tuple((jid, str(v.phase), tuple(sorted(v.allocation.placement)), _f(v.attained(snap.now)),
                  _f(v.progress), v.num_restarts, v.spec.num_gpus, v.batch_size)
                 for jid, v in snap.jobs.items())
    placed = tuple(sorted((j, tuple(sorted(a.placement))) for j, a in res.allocations.items()))
    reasons = tuple(sorted((j, str(r)) for j, r in res.decision.reasons.items()))
    returned = res.reclaim.servers if res.reclaim is not None else ()
    actions = tuple((a.kind.value, a.job_id, tuple(sorted(a.allocation.placement))) for a in res.actions)
    state = _canon(policy.state_dict())
    return (snap.now, jobs, placed, reasons, returned, actions, state)  # the exact time: the replay runs at it


def run_sim(models: PerfModels, policy: str) -> tuple[list[Summary], dict[str, float]]:
    rounds: list[Summary] = []
    specs = tuple(job_spec(j, j, t, _spec_dict(j)) for j, t in SUBMIT.items())
    wl = Workload("drift", specs, "script", "0")
    cfg = SimConfig(loans=LoanPlan(((LOAN_AT, LOANS), (RECLAIM_AT, LOANS - 1)), "t4", 4),
                    failures=(FAIL,), admin_resizes=(RESIZE,),
                    on_round=lambda s, r: rounds.append(_summary(s, r, pol)))
    pol = _policy(policy)
    sim = Simulator(wl, pol, NODES, models, cfg)
    res = sim.run()
    ends = {str(r.job): float(r.end) for r in res.jobs.itertuples() if r.state == "SUCCEEDED"}
    assert res.summary["n_finished"] == len(SUBMIT)
    return rounds, ends


def run_live(models: PerfModels, policy: str, times: Sequence[float], ends: dict[str, float]) -> list[Summary]:
    store = Store("sqlite://")
    store.set_meta("epoch", 0.0)  # service time = store time: submission times compare exactly
    clock = SimClock()
    be = InstantBackend(clock.now)
    svc = Service(store, NODES, be, _policy(policy), tick_s=0.0, clock=clock, models=models)
    rounds: list[Summary] = []
    svc.on_round = lambda s, r: rounds.append(_summary(s, r, svc.policy))
    ids: dict[str, str] = {}
    script: list[tuple[float, int, Callable[[], None]]] = []
    for j, t in SUBMIT.items():
        script.append((t, 0, lambda j=j, t=t: ids.__setitem__(j, str(store.create_job(
            name=j, script="/x.py", args=[], spec=_spec_dict(j), now=t)["id"]))))
    for j, t in ends.items():
        script.append((t, 1, lambda j=j, t=t: be.events.append(JobFinished(t, ids[j]))))
    script.append((FAIL[0], 1, lambda: be.events.append(JobFailed(FAIL[0], ids[FAIL[1]], "worker died"))))
    script.append((RESIZE[0], 2, lambda: store.request_resize(ids[RESIZE[1]], RESIZE[2])))
    script.append((LOAN_AT, 3, lambda: store.add_loans([(f"loan-{i}", "t4", 4) for i in range(LOANS)])))
    script.append((RECLAIM_AT, 3, lambda: store.add_reclaim(1, RECLAIM_AT + 60)))
    script.sort(key=lambda e: (e[0], e[1]))
    k = 0
    for t in times:
        clock.advance_to(t)
        while k < len(script) and script[k][0] <= t + 1e-9:
            script[k][2]()
            k += 1
        svc.wake()
        svc.step()
    assert k == len(script)
    # the service names jobs by its own ids: map them back to the script's names
    back = {v: j for j, v in ids.items()}
    return [_rename(r, back) for r in rounds]


def _rename(x: Any, back: dict[str, str]) -> Any:
    if isinstance(x, str):
        if x in back:
            return back[x]
        for live_id, name in back.items():  # ids inside a text (ONES's quiet-round signature)
            x = x.replace(live_id, name)
        return x
    if isinstance(x, tuple):
        return tuple(_rename(y, back) for y in x)
    return x


def _live_ids_sorted(rounds: list[Summary]) -> list[Summary]:
    """Decision parts sorted by job id are sorted by the service's random ids: re-sort after renaming."""
    out = []
    for now, jobs, placed, reasons, returned, actions, state in rounds:
        out.append((now, jobs, tuple(sorted(placed)), tuple(sorted(reasons)), returned, actions, state))
    return out


def compare(models: PerfModels, policy: str) -> tuple[list[Summary], list[Summary]]:
    sim_rounds, ends = run_sim(models, policy)
    live = run_live(models, policy, [r[0] for r in sim_rounds], ends)
    return sim_rounds, _live_ids_sorted(live)


@pytest.fixture(scope="module")
def sia_models() -> PerfModels:
    if not SIA.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"peer data missing: {SIA}")
        pytest.skip("Sia traces (../shared/peer-data) not found")
    return PerfModels.load(SIA)


def _first_difference(a: list[Summary], b: list[Summary]) -> str | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"round {i} at t={x[0]}:\n sim  {x}\n live {y}"
    if len(a) != len(b):
        return f"{len(a)} simulated rounds, {len(b)} live rounds"
    return None


@pytest.mark.parametrize("policy", ["fifo-mixed", "fifo", "srtf", "tiresias", "ones"])
def test_sim_and_live_decide_identically_round_by_round(sia_models: PerfModels, policy: str) -> None:
    sim_rounds, live = compare(sia_models, policy)
    assert len(sim_rounds) >= 10
    assert {"launch", "suspend"} <= {a[0] for r in sim_rounds for a in r[5]}
    assert any(r[4] for r in sim_rounds)  # a server was returned
    resized = [j for r in sim_rounds if r[0] >= RESIZE[0] for j in r[1] if j[0] == RESIZE[1]]
    assert resized and resized[0][6] == RESIZE[2]  # the admin resize pinned the job
    if policy == MixedFifo.name:  # a job ran across two GPU types; the fallback returned the least-used server,
        assert any({n for n, _ in j[2]} == {"fast-0", "slow-0"} for r in sim_rounds for j in r[1])
        assert [r[4] for r in sim_rounds if r[4]] == [("loan-0",)]  # not the most recently loaned (loan-1)
    assert _first_difference(sim_rounds, live) is None, _first_difference(sim_rounds, live)


def test_a_changed_reclaim_fallback_is_caught(sia_models: PerfModels, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator alone returns the most recently loaned server (the old simulator rule)."""
    def most_recent(snap: ClusterSnapshot, chosen: Sequence[str]) -> tuple[str, ...]:
        loaned = [n.node_id for n in snap.nodes if n.pool.value == "loanable"]
        return tuple(reversed(loaned))[: snap.reclaim_demand]

    with monkeypatch.context() as m:
        m.setattr(loop, "choose_returned", most_recent)
        sim_rounds, ends = run_sim(sia_models, MixedFifo.name)
    live = _live_ids_sorted(run_live(sia_models, MixedFifo.name, [r[0] for r in sim_rounds], ends))
    assert _first_difference(sim_rounds, live) is not None


def test_a_changed_progress_rule_is_caught(sia_models: PerfModels, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator alone runs a mixed placement at its fastest type instead of its slowest."""
    def fastest(app: Any, types: Any) -> str:
        one = app.batch_config(1, app.init_batch_size)
        return max(sorted(types), key=lambda t: app.throughput(t, (1,), one))

    with monkeypatch.context() as m:
        m.setattr(jobstate, "running_type", fastest)
        sim_rounds, ends = run_sim(sia_models, MixedFifo.name)
    live = _live_ids_sorted(run_live(sia_models, MixedFifo.name, [r[0] for r in sim_rounds], ends))
    assert _first_difference(sim_rounds, live) is not None
