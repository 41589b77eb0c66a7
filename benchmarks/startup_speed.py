"""Start-up speed of the command line (issue 15), one run, in separate processes:
- `elastisched --help` and `elastisched ls` (a client command; no server listening, so it fails fast after
  its imports): wall seconds, best of 10; target ≤ 0.5 s (CPU seconds recorded too: on a shared machine the
  wall time also counts other processes' turns);
- one whole `elastisched sim run -p tiresias -w pollux:workload-6`: CPU seconds of the process (user + sys,
  imports, profile loading, fits and triangulations (cached on disk after the first run), simulation,
  files); target ≤ 1 s;
- the same with the fit cache disabled (cold), for the ratio;
- side by side, in the same run, the Pollux artifact's own Tiresias on workload-6 (petuum/adaptdl branch
  `osdi21-artifact`, `simulator/simulator.py --policy tiresias workloads/workload-6.csv`, one BLAS thread):
  CPU seconds of its process and its average JCT; target: ours ≥ 25× less CPU. `--artifact DIR` is the
  artifact's `simulator/` folder (fetched outside the project, never committed), `--artifact-python` a
  Python with its requirements (pandas, scipy, autograd, pymoo 0.4.2.1). numpy ≥ 1.20 dropped the aliases
  `np.float`/`np.int` that the artifact and pymoo 0.4 use: the launcher restores them (aliases of the
  builtins, as they were) and runs the unmodified script with `runpy`.
Both sides are measured the same way: a child process of this script, stdout and stderr piped, CPU = the
change in RUSAGE_CHILDREN (user + sys of the process and of every descendant it waited for) around it, wall =
around it; same environment (one BLAS thread) and byte-code caching on for both (PYTHONDONTWRITEBYTECODE is
dropped: a user's installed packages have their .pyc; with it set, our editable source would be recompiled
at every start while the artifact's site-packages keep theirs); best of 3 on each side after the caches
(.pyc, our fit cache) are filled. Ratios: CPU and wall, warm and cold (our fit cache off).
Writes startup_speed.json. Run: `python benchmarks/startup_speed.py --out results/bench
[--artifact /work/peers/adaptdl/simulator --artifact-python /work/peers/venv-pollux/bin/python]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EXE = [sys.executable, "-m", "elastisched"]


def _run(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(wall s, child CPU s, exit code) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(args, capture_output=True, env=env, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.returncode


ARTIFACT_LAUNCHER = ("import runpy, sys, numpy as np; np.float = float; np.int = int; sys.path.insert(0, '.');"
                     " sys.argv = ['simulator.py', '--policy', 'tiresias', 'workloads/workload-6.csv'];"
                     " runpy.run_path('simulator.py', run_name='__main__')")


def artifact_run(folder: Path, python: str, env: dict[str, str]) -> dict[str, Any]:
    """The Pollux artifact's Tiresias on workload-6: CPU and wall seconds of its process (children included, as
    for ours), its average JCT."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run([python, "-c", ARTIFACT_LAUNCHER], cwd=folder, env=env, capture_output=True, text=True,
                       check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    jcts = re.findall(r"^Average JCT: ([0-9.eE+-]+)$", p.stdout, re.MULTILINE)
    if p.returncode or not jcts:
        raise SystemExit(f"artifact run failed (exit {p.returncode}): {p.stderr[-2000:]}")
    return {"cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), "wall_s": wall,
            "avg_jct": float(jcts[-1])}


