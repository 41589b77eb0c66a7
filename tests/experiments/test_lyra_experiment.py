"""`reproduce lyra` and `reproduce lyra-deepboot` end to end on small slices (the full runs are the CLI's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from elastisched.core.errors import ConfigError
from elastisched.experiments.lyra import Lyra, LyraConfig
from elastisched.experiments.lyra_deepboot import DeepBootConfig, LyraDeepBoot
from elastisched.experiments.writer import write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from rendering import check_page, checked_figures


def test_small_lyra_run_writes_lyra_json(tmp_path: Path) -> None:
    peer = tmp_path / "tiny.csv"
    peer.write_text(DEEPBOOT_CSV)
    cfg = LyraConfig(days=2.0, sample=150, fixed_servers=6, variants=("deepboot", "random"), peer=peer)
    with checked_figures() as problems:
        res = Lyra().run(cfg)
    assert not problems, problems  # every figure titled, labelled, with a legend
    write_result(res, tmp_path)
    check_page(tmp_path / "report.html", "reproduce-lyra")  # loads without errors, tables within 1,280 px
    saved = json.loads((tmp_path / "lyra.json").read_text())
    data = saved["data"]
    for key in ("queue_reduction", "jct_reduction", "gpu_usage_gain", "preemptions", "mckp_optimality",
                "baseline_avg_queue", "inference", "ablation"):
        assert key in data
    assert saved["config"]["fixed_servers"] == 6 and saved["config"]["variants"] == ["deepboot", "random"]
    assert (tmp_path / "loans.png").stat().st_size > 0 and (tmp_path / "cdf.png").stat().st_size > 0
    assert "JCT reduction" in (tmp_path / "report.html").read_text()
    assert data["runs"]["lyra"]["n_finished"] == data["runs"]["baseline"]["n_finished"] == 150
    same = data["preemptions"]["same_instances"]
    assert same["greedy"] <= same["deepboot"] and same["greedy"] <= same["random"]
    assert same["milp"] <= same["greedy"]
    assert 0.98 <= data["mckp_optimality"] <= 1.0 + 1e-9
    assert data["inference"]["fraction_below_40pct"] > 0.3
    assert data["deepboot_peer"]["training_jobs"] == 3 and (tmp_path / "deepboot_cdf.png").exists()  # --peer
    # the verdicts are the bars, computed from the same figures
    jct = next(v for v in res.verdicts if v.claim.startswith("JCT"))
    assert jct.measured == data["jct_reduction"] and jct.passed == (data["jct_reduction"] >= 1.48)


def test_unknown_reclaim_variant_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="variants"):
        Lyra().run(LyraConfig(days=1.0, sample=20, fixed_servers=2, variants=("nope",)))


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
