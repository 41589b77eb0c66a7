"""The Ray backend (issue 12) on a real multi-node Ray cluster started here (one per module).

Inventory from Ray node resources and labels; a node removed mid-run (its raylet and workers killed) → the
job resumes from its last checkpoint on another node, losing at most one checkpoint interval of steps; the
service killed with SIGKILL while jobs train → the restart adopts the placement groups and actors by their
launch token: no job lost, no generation launched twice, every job ends with exactly its number of steps.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from _ray_cluster import clean, start_cluster
from _svc_helpers import EXAMPLE, ServiceProc, wait_for

from elastisched.backends._ray_nodes import parse_nodes, train_views
from elastisched.core.types import Pool

N, BATCH, CKPT = 2048, 64, 8  # 32 steps an epoch; a checkpoint every 8 steps


def _node(nid: str, res: dict[str, float], labels: dict[str, str] | None = None, alive: bool = True) -> dict[str, Any]:
    return {"NodeID": nid, "Alive": alive, "Resources": res, "Labels": labels or {}, "NodeManagerAddress": "10.0.0.1"}


def test_inventory_from_resources_and_labels() -> None:
    raw = [_node("aa" * 28, {"CPU": 4}),  # a head without GPUs: not schedulable
           _node("bb" * 28, {"gpu_t4": 4, "CPU": 8}, {"pool": "train"}),
           _node("cc" * 28, {"gpu_A100": 8, "GPU": 8}, {"pool": "loanable"}),
           _node("dd" * 28, {"gpu_v100": 2, "pool_loanable": 1}),  # no label: the resource fallback
           _node("ee" * 28, {"gpu_k80": 2}, {"name": "rack1-k80"}),
           _node("ff" * 28, {"gpu_t4": 4}, {"pool": "train"}, alive=False)]
    nodes = parse_nodes(raw)
    assert [(n.name, n.gpu_type, n.num_gpus, n.pool, n.has_cuda) for n in nodes] == [
        ("rack1-k80", "k80", 2, Pool.TRAIN, False), ("t4-bbbbbb", "t4", 4, Pool.TRAIN, False),
        ("loan-a100-cccccc", "a100", 8, Pool.LOANABLE, True), ("loan-v100-dddddd", "v100", 2, Pool.LOANABLE, False)]
    assert [(v.node_id, v.index) for v in train_views(nodes)] == [("rack1-k80", 0), ("t4-bbbbbb", 1)]


class _Ref:
    def __init__(self, fn: Any, *a: Any) -> None:
        self.value, self.exc = None, None
        try:
            self.value = fn(*a)
        except Exception as e:
            self.exc = e


class _Actor:
    """A rank actor as the backend sees it: `status` answers until the actor dies, then raises."""

    def __init__(self) -> None:
        self.alive = True
        self.status = type("M", (), {"remote": lambda _s: _Ref(self._status)})()
        self.signal = type("M", (), {"remote": lambda _s, sig: _Ref(lambda: None)})()

    def _status(self) -> tuple[int | None, bool, int]:
        if not self.alive:
            raise RuntimeError("ActorDiedError: the actor died unexpectedly")
        return None, False, 123


class _FakeRay:
    """The few Ray calls `RayBackend.poll` makes, answered from a node table the test edits."""

    exceptions = type("E", (), {"RayError": RuntimeError})

    def __init__(self, raw: list[dict[str, Any]]) -> None:
        self.raw = raw

    def nodes(self) -> list[dict[str, Any]]:
        return self.raw

    def wait(self, refs: list[_Ref], num_returns: int = 1, timeout: float = 0) -> tuple[list[_Ref], list[_Ref]]:
        return list(refs), []

    def get(self, ref: _Ref, timeout: float = 0) -> Any:
        if ref.exc is not None:
            raise ref.exc
        return ref.value

    def kill(self, actor: _Actor, no_restart: bool = True) -> None:
        actor.alive = False


def _dying_node_backend(tmp_path: Path, wait_s: float) -> tuple[Any, _FakeRay, list[_Actor]]:
    """A 2-rank generation on node t4-aaaaaa whose raylet was just killed: rank 1's actor is gone, rank 0's
    child saw its collective reset and wrote exit code 1 — while Ray still calls the node alive."""
    from elastisched.backends.local import LocalBackend
    from elastisched.backends.ray import RayBackend, _Group, _Rank
    from elastisched.core.types import Allocation

    fake = _FakeRay([_node("aa" * 28, {"gpu_t4": 2}), _node("bb" * 28, {"gpu_t4": 2})])
    b = RayBackend.__new__(RayBackend)
    b.ray, b.workdir, b.grace_s, b.node_loss_wait_s, b.alive_every_s = fake, tmp_path, 0.1, wait_s, 2.0
    b.nodes_every_s = 0.0
    b.groups, b._pending, b._hints, b._nodes, b._nodes_at = {}, [], LocalBackend(tmp_path), parse_nodes(fake.raw), 0.0
    actors = [_Actor(), _Actor()]
    b.groups["j"] = _Group("j", 1, Allocation(placement=(("t4-aaaaaa", 2),)), "tok",
                           [_Rank(a, "t4-aaaaaa") for a in actors], None)
    b.groups["j"].asked = time.monotonic()  # it asked whether the actors live a moment ago (every 2 s)
    (tmp_path / "jobs" / "j" / "run").mkdir(parents=True)
    (tmp_path / "jobs" / "j" / "run" / "g1-r0.exit").write_text("1")
    actors[0].alive = actors[1].alive = False
    return b, fake, actors


def test_peer_error_on_a_dying_node_waits_for_rays_verdict(tmp_path: Path) -> None:
    b, fake, _ = _dying_node_backend(tmp_path, wait_s=30.0)
    assert [type(e).__name__ for e in b.poll()] == []  # not "failed" (that retried it on the dying node)
    fake.raw[0]["Alive"] = False  # Ray declares the node dead
    events = b.poll()
    assert [(type(e).__name__, getattr(e, "lost", None)) for e in events] == [("NodesChanged", ("t4-aaaaaa",))]


def test_dead_actor_on_a_live_node_fails_its_generation_after_the_wait(tmp_path: Path) -> None:
    b, _, _ = _dying_node_backend(tmp_path, wait_s=0.3)
    assert b.poll() == []
    time.sleep(0.4)
    (end,) = b.poll()
    assert (type(end).__name__, end.outcome, end.exit_codes) == ("GenerationEnded", "failed", (1, -9))
    assert b.groups == {}


def test_launch_on_a_node_that_left_requeues_instead_of_failing_the_job(tmp_path: Path) -> None:
    from elastisched.core.events import Action, ActionKind, LaunchSpec
    from elastisched.core.types import Allocation

    b, fake, _ = _dying_node_backend(tmp_path, wait_s=30.0)
    b.groups.clear()
    fake.raw[0]["Alive"] = False  # t4-aaaaaa died after the engine placed a generation on it
    spec = LaunchSpec(script="x.py", args=(), generation=2, cause="retry", token="tok2")
    b.apply([Action(ActionKind.LAUNCH, "j", Allocation(placement=(("t4-aaaaaa", 1),)), Allocation(), spec)])
    changed, end = b.poll()
    assert (type(changed).__name__, changed.lost) == ("NodesChanged", ("t4-aaaaaa",))  # first: the job requeues
    assert (type(end).__name__, end.outcome, end.generation) == ("GenerationEnded", "lost", 2)  # not launch_failed


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    # two t4 nodes, so a 2-worker t4 job has somewhere to go when one is lost; a v100; a loanable t4
    c = start_cluster(train=[{"gpu_t4": 2}, {"gpu_t4": 2}, {"gpu_v100": 1}])
    yield c
    c.shutdown()


@pytest.fixture
def ray_service(cluster: Any, tmp_path: Path) -> Iterator[ServiceProc]:
    svc = ServiceProc(tmp_path, policy="fifo", extra=("--backend", "ray", "--ray-address", cluster.address))
    yield svc
    svc.stop()
    clean(cluster.address)


def _steps(log: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()] if log.exists() else []


def _submit(svc: ServiceProc, name: str, gpus: int, epochs: int, log: Path, **kw: Any) -> str:
    r = svc.api("POST", "/v1/jobs", json={
        "script": EXAMPLE, "name": name, "gpus": gpus, "batch_size": BATCH, **kw,
        "args": ["--epochs", str(epochs), "--n", str(N), "--batch-size", str(BATCH), "--log", str(log),
                 "--checkpoint-interval", str(CKPT)]})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _final_steps(svc: ServiceProc, jid: str) -> list[int]:
    text = svc.api("GET", f"/v1/jobs/{jid}/logs").text
    return [json.loads(ln)["steps"] for ln in text.splitlines() if ln.startswith('{"final')]


def _all_end(svc: ServiceProc, timeout: float) -> list[dict[str, Any]]:
    return wait_for(lambda: (js := svc.api("GET", "/v1/jobs").json()) and all(
        j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for j in js) and js, timeout, "all jobs to end")


def test_service_kill9_restart_adopts_ray_generations(ray_service: ServiceProc, tmp_path: Path) -> None:
    svc = ray_service.start()
    nodes = {n["node"]: n for n in svc.api("GET", "/v1/nodes").json()}
    assert sorted((n["gpu_type"], n["gpus"], n["pool"]) for n in nodes.values()) == [
        ("t4", 2, "train"), ("t4", 2, "train"), ("v100", 1, "train")]
    # x, the one that must be adopted, is submitted once y and z train, and the crash comes as soon as x trains: it
    # then need only outlast the down time (a run here: restart 2.8 s, x at ~94 steps/s, 187 steps). 5,120 steps:
    # ~1,300 of them go in that time at 5x those steps/s, ~1,700 at the ~600/s two workers make alone here.
    # Submitted together (x at 40 epochs, 1,280 steps), x could train first, wait out the others' start-up too and
    # finish while the service was down on a faster machine: the test then passed without adopting anything.
    plan = {"x": (2, 160), "y": (1, 30), "z": (2, 6)}
    ids: dict[str, str] = {}
    for group in (("y", "z"), ("x",)):
        for n in group:
            g, ep = plan[n]
            ids[n] = _submit(svc, n, g, ep, tmp_path / f"{n}.jsonl", gpu_type="t4" if g == 2 else "v100")
        for name in group:
            wait_for(lambda n=name: _steps(tmp_path / f"{n}.jsonl"), 120, f"{name} training")
    before = {n: svc.job(j) for n, j in ids.items()}

    svc.kill9()  # the detached placement groups and actors keep training without their driver
    t_kill = time.monotonic()
    svc.start()  # same database, new process
    x_total, x_done = plan["x"][1] * N // BATCH, len(_steps(tmp_path / "x.jsonl"))
    print(f"restart took {time.monotonic() - t_kill:.1f} s; x: {x_done} of {x_total} steps logged just after it")
    for name in ("x", "y"):
        d = svc.job(ids[name])
        if name == "x" or d["state"] not in ("SUCCEEDED",):  # still running at the restart: adopted, same generation
            assert d["generation"] == before[name]["generation"], (name, d["generation"])
            assert any(e["kind"] == "adopted" for e in d["events"]), (
                f"{name} not adopted ({len(_steps(tmp_path / f'{name}.jsonl'))} steps logged; if all, it finished "
                f"while the service was down): state {d['state']}, events {d['events']}")

    done = _all_end(svc, 360)
    assert {j["name"]: j["state"] for j in done} == dict.fromkeys(ids, "SUCCEEDED")
    for name, jid in ids.items():
        gens = svc.job(jid)["generations"]
        assert [g["generation"] for g in gens] == [1], (name, gens)  # adopted, never launched twice
        assert _final_steps(svc, jid) == [plan[name][1] * N // BATCH], name  # 0 lost, 0 duplicated
        steps = [s["step"] for s in _steps(tmp_path / f"{name}.jsonl")]
        assert steps == list(range(1, plan[name][1] * N // BATCH + 1)), name  # every step once, in order


# The node's raylet is killed: its actors die at once, but Ray declares the node dead only after missed health
# checks. In between, the surviving rank's collective fails (gloo: connection reset) and writes exit code 1;
# the backend must read that as the node loss (wait for Ray's verdict), not as the job failing — which used
# to retry it on the dying node, wait 60 s for a placement group that could never be placed, and fail the job.
@pytest.mark.node_loss
def test_node_failure_resumes_from_checkpoint_on_other_nodes(ray_service: ServiceProc, cluster: Any,
                                                             tmp_path: Path) -> None:
    svc = ray_service.start()
    log = tmp_path / "w.jsonl"
    epochs = 30  # 960 steps: in a run here the node was gone 12 steps after step 24 (0.13 s at ~92 steps/s)
    jid = _submit(svc, "w", 2, epochs, log, gpu_type="t4")
    wait_for(lambda: len(_steps(log)) > 3 * CKPT, 120, "w past a few checkpoints")
    first = svc.job(jid)
    (node, _k), = first["placement"]
    victim = next(w for w in cluster.workers if node.endswith(w.node_id[:6]))
    cluster.remove_node(victim, allow_graceful=False)  # its raylet and every worker on it are killed
    cluster.workers.remove(victim)
    try:
        _resumes_elsewhere(svc, jid, first, node, log, epochs)
    finally:  # a new t4 node in its place: the module's cluster keeps its shape for whatever runs after this test
        cluster.workers.append(cluster.add_node(object_store_memory=80 * 2**20, num_cpus=1,
                                                resources={"gpu_t4": 2}, labels={"pool": "train"}))


def _resumes_elsewhere(svc: ServiceProc, jid: str, first: dict[str, Any], node: str, log: Path, epochs: int) -> None:
    try:  # Ray declares the node dead after 3 missed 1 s health checks
        d = wait_for(lambda: (j := svc.job(jid))["generation"] > first["generation"] and j["state"] == "RUNNING"
                     and j, 120, "w relaunched")
    except AssertionError as e:  # say whether w had finished before its node was lost (the test's premise)
        j = svc.job(jid)
        raise AssertionError(f"{e}; w logged {len(_steps(log))} of {epochs * N // BATCH} steps; state {j['state']}, "
                             f"generations {j['generations']}") from None
    assert d["placement"] != first["placement"] and all(n != node for n, _ in d["placement"])
    kinds = [e["kind"] for e in d["events"]]
    assert "node_lost" in kinds and "retried" not in kinds, kinds  # requeued by the loss, not failed and retried
    assert node not in {n["node"] for n in svc.api("GET", "/v1/nodes").json()}
    done = _all_end(svc, 240)
    assert done[0]["state"] == "SUCCEEDED", done
    assert _final_steps(svc, jid) == [epochs * N // BATCH]
    steps = _steps(log)
    old = [s["step"] for s in steps if s["gen"] == first["generation"]]
    new = [s["step"] for s in steps if s["gen"] == d["generation"]]
    lost = max(old) - (new[0] - 1)  # steps done before the failure and done again after it
    print(f"node failure: last step before {max(old)}, resumed at {new[0]}, lost work {lost} steps "
          f"(checkpoint interval {CKPT})")
    assert 0 <= lost <= CKPT
    assert svc.job(jid)["restarts"] >= 1
