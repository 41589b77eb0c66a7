"""Policy options (issue 24 item 2): `-p NAME:key=value,...` and `--policy-options FILE.yaml`, checked against the
options each policy declares, listed by `elastisched policies NAME`, recorded in summary.json; `sim run --setup
sia` with Gavel's artifact options reproduces `reproduce sia`'s gavel figure exactly."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import peer_data
from elastisched.cli.main import app
from elastisched.core.errors import ConfigError
from elastisched.policies.base import registered
from elastisched.policies.options import parse_spec, split_specs
from elastisched.policies.plugins import build

runner = CliRunner()


def test_spec_grammar() -> None:
    assert parse_spec("tiresias").ref == "tiresias" and parse_spec("tiresias").options == ()
    s = parse_spec("gavel:objective=max_sum_throughput,interval=360")
    assert s.ref == "gavel" and s.options == (("objective", "max_sum_throughput"), ("interval", "360"))
    s = parse_spec("~/p/ljf.py:LJF:boost=2")
    assert s.ref == "~/p/ljf.py:LJF" and s.options == (("boost", "2"),)
    assert parse_spec("pkg.mod:Cls").ref == "pkg.mod:Cls"
    specs = split_specs("gavel:objective=las,interval=360,tiresias,~/p/ljf.py:LJF")
    assert [x.ref for x in specs] == ["gavel", "tiresias", "~/p/ljf.py:LJF"]
    assert specs[0].options == (("objective", "las"), ("interval", "360"))
    with pytest.raises(ConfigError, match="given more than once"):
        parse_spec("gavel:interval=1,interval=2")


@pytest.mark.parametrize("name", sorted(registered(plugins=False)))
def test_declared_options_match_the_constructor(name: str) -> None:
    """Every declared option is a constructor keyword with that default (ONES: its preset's value), has one
    line of help, and each default passes the option's own check."""
    cls = registered(plugins=False)[name]
    declared = cls.declared_options()  # type: ignore[attr-defined]
    params = {k for c in cls.__mro__ if "__init__" in c.__dict__ for k in inspect.signature(c.__init__).parameters}
    for o in declared:
        assert o.help and "\n" not in o.help, (name, o.name)
        assert o.convert(o.default, "test") == o.default
        if name != "ones" or o.name == "preset":
            assert o.name in params, (name, o.name)
    built = build(name)
    assert built.options == {o.name: o.default for o in declared}


def test_options_reach_the_policy_and_bad_ones_are_named() -> None:
    b = build("gavel:objective=max_sum_throughput,interval=360")
    assert (b.policy.objective, b.policy.interval) == ("max_sum_throughput", 360.0)  # type: ignore[attr-defined]
    assert b.label == "gavel:objective=max_sum_throughput,interval=360"
    assert build("ones:preset=faithful,population=8").policy.opts.population == 8  # type: ignore[attr-defined]
    assert build("lyra_scaled:preempt=3").policy.preempt == 3.0  # type: ignore[attr-defined]  # a base's option
    for spec, expect in (("tiresias:bogus=1", "unknown option; tiresias takes: threshold_gpu_seconds (float"),
                         ("gavel:objective=fast", "must be one of las, max_sum_throughput"),
                         ("gavel:interval=1_000", "must be a finite float"),
                         ("gavel:interval=nan", "must be a finite float"),
                         ("gavel:interval=0", "must be > 0"),
                         ("sia:max_gpus=2.5", "must be a whole number"),
                         ("gavel:center=maybe", "must be true or false")):
        with pytest.raises(ConfigError, match=expect.replace("(", r"\(")):
            build(spec)


def test_cli_bogus_option_is_one_line_listing_the_options(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-6", "-p", "tiresias:bogus=1", "-o", str(tmp_path)])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "tiresias:bogus" in lines[0] and "threshold_gpu_seconds" in lines[0], r.stderr
    assert not (tmp_path / "summary.json").exists()


def test_policies_name_lists_options_and_summary_records_them(tmp_path: Path) -> None:
    r = runner.invoke(app, ["policies", "gavel", "--json"])
    assert r.exit_code == 0, r.output
    rows = {o["name"]: o for o in json.loads(r.stdout)}
    assert rows["objective"]["choices"] == ["las", "max_sum_throughput"] and rows["interval"]["default"] == 360.0
    opts = tmp_path / "opts.yaml"
    opts.write_text("tiresias: {threshold_gpu_seconds: 3600}\n")
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-6", "-p", "tiresias", "--policy-options", str(opts),
                            "-o", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["policy_options"] == {"threshold_gpu_seconds": 3600.0}
    assert summary["policy_spec"] == "tiresias:threshold_gpu_seconds=3600"
    # the inline spec gives the same run as the file; a different threshold gives another
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-6", "-p", "tiresias:threshold_gpu_seconds=3600",
                            "-o", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "a" / "jobs.csv").read_bytes() == (tmp_path / "b" / "jobs.csv").read_bytes()
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-6", "-p", "tiresias", "-o", str(tmp_path / "c")])
    assert (tmp_path / "c" / "jobs.csv").read_bytes() != (tmp_path / "a" / "jobs.csv").read_bytes()
    opts.write_text("gavel: {interval: 60}\n")
    r = runner.invoke(app, ["sim", "run", "-w", "pollux:workload-6", "-p", "tiresias", "--policy-options", str(opts)])
    assert r.exit_code == 2 and "names a policy not run here" in r.stderr


def test_compare_takes_options_and_the_same_policy_twice(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "compare", "-w", "pollux:workload-6", "-o", str(tmp_path),
                            "-p", "tiresias,tiresias:threshold_gpu_seconds=3600"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "tiresias" / "summary.json").is_file()
    assert (tmp_path / "tiresias:threshold_gpu_seconds=3600" / "summary.json").is_file()


SATURN = peer_data.path("sia", "workloads", "saturn", "workload-1.csv")


@peer_data.needs("sia", "traces")
def test_sim_run_reproduces_reproduce_sia_gavel_exactly(tmp_path: Path) -> None:
    """Must show: `sim run -p gavel:objective=max_sum_throughput,interval=360` on Saturn-1 with Sia's set-up gives
    `reproduce sia`'s gavel figure to the last bit."""
    from elastisched.experiments import sia

    assert SATURN is not None
    models = sia.sia_models(SATURN.parents[2] / "traces")
    wl = sia.saturn_workload(SATURN, models)
    reference = sia.run_one("gavel", wl, models, 0).summary["avg_jct"]  # what `reproduce sia` reports
    r = runner.invoke(app, ["sim", "run", "-w", str(SATURN), "--setup", "sia", "-o", str(tmp_path),
                            "-p", "gavel:objective=max_sum_throughput,interval=360"])
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["avg_jct"] == reference
    assert summary["policy_options"] == {"interval": 360.0, "objective": "max_sum_throughput", "center": True}