def _commit(folder: Path | None = None) -> str | None:
    p = subprocess.run(["git", "-C", str(folder or Path(__file__).parent), "rev-parse", "HEAD"], capture_output=True,
                       text=True, check=False)
    return p.stdout.strip() or None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    ap.add_argument("--artifact", type=Path, help="the Pollux artifact's simulator/ folder")
    ap.add_argument("--artifact-python", default=sys.executable, help="Python with the artifact's requirements")
    a = ap.parse_args()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out: dict[str, Any] = {"python": sys.version.split()[0], "commit": _commit(), "cpus": os.cpu_count(),
                           "load_average_before": os.getloadavg(),
                           "method": "each command a child process; CPU = RUSAGE_CHILDREN delta (user+sys, waited-for "
                                     "descendants included), wall around it; byte-code caching on; one BLAS thread; "
                                     "best of 3 (help/ls: of 10) after a warm-up, the same for the artifact"}
    _run([*EXE, "--help"], env)  # writes the .pyc files
    helps = [_run([*EXE, "--help"], env) for _ in range(10)]
    lss = [_run([*EXE, "ls", "--server", "http://127.0.0.1:9"], env) for _ in range(10)]
    out["help_wall_s"], out["help_cpu_s"] = min(w for w, _, _ in helps), min(c for _, c, _ in helps)
    out["ls_wall_s"], out["ls_cpu_s"] = min(w for w, _, _ in lss), min(c for _, c, _ in lss)
    tmp = Path(tempfile.mkdtemp())
    # our fit/interpolation cache: a private one, filled by the warm-up run (a user's second run), not the
    # machine's shared ~/.cache/elastisched that other runs keep growing
    env = {**env, "ELASTISCHED_CACHE_DIR": str(tmp / "cache")}
    try:
        run = [*EXE, "sim", "run", "-p", "tiresias", "-w", "pollux:workload-6", "--out", str(tmp / "r")]
        _run(run, env)  # fills the fit cache and writes the .pyc files
        warm = [_run(run, env) for _ in range(3)]
        cold = [_run(run, {**env, "ELASTISCHED_CACHE_DIR": "off"}) for _ in range(2)]
        out["sim_run_tiresias_w6_cpu_s"] = min(c for _, c, _ in warm)
        out["sim_run_tiresias_w6_wall_s"] = min(w for w, _, _ in warm)
        out["sim_run_tiresias_w6_cold_cpu_s"] = min(c for _, c, _ in cold)
        out["sim_run_tiresias_w6_cold_wall_s"] = min(w for w, _, _ in cold)
        out["sim_run_tiresias_w6_runs"] = {"warm": [{"cpu_s": c, "wall_s": w} for w, c, _ in warm],
                                           "cold": [{"cpu_s": c, "wall_s": w} for w, c, _ in cold]}
        out["exit_codes"] = sorted({rc for _, _, rc in warm + cold})
        out["sim_run_tiresias_w6_avg_jct"] = json.loads((tmp / "r" / "summary.json").read_text())["avg_jct"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["targets"] = {"help_wall_s": 0.5, "ls_wall_s": 0.5, "sim_run_tiresias_w6_cpu_s": 1.0}
    out["met"] = {k: out[k] <= v for k, v in out["targets"].items()}
    if a.artifact is not None:
        artifact_run(a.artifact, a.artifact_python, env)  # warm-up: writes the artifact's .pyc files
        runs = [artifact_run(a.artifact, a.artifact_python, env) for _ in range(3)]
        art_cpu, art_wall = min(r["cpu_s"] for r in runs), min(r["wall_s"] for r in runs)
        out["pollux_artifact_tiresias_w6"] = {"cpu_s": art_cpu, "wall_s": art_wall, "avg_jct": runs[0]["avg_jct"],
                                              "runs": runs, "folder": str(a.artifact),
                                              "commit": _commit(a.artifact)}
        out["speedup_vs_artifact_cpu"] = art_cpu / out["sim_run_tiresias_w6_cpu_s"]
        out["speedup_vs_artifact_wall"] = art_wall / out["sim_run_tiresias_w6_wall_s"]
        out["speedup_vs_artifact_cpu_cold"] = art_cpu / out["sim_run_tiresias_w6_cold_cpu_s"]
        out["speedup_vs_artifact_wall_cold"] = art_wall / out["sim_run_tiresias_w6_cold_wall_s"]
        out["targets"]["speedup_vs_artifact_cpu"] = 25.0
        out["met"]["speedup_vs_artifact_cpu"] = out["speedup_vs_artifact_cpu"] >= 25.0
    out["load_average_after"] = os.getloadavg()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "startup_speed.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
