"""The pollux-policy experiment: reference files and workloads of every load are found, and the verdicts are
computed from the runs as the issue's bars say (a synthetic run list, so the arithmetic is checked exactly)."""

from __future__ import annotations

import pytest

import peer_data
from elastisched.experiments.base import get_experiment
from elastisched.experiments.pollux_policy import (
    WORKLOADS,
    PolluxPolicyConfig,
    default_peer_dir,
    reference,
    summarise,
    workload_path,
)

PEER = default_peer_dir()


def test_registered() -> None:
    assert get_experiment("pollux-policy").Config is PolluxPolicyConfig


@peer_data.needs("adaptdl-pollux", "reference-results")
def test_reference_and_workloads_of_every_load() -> None:
    ref = reference(PEER, "1.0")
    assert sum(ref[w] for w in WORKLOADS) / 8 == pytest.approx(2751.1, abs=0.1)  # the figure
    assert sum(reference(PEER, "0.5").values()) / 8 == pytest.approx(1534.0, abs=0.1)
    assert sum(reference(PEER, "2.0").values()) / 8 == pytest.approx(5289.2, abs=0.1)
    for load, n in (("0.5", 80), ("1.0", 160), ("2.0", 320)):
        lines = workload_path(PEER, load, "workload-3").read_text().strip().splitlines()
        assert len(lines) - 1 == n


def _runs(scale: dict[str, float]) -> tuple[dict[str, dict[str, float]], list[dict[str, object]]]:
    refs = {load: {w: 1000.0 + 100 * i for i, w in enumerate(WORKLOADS)} for load in scale}
    runs: list[dict[str, object]] = []
    for load, f in scale.items():
        for w in WORKLOADS:
            for seed, d in ((0, -0.01), (1, 0.01)):
                runs.append({"workload": f"{load}/{w}", "seed": seed, "avg_jct": refs[load][w] * (f + d),
                             "cpu_s": 1.0})
    return refs, runs


def test_verdicts_follow_the_bars() -> None:
    cfg = PolluxPolicyConfig(seeds=(0, 1), loads=("1.0", "0.5", "2.0"))
    refs, runs = _runs({"1.0": 1.04, "0.5": 0.92, "2.0": 1.12})
    res = summarise(cfg, refs, runs)
    v = {x.claim: x for x in res.verdicts}
    assert v["1.0x load: mean avg JCT vs artifact (error)"].measured == pytest.approx(0.04)
    assert v["1.0x load: mean avg JCT vs artifact (error)"].passed
    assert v["0.5x load: mean avg JCT vs artifact (error)"].passed
    assert not v["2.0x load: mean avg JCT vs artifact (error)"].passed  # +12 % > 10 %
    assert res.data["loads"]["1.0"]["seed_means"][0] < res.data["loads"]["1.0"]["seed_means"][1]
    refs, runs = _runs({"1.0": 1.06})
    runs[0]["avg_jct"] = refs["1.0"]["workload-1"] * 1.25  # one workload far off
    res = summarise(PolluxPolicyConfig(seeds=(0, 1), loads=("1.0",)), refs, runs)
    v = {x.claim: x for x in res.verdicts}
    assert not v["1.0x load: mean avg JCT vs artifact (error)"].passed
    assert not v["1.0x load: worst per-workload error"].passed
    assert set(res.figures) == {"pollux_1.0.png"}
