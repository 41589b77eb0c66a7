"""`benchmarks/_scale_decisions.py`, `_scale_philly.py` and `_scale_budgets.py` (issue 22): one real, small point each,
the schemas `benchmarks/scale.py` writes, the cluster and workload the decision benchmark builds."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from peer_data import needs

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str) -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_cluster_has_saturns_proportions_and_the_asked_size() -> None:
    d = _module("_scale_decisions")
    from elastisched.core.cluster import parse_cluster

    for gpus in (100, 512, 2048, 8192):
        nodes = parse_cluster(d.cluster_spec(gpus))
        per_type = {t: sum(n.num_gpus for n in nodes if n.gpu_type == t) for t in ("t4", "a100", "rtx")}
        assert abs(sum(per_type.values()) - gpus) <= 8
        assert per_type["t4"] == pytest.approx(gpus * 3 / 8, rel=0.1)
        assert per_type["a100"] == pytest.approx(gpus / 4, rel=0.1)
    assert d.target_jobs(8192, 1000) == 1000 and d.target_jobs(100, 1000) == 12


@needs("sia", "traces")
def test_a_decision_point_keeps_the_jobs_active_and_reports_the_schema() -> None:
    d = _module("_scale_decisions")
    p = d.measure_point("lyra_scaled", {}, 100, 12, 3, 0, str(d.DEFAULT_PROFILES))
    for key in ("policy", "gpus", "types", "jobs", "rounds", "p50_s", "p99_s", "max_s", "cpu_p99_s", "budget_s",
                "peak_rss_mib"):
        assert key in p
    assert p["types"] == ["a100", "rtx", "t4"] and p["gpus"] == 100
    assert p["jobs"] >= 10 and p["rounds"] >= 1  # the burst arrives in the first minute and stays
    assert 0 <= p["cpu_p50_s"] <= p["cpu_p99_s"] <= p["cpu_max_s"]
    from elastisched.models.registry import PerfModels

    wl = d.dense_workload(PerfModels.load(str(d.DEFAULT_PROFILES)), 40, 30, 1)
    first = [j for j in wl.jobs if j.submit_time < 60.0]
    assert len(first) == 40 and len(wl.jobs) > 40  # the active set, then the arrivals that keep it there


def test_options_parse_and_unknown_policies_are_skipped() -> None:
    d = _module("_scale_decisions")
    assert d._parse_options(["pollux:budget_s=0.8", "pollux:quiet_s=300", "lyra:value=rate"]) == {
        "pollux": {"budget_s": 0.8, "quiet_s": 300}, "lyra": {"value": "rate"}}
    with pytest.raises(SystemExit):
        d._parse_options(["pollux-budget"])
    args = argparse.Namespace(sizes="100", quick=False, options=[], policies="no-such-policy", jobs_at_8192=1000,
                              rounds=1, profiles=str(d.DEFAULT_PROFILES), seed=0, point_timeout=60.0, repeats=3)
    out = d.run(args)
    assert out["points"] == [] and out["skipped"] == ["no-such-policy"]


def test_a_philly_run_reports_cpu_rss_and_jct() -> None:
    ph = _module("_scale_philly")
    r = ph.run_one("lyra_scaled", {}, "philly:sample=150,seed=1", "8x4:t4", 0)
    assert r["jobs"] == 150 and r["finished"] == 150
    assert r["cpu_s"] > 0 and r["peak_rss_mib"] > 0 and r["avg_jct"] > 0 and r["p95_jct"] >= r["avg_jct"] * 0.5
    assert r["meets_bar"] is (r["cpu_s"] <= ph.BAR_S)


def test_a_philly_run_past_its_cpu_cap_stops_and_says_how_far_it_got() -> None:
    ph = _module("_scale_philly")
    r = ph.run_one("lyra_scaled", {}, "philly:sample=150,seed=1", "8x4:t4", 0, cap_s=1e-9)
    assert "over the CPU cap" in r["error"] and r["meets_bar"] is False and "avg_jct" not in r
    assert r["rounds"] == 1 and 0 <= r["sim_time_reached_s"] <= r["last_arrival_s"] and r["cpu_s"] > 0


def test_a_budget_run_times_its_slowest_round_and_the_comparison_judges_each_workload() -> None:
    b = _module("_scale_budgets")
    r = b.run_one("tiresias", {}, "pollux:workload-1", 0)
    assert r["avg_jct"] > 0 and r["rounds"] > 10 and 0 < r["max_round_cpu_s"] <= r["cpu_s"]
    runs = [{"workload": w, "options": opts, "seed": s, "avg_jct": jct * (1.0 + 0.01 * s), "max_round_cpu_s": 0.1}
            for w in b.WORKLOADS for s in b.SEEDS for opts, jct in (({}, 1000.0), ({"budget_s": 0.5}, 1010.0))]
    runs[-1]["max_round_cpu_s"] = 0.7
    row = b.compare("pollux", {"budget_s": 0.5}, runs)
    assert row["mean_jct_without"] == pytest.approx(1010.0) and row["mean_jct_with"] == pytest.approx(1020.1)
    assert row["worst_rel_diff"] == pytest.approx(0.01) and row["within_bar"] and row["slowest_round_cpu_s"] == 0.7
    assert row["workloads"][0]["spread_with"] > 0 and row["workloads"][0]["seeds"] == 3
    runs[0]["avg_jct"] = 2000.0  # one seed of one workload 2x slower without the budget: that workload is off the bar
    assert not b.compare("pollux", {"budget_s": 0.5}, runs)["within_bar"]


def test_every_default_budget_of_the_scale_benchmarks_is_compared_once() -> None:
    b, d, ph = _module("_scale_budgets"), _module("_scale_decisions"), _module("_scale_philly")
    pairs = b.budgets_to_compare()
    for defaults in (d.DEFAULT_OPTIONS, ph.DEFAULT_OPTIONS):
        for name, opts in d._parse_options(list(defaults)).items():
            assert pairs.count((name, opts)) == 1
    assert len(pairs) == len({(n, json.dumps(o, sort_keys=True)) for n, o in pairs})


def test_the_figures_draw_from_the_committed_json_including_unfinished_runs(tmp_path: Path) -> None:
    """docs/scale/*.png come from benchmarks/results/scale.json; a full-Philly run stopped unfinished (no JCT)
    is drawn as how far it got, not a crash."""
    plots = _module("scale_plots")
    data = json.loads((ROOT / "benchmarks" / "results" / "scale.json").read_text())
    assert any("avg_jct" not in r for r in data["philly"]["runs"])  # the case this guards is in the data
    assert plots.main(["--out", str(tmp_path)]) == 0
    drawn = {p.name: p.stat().st_size for p in tmp_path.glob("*.png")}
    assert {"replay_cpu.png", "replay_rss.png", "decisions.png", "philly.png"} <= set(drawn)
    assert min(drawn.values()) > 10_000


def test_the_replay_figure_draws_the_newest_measurement_of_each_kind() -> None:
    """Each re-measurement is kept under its own key (`replay_compiled*` with the compiled core, `replay` or
    `replay_source*` from source); the figure draws, of each kind, the one measured last."""
    plots = _module("scale_plots")
    data = {"replay": {"measured_at": "2026-12-03T09:00"},
            "replay_compiled": {"measured_at": "2026-12-03T17:02"},
            "replay_compiled_2026_12_07": {"measured_at": "2026-12-07T05:31"},
            "replay_compiled_later": {"measured_at": "2026-12-03T18:06"},
            "replay_source_2026_12_07": {"measured_at": "2026-12-07T05:44"}}
    assert plots.latest_replay(data, compiled=True) is data["replay_compiled_2026_12_07"]
    assert plots.latest_replay(data, compiled=False) is data["replay_source_2026_12_07"]
    del data["replay_source_2026_12_07"]
    assert plots.latest_replay(data, compiled=False) is data["replay"]
    assert plots.latest_replay({"replay": {}}, compiled=True) is None
