"""The `ones` policy: elasticity limits (ones.md §2.7), δ throttle (§2.9), determinism and state round trip."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import peer_data
from elastisched.core.cluster import parse_cluster
from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, NodeView
from elastisched.engine.invariants import check
from elastisched.engine.placer import place
from elastisched.policies.base import PolicyContext
from elastisched.policies.ones.limits import big_jobs
from elastisched.policies.ones.ops import defer as _defer
from elastisched.policies.ones.policy import HISTORY_OPTION, OnesPolicy, job_batch
from elastisched.policies.ones.predict import remaining
from elastisched.policies.ones.progress_predictor import history_table

E = -1
HISTORY_PATH = peer_data.ONES_HISTORY
HISTORY = history_table(HISTORY_PATH) if HISTORY_PATH is not None else None  # loaded by the caller, as in use
needs_data = peer_data.needs("ones", "traces", "job_history.csv")


def _job(jid: str, req: int, gpus: int, epochs: float, run_time: float = 0.0, ran: bool | None = None,
         node: str = "n0") -> JobView:
    spec = JobSpec(jid, 0.0, "cifar10", req, 256 * req, attrs={"epoch_work": 10.0, "epoch_size": 1000,
                                                                 "local_batch": 256, "lr": 0.1, "max_lr": 1.6})
    alloc = Allocation(((node, gpus),)) if gpus else Allocation()
    return JobView(spec, JobPhase.RUNNING if gpus else JobPhase.PENDING, alloc, progress=epochs * 10.0,
                   total_work=1e9, run_time=run_time, start_time=0.0 if (gpus or ran) else None)


def _caps(pol: OnesPolicy, jobs: list[JobView], c: int, pool: list[float] | None = None) -> tuple[Any, Any]:
    sts = [pol._observe(j) for j in jobs]
    e = np.array([s.e for s in sts])
    running = np.array([j.gpus > 0 for j in jobs])
    new = ~running & ((e < 1) | np.array([not s.ran for s in sts]))
    executed = ~new & (e >= 1)
    return pol._caps(jobs, sts, executed, c, pool or [])


def test_scale_up_doubles_only_at_max_size_and_caps_at_4x_request() -> None:
    pol = OnesPolicy("faithful", bootstrap=False)
    jobs = [_job("a", 2, 1, 3.0), _job("b", 2, 1, 0.5)]  # a executed at max_size 1; b too young
    caps, _ = _caps(pol, jobs, 64)
    assert pol.js["a"].max_size == 2 and caps.tolist() == [2, 1]
    pol.js["a"].max_size = 16  # already doubled far past 4x request
    jobs = [_job("a", 2, 16, 3.0), _job("b", 2, 1, 0.5)]
    caps, maxs = _caps(pol, jobs, 64)
    assert pol.js["a"].max_size == 32 and caps[0] == 8 and maxs[0] == 32


def test_scale_up_gate_intended_vs_artifact() -> None:
    jobs = [_job("a", 4, 1, 2.5)]
    pol = OnesPolicy("faithful", bootstrap=False)
    pol._observe(jobs[0])
    pol.js["a"].last_change = 1.5  # resized one epoch ago: the intended gate (2 epochs) holds it
    caps, _ = _caps(pol, jobs, 64)
    assert caps[0] == 1 and pol.js["a"].max_size == 1
    art = OnesPolicy("faithful", bootstrap=False, artifact_scale_gate=True)
    art._observe(jobs[0])
    art.js["a"].last_change = 1.5
    caps, _ = _caps(art, jobs, 64)
    assert caps[0] == 2 and art.js["a"].max_size == 2


def test_scale_down_of_giant_long_running_job() -> None:
    pol = OnesPolicy("faithful", bootstrap=False)
    big = _job("big", 16, 40, 5.0, run_time=300.0)
    pol._observe(big)
    pol.js["big"].max_size = 64
    small = _job("s", 1, 1, 5.0, run_time=50.0, node="n1")
    # median run time 100: new = int(2·40 / (300/100 + 1)) = 20 (even)
    caps, maxs = _caps(pol, [big, small], 64, pool=[100.0, 100.0, 50.0, 300.0, 100.0])
    assert caps[0] == 20 and maxs[0] == 64
    # shorter than the median: no scale-down
    caps, _ = _caps(pol, [big, small], 64, pool=[400.0, 500.0, 50.0])
    assert caps[0] == 64
    # odd results round up to even: int(2·40/(1.5·... )) with med=120 → int(80/3.5)=22 → 22; med 110 → 21 → 22
    caps, _ = _caps(pol, [big, small], 64, pool=[110.0])
    assert caps[0] == 22


def test_scale_in_halves_preempted_jobs_passed_over() -> None:
    pol = OnesPolicy("faithful", bootstrap=False)
    nodes = (NodeView("n0", "t4", 4, index=0),)
    waiting = _job("w", 4, 0, 3.0, ran=True)
    newcomer = _job("x", 1, 0, 0.0)
    snap = ClusterSnapshot(10.0, nodes, {"w": waiting, "x": newcomer})
    pol._observe(waiting)
    pol.js["w"].resume, pol.js["w"].max_size, pol.js["w"].ran = 4, 4, True
    pol.capacity = 4
    pol._node_of = np.zeros(4, dtype=np.int64)
    pol._node_ids, pol._node_types = ["n0"], ["t4"]
    sts = [pol.js["w"], pol._observe(newcomer)]
    cur = np.full(4, E)
    best = np.array([1, E, E, E])  # the newcomer starts, w is passed over
    d = pol._deploy(snap, [waiting, newcomer], sts, cur, best, np.array([3.0, 0.0]), np.array([True, False]))
    assert list(d.allocations) == ["x"] and pol.js["w"].resume == 2 and pol.js["w"].max_size == 2


def test_delta_throttle_defers_young_changes_and_collisions() -> None:
    cur = np.array([0, 0, 1, 1, E, E, E, E])
    best = np.array([0, 0, 0, 0, 1, 1, 2, 2])  # 0 grows over 1's slots, 1 moves, 2 starts
    blocked = np.array([False, True, False])  # 1 changed less than δ ago
    out = _defer(cur, best, blocked)
    # 1 stays; 0 would take 1's slots so it is deferred too (stays); 2 starts on idle GPUs
    assert out.tolist() == [0, 0, 1, 1, E, E, 2, 2]


def test_global_throttle_only_starts_jobs_on_idle_gpus() -> None:
    pol = OnesPolicy("faithful", bootstrap=False, throttle="global")
    nodes = (NodeView("n0", "t4", 4), NodeView("n1", "t4", 4, index=1))
    a, b = _job("a", 2, 2, 3.0), _job("b", 2, 0, 0.0)
    snap = ClusterSnapshot(10.0, nodes, {"a": a, "b": b})
    pol.capacity = 8
    pol._node_of = np.repeat([0, 1], 4)
    pol._node_ids, pol._node_types = ["n0", "n1"], ["t4", "t4"]
    sts = [pol._observe(a), pol._observe(b)]
    sts[0].last_placed = 2.5  # half an epoch since its last change
    cur = np.array([0, 0, E, E, E, E, E, E])
    best = np.array([0, 0, 0, 0, 1, E, E, E])
    d = pol._deploy(snap, [a, b], sts, cur, best, np.array([3.0, 0.0]), np.array([True, False]))
    assert d.allocations["a"] == a.allocation and d.allocations["b"].placement == (("n1", 1),)


def test_batch_follows_gpu_count_with_lr_cap() -> None:
    spec = JobSpec("j", 0.0, "cifar10", 4, 1024, attrs={"local_batch": 256, "lr": 0.005, "max_lr": 0.08})
    assert [job_batch(spec, n) for n in (1, 4, 16)] == [256, 1024, 4096]
    assert job_batch(spec, 32) == 4096 and job_batch(spec, 24) == (4096 // 24) * 24


def _snap_conformance(seed: int) -> ClusterSnapshot:
    rng = np.random.default_rng(seed)
    nodes = tuple(NodeView(f"n{i}", t, int(g), index=i) for i, (t, g) in
                  enumerate(zip(["t4", "v100", "t4"], rng.choice([1, 2, 4, 8], 3), strict=True)))
    jobs: dict[str, JobView] = {}
    for k in range(int(rng.integers(1, 10))):
        g = int(rng.integers(1, 5))
        elastic = bool(rng.integers(2))
        spec = JobSpec(f"j{k}", float(k), "cifar10", g, 128 * g, min_gpus=1 if elastic else g,
                       max_gpus=2 * g if elastic else g, elastic=elastic, gpu_types=("t4",) if k % 3 == 0 else ())
        jobs[spec.job_id] = JobView(spec, JobPhase.PENDING, Allocation(), progress=float(rng.random() * 900),
                                    total_work=1000.0, updated_at=100.0)
    return ClusterSnapshot(200.0, nodes, jobs)


@pytest.mark.parametrize("seed", range(8))
def test_conformance_bounds_types_and_state_round_trip(seed: int, models: object) -> None:
    snap = _snap_conformance(seed)
    pol = OnesPolicy("faithful", history=HISTORY)
    state0 = copy.deepcopy(pol.state_dict())
    d1 = pol.schedule(snap, PolicyContext(perf=models, seed=0))  # type: ignore[arg-type]
    check(place(d1.allocations, snap), snap, pol.elastic)
    pol2 = OnesPolicy("faithful", history=HISTORY)
    pol2.load_state_dict(state0)
    assert dict(pol2.schedule(snap, PolicyContext(perf=models, seed=0)).allocations) == dict(d1.allocations)  # type: ignore[arg-type]


def _small_workload(models: Any) -> Any:
    from elastisched.workloads.ones import load_ones_csv

    assert HISTORY_PATH is not None
    return load_ones_csv(Path(HISTORY_PATH).parent / "trace_1.csv", HISTORY_PATH, models, num_jobs=8)


class _RoundTrip(OnesPolicy):
    """Rebuilds itself from a JSON copy of its state at round `at`, as a restarted service would."""

    at = 25

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Any:
        self.rounds = getattr(self, "rounds", 0) + 1
        if self.rounds == self.at:
            state = json.loads(json.dumps(self.state_dict()))
            OnesPolicy.__init__(self, history=HISTORY, refit=False)
            self._rng = None
            self.load_state_dict(state)
        return super().schedule(snap, ctx)


@needs_data
def test_simulation_determinism_and_mid_run_state_round_trip(models: Any) -> None:
    from elastisched.sim import SimConfig, simulate

    wl = _small_workload(models)
    nodes = parse_cluster("2x4:t4")
    runs = [simulate(wl, cls(history=HISTORY, refit=False), nodes, models, SimConfig(seed=3)).jobs
            for cls in (OnesPolicy, OnesPolicy, _RoundTrip)]
    assert len(runs[0]) == 8
    assert runs[0].equals(runs[1])
    assert runs[0][["job", "end", "restarts"]].equals(runs[2][["job", "end", "restarts"]])


def test_start_at_request_and_growth_to_cap() -> None:
    """Deviations D1/D2 (docs/ones.md): max_size starts at the request; growth jumps to the 4x cap."""
    pol = OnesPolicy("faithful", bootstrap=False, start="request", growth="cap")
    jobs = [_job("a", 2, 2, 3.0), _job("b", 4, 0, 0.0)]
    caps, _ = _caps(pol, jobs, 64)
    assert pol.js["b"].max_size == 4 and pol._start_size(jobs[1].spec) == 4
    assert pol.js["a"].max_size == 8 and caps[0] == 8  # at its start size 2 with the gate open: 4x2
    faithful = OnesPolicy("faithful", bootstrap=False)
    caps, _ = _caps(faithful, [_job("a", 2, 1, 3.0)], 64)
    assert faithful.js["a"].max_size == 2 and caps[0] == 2  # artifact: start at 1, double
    with pytest.raises(ValueError):
        OnesPolicy(start="big")


def test_remaining_uses_samples_done_when_asked() -> None:
    """D3: y_j = samples really processed (JobView.samples_done) instead of epochs x epoch size."""
    job = dataclasses.replace(_job("a", 2, 2, 3.0), samples_done=4500.0)
    rng = np.random.default_rng(0)
    for flag, y in ((False, 3000.0), (True, 4500.0)):
        pol = OnesPolicy("faithful", bootstrap=False, samples=flag)  # no predictor: rho = 0.5, remaining = y
        sts = [pol._observe(job)]
        rem = remaining(sts, np.array([True]), pol.preds, pol.opts.samples, pol.opts.sample_rho, rng)
        assert rem.tolist() == [pytest.approx(y)]
    # a job without an epoch size (the Pollux traces) is measured in samples either way
    bare = dataclasses.replace(job, spec=dataclasses.replace(job.spec, attrs={"epoch_work": 10.0}))
    pol = OnesPolicy("faithful", bootstrap=False)
    rem = remaining([pol._observe(bare)], np.array([True]), pol.preds, False, True, rng)
    assert rem.tolist() == [pytest.approx(4500.0)]


def test_start_within_one_node() -> None:
    """D1 "node": a new job starts at its request, but no larger than one node (known after a round)."""
    pol = OnesPolicy("faithful", bootstrap=False, start="node")
    big, small = _job("a", 16, 0, 0.0), _job("b", 2, 0, 0.0)
    assert pol._start_size(big.spec) == 16  # node size not known yet
    pol._node_gpus = 4
    assert pol._start_size(big.spec) == 4 and pol._start_size(small.spec) == 2
    assert OnesPolicy("faithful", bootstrap=False)._start_size(big.spec) == 1  # artifact


def test_big_start_takes_whole_nodes_when_idle() -> None:
    """D9: a job without a progress log requesting more than a node starts on whole nodes when that many GPUs
    are idle, else within one node; a job with a log (the ONES trace) is left as D1 has it."""
    pol = OnesPolicy("tuned", bootstrap=False, big_start=2)
    pol._node_gpus, pol._idle = 4, 64
    big, odd, small = _job("a", 16, 0, 0.0), _job("c", 10, 0, 0.0), _job("b", 2, 0, 0.0)
    assert [pol._start_size(j.spec) for j in (big, odd, small)] == [16, 8, 2]
    pol._idle = 12
    assert pol._start_size(big.spec) == 4 and pol._start_size(odd.spec) == 8
    logged = dataclasses.replace(big.spec, attrs={**big.spec.attrs, "acc_curve": [0.1, 0.2]})
    pol._idle = 64
    assert pol._start_size(logged) == 4
    off = OnesPolicy("tuned", bootstrap=False)
    off._node_gpus, off._idle = 4, 64
    assert off._start_size(big.spec) == 4  # without D9


def test_big_jobs_selects_requests_of_whole_nodes_without_a_log() -> None:
    """D10: only jobs without a progress log requesting ≥ `nodes` nodes' worth of GPUs are probed; 0 is off."""
    specs = [_job(j, r, 0, 0.0).spec for j, r in (("a", 16), ("b", 8), ("c", 4))]
    specs.append(dataclasses.replace(specs[0], job_id="d", attrs={**specs[0].attrs, "loss_curve": [1.0, 0.5]}))
    assert big_jobs(specs, 4, 2).tolist() == [True, True, False, False]
    assert big_jobs(specs, 4, 4).tolist() == [True, False, False, False]
    assert not big_jobs(specs, 4, 0).any() and not big_jobs(specs, 0, 2).any()


