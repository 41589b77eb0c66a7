"""The `artifact` preset of `ones` follows the artifact's code (kurisusnowdeng/ones_sc21 @ 8535358, read not
copied): one deterministic scenario per rule, each checked against a hand computation, and each checked to
differ from the `faithful` preset, so the test fails if the rule is lost."""

from __future__ import annotations

import json

import numpy as np
import pytest

from elastisched.core.errors import ConfigError
from elastisched.core.types import Allocation, ClusterSnapshot, JobPhase, JobSpec, JobView, NodeView
from elastisched.policies.ones import deploy as dep
from elastisched.policies.ones.ops import trim_to_caps
from elastisched.policies.ones.policy import OnesPolicy
from elastisched.policies.ones.presets import PRESETS

E = -1


def _job(jid: str, req: int, gpus: int, epochs: float, ran: bool | None = None, node: str = "n0") -> JobView:
    spec = JobSpec(jid, 0.0, "cifar10", req, 256 * req, attrs={"epoch_work": 10.0, "epoch_size": 1000,
                                                                 "local_batch": 256, "lr": 0.1, "max_lr": 1.6})
    alloc = Allocation(((node, gpus),)) if gpus else Allocation()
    return JobView(spec, JobPhase.RUNNING if gpus else JobPhase.PENDING, alloc, progress=epochs * 10.0,
                   total_work=1e9, start_time=0.0 if (gpus or ran) else None)


def _caps(pol: OnesPolicy, jobs: list[JobView], c: int) -> np.ndarray:
    sts = [pol._observe(j) for j in jobs]
    executed = np.array([s.e >= 1 for s in sts])
    return pol._caps(jobs, sts, executed, c, [])[0]


def _wire(pol: OnesPolicy, nodes: int, per: int = 4) -> None:
    pol.capacity = nodes * per
    pol._node_of = np.repeat(np.arange(nodes), per)
    pol._node_ids, pol._node_types = [f"n{i}" for i in range(nodes)], ["t4"] * nodes


def test_artifact_preset_sets_every_rule() -> None:
    art = OnesPolicy("artifact", bootstrap=False)
    assert PRESETS["artifact"]["throughput_limit"] is False and not art.opts.throughput_limit  # A16 off
    assert art.opts.artifact_scale_gate and art.opts.double_once_per_epoch and art.opts.refresh_keep_first
    assert art.opts.scale_in == "every" and art.opts.delta_reset == "all" and not art.opts.restart_aware
    assert art.opts.delta_clock == "epochs" and OnesPolicy("faithful", bootstrap=False).opts.delta_clock == "progress"


def test_at_most_one_doubling_per_epoch() -> None:
    # job a: 1 GPU requested, running at its max_size 1, 1.2 epochs done (the artifact's gate: >= 1 epoch)
    art, faithful = OnesPolicy("artifact", bootstrap=False), OnesPolicy("faithful", bootstrap=False,
                                                                        artifact_scale_gate=True)
    for pol in (art, faithful):
        _caps(pol, [_job("a", 4, 1, 1.2)], 64)  # 1 -> 2
        assert pol.js["a"].max_size == 2
    # later in the same epoch (1.7) the job already runs at 2: by hand, the artifact may not double again
    # until epoch 2; the faithful preset's artifact gate alone would double to 4 now
    _caps(art, [_job("a", 4, 2, 1.7)], 64)
    _caps(faithful, [_job("a", 4, 2, 1.7)], 64)
    assert art.js["a"].max_size == 2 and faithful.js["a"].max_size == 4
    caps = _caps(art, [_job("a", 4, 2, 2.1)], 64)  # epoch 2 completed: one more doubling, 2 -> 4
    assert art.js["a"].max_size == 4 and caps[0] == 4


