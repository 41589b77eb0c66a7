"""The compiled core (`elastisched.native`): built for real by Cython and a C compiler into a temporary folder,
then whole runs compared byte for byte with the same runs from source, in fresh processes; a stale or foreign
build is never imported, and the sim and engine tests pass with the compiled modules."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from elastisched import native
from elastisched.native.build import NativeBuildError, build

ROOT = Path(__file__).resolve().parents[2]

#: whole runs, each digested: jobs.csv, timeline.csv and the summary without its timings
RUNS = r'''
import hashlib, json, sys
import elastisched
from elastisched import native
out = {}
philly, pollux = "philly:jobs=3000,seed=1", "pollux:workload-3"
for workload, policy, cluster in [(philly, "fifo", "pai"), (philly, "tiresias", "pai"),
                                  (pollux, "elastisched", "16x4:t4"), (pollux, "pollux", "16x4:t4"),
                                  (pollux, "lyra_scaled", "16x4:t4")]:
    run = elastisched.simulate(workload, policy, cluster, seed=1)
    s = {k: v for k, v in run.summary_dict.items() if k not in ("wall_seconds", "compiled_modules")
         and not k.startswith("decision_ms")}
    text = run.jobs.to_csv() + run.timeline.to_csv() + json.dumps(s, sort_keys=True, default=str)
    out[f"{policy} {workload}"] = (hashlib.sha256(text.encode()).hexdigest(), s["n_finished"])
imported = sorted(m for m in native.MODULES if m in sys.modules)
print(json.dumps({"runs": out, "loaded": native.loaded(), "imported": imported}))
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every module of `native.MODULES`, compiled (about a minute on two cores)."""
    dest = tmp_path_factory.mktemp("native")
    try:
        build(dest)
    except NativeBuildError as e:
        if os.environ.get("CI") == "true":  # .ci/run installs a C compiler; Cython is in the dev extra
            raise
        pytest.skip(f"no compiled core here: {e}")
    return dest


def _python(code: str, native_dir: Path | None, *args: str, off: bool = False) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (native.DIR_ENV, native.OFF_ENV)}
    env.update({"OPENBLAS_NUM_THREADS": "1", native.DIR_ENV: str(native_dir or "/nonexistent")})
    if off:
        env[native.OFF_ENV] = "0"
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=600, check=False)


def test_whole_runs_are_the_same_compiled_and_from_source(built: Path) -> None:
    compiled = _python(RUNS, built)
    source = _python(RUNS, built, off=True)
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    assert source.returncode == 0, source.stderr[-3000:]
    c, s = json.loads(compiled.stdout), json.loads(source.stdout)
    assert s["loaded"] == [] and c["imported"] == s["imported"]
    assert c["loaded"] == c["imported"], "every compiled module a run imported came from the build"
    assert len(c["loaded"]) >= len(native.MODULES) - 2  # (the runs touch nearly all of them)
    assert c["runs"] == s["runs"]
    assert all(n > 0 for _, n in c["runs"].values())


def _with_manifest(built: Path, dest: Path, change: dict[str, object]) -> Path:
    shutil.copytree(built, dest)
    manifest = json.loads((built / native.MANIFEST).read_text())
    for key, value in change.items():
        if key in manifest["modules"]:
            manifest["modules"][key]["sha256"] = value
        else:
            manifest[key] = value
    (dest / native.MANIFEST).write_text(json.dumps(manifest))
    return dest


SHOW = ("import json, elastisched.sim.simulator as s, elastisched.sim.timing as t; from elastisched import native; "
        "print(json.dumps([native.loaded(), s.__file__, t.__file__]))")


def test_a_module_whose_source_changed_is_imported_from_source(built: Path, tmp_path: Path) -> None:
    stale = _with_manifest(built, tmp_path / "b", {"elastisched.sim.timing": "0" * 64})
    r = _python(SHOW, stale)
    assert r.returncode == 0, r.stderr
    loaded, sim_file, timing_file = json.loads(r.stdout)
    assert "elastisched.sim.simulator" in loaded and sim_file.endswith(".so")
    assert "elastisched.sim.timing" not in loaded and timing_file.endswith("timing.py")
    assert "elastisched.sim.timing changed since the compiled core was built" in r.stderr


def test_a_build_for_another_python_or_switched_off_is_not_used(built: Path, tmp_path: Path) -> None:
    foreign = _with_manifest(built, tmp_path / "b", {"ext_suffix": ".cpython-299-other.so"})
    r = _python(SHOW, foreign)
    assert r.returncode == 0 and json.loads(r.stdout)[0] == []
    assert "built for '.cpython-299-other.so'" in r.stderr
    r = _python(SHOW, built, off=True)
    assert r.returncode == 0 and json.loads(r.stdout)[0] == [] and r.stderr == ""
    r = _python(SHOW, built)
    assert r.returncode == 0 and len(json.loads(r.stdout)[0]) > 5 and r.stderr == ""


def test_status_names_each_module(built: Path, tmp_path: Path) -> None:
    stale = _with_manifest(built, tmp_path / "b", {"elastisched.sim.table": "0" * 64})
    (stale / json.loads((stale / native.MANIFEST).read_text())["modules"]["elastisched.sim.idle"]["file"]).unlink()
    r = _python("from elastisched.native.__main__ import main; main(['status'])", stale)
    lines = dict(reversed(line.split()) for line in r.stdout.splitlines())
    assert lines["elastisched.sim.table"] == "stale" and lines["elastisched.sim.idle"] == "missing"
    assert lines["elastisched.sim.simulator"] == "compiled" and len(lines) == len(native.MODULES)


def test_the_sim_and_engine_tests_pass_compiled(built: Path) -> None:
    env = {**os.environ, native.DIR_ENV: str(built), "OPENBLAS_NUM_THREADS": "1"}
    env.pop(native.OFF_ENV, None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "tests/sim",
                        "tests/engine", "tests/policies/test_tiresias_walk.py"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_building_without_cython_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "Cython", None)
    with pytest.raises(NativeBuildError, match=r"pip install -e '\.\[native\]'"):
        build(tmp_path)
    assert not (tmp_path / native.MANIFEST).exists()
