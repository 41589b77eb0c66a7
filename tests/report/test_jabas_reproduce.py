"""`elastisched reproduce jabas` and its one-job training simulation (docs/jabas.md "Reproduction")."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from elastisched.models.jabas_autoscale import epoch_cost
from elastisched.report.jabas_reproduce import default_profiles_dir, register, reproduce, resnet50_backend, summarize
from elastisched.report.jabas_sim import Cfg, RunResult, fastest_homogeneous, simulate


@pytest.fixture(scope="module")
def resnet() -> object:
    return resnet50_backend()


def test_resnet_configuration_reproduces_test_vector(resnet: object) -> None:
    """node0 + node1, GBS 256 → LBS 32, 1493.3 samples/s (digest §7) through the reproduction's re-solve."""
    be = resnet
    two = tuple(s for s in be.servers if s.name in ("node0", "node1"))  # type: ignore[attr-defined]
    cfg = be.configure(two, 256, None)  # type: ignore[attr-defined]
    assert cfg is not None and cfg.gbs == 256 and cfg.lbs == 32
    assert cfg.gbs / cfg.iter_time == pytest.approx(1493.3, rel=0.01)
    # a move toward a target is strict and stays on the grid (solve_placement rules)
    up = be.configure(two, 256 * 1.1, 256)  # type: ignore[attr-defined]
    assert up is not None and up.gbs > 256 and up.gbs % up.lbs == 0


def test_uniform_baseline_is_paced_by_the_slowest_gpu(resnet: object) -> None:
    be = resnet
    fast = tuple(s for s in be.servers if s.name == "node2")  # type: ignore[attr-defined]
    slow = tuple(s for s in be.servers if s.name == "node6")  # type: ignore[attr-defined]
    both = fast + slow
    t_both, t_slow = be.uniform_time(both, 1024), be.uniform_time(slow, 512)  # type: ignore[attr-defined]
    assert t_both >= 0.9 * t_slow  # same per-GPU batch: the Quadro P4000 sets the pace (comm scope differs)
    assert be.uniform_time(fast, 512) < t_slow  # type: ignore[attr-defined]
    iidp = be.configure(both, 1024, None)  # type: ignore[attr-defined]
    assert iidp is not None and iidp.iter_time < t_both  # the heterogeneity-aware split is faster
    assert fastest_homogeneous(be)[0].gpu_type == "NVIDIA GeForce RTX 3090"  # type: ignore[arg-type]


def test_one_epoch_runs_and_accounts_time_and_cost(resnet: object) -> None:
    be = resnet
    runs = {s: simulate(be, s, max_epochs=1) for s in ("jabas", "static", "uniform")}  # type: ignore[arg-type]
    for r in runs.values():
        assert r.time_s > 0 and r.cost_usd > 0 and r.allocation[0][0] == 0.0
        gpus, servers = r.allocation[0][1], r.allocation[0][2].split("+")
        cl = tuple(s for s in be.servers if s.name in servers)  # type: ignore[attr-defined]
        assert sum(s.num_gpus for s in cl) == gpus
        assert r.cost_usd == pytest.approx(epoch_cost(cl, r.time_s))  # no restart in epoch 0
    assert runs["uniform"].allocation[0][1] == 36  # (b) holds every GPU
    assert len(runs["static"].gbs) == 1  # (a) never changes its batch
    assert len(runs["jabas"].gbs) > 10 and all(256 <= g <= 32768 for _, g in runs["jabas"].gbs)


def test_summary_reductions_are_against_uniform() -> None:
    def rr(name: str, t: float, c: float) -> RunResult:
        return RunResult(name, t, c, 0, [(0.0, 1)], [(0.0, 1, "x")])

    res = {"m": {"jabas-time": rr("jabas-time", 60, 20), "jabas-cost": rr("jabas-cost", 90, 10),
                 "static": rr("static", 300, 50), "uniform": rr("uniform", 100, 100),
                 "homogeneous": rr("homogeneous", 80, 30)}}
    doc = summarize(res)
    assert doc["time_reduction"] == pytest.approx(0.4) and doc["cost_reduction"] == pytest.approx(0.8)
    assert doc["cost_aware"] == pytest.approx({"time_reduction": 0.1, "cost_reduction": 0.9})
    assert doc["acceptance"]["time_objective_time_ge_0.30"] is True
    assert isinstance(Cfg(1, 2, 0.5), Cfg)


@pytest.mark.skipif(default_profiles_dir() is None, reason="Sia traces not found")
def test_cli_writes_json_plots_and_report(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps `jabas` a sub-command
    out = tmp_path / "j"
    r = CliRunner().invoke(app, ["jabas", "--out", str(out), "--apps", "cifar10", "--no-resnet", "--epochs", "3"])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "jabas.json").read_text())
    row = doc["models"]["cifar10"]
    assert set(row) == {"jabas-time", "jabas-cost", "static", "uniform", "homogeneous"}
    assert math.isfinite(doc["time_reduction"]) and math.isfinite(doc["cost_aware"]["cost_reduction"])
    assert doc["time_reduction"] == pytest.approx(1 - row["jabas-time"]["time_h"] / row["uniform"]["time_h"])
    assert row["uniform"]["mean_gpus"] == pytest.approx(32.0)
    assert doc["trajectories"]["cifar10"]["jabas-time"]["gbs"]
    for f in ("gbs.png", "allocation.png"):
        assert (out / f).read_bytes()[:4] == b"\x89PNG"
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "cifar10" in html


def test_reproduce_without_models_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no model"):
        reproduce(tmp_path, None, [], resnet=False)
    assert not (tmp_path / "jabas.json").exists()