def test_no_throughput_limit() -> None:
    # observed: 4 GPUs 400 samples/s, 8 GPUs 300 samples/s (slower): A16 would hold the job at 4
    jobs = [_job("a", 4, 8, 5.0)]
    art, faithful = OnesPolicy("artifact", bootstrap=False), OnesPolicy("faithful", bootstrap=False)
    for pol in (art, faithful):
        pol.thr.observe("a", 4, 400.0)
        pol.thr.observe("a", 8, 300.0)
        pol._observe(jobs[0])
        pol.js["a"].max_size, pol.js["a"].last_change = 8, 0.0
    lim = art._caps(jobs, [art.js["a"]], np.array([True]), 64, [], None)  # the artifact passes no limit
    from elastisched.policies.ones.ops import scaling_limit
    pts = faithful.thr.tables(["a"])
    limited = faithful._caps(jobs, [faithful.js["a"]], np.array([True]), 64, [], scaling_limit(*pts))
    # by hand: 8 >= max_size 8 and the gate is open, so max_size doubles to 16 and the cap is min(16, 4*4) = 16;
    # with A16 the cap is the best observed count, 4
    assert lim[0][0] == 16 and art.js["a"].max_size == 16
    assert limited[0][0] == 4


def test_scale_in_halves_every_unthrottled_update() -> None:
    # w: preempted, executed, resume size 8. No other job starts this round (the cluster stays as it is).
    nodes = (NodeView("n0", "t4", 4, index=0), NodeView("n1", "t4", 4, index=1))
    run = _job("r", 4, 4, 3.0)
    w = _job("w", 8, 0, 3.0, ran=True)
    snap = ClusterSnapshot(10.0, nodes, {"r": run, "w": w})
    cur = np.array([0, 0, 0, 0, E, E, E, E])
    for preset, want in (("artifact", [4, 2, 1]), ("faithful", [8, 8, 8])):
        pol = OnesPolicy(preset, bootstrap=False)
        _wire(pol, 2)
        sts = [pol._observe(run), pol._observe(w)]
        sts[1].resume, sts[1].max_size, sts[1].ran = 8, 8, True
        got = []
        for _ in range(3):  # three iterations, nothing throttled (r was placed >= 1 epoch ago)
            pol._deploy(snap, [run, w], sts, cur, cur.copy(), np.array([3.0, 3.0]), np.array([True, True]))
            got.append(sts[1].resume)
        # by hand: the artifact halves 8 -> 4 -> 2 -> 1; our A15 reading halves only when another job starts
        assert got == want, preset
        assert sts[1].max_size == want[-1]


def test_delta_clock_reset_for_every_job_of_a_new_schedule() -> None:
    nodes = (NodeView("n0", "t4", 4, index=0), NodeView("n1", "t4", 4, index=1))
    a, b = _job("a", 2, 2, 3.0), _job("b", 2, 0, 0.0)
    snap = ClusterSnapshot(10.0, nodes, {"a": a, "b": b})
    cur = np.array([0, 0, E, E, E, E, E, E])
    best = np.array([0, 0, E, E, 1, 1, E, E])  # a unchanged, b starts on n1
    for preset, want in (("artifact", 3.0), ("faithful", 1.5)):
        pol = OnesPolicy(preset, bootstrap=False)
        _wire(pol, 2)
        sts = [pol._observe(a), pol._observe(b)]
        sts[0].last_placed = 1.5
        pol._deploy(snap, [a, b], sts, cur, best, np.array([3.0, 0.0]), np.array([True, False]))
        # by hand: a new schedule was deployed (b started), so the artifact stamps a's clock with its 3.0 epochs
        assert sts[0].last_placed == want, preset
        assert sts[1].last_placed == 0.0
        if preset == "artifact":  # the artifact's own clock: a's count (1 + 3 epochs) becomes its stamp
            assert (sts[0].ce, sts[0].stamp) == (4, 4)
    # and when nothing is deployed no clock moves
    pol = OnesPolicy("artifact", bootstrap=False)
    _wire(pol, 2)
    sts = [pol._observe(a)]
    sts[0].last_placed = 1.5
    pol._deploy(ClusterSnapshot(10.0, nodes, {"a": a}), [a], sts, cur, cur.copy(), np.array([3.0]),
                np.array([True]))
    assert sts[0].last_placed == 1.5