def test_no_soak_keeps_max_size_at_the_growth_cap() -> None:
    """D11 (`soak=False`): pad stage 3 may not grow a job past its cap (the request in "tuned") into idle GPUs;
    by default `max_size` doubles past it and stage 3 soaks idle GPUs up to it."""
    for soak, want in ((True, 8), (False, 4)):
        pol = OnesPolicy("tuned", bootstrap=False, soak=soak)
        jobs = [_job("a", 4, 4, 3.0)]
        pol._observe(jobs[0])
        pol.js["a"].max_size = 4
        caps, maxs = _caps(pol, jobs, 64)
        assert caps[0] == 4 and maxs[0] == want


@needs_data
def test_start_node_admits_new_jobs_at_one_node_in_a_round(models: Any) -> None:
    """End to end in one round: on an idle 2x4 cluster a 16-GPU request starts on 4 GPUs, a 2-GPU one on 2."""
    jobs = {j.job_id: j for j in (_job("a", 16, 0, 0.0), _job("b", 2, 0, 0.0))}
    nodes = (NodeView("n0", "t4", 4), NodeView("n1", "t4", 4, index=1))
    snap = ClusterSnapshot(0.0, nodes, jobs)
    ctx = PolicyContext(perf=models, rng=np.random.default_rng(0), seed=0)
    dec = OnesPolicy("faithful", history=HISTORY, start="node").schedule(snap, ctx)
    assert {k: a.gpus for k, a in dec.allocations.items()} == {"a": 4, "b": 2}
    dec1 = OnesPolicy("faithful", history=HISTORY).schedule(snap, ctx)
    assert {k: a.gpus for k, a in dec1.allocations.items()} == {"a": 1, "b": 1}


