"""Policies from outside the package (issue 24 item 1): a file anywhere (`~/my-policies/ljf.py:LJF`), a module on
the path (`package.module:Class`), an installed package's entry point (`elastisched.policies`), and
`elastisched policies check SPEC`, which passes a correct policy and fails a broken one naming the invariant."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from elastisched.engine import conformance
from elastisched.models import PerfModels
from elastisched.policies.plugins import build

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ljf-policy"
CLI = [sys.executable, "-m", "elastisched.cli"]


def _cli(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1", **env})


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package installed (pip, from a copy of its folder) into a directory of its own, which the
    commands below put on PYTHONPATH: the test's own environment is left as it was."""
    root = tmp_path_factory.mktemp("plugin")
    src = root / "src"
    shutil.copytree(EXAMPLE, src)
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(target), str(src)], check=True, capture_output=True, timeout=600)
    return target


def test_a_file_outside_the_repository_runs_in_compare(tmp_path: Path) -> None:
    """Must show: `sim compare -p tiresias,~/my-policies/ljf.py:LJF` (the shell leaves `~` after a comma alone)."""
    home = tmp_path / "home"
    (home / "my-policies").mkdir(parents=True)
    shutil.copy(EXAMPLE / "ljf_policy" / "ljf.py", home / "my-policies" / "ljf.py")
    out = tmp_path / "out"
    r = _cli(["sim", "compare", "-w", "pollux:workload-6", "-p", "tiresias,~/my-policies/ljf.py:LJF", "-o", str(out)],
             HOME=str(home))
    assert r.returncode == 0, r.stderr
    ljf = json.loads((out / "ljf" / "summary.json").read_text())
    tiresias = json.loads((out / "tiresias" / "summary.json").read_text())
    assert ljf["policy"] == "ljf" and ljf["n_finished"] == ljf["n_jobs"] == 160
    assert ljf["avg_jct"] != tiresias["avg_jct"] and ljf["restarts"] == 0  # its own, non-preemptive order


def test_an_installed_package_appears_with_its_origin_and_passes_check(installed: Path, tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(installed)}
    r = _cli(["policies", "--json"], **env)
    assert r.returncode == 0, r.stderr
    rows = {p["name"]: p for p in json.loads(r.stdout)}
    assert rows["ljf"]["origin"] == "entry point elastisched-ljf (ljf_policy.ljf:LJF)"
    assert rows["ljf"]["options"] == ["smallest_first"] and rows["fifo"]["origin"] == "built-in"
    r = _cli(["policies", "check", "ljf"], **env)
    assert r.returncode == 0 and "ljf: passed the conformance checks" in r.stdout, r.stdout + r.stderr
    r = _cli(["sim", "run", "-w", "pollux:workload-6", "-p", "ljf:smallest_first=true", "-o", str(tmp_path)], **env)
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "summary.json").read_text())["policy_options"] == {"smallest_first": True}
    assert "ljf" not in _cli(["policies", "--json"]).stdout  # not installed here: not listed


def test_a_broken_policy_fails_check_naming_the_invariant(installed: Path) -> None:
    """Must show: a policy that returns an over-capacity decision fails `check` with the invariant's name; the
    same class named by module (on PYTHONPATH) and by file."""
    for spec, env in (("ljf_policy.broken:OverCommit", {"PYTHONPATH": str(installed)}),
                      (f"{EXAMPLE}/ljf_policy/broken.py:OverCommit", {})):
        r = _cli(["policies", "check", spec], **env)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "FAILED capacity: no server gets more GPUs than it has" in r.stdout
        assert "GPUs allocated, capacity" in r.stdout and "overcommit: " in r.stderr


def test_a_broken_entry_point_is_reported_not_fatal(installed: Path, tmp_path: Path) -> None:
    bad = tmp_path / "site"
    shutil.copytree(installed, bad)
    eps = next(bad.glob("elastisched_ljf-*.dist-info")) / "entry_points.txt"
    eps.write_text(eps.read_text().replace("ljf_policy.ljf:LJF", "ljf_policy.ljf:Missing"))
    r = _cli(["policies"], PYTHONPATH=str(bad))
    assert r.returncode == 0 and "tiresias" in r.stdout
    assert "installed policy 'ljf' failed to load" in r.stderr


@pytest.mark.parametrize("name", ["fifo", "srtf", "tiresias", "gavel:objective=max_sum_throughput"])
def test_built_in_policies_pass_the_runtime_suite(name: str, models: PerfModels) -> None:
    assert conformance.run(lambda: build(name).policy, models, examples=40) == []


def test_unknown_class_and_bad_file_are_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    for spec, expect in ((f"{EXAMPLE}/ljf_policy/ljf.py:Nope", "not a policy class"),
                         (f"{tmp_path}/none.py:X", "no such file"),
                         (f"{bad}:X", "importing it failed: RuntimeError: boom"),
                         ("no_such_module_xyz:X", "cannot import 'no_such_module_xyz'")):
        r = _cli(["sim", "run", "-w", "pollux:workload-6", "-p", spec, "-o", str(tmp_path / "o")])
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and expect in lines[0], r.stderr
