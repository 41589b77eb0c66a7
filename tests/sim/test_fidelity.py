"""Fidelity against the Pollux artifact: avg JCT within ±10 % per workload and ±5 % on the mean of eight."""

from __future__ import annotations

import pytest

from elastisched.core.cluster import parse_cluster
from elastisched.experiments.pollux_fidelity import WORKLOADS, reference
from elastisched.policies.base import make_policy
from elastisched.sim import SimConfig, simulate
from elastisched.workloads import load_workload


@pytest.mark.parametrize("policy", ["tiresias", "optimus"])
def test_matches_pollux_artifact(policy: str, models: object) -> None:
    ref = reference(policy)
    ours = {}
    for w in WORKLOADS:
        wl = load_workload(f"pollux:{w}", models)  # type: ignore[arg-type]
        r = simulate(wl, make_policy(policy), parse_cluster("16x4:t4"), models, SimConfig())  # type: ignore[arg-type]
        assert r.summary["n_finished"] == 160
        ours[w] = r.summary["avg_jct"]
        assert abs(ours[w] / ref[w] - 1) <= 0.10, (w, ours[w], ref[w])
    mean_ours = sum(ours.values()) / 8
    mean_ref = sum(ref[w] for w in WORKLOADS) / 8
    assert abs(mean_ours / mean_ref - 1) <= 0.05, (mean_ours, mean_ref)