class _RoundTripTuned(OnesPolicy):
    """`_RoundTrip` with the deviations on (D1 "node", D3, D4): options are configuration, not state."""

    deviations: ClassVar[dict[str, Any]] = {"start": "node", "samples": True, "fitness": "time", "refit": False}

    def __init__(self, **kw: Any) -> None:
        super().__init__(**{**self.deviations, **kw})

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Any:
        self.rounds = getattr(self, "rounds", 0) + 1
        if self.rounds == 25:
            state = json.loads(json.dumps(self.state_dict()))
            OnesPolicy.__init__(self, history=HISTORY, **self.deviations)
            self._rng = None
            self.load_state_dict(state)
        return super().schedule(snap, ctx)


@needs_data
def test_deviations_are_deterministic_and_survive_a_state_round_trip(models: Any) -> None:
    from elastisched.sim import SimConfig, simulate

    wl = _small_workload(models)
    nodes = parse_cluster("2x4:t4")
    tuned = _RoundTripTuned.deviations
    runs = [simulate(wl, OnesPolicy(history=HISTORY, **tuned), nodes, models,
                     SimConfig(seed=3, resize_cost=8.0)).jobs
            for _ in range(2)]
    runs.append(simulate(wl, _RoundTripTuned(history=HISTORY), nodes, models,
                         SimConfig(seed=3, resize_cost=8.0)).jobs)
    assert len(runs[0]) == 8 and runs[0].equals(runs[1])
    assert runs[0][["job", "end", "restarts"]].equals(runs[2][["job", "end", "restarts"]])
    faithful = simulate(wl, OnesPolicy("faithful", history=HISTORY, refit=False), nodes, models,
                        SimConfig(seed=3, resize_cost=8.0)).jobs
    assert not faithful.equals(runs[0])  # the options do change the schedule


