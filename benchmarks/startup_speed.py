"""Start-up speed of the command line (issue 15), one run, in separate processes:
- `elastisched --help` and `elastisched ls` (a client command; no server listening, so it fails fast after
  its imports): wall seconds, best of 5; target ≤ 0.5 s;
- one whole `elastisched sim run -p tiresias -w pollux:workload-6`: CPU seconds of the process (user + sys,
  imports, profile loading, fits (cached on disk after the first run), simulation, files); target ≤ 1 s;
- the same with the fit cache disabled (cold), for the ratio.
Writes startup_speed.json. Run: `python benchmarks/startup_speed.py --out results/bench`.
"""

from __future__ import annotations

import argparse
import json
import os
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path("results/bench"))
    a = ap.parse_args()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    out: dict[str, Any] = {"python": sys.version.split()[0], "load_average_before": os.getloadavg()}
    out["help_wall_s"] = min(_run([*EXE, "--help"], env)[0] for _ in range(5))
    out["ls_wall_s"] = min(_run([*EXE, "ls", "--server", "http://127.0.0.1:9"], env)[0] for _ in range(5))
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
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["targets"] = {"help_wall_s": 0.5, "ls_wall_s": 0.5, "sim_run_tiresias_w6_cpu_s": 1.0}
    out["met"] = {k: out[k] <= v for k, v in out["targets"].items()}
    out["load_average_after"] = os.getloadavg()
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "startup_speed.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
