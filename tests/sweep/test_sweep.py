"""Sweeps: the same summaries serially, in a process pool and on a real multi-node Ray cluster; failed
cells are reported, not fatal; the report has every file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from elastisched.core.errors import ConfigError
from elastisched.report.sweep import write_sweep
from elastisched.sim.sweep import aggregate, expand, make_cells, parse_seeds, run_sweep

WL = "synthetic:num_jobs=24,seed=3"
VOLATILE = {"wall_seconds", "decision_ms_p50", "decision_ms_p99", "decision_ms_max"}


def _stable(results: list) -> list:
    return [(r.cell, r.error, {k: v for k, v in (r.summary or {}).items() if k not in VOLATILE}) for r in results]


def test_expand_and_seeds() -> None:
    assert expand("pollux:workload-1..3") == ["pollux:workload-1", "pollux:workload-2", "pollux:workload-3"]
    assert expand("philly:sample=2000,seed=1") == ["philly:sample=2000,seed=1"]
    assert parse_seeds("0..2") == [0, 1, 2] and parse_seeds("3,1,3") == [3, 1]
    for bad in ("-1", "a", "", "１", "2..1"):
        with pytest.raises(ConfigError, match=r"--seeds|range"):
            parse_seeds(bad)
    with pytest.raises(ConfigError, match="--policies"):
        make_cells([WL], [], [0], ["4x4:t4"])


def test_parallel_sweep_equals_serial_and_failed_cells_are_reported(tmp_path: Path) -> None:
    cells = make_cells([WL], ["fifo", "tiresias", "no-such-policy"], [0, 1], ["4x4:t4"])
    serial = run_sweep(cells, workers=1)
    seen: list[tuple[int, int]] = []
    parallel = run_sweep(cells, workers=2, progress=lambda d, t: seen.append((d, t)))
    assert _stable(parallel) == _stable(serial)
    assert seen[-1] == (len(cells), len(cells))
    bad = [r for r in serial if not r.ok]
    assert {r.cell.policy for r in bad} == {"no-such-policy"} and all("no-such-policy" in r.error for r in bad)
    assert all(r.ok and r.summary["n_finished"] == 24 for r in serial if r.cell.policy != "no-such-policy")

    rows = {r["policy"]: r for r in aggregate(serial)}
    fifo = [r.summary["avg_jct"] for r in serial if r.cell.policy == "fifo"]
    assert rows["fifo"]["avg_jct"] == pytest.approx(sum(fifo) / 2) and rows["fifo"]["seeds"] == 2
    assert rows["no-such-policy"]["failed"] == 2 and rows["no-such-policy"]["seeds"] == 0

    files = write_sweep(tmp_path, serial, {"workloads": [WL]})
    assert {"cells.csv", "summary.csv", "summary.json", "report.html", "avg_jct.png"} <= set(os.listdir(tmp_path))
    assert "no-such-policy" in (tmp_path / "report.html").read_text() and "failed" in str(files["report.html"])
    assert len(json.loads((tmp_path / "summary.json").read_text())["failed"]) == 2


@pytest.mark.ray
def test_ray_sweep_on_a_two_node_cluster_equals_serial() -> None:
    ray = pytest.importorskip("ray") if os.environ.get("CI") != "true" else __import__("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        cluster.wait_for_nodes()
        cells = make_cells([WL], ["fifo", "tiresias"], [0], ["4x4:t4"])
        on_ray = run_sweep(cells, ray_address=cluster.address)
        assert _stable(on_ray) == _stable(run_sweep(cells, workers=1))
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_cell_in_a_terminated_worker_leaves_its_interpolations_on_disk(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A cell's worker may end without atexit (a terminated pool, a Ray worker): the cell's simulation
    (`sim.simulate`) saves the interpolation answers it asked of scipy when it ends, so later cells start warm."""
    import multiprocessing as mp

    from elastisched.sim.sweep import run_cell

    monkeypatch.setenv("ELASTISCHED_CACHE_DIR", str(tmp_path))
    cell = make_cells(["pollux:workload-3"], ["fifo"], [0], ["16x4:t4"])[0]  # a workload that interpolates
    with mp.get_context("spawn").Pool(1) as pool:  # leaving `with` terminates the worker
        assert pool.apply(run_cell, (cell,)).ok
    saved = list((tmp_path / "interpolations").glob("*.npz"))
    assert saved and all(p.stat().st_size > 0 for p in saved)
