"""A `sacct` log produced by a real Slurm (tests/slurm_cluster.py, accounting through slurmdbd and MariaDB) loads
and simulates: GPU jobs, an array, a job with a step, a heterogeneous job, one that fails, one cancelled while
it runs, one still pending and a CPU-only one, each kept or left out as workloads/sacct.py says."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from elastisched.cli.main import app
from elastisched.models import PerfModels
from elastisched.workloads import load_workload

NAME = "sacct-t"
COLUMNS = "JobID,JobName,Partition,User,Submit,Start,End,Elapsed,State,ExitCode,NNodes,AllocTRES,ReqTRES"


def _submit_all(c: Any, tmp: Path) -> dict[str, str]:
    het = tmp / "het.sh"
    het.write_text("#!/bin/sh\nsleep 2\n")
    run = lambda *a: c.tool("sbatch", "--parsable", f"--job-name={NAME}", "--output=/dev/null", *a).strip()  # noqa: E731
    ids = {
        "one": run("-p", "train", "--gres=gpu:t4:1", "--wrap", "sleep 2"),
        "two": run("-p", "train", "--gres=gpu:t4:2", "--wrap", "sleep 3"),
        "array": run("-p", "train", "--gres=gpu:t4:1", "--array=1-3", "--wrap", "sleep 1"),
        "step": run("-p", "train", "--gres=gpu:t4:1", "--wrap", "srun sleep 1"),
        "fails": run("-p", "train", "--gres=gpu:t4:1", "--wrap", "sleep 1; exit 3"),
        "cancel": run("-p", "train", "--gres=gpu:t4:1", "--wrap", "sleep 300"),
        "pending": run("-p", "train", "--gres=gpu:t4:1", "--begin=now+3600", "--wrap", "sleep 1"),
        "cpu": run("-p", "train", "--wrap", "sleep 1"),
        "het": run("-p", "train", "-w", "n1", "--gres=gpu:t4:1", ":", "-p", "train", "-w", "n2",
                   "--gres=gpu:t4:1", str(het)),
    }
    return {k: v.split(";")[0] for k, v in ids.items()}


def _wait(c: Any, pred: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}: {c.tool('squeue', check=False)}")


def test_a_sacct_log_of_the_test_cluster_loads_and_simulates(slurm_cluster: Any, tmp_path: Path,
                                                            models: PerfModels) -> None:
    c = slurm_cluster
    ids = _submit_all(c, tmp_path)
    state = lambda j: c.tool("squeue", "-h", "-j", j, "-o", "%T", check=False).strip()  # noqa: E731
    _wait(c, lambda: state(ids["cancel"]) == "RUNNING", 60, "the job to cancel running")
    time.sleep(1.5)
    c.tool("scancel", ids["cancel"])
    left = lambda: {ln for ln in c.tool("squeue", "-h", "-n", NAME, "-o", "%i %T").splitlines()}  # noqa: E731
    _wait(c, lambda: all(s.endswith("PENDING") and s.split()[0] == ids["pending"] for s in left()), 120,
          "every job but the pending one to end")

    def log() -> str:
        return c.tool("sacct", "-a", "--parsable2", f"--name={NAME}", "-S", "now-1hour", "-o", COLUMNS)

    text = _wait(c, lambda: (t := log()) and t.count("\n") > 12 and "RUNNING" not in t and t, 60,
                 "the accounting to catch up")
    f = tmp_path / "cluster.sacct"
    f.write_text(text)
    print(text)
    w = load_workload(str(f), models)
    kept = {j.job_id: (j.num_gpus, j.attrs["slurm_state"]) for j in w.jobs}
    arr = ids["array"]
    want = {ids["one"]: (1, "COMPLETED"), ids["two"]: (2, "COMPLETED"), ids["step"]: (1, "COMPLETED"),
            **{f"{arr}_{k}": (1, "COMPLETED") for k in (1, 2, 3)}, ids["fails"]: (1, "FAILED"),
            ids["cancel"]: (1, "CANCELLED"), ids["het"]: (2, "COMPLETED")}
    assert kept == want, (kept, want)  # the pending and the CPU-only jobs are left out, the steps skipped
    assert all(j.duration is not None and j.duration >= 1 for j in w.jobs)
    done = load_workload(f"sacct:{f}?ended=completed", models)
    assert {j.job_id for j in done.jobs} == {k for k, v in want.items() if v[1] == "COMPLETED"}
    r = CliRunner().invoke(app, ["sim", "run", "--workload", str(f), "--policy", "fifo", "--cluster", "2x2:t4",
                                 "--out", str(tmp_path / "sim")])
    assert r.exit_code == 0, r.output
    assert len((tmp_path / "sim" / "jobs.csv").read_text().splitlines()) == 1 + len(want)
    r = CliRunner().invoke(app, ["trace", "describe", str(f), "--out", str(tmp_path / "d"), "--cluster", "2x2:t4"])
    assert r.exit_code == 0, r.output
