"""Issue 13 item 1: the JCT decomposition (sim.metrics) adds up, prices what it claims, and is written out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from elastisched.core.cluster import parse_cluster
from elastisched.core.types import JobSpec
from elastisched.models import PerfModels
from elastisched.models.application import packed_shape
from elastisched.policies.base import make_policy
from elastisched.report.compare import compare_report, write_run
from elastisched.sim import SimConfig, simulate
from elastisched.sim.decompose import DECOMPOSITION, best_batch_rates, best_rates
from elastisched.workloads.schema import Workload


def _wl(*jobs: JobSpec) -> Workload:
    return Workload("hand", tuple(jobs), "test", "0")


def test_alone_at_best_config_loses_nothing(models: PerfModels) -> None:
    """One 1-GPU job alone at its own batch: no queue, one restart window, running = best + batch loss, and
    the batch loss is exactly running minus the work priced at the best batch on one GPU (hand computation)."""
    spec = JobSpec("a", 0.0, "cifar10", 1, 128, work_scale=0.02)
    r = simulate(_wl(spec), make_policy("fifo"), parse_cluster("1x4:t4"), models, SimConfig())
    row = r.jobs.iloc[0]
    app = models.app("cifar10")
    assert row.queued == 0.0 and abs(row.restarting - app.restart_cost) < 1e-6
    assert abs(row.queued + row.restarting + row.running - row.jct) < 1e-6
    assert abs(row.best + row.loss_gpus + row.loss_batch - row.running) < 1e-6
    rb = best_batch_rates(app, "t4", (1,), 128)
    work = np.diff(np.asarray(app.epoch_end) * 0.02)
    at_best = float(np.sum(work / rb[: len(work)]))
    assert abs(row.loss_batch - (row.running - at_best)) < 1e-6 * row.running
    assert row.loss_batch >= -1e-9 and abs(row.loss_gpus) < 1e-6  # cap 1: its one GPU is the best count


def test_queue_and_gpu_loss_are_seen(models: PerfModels) -> None:
    """Two 4-GPU jobs on one 4-GPU server under FIFO: the second queues for the first's whole run; both cap
    at 8 GPUs, so running on 4 shows as GPU-count loss (best > its 4-GPU time when scaling helps)."""
    jobs = [JobSpec(j, 0.0, "cifar10", 4, 512, max_gpus=8, work_scale=0.05) for j in ("a", "b")]
    r = simulate(_wl(*jobs), make_policy("fifo"), parse_cluster("1x4:t4"), models, SimConfig())
    a, b = r.jobs.iloc[0], r.jobs.iloc[1]
    assert abs(b.queued - a.jct) < 1e-6
    app = models.app("cifar10")
    four = best_batch_rates(app, "t4", packed_shape(4, 4), 512)
    best = best_rates(app, "t4", 8, 512, 4, 1)
    assert np.all(best >= four - 1e-12)
    assert a.loss_gpus >= -1e-6
    s = r.summary
    assert set(DECOMPOSITION) <= set(s["decomposition"])
    gh = s["gpu_hours"]
    assert abs(gh["running"] + gh["restarting"] + gh["idle"] - gh["available"]) < 1e-6
    assert gh["restarting"] > 0


def test_written_to_jobs_csv_summary_and_report(models: PerfModels, tmp_path: Path) -> None:
    spec = JobSpec("a", 0.0, "cifar10", 2, 256, work_scale=0.02)
    res = {p: simulate(_wl(spec), make_policy(p), parse_cluster("1x4:t4"), models, SimConfig())
           for p in ("fifo", "tiresias")}
    write_run(tmp_path, res["fifo"])
    jobs = pd.read_csv(tmp_path / "jobs.csv")
    assert set(DECOMPOSITION) <= set(jobs.columns)
    assert "decomposition" in json.loads((tmp_path / "summary.json").read_text())
    html = compare_report(res, "t", {})["report.html"]
    assert "JCT decomposition" in str(html) and "loss_batch" in str(html)


def test_batched_decompositions_are_the_per_job_ones_bit_for_bit(models: PerfModels) -> None:
    """`JobRows` prices the jobs that ran undisturbed in batches (`decompose.Batch`): every row's figures are
    those `decompose` gives the job alone, bit for bit, and the batch did take most of them (a preemptive
    policy on a small cluster, so some jobs were disturbed and priced alone)."""
    from elastisched.sim import Simulator
    from elastisched.sim.decompose import Batch, decompose
    from elastisched.workloads import load_workload

    wl = load_workload("philly:sample=400,seed=3", models)
    sim = Simulator(wl, make_policy("tiresias"), parse_cluster("4x4:t4"), models, SimConfig(keep_finished=True))
    res = sim.run()
    rows = {r.job: r for r in res.jobs.itertuples()}
    batch = Batch(sim.per_type_servers)
    taken = sum(batch.add(j, 0, j.run_time - j.restart_time) for j in sim.done)
    assert 0.5 * len(sim.done) < taken < len(sim.done)
    for j in sim.done:
        row = rows[j.spec.job_id]
        alone = decompose(j, sim.per_type_servers)
        got = tuple(getattr(row, k) for k in DECOMPOSITION)
        assert np.array_equal(np.array(got), np.array(alone), equal_nan=True), (j.spec.job_id, got, alone)
