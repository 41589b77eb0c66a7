"""Pollux live, in process: a job's hints (gradient statistics) → `LiveJobs` → `JobView.grad_stats` → the
pollux policy's goodput-optimal batch → an in-place reconfigure handed to the backend (`set_batch`), with no
new generation. The end-to-end run with real workers is in test_e2e.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from elastisched.backends.base import BackendBase, JobHints, JobStarted
from elastisched.core.cluster import parse_cluster
from elastisched.policies.pollux.goodput import GoodputFunction
from elastisched.policies.pollux.policy import PolluxPolicy
from elastisched.service.daemon import Service
from elastisched.service.store import Store

PROFILES = Path(__file__).with_name("data") / "profiles"


class _Backend(BackendBase):
    """Records what the daemon asks; reports the events a test queues."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.batches: list[tuple[str, int]] = []
        self.applied: list[Any] = []

    def recover(self, records: Any) -> list[Any]:
        return []

    def apply(self, actions: Any) -> None:
        self.applied += list(actions)

    def cancel(self, job_id: str) -> None: ...

    def close(self) -> None: ...

    def set_batch(self, job_id: str, batch_size: int) -> None:
        self.batches.append((job_id, batch_size))

    def poll(self) -> list[Any]:
        out, self.events = self.events, []
        return out


def _service() -> tuple[Service, _Backend, str]:
    store = Store("sqlite://")
    be = _Backend()
    svc = Service(store, parse_cluster("1x1:cpu", default_gpu_type="cpu"), be, "pollux",  # type: ignore[arg-type]
                  profiles_dir=str(PROFILES), policy_interval=0.01)
    spec = {"num_gpus": 1, "min_gpus": 1, "max_gpus": 1, "batch_size": 64, "application": "linreg"}
    jid = store.create_job(name="p", script="/x.py", args=[], spec=spec)["id"]
    store.update_job(jid, placement=[["cpu-0", 1]], state="RUNNING", generation=1, batch_size=64)
    be.events.append(JobStarted(time.time() - 20.0, jid, 1))  # running for 20 s: past the restart cost
    return svc, be, jid


def _rounds(svc: Service, n: int = 2) -> None:
    for _ in range(n):
        time.sleep(0.02)  # the policy interval (0.01 s) has passed: a round is due
        svc.step()


def test_hinted_gradient_statistics_reach_the_view_and_change_pollux_batch_in_place() -> None:
    svc, be, jid = _service()
    _rounds(svc)
    view = svc.snapshot(svc.nodes()).jobs[jid]
    assert view.grad_stats is None and view.batch_size == 64
    assert be.batches == [] and svc.store.get_job(jid)["batch_size"] == 64  # the profile alone: no noise, stays 64

    sqr, trace = 0.02, 40.0  # |E g|² and tr(Σ) per sample: noise scale 2,000 samples
    be.events.append(JobHints(time.time(), jid, 1, step=40, epoch=1, global_batch=64, world_size=1,
                              throughput=5000.0, grad_sqr=sqr, grad_var=trace))
    _rounds(svc)
    view = svc.snapshot(svc.nodes()).jobs[jid]
    assert view.grad_stats == (sqr, trace)
    pol = svc.policy
    assert isinstance(pol, PolluxPolicy)
    app = view.model
    fn = pol.goodput_fn(view, app)
    assert fn is not None and (fn.grad_sqr, fn.grad_var) == (sqr, pytest.approx(trace / app.init_batch_size))
    want = PolluxPolicy.batch_size(app, GoodputFunction(fn.perf, sqr, trace / app.init_batch_size,
                                                        app.init_batch_size), 1, 1)
    assert want is not None and want > 64  # a noisy gradient: a larger batch is worth its samples
    assert be.batches[-1] == (jid, want) and svc.store.get_job(jid)["batch_size"] == want
    assert be.applied == [] and svc.store.get_job(jid)["generation"] == 1  # in place: nothing relaunched
    ev = [e for e in svc.store.events(jid) if e["kind"] == "reconfigure"]
    assert ev and ev[-1]["data"]["source"] == "hints" and ev[-1]["data"]["grad_stats"] == [sqr, trace]
    assert ev[-1]["data"]["batch_size"] == want and ev[0]["data"]["previous"] == 64


def test_pollux_reads_measured_statistics_over_the_model() -> None:
    from elastisched.service.profiles import load_models

    app = load_models(PROFILES).app("linreg")
    svc, _, jid = _service()
    svc.step()
    view = svc.snapshot(svc.nodes()).jobs[jid]
    assert PolluxPolicy.grad_stats(view, app) == app.efficiency.grad_stats(64, view.epoch)
    from dataclasses import replace

    assert PolluxPolicy.grad_stats(replace(view, grad_stats=(0.5, 640.0)), app) == (0.5, 640.0 / 64)


def test_hints_parser_keeps_the_newest_statistics() -> None:
    """The newest line gives step and batch; gradient statistics come from the newest line that has them (a
    scheduler-batch line written after a statistics line must not hide them), converted to tr(Σ) per sample."""
    import json

    from elastisched.backends.hints import parse_hints

    lines = [{"time": 1.0, "step": 4, "globalBatchSize": 64, "initBatchSize": 64, "grad_sqr": 0.5, "grad_var": 0.25},
             {"time": 2.0, "step": 8, "globalBatchSize": 64, "initBatchSize": 64, "grad_sqr": 0.1, "grad_var": 0.5},
             {"time": 3.0, "step": 9, "globalBatchSize": 550, "initBatchSize": 64, "source": "scheduler"}]
    chunk = b"\n".join(json.dumps(x).encode() for x in lines) + b"\nnot json\n"
    h = parse_hints(chunk, "j")
    assert h is not None and (h.step, h.global_batch) == (9, 550) and (h.grad_sqr, h.grad_var) == (0.1, 32.0)
    h = parse_hints(json.dumps(lines[2]).encode(), "j")
    assert h is not None and h.grad_sqr is None and h.grad_var is None
    assert parse_hints(b"[1, 2]\n{\"time\": 1}\n", "j") is None