def test_refresh_keeps_the_first_gene_of_a_cap_0_job() -> None:
    pop = np.array([[0, 0, 1, 1, 1, 2, E, E]])
    caps = np.array([1, 0, 2])  # job 1 has cap 0 (not started / not waiting to resume)
    # by hand (artifact `_refresh`): job 0 keeps 1 of 2, job 1 keeps its first gene only, job 2 keeps its 1
    assert trim_to_caps(pop, caps, keep_first=True).tolist() == [[0, E, 1, E, E, 2, E, E]]
    assert trim_to_caps(pop, caps).tolist() == [[0, E, E, E, E, 2, E, E]]
    # crossover still trims a cap-0 job away entirely (the artifact checks the cap before the first gene there)
    from elastisched.policies.ones.ops import crossover
    c1, _ = crossover(pop, pop, caps, np.random.default_rng(0), 0.5)
    assert 1 not in c1


def test_artifact_preset_refresh_in_a_generation() -> None:
    """In a whole round, the artifact preset's parents keep a cap-0 job's first gene (faithful drops it)."""
    kept = {}
    for preset in ("artifact", "faithful"):
        pol = OnesPolicy(preset, bootstrap=False, population=2, theta=0.0)
        pol.pop = np.array([[1, 0, 0, E], [1, 0, 0, E]])
        parents = trim_to_caps(pol.pop, np.array([2, 0]), pol.opts.refresh_keep_first)
        kept[preset] = int((parents == 1).sum())
    assert kept == {"artifact": 2, "faithful": 0}


def test_hold_keeps_a_move_that_does_not_pay() -> None:
    """Tuned preset: a growth whose predicted gain is below the resize cost is held; a real gain is not."""
    cur = np.array([0, 0, 1, 1, E, E, E, E])
    best = np.array([0, 0, 0, 0, 1, 1, E, E])  # 0 grows 2 -> 4, 1 migrates
    running = np.array([True, True])
    pts_n = np.array([[2.0, np.inf], [2.0, np.inf]])
    pts_x = np.array([[100.0, 0.0], [100.0, 0.0]])
    # rem 1000 samples: 10 s on 2 GPUs, 5 s on 4 (+ 8 s resize) -> no gain, held; 1 migrates: always held
    held = dep.hold(cur, best, running, np.array([1000.0, 500.0]), pts_n, pts_x, 8.0)
    assert held.tolist() == [True, True]
    # rem 10,000 samples: 100 s vs 50 + 8 s -> moves
    held = dep.hold(cur, best, running, np.array([10000.0, 500.0]), pts_n, pts_x, 8.0)
    assert held.tolist() == [False, True]
    out, full = dep.plan(cur, best, running, np.array([5.0, 5.0]), 1.0, "global", held)
    assert out.tolist() == [0, 0, 1, 1, E, E, E, E]  # 0 would take 1's held slots: deferred with it
    assert full


def test_move_cost_charges_changes_to_running_jobs() -> None:
    counts = np.array([[2, 2, 0], [4, 0, 0], [2, 2, 4]])
    n_cur = np.array([2, 2, 0])
    running = np.array([True, True, False])
    # by hand: row 0 no change; row 1 resizes 0 to 4 GPUs (4·8) and stops 1 (2·30); row 2 starts a new job only
    assert dep.move_cost(counts, n_cur, running, 30.0, 8.0).tolist() == [0.0, 92.0, 0.0]
    assert dep.move_cost(counts, n_cur, running, 30.0, 8.0, "time").tolist() == [0.0, 38.0, 0.0]


