"""What jobs declare about their length (issue 21 item 2): exact, log-normal noise, or nothing — the truth ends them."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from elastisched.core.cluster import parse_cluster
from elastisched.core.enums import LengthKnowledge
from elastisched.core.errors import ConfigError
from elastisched.core.types import ClusterSnapshot, Decision
from elastisched.models import PerfModels
from elastisched.policies.base import PolicyContext, make_policy, registered
from elastisched.sim import SimConfig, simulate
from elastisched.sim.length_estimate import LengthEstimate
from elastisched.workloads import load_workload


def test_parse_and_errors() -> None:
    assert LengthEstimate.parse("exact").is_exact
    assert LengthEstimate.parse("lognormal:0").is_exact
    e = LengthEstimate.parse("lognormal:0.5")
    assert (e.kind, e.sigma, str(e)) == ("lognormal", 0.5, "lognormal:0.5")
    assert LengthEstimate.parse("none").declared(10.0, "a", 0) is None
    for bad in ("", "noisy", "lognormal", "lognormal:", "lognormal:x", "lognormal:-1", "lognormal:9", "exact:1",
                "none:0"):
        with pytest.raises(ConfigError, match="--length-estimate"):
            LengthEstimate.parse(bad)


def test_noise_is_per_job_seeded_and_median_unbiased() -> None:
    est = LengthEstimate.parse("lognormal:0.5")
    ids = [f"job-{i}" for i in range(4000)]
    f = np.array([est.declared(100.0, j, 7) for j in ids]) / 100.0
    assert [est.declared(100.0, j, 7) for j in reversed(ids)][::-1] == list(f * 100.0)  # order does not matter
    assert est.declared(100.0, "job-1", 8) != est.declared(100.0, "job-1", 7)  # the seed does
    logs = np.log(f)
    assert abs(float(np.median(logs))) < 0.05 and abs(float(logs.std()) - 0.5) < 0.03
    assert LengthEstimate().declared(123.0, "x", 0) == 123.0


class _Recorder:
    """Wraps a policy and records what each round's views declare."""

    def __init__(self, name: str) -> None:
        self.inner = make_policy(name)
        self.seen: dict[str, tuple[float | None, float]] = {}

    def __getattr__(self, item: str) -> Any:
        return getattr(self.inner, item)

    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        for jid, v in snap.jobs.items():
            self.seen[jid] = (v.declared_work, v.total_work)
        return self.inner.schedule(snap, ctx)


def _run(estimate: str, seed: int = 0) -> tuple[Any, _Recorder]:
    models = PerfModels.load()
    wl = load_workload("pollux:workload-6", models)
    rec = _Recorder("srtf")
    res = simulate(wl, rec, parse_cluster("16x4:t4"), models,  # type: ignore[arg-type]
                   SimConfig(seed=seed, length_estimate=LengthEstimate.parse(estimate)))
    return res, rec


def test_policies_see_the_estimate_while_the_truth_ends_jobs() -> None:
    exact, rec_e = _run("exact")
    noisy, rec_n = _run("lognormal:1.0")
    hidden, rec_h = _run("none")
    assert all(d == t for d, t in rec_e.seen.values())
    ratios = [d / t for d, t in rec_n.seen.values() if d is not None]
    assert len(ratios) == len(rec_n.seen) and min(ratios) < 0.5 and max(ratios) > 2.0
    assert all(d is None for d, _ in rec_h.seen.values())
    # srtf reads the truth (an oracle): what jobs declare does not change a single decision
    assert (exact.jobs["jct"] == noisy.jobs["jct"]).all() and (exact.jobs["jct"] == hidden.jobs["jct"]).all()
    assert (exact.summary["length_estimate"], noisy.summary["length_estimate"]) == ("exact", "lognormal:1")
    assert math.isclose(exact.summary["avg_jct"], noisy.summary["avg_jct"])


def test_every_policy_says_what_it_knows() -> None:
    knows = {n: c.knows_length for n, c in registered().items()}  # type: ignore[attr-defined]
    assert all(isinstance(k, LengthKnowledge) for k in knows.values())
    for oracle in ("srtf", "lyra", "lyra_scaled", "optimus", "jabas"):
        assert knows[oracle] is LengthKnowledge.TRUTH, oracle
    for blind in ("fifo", "tiresias", "pollux", "sia", "gavel", "ones", "optimus-online"):
        assert knows[blind] is LengthKnowledge.NOTHING, blind


def test_cli_shows_knowledge_and_rejects_a_bad_estimate(tmp_path: Any) -> None:
    from elastisched.cli.main import app

    r = CliRunner().invoke(app, ["policies", "--json"])
    assert r.exit_code == 0, r.output
    rows = {x["name"]: x["knows_length"] for x in json.loads(r.output)}
    assert rows["srtf"] == "true remaining work" and rows["tiresias"] == "nothing"
    r = CliRunner().invoke(app, ["sim", "run", "-w", "pollux:workload-6", "-p", "fifo", "--length-estimate",
                                 "lognormal:abc", "--out", str(tmp_path / "x")])
    assert r.exit_code != 0 and "--length-estimate=" in r.output and "not a number" in r.output
    assert not (tmp_path / "x").exists()