def test_history_is_data_not_a_path_and_can_be_required() -> None:
    """Policies do no I/O: a path is refused; a required but missing table is a ConfigError naming it."""
    from elastisched.core.errors import ConfigError

    with pytest.raises(ConfigError, match="history"):
        OnesPolicy("faithful", history="job_history.csv")  # type: ignore[arg-type]
    snap = ClusterSnapshot(0.0, (NodeView("n0", "t4", 4),), {"a": _job("a", 2, 0, 0.0)})
    with pytest.raises(ConfigError, match=HISTORY_OPTION):
        OnesPolicy("faithful", require_history=True).schedule(snap, PolicyContext(seed=0))


def test_history_arrives_through_the_context() -> None:
    """The caller may hand the bootstrap table over in `ctx.options`; it fits the predictor like `history=`."""
    rng = np.random.default_rng(0)
    x = np.column_stack([np.full(60, 7.0), np.full(60, 2.0), rng.integers(1, 20, 60), rng.random(60), rng.random(60)])
    table = (x, np.clip(x[:, 2] / 20.0, 0.05, 0.95))
    snap = ClusterSnapshot(0.0, (NodeView("n0", "t4", 4),), {"a": _job("a", 2, 0, 0.0)})
    via_ctx, via_arg, none = OnesPolicy("faithful"), OnesPolicy("faithful", history=table), OnesPolicy("faithful")
    via_ctx.schedule(snap, PolicyContext(seed=0, options={HISTORY_OPTION: table}))
    via_arg.schedule(snap, PolicyContext(seed=0))
    none.schedule(snap, PolicyContext(seed=0))
    assert via_ctx.pred.params and not none.pred.params
    assert json.dumps(via_ctx.pred.state_dict(), default=str) == json.dumps(via_arg.pred.state_dict(), default=str)


def test_pending_reasons_are_typed() -> None:
    """Jobs left out of the best schedule wait with `PendingReason.NOT_SELECTED` (one vocabulary)."""
    from elastisched.core.types import PendingReason

    jobs = {f"j{i}": _job(f"j{i}", 4, 0, 0.0) for i in range(3)}
    snap = ClusterSnapshot(0.0, (NodeView("n0", "t4", 4),), jobs)
    dec = OnesPolicy("faithful", bootstrap=False, start="request").schedule(snap, PolicyContext(seed=0))
    assert dec.reasons and all(r is PendingReason.NOT_SELECTED for r in dec.reasons.values())