def _view(jid: str, epochs: float, slots: list[int], per: int = 4) -> JobView:
    """A running (or, without slots, pending) view of `_job` on the nodes its slots fall in."""
    nodes: dict[str, int] = {}
    for s in slots:
        nodes[f"n{s // per}"] = nodes.get(f"n{s // per}", 0) + 1
    v = _job(jid, 2, 0, epochs)
    if not slots:
        return v
    return JobView(v.spec, JobPhase.RUNNING, Allocation(tuple(nodes.items())), progress=v.progress,
                   total_work=v.total_work, start_time=0.0)


def _round(pol: OnesPolicy, views: list[JobView], best: list[int]) -> dict[str, list[int]]:
    """One deployment of `best` (job indices per slot) from the views' current slots; returns the deployed slots."""
    ids = [v.job_id for v in views]
    cur = np.full(pol.capacity, E, dtype=np.int64)
    for i, jid in enumerate(ids):
        cur[pol.slots.get(jid, [])] = i
    nodes = tuple(NodeView(f"n{i}", "t4", 4, index=i) for i in range(pol.capacity // 4))
    snap = ClusterSnapshot(0.0, nodes, {v.job_id: v for v in views})
    sts = [pol._observe(v) for v in views]
    e = np.array([st.e for st in sts])
    pol._deploy(snap, views, sts, cur, np.array(best), e, e >= 1.0)
    return {k: list(v) for k, v in pol.slots.items()}


def test_restamped_job_waits_only_for_the_end_of_its_epoch() -> None:
    """Artifact δ clock: `completed_epochs` is an integer raised at each epoch's end, so a job restamped mid-epoch
    (another job's start deploys a new schedule) may move once that epoch ends, not one full epoch later."""
    got = {}
    for clock in ("epochs", "progress"):
        pol = OnesPolicy("artifact", bootstrap=False, delta_clock=clock)
        _wire(pol, 2)
        pol.slots = {"a": [0, 1]}
        # round 1: a (2 GPUs, 3.4 epochs: count 1 + 3 = 4) keeps its slots, b starts on n1: a is stamped 4
        _round(pol, [_view("a", 3.4, [0, 1]), _view("b", 0.0, [])], [0, 0, E, E, 1, 1, E, E])
        # round 2, a at 3.9 epochs: count still 4 = stamp, so its growth to 4 GPUs is deferred (by hand: 4 < 4 + 1)
        r2 = _round(pol, [_view("a", 3.9, [0, 1]), _view("b", 0.2, [4, 5])], [0, 0, 0, 0, 1, 1, E, E])
        # round 3, a at 4.05 epochs: epoch 4 ended, count 5 ≥ 4 + 1: the growth is deployed
        r3 = _round(pol, [_view("a", 4.05, [0, 1]), _view("b", 0.4, [4, 5])], [0, 0, 0, 0, 1, 1, E, E])
        got[clock] = (r2["a"], r3["a"])
    assert got["epochs"] == ([0, 1], [0, 1, 2, 3])
    # the progress clock (before the fix) asks for a full epoch after the stamp: 4.05 − 3.4 < 1, still deferred
    assert got["progress"] == ([0, 1], [0, 1])


def test_fresh_job_is_stamped_before_its_initial_evaluation() -> None:
    """`_wait_for_execution` stamps a fresh job at 0 before its initial evaluation raises the count to 1, so the
    artifact may move it before it trains a full epoch (by hand: 0 + 1 > 1 is false, the update goes ahead)."""
    got = {}
    for clock in ("epochs", "progress"):
        pol = OnesPolicy("artifact", bootstrap=False, delta_clock=clock)
        _wire(pol, 2)
        _round(pol, [_view("b", 0.0, [])], [E, E, E, E, 0, 0, E, E])  # b starts on n1
        assert pol.slots["b"] == [4, 5]
        got[clock] = _round(pol, [_view("b", 0.3, [4, 5])], [0, 0, E, E, E, E, E, E])["b"]  # best moves b to n0
        if clock == "epochs":
            assert (pol.js["b"].ce, pol.js["b"].stamp) == (1, 1)  # moved: restamped with its count
    assert got == {"epochs": [0, 1], "progress": [4, 5]}


def test_own_change_restarts_the_epoch() -> None:
    """A job whose own placement changes leaves its epoch early; the next epoch starts from its first sample, so
    the clock opens one full epoch after the change (3.3 → 4.3), not at the next whole epoch (4.0)."""
    pol = OnesPolicy("artifact", bootstrap=False)
    _wire(pol, 2)
    pol.slots = {"a": [0, 1]}
    r1 = _round(pol, [_view("a", 3.3, [0, 1])], [0, 0, 0, 0, E, E, E, E])  # a grows 2 -> 4 at 3.3 epochs
    assert r1["a"] == [0, 1, 2, 3]
    st = pol.js["a"]
    # by hand: count 1 + 3 = 4; the cut epoch ran 0.3 < half, so it does not count; the new epoch starts at 3.3
    assert (st.ce, st.origin, st.stamp) == (4, 3.3, 4)
    assert _round(pol, [_view("a", 4.1, [0, 1, 2, 3])], [0, 0, E, E, E, E, E, E])["a"] == [0, 1, 2, 3]
    assert _round(pol, [_view("a", 4.35, [0, 1, 2, 3])], [0, 0, E, E, E, E, E, E])["a"] == [0, 1]
    # that shrink cut the epoch begun at 4.3 after 0.05 (< half): no count; begun anew at 4.35, stamped 5
    assert (st.ce, st.stamp) == (5, 5)
    # a cut of at least half an epoch counts (the worker evaluates it: num_samples·size·2 ≥ epoch_size): at 5.95
    # the epoch begun at 4.35 has ended (count 6) and the one begun at 5.35 is 0.6 done: the growth makes it 7
    assert _round(pol, [_view("a", 5.95, [0, 1])], [0, 0, 0, 0, E, E, E, E])["a"] == [0, 1, 2, 3]
    assert (st.ce, st.origin, st.stamp) == (7, 5.95, 7)


def test_delta_clock_option_is_checked() -> None:
    with pytest.raises(ConfigError, match="delta_clock"):
        OnesPolicy("artifact", bootstrap=False, delta_clock="wall")


def test_options_are_validated_naming_the_field_and_value() -> None:
    from elastisched.policies.ones.options import OnesOptions

    with pytest.raises(ConfigError, match="fitness='speed'"):
        OnesPolicy("faithful", fitness="speed")
    with pytest.raises(ConfigError, match="ones option='popsize'"):
        OnesPolicy("faithful", popsize=4)
    with pytest.raises(ConfigError, match="preset='fast'"):
        OnesPolicy("fast")
    with pytest.raises(ConfigError, match="xi='half'"):
        OnesOptions(xi="half")  # type: ignore[arg-type]
    tuned = OnesPolicy("tuned").opts
    assert isinstance(tuned, OnesOptions) and tuned.cap_factor == 1 and isinstance(tuned.quiet_s, float)


def test_job_state_saves_as_the_same_plain_dict() -> None:
    """`state_dict()` keeps the dict shape of a job's state: optional rule fields only once a rule set them."""
    from elastisched.policies.ones.jobstate import OnesJobState

    st = OnesJobState(2, log=[([1.0, 2.0], 100.0)], epoch_size=1000)
    d = st.to_dict()
    assert "ce" not in d and "doubled_at" not in d and d["max_size"] == 2 and d["log"] == [([1.0, 2.0], 100.0)]
    st.ce, st.origin, st.stamp = 1, 0.0, 0
    back = OnesJobState.from_dict(json.loads(json.dumps(st.to_dict())))
    assert back == st and back.to_dict()["ce"] == 1
