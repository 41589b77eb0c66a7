"""Start-up speed of the command line (issue 15), one run, in separate processes:
- `elastisched --help` and `elastisched ls` (a client command; no server listening, so it fails fast after
  its imports): wall seconds, best of 5; target ≤ 0.5 s (CPU seconds recorded too: on a shared machine the
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
    """The Pollux artifact's Tiresias on workload-6: CPU and wall seconds of its process, its average JCT."""
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    ap.add_argument("--artifact", type=Path, help="the Pollux artifact's simulator/ folder")
    ap.add_argument("--artifact-python", default=sys.executable, help="Python with the artifact's requirements")
    a = ap.parse_args()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out: dict[str, Any] = {"python": sys.version.split()[0], "load_average_before": os.getloadavg()}
    helps = [_run([*EXE, "--help"], env) for _ in range(5)]
    lss = [_run([*EXE, "ls", "--server", "http://127.0.0.1:9"], env) for _ in range(5)]
    out["help_wall_s"], out["help_cpu_s"] = min(w for w, _, _ in helps), min(c for _, c, _ in helps)
    out["ls_wall_s"], out["ls_cpu_s"] = min(w for w, _, _ in lss), min(c for _, c, _ in lss)
    tmp = Path(tempfile.mkdtemp())
    try:
        run = [*EXE, "sim", "run", "-p", "tiresias", "-w", "pollux:workload-6", "--out", str(tmp / "r")]
        _run(run, env)  # fills the fit cache
        warm = [_run(run, env) for _ in range(3)]
        cold = [_run(run, {**env, "ELASTISCHED_CACHE_DIR": "off"}) for _ in range(2)]
        out["sim_run_tiresias_w6_cpu_s"] = min(c for _, c, _ in warm)
        out["sim_run_tiresias_w6_wall_s"] = min(w for w, _, _ in warm)
        out["sim_run_tiresias_w6_cold_cpu_s"] = min(c for _, c, _ in cold)
        out["exit_codes"] = sorted({rc for _, _, rc in warm + cold})
        out["sim_run_tiresias_w6_avg_jct"] = json.loads((tmp / "r" / "summary.json").read_text())["avg_jct"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["targets"] = {"help_wall_s": 0.5, "ls_wall_s": 0.5, "sim_run_tiresias_w6_cpu_s": 1.0}
    out["met"] = {k: out[k] <= v for k, v in out["targets"].items()}
    if a.artifact is not None:
        runs = [artifact_run(a.artifact, a.artifact_python, {**env, "MKL_NUM_THREADS": "1"}) for _ in range(2)]
        art = min(runs, key=lambda r: r["cpu_s"])
        out["pollux_artifact_tiresias_w6"] = {**art, "runs": runs, "folder": str(a.artifact)}
        out["speedup_vs_artifact_cpu"] = art["cpu_s"] / out["sim_run_tiresias_w6_cpu_s"]
        out["targets"]["speedup_vs_artifact_cpu"] = 25.0
        out["met"]["speedup_vs_artifact_cpu"] = out["speedup_vs_artifact_cpu"] >= 25.0
    out["load_average_after"] = os.getloadavg()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "startup_speed.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
