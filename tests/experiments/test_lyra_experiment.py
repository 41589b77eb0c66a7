"""`reproduce lyra` and `reproduce lyra-deepboot` end to end on small slices (the full runs are the CLI's)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from elastisched.core.errors import ConfigError
from elastisched.experiments._lyra_regimes import rival_verdicts
from elastisched.experiments.lyra import Lyra, LyraConfig, _queue_error
from elastisched.experiments.lyra_deepboot import DeepBootConfig, LyraDeepBoot
from elastisched.experiments.writer import write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from rendering import check_page, checked_figures


def test_small_lyra_run_writes_lyra_json(tmp_path: Path) -> None:
    peer = tmp_path / "tiny.csv"
    peer.write_text(DEEPBOOT_CSV)
    cfg = LyraConfig(days=2.0, sample=150, fixed_servers=6, variants=("deepboot", "random"), peer=peer,
                     seeds=(0, 1), policies=("tiresias",))
    with checked_figures() as problems:
        res = Lyra().run(cfg)
    assert not problems, problems  # every figure titled, labelled, with a legend
    write_result(res, tmp_path)
    check_page(tmp_path / "report.html", "reproduce-lyra")  # loads without errors, tables within 1,280 px
    saved = json.loads((tmp_path / "lyra.json").read_text())
    data = saved["data"]
    for key in ("queue_reduction", "jct_reduction", "gpu_usage_gain", "headline", "policies", "ablation",
                "loss_definition", "regime", "per_seed"):
        assert key in data
    assert saved["config"]["fixed_servers"] == 6 and saved["config"]["variants"] == ["deepboot", "random"]
    assert saved["config"]["regime"] == "paper" and data["regime"]["baseline"] == "sjf_only"
    assert (tmp_path / "loans.png").stat().st_size > 0 and (tmp_path / "cdf.png").stat().st_size > 0
    html = (tmp_path / "report.html").read_text()
    assert "JCT reduction" in html and "GPU-hours lost to reclaims" in html and "checkpoint" in html
    assert data["seeds"] == [0, 1] and set(data["per_seed"]) == {"0", "1"}
    for seed in data["per_seed"].values():
        for key in ("queue_reduction", "jct_reduction", "gpu_usage_gain", "preemptions", "mckp_optimality",
                    "baseline_avg_queue", "inference", "ablation", "vs_fifo"):
            assert key in seed
        # the paper regime: the baseline is lyra without loaning or elasticity, FIFO a reference run
        assert set(seed["runs"]) >= {"baseline", "fifo", "loaning_only", "elastic_only", "lyra", "tiresias"}
        assert seed["runs"]["lyra"]["n_finished"] == seed["runs"]["baseline"]["n_finished"] == 150
        assert seed["inference"]["headroom"] == round(0.4 * seed["inference"]["servers"])
        assert seed["inference"]["fraction_below_40pct"] > 0.3
        same = seed["preemptions"]["same_instances"]
        assert same["greedy"] <= same["deepboot"] and same["greedy"] <= same["random"]
        assert same["milp"] <= same["greedy"]
        assert 0.98 <= seed["mckp_optimality"] <= 1.0 + 1e-9
        lyra_run = seed["runs"]["lyra"]
        assert lyra_run["reclaim_evictions"] == seed["preemptions"]["per_run_simulator"]["lyra"]
        assert lyra_run["reclaim_gpu_hours_lost"] >= 0 and seed["runs"]["baseline"]["reclaim_gpu_hours_lost"] == 0
    # the headline is the mean over seeds, with its spread; the other policy is in the comparison
    qr = data["headline"]["queue_reduction"]
    assert qr["mean"] == pytest.approx(sum(qr["per_seed"]) / 2) and qr["spread"] == max(qr["per_seed"]) - min(
        qr["per_seed"])
    assert data["policies"]["tiresias"]["avg_jct"]["mean"] > 0 and "reclaim_evictions" in data["policies"]["tiresias"]
    assert data["deepboot_peer"]["training_jobs"] == 3 and (tmp_path / "deepboot_cdf.png").exists()  # --peer
    # the verdicts are the paper regime's bands (within ±20 % of 1.48× / 1.53×), computed from the same figures
    jct = next(v for v in res.verdicts if v.claim.startswith("JCT"))
    assert jct.measured == data["jct_reduction"] and jct.passed == (1.184 <= data["jct_reduction"] <= 1.776)
    queue = next(v for v in res.verdicts if v.claim.startswith("queuing"))
    assert queue.passed == (1.224 <= data["queue_reduction"] <= 1.836)


def test_abundant_regime_is_the_earlier_set_up() -> None:
    res = Lyra().run(LyraConfig(regime="abundant", days=1.0, sample=60, fixed_servers=3, variants=(), seeds=(0,)))
    data = res.data
    seed = data["per_seed"]["0"]
    assert data["regime"]["baseline"] == "fifo" and "sjf_only" in seed["runs"] and "fifo" not in seed["runs"]
    assert seed["inference"]["headroom"] == 1 and seed["inference"]["servers"] == 3
    assert seed["vs_fifo"] == {"queue_reduction": seed["queue_reduction"], "jct_reduction": seed["jct_reduction"]}
    jct = next(v for v in res.verdicts if v.claim.startswith("JCT"))
    assert jct.target == "≥ 1.48" and jct.passed == (data["jct_reduction"] >= 1.48)


def test_elastisched_is_judged_against_lyra_by_the_issue_bars() -> None:
    def runs(jct: float, evicted: float) -> dict[str, dict[str, float]]:
        return {"avg_jct": {"mean": jct}, "reclaim_evictions": {"mean": evicted}}

    got = rival_verdicts({"lyra": runs(1000.0, 30.0), "elastisched": runs(850.0, 21.0), "tiresias": runs(1.0, 0.0)},
                         "0, 1")
    assert [(round(m, 3), bar, ok) for _, m, bar, ok in got] == [(0.85, "≤ 0.90", True), (0.7, "≤ 0.67", False)]
    assert all(claim.startswith("elastisched's") for claim, *_ in got)  # only the policy the bars are for
    assert rival_verdicts({"lyra": runs(1000.0, 0.0), "elastisched": runs(950.0, 0.0)}, "0")[1][1:] == (
        0.0, "≤ 0.67", True)  # no eviction by either: met
    assert rival_verdicts({"lyra": runs(1000.0, 0.0)}, "0") == []


def test_queue_at_least_ranks_every_queue_above_the_target_first() -> None:
    assert _queue_error(3300.0, 3000.0, False) == pytest.approx(0.1) == _queue_error(2700.0, 3000.0, False)
    assert _queue_error(3900.0, 3000.0, True) < _queue_error(2990.0, 3000.0, True)
    assert _queue_error(3100.0, 3000.0, True) < _queue_error(3300.0, 3000.0, True)


@pytest.mark.parametrize("field, value", [("variants", ("nope",)), ("policies", ("lyar",)), ("regime", "papr"),
                                          ("seeds", ()), ("length_estimate", "lognormal"),
                                          ("reserve_fraction", 1.5)])
def test_bad_names_are_config_errors(field: str, value: object) -> None:
    cfg = dataclasses.replace(LyraConfig(days=1.0, sample=20, fixed_servers=2), **{field: value})
    with pytest.raises(ConfigError, match=field):
        Lyra().run(cfg)


DEEPBOOT_CSV = """name,time,application,num_replicas,batch_size,duration,num_task
cifar10-0,0,cifar10,4,512,4.0,-1
ncf-1,30,ncf,1,256,4.0,-1
cifar10-2,60,cifar10,2,256,4.0,-1
inference-ncf-0,10,infer-ncf-1,1,1,5.0,100
inference-ncf-1,400,infer-ncf-1,1,1,5.0,100
"""


def test_deepboot_runs_lyra_and_tiresias_on_the_split(tmp_path: Path) -> None:
    wl = tmp_path / "tiny.csv"
    wl.write_text(DEEPBOOT_CSV)
    cfg = DeepBootConfig(workload=wl, servers=4, inference_servers=2, policies=("lyra", "tiresias"))
    res = LyraDeepBoot().run(cfg)
    write_result(res, tmp_path / "out")
    data = json.loads((tmp_path / "out" / "lyra-deepboot.json").read_text())["data"]
    assert (tmp_path / "out" / "deepboot_cdf.png").exists() and (tmp_path / "out" / "deepboot_loans.png").exists()
    assert data["training_jobs"] == 3 and data["training_servers"] == 2 and data["inference"]["tasks"] == 2
    assert set(data["avg_jct_training"]) == {"lyra", "tiresias"}
    for name in ("lyra", "tiresias"):
        assert data["runs"][name]["n_finished"] == 3  # training jobs only: inference rows are demand, not jobs
    assert data["lyra_beats"]["aryl"] == (data["avg_jct_training"]["lyra"] < 42310.0)
    assert data["deepboot_figures"] == {"deepboot_aryl": 42310.0, "deepboot_tiresias": 2618.0}
    assert res.verdicts[0].passed == (data["avg_jct_training"]["lyra"] < 2618.0)


def test_deepboot_missing_workload_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="workload"):
        LyraDeepBoot().run(DeepBootConfig(workload=tmp_path / "absent.csv"))


def test_deepboot_runs_any_registered_policy_with_its_reclaim_losses(tmp_path: Path) -> None:
    wl = tmp_path / "tiny.csv"
    wl.write_text(DEEPBOOT_CSV)
    res = LyraDeepBoot().run(DeepBootConfig(workload=wl, servers=4, inference_servers=2, policies=("lyra", "srtf")))
    data = res.data
    assert set(data["runs"]) == {"lyra", "srtf"} and data["runs"]["srtf"]["n_finished"] == 3
    for run in data["runs"].values():
        assert {"reclaim_evictions", "reclaim_shrinks", "reclaim_gpu_hours_lost"} <= set(run)
    table = next(t for t in res.tables if "Reclaim losses" in t.title)
    assert [r["run"] for r in table.rows] == ["lyra", "srtf"] and "checkpoint" in table.title
    with pytest.raises(ConfigError, match="policies"):
        LyraDeepBoot().run(DeepBootConfig(workload=wl, policies=("tiresia",)))
