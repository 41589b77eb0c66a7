"""Measured profiles as the service's models, engine-owned progress, and the calibration benchmark's code path
(profile dir → models → simulated JCTs → errors) without the live run."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import ModuleType

import pytest

from elastisched.backends.base import BackendBase, JobHints, JobStarted
from elastisched.core.cluster import parse_cluster
from elastisched.policies.base import make_policy, registered
from elastisched.service.daemon import Service
from elastisched.service.profiles import OneNodeModel, app_names, load_models
from elastisched.service.store import Store
from elastisched.train.profiler import ProfilePoint, write_profile

ROOT = Path(__file__).resolve().parents[2]
STEP1, STEP2 = 0.030, 0.018  # seconds per step at 1 worker x the batch and 2 workers x half of it


def _calibration() -> ModuleType:
    spec = importlib.util.spec_from_file_location("calibration", ROOT / "benchmarks" / "calibration.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cal() -> ModuleType:
    return _calibration()


@pytest.fixture
def profiles(tmp_path: Path, cal: ModuleType) -> Path:
    """What `elastisched profile` writes on one machine, plus the benchmark's validation and meta files."""
    app = tmp_path / "profiles" / cal.APP
    b = cal.BATCH
    write_profile([ProfilePoint(1, 1, b // 2, STEP1 / 2, 0.0), ProfilePoint(1, 1, b, STEP1, 0.0),
                   ProfilePoint(1, 2, b // 2, STEP2, 0.004), ProfilePoint(1, 2, b, 2 * STEP2, 0.006)], app)
    cal.write_validation(app)
    cal.write_meta(app, 2.5)
    return app.parent


def test_one_node_profile_becomes_models_with_measured_restart_cost(profiles: Path, cal: ModuleType) -> None:
    assert cal.APP in app_names(profiles) and "cifar10" in app_names(profiles)
    app = load_models(profiles).app(cal.APP)
    assert app.restart_cost == 2.5 and app.gpu_types == ("cpu",)
    assert isinstance(app.model("cpu"), OneNodeModel)  # local nodes are slices of the profiled host
    assert app.iteration_time("cpu", (1,), app.batch_config(1, cal.BATCH)) == pytest.approx(STEP1)
    assert app.iteration_time("cpu", (2,), app.batch_config(2, cal.BATCH)) == pytest.approx(STEP2)
    assert app.total_work == cal.STEPS_PER_EPOCH
    step, _ = app.model("cpu").step_sync((2,), 0.75 * cal.BATCH)  # between measured local batches: interpolated
    assert STEP2 < step < 2 * STEP2


def test_simulated_side_and_errors(profiles: Path, cal: ModuleType) -> None:
    """A lone elastic job gets both slots (Lyra) and takes restart + epochs x steps x the 2-worker step."""
    live = [{"name": "a", "epochs": 3, "submit_time": 1000.0, "jct_s": 10.0}]
    sim = cal.simulate(profiles, live)
    expect = 2.5 + 3 * cal.STEPS_PER_EPOCH * STEP2
    assert sim["a"]["jct_s"] == pytest.approx(expect, rel=1e-6)
    assert sim["a"]["avg_gpus"] == pytest.approx(2.0)
    err = cal.errors(live, sim)
    assert err["per_job"]["a"] == pytest.approx((expect - 10.0) / 10.0)
    assert err["mean_abs"] == pytest.approx(abs(expect - 10.0) / 10.0)


def test_dead_times_from_step_logs(profiles: Path, cal: ModuleType) -> None:
    models = load_models(profiles)
    steps = [{"gen": 1, "world": 1, "t": 105.0}, {"gen": 1, "world": 1, "t": 105.03},
             {"gen": 2, "world": 2, "t": 109.0}, {"gen": 2, "world": 2, "t": 109.018}]
    d = cal.dead_times(steps, 100.0, models)
    assert [x["kind"] for x in d] == ["launch", "resize"]
    assert d[0]["dead_s"] == pytest.approx(5.0 - STEP1) and d[1]["dead_s"] == pytest.approx(3.97 - STEP2)


class _Quiet(BackendBase):
    """A backend that applies nothing (the test feeds events by hand)."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def apply(self, actions: object) -> None: ...
    def cancel(self, job_id: str) -> None: ...
    def recover(self, generations: object = ()) -> list[object]: return []
    def close(self) -> None: ...

    def poll(self) -> list[object]:
        out, self.events = self.events, []
        return out


def test_progress_is_integrated_from_models_and_reset_by_hints(profiles: Path, cal: ModuleType) -> None:
    store = Store("sqlite://")
    be = _Quiet()
    svc = Service(store, parse_cluster("1x2:cpu", default_gpu_type="cpu"), be, "lyra",  # type: ignore[arg-type]
                  profiles_dir=str(profiles))
    spec = {"num_gpus": 1, "min_gpus": 1, "max_gpus": 2, "elastic": True, "batch_size": cal.BATCH,
            "application": cal.APP, "work_scale": 100.0}
    jid = store.create_job(name=None, script="/x.py", args=[], spec=spec)["id"]
    store.update_job(jid, placement=[["cpu-0", 1]], state="RUNNING", generation=1)
    t_start = time.time() - 10.0  # generation started 10 s ago: 2.5 s restart, then 7.5 s at 1 worker
    be.events.append(JobStarted(t_start, jid, 1))
    svc.step()
    snap = svc.snapshot(svc.nodes())
    t_after = time.time()
    v = snap.jobs[jid]
    assert v.total_work == pytest.approx(100 * cal.STEPS_PER_EPOCH)
    assert 7.5 / STEP1 <= v.progress <= (t_after - t_start - 2.5) / STEP1  # 1 worker, after the restart cost
    be.events.append(JobHints(time.time(), jid, 1, step=40, epoch=1, global_batch=cal.BATCH, world_size=1))
    svc.step()
    v = svc.snapshot(svc.nodes()).jobs[jid]
    assert v.progress == pytest.approx(40, abs=2)  # the measured steps replace the estimate


def test_policies_that_need_models_say_so() -> None:
    need = {n for n, f in registered().items() if make_policy(n).needs_perf_models}
    assert {"srtf", "optimus", "jabas"} <= need
    assert not {"fifo", "lyra", "tiresias"} & need


def test_per_generation_cost_spreads_the_exit_over_generations(cal: ModuleType) -> None:
    dead = [{"dead_s": 4.0}, {"dead_s": 5.0}, {"dead_s": 3.0}]
    assert cal.per_generation_cost(dead, 3.0) == pytest.approx(5.0)


def test_step_times_per_world_size_skip_generation_changes(cal: ModuleType) -> None:
    steps = [{"gen": 1, "world": 1, "t": 0.0}, {"gen": 1, "world": 1, "t": 0.1}, {"gen": 1, "world": 1, "t": 0.3},
             {"gen": 2, "world": 2, "t": 5.0}, {"gen": 2, "world": 2, "t": 5.05}]
    assert cal.step_times(steps) == {"1": pytest.approx(0.15), "2": pytest.approx(0.05)}
