"""`sacct --parsable2` logs as workloads (workloads/sacct.py): the synthetic log (arrays, steps, pending and
cancelled jobs, a heterogeneous job, a requeued one, CPU-only and running jobs) loads, is described, planned and
simulated; every bad cell is named by line and column; a fuzzed corpus gives one-line errors, never a traceback."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from elastisched.cli.main import app
from elastisched.core.errors import ConfigError, ElastischedError, WorkloadError
from elastisched.models import PerfModels
from elastisched.workloads import load_workload

SYNTH = Path(__file__).parent / "data" / "sacct_synthetic.txt"
HEADER = "JobID|JobName|Submit|Start|End|Elapsed|State|AllocTRES|ReqTRES"
GOOD = ("7|x|2026-11-02T08:00:00|2026-11-02T08:00:05|2026-11-02T09:00:05|01:00:00|COMPLETED|"
        "cpu=2,gres/gpu:t4=2,gres/gpu=2|")


def test_synthetic_log_keeps_the_gpu_jobs_that_ran(models: PerfModels) -> None:
    w = load_workload(str(SYNTH), models)
    got = {j.job_id: (j.num_gpus, j.duration, j.attrs["slurm_state"]) for j in w.jobs}
    assert got == {  # steps skipped; 1003_[5-8], 1006 pending, 1007 cancelled before start, 1010 running, 1005 CPU
        "1001": (4, 10800.0, "COMPLETED"), "1002": (1, 1800.0, "COMPLETED"), "1003_1": (1, 1200.0, "COMPLETED"),
        "1003_2": (1, 1500.0, "COMPLETED"), "1003_3": (1, 570.0, "FAILED"), "1003_4": (1, 3600.0, "TIMEOUT"),
        "1004": (6, 7200.0, "COMPLETED"),  # het components 4 + 2 GPUs: one job
        "1008": (2, 2400.0, "CANCELLED"), "1009": (8, 4200.0, "NODE_FAIL"), "1009~2": (8, 7200.0, "COMPLETED"),
        "1011": (1, 1800.0, "COMPLETED"), "1012": (2, 120.0, "OUT_OF_MEMORY")}
    assert w.jobs[0].submit_time == 0.0 and {j.job_id: j.submit_time for j in w.jobs}["1002"] == 600.0
    assert {j.job_id: j.attrs["slurm_gpu_type"] for j in w.jobs}["1001"] == "a100"
    done = load_workload(f"sacct:{SYNTH}?ended=completed", models)
    assert [j.job_id for j in done.jobs] == ["1001", "1002", "1003_1", "1003_2", "1004", "1009~2", "1011"]


def test_work_is_priced_so_a_job_runs_its_elapsed_time_at_its_size(models: PerfModels) -> None:
    for j in load_workload(str(SYNTH), models).jobs:
        app = models.app(j.application)
        assert app.run_seconds("t4", j.num_gpus, j.batch_size, 4) * j.work_scale == pytest.approx(j.duration)


def test_options_are_checked(models: PerfModels) -> None:
    with pytest.raises(ConfigError, match="sacct:ended"):
        load_workload(f"sacct:{SYNTH}?ended=some", models)
    with pytest.raises(ConfigError, match="sacct:map"):
        load_workload(f"sacct:{SYNTH}?map=a100", models)
    with pytest.raises(ConfigError, match="unknown option"):
        load_workload(f"sacct:{SYNTH}?colour=red", models)


@pytest.mark.parametrize(("row", "line", "column"), [
    (GOOD.replace("7|", "7x|", 1), 2, "JobID"),
    (GOOD.replace("2026-11-02T08:00:05", "yesterday", 1), 2, "Start"),
    (GOOD.replace("01:00:00", "1:99:00"), 2, "Elapsed"),
    (GOOD.replace("COMPLETED", "DONE"), 2, "State"),
    (GOOD.replace("gres/gpu=2", "gres/gpu=two"), 2, "AllocTRES"),
    (GOOD.replace("2026-11-02T09:00:05", "2026-11-02T07:00:00"), 2, "End"),
    (GOOD + "|extra", 2, "row"),
])
def test_a_bad_cell_is_named_by_line_and_column(tmp_path: Path, models: PerfModels, row: str, line: int,
                                                column: str) -> None:
    f = tmp_path / "bad.sacct"
    f.write_text(f"{HEADER}\n{row}\n")
    with pytest.raises(WorkloadError) as e:
        load_workload(str(f), models)
    assert (e.value.line, e.value.column) == (line, column), str(e.value)
    assert str(f) in str(e.value) and "\n" not in str(e.value)


def test_missing_columns_say_what_sacct_to_run(tmp_path: Path, models: PerfModels) -> None:
    f = tmp_path / "cols.txt"
    f.write_text("JobID|State\n1|COMPLETED\n")
    with pytest.raises(WorkloadError, match="sacct --parsable2 -o JobID"):
        load_workload(str(f), models)


NASTY = ["", " ", "|", "Unknown", "-1", "99999999999999999999999", "1e400", "nan", "2026-13-45T99:99:99",
         "\x00", "é", "gres/gpu=", "gres/gpu:=1", "gres/gpu=-3", "gres/gpu=70000", "123_[", "1.2.3", "+1", "0:0:0:0",
         "x" * 5000, "CANCELLED by", "2026-11-02T08:00:00+99:00", "--", "1-99:00:00"]


def _corpus(seed: int, n: int) -> list[str]:
    """Valid synthetic rows, each mutated once: a nasty value in one cell, a cell dropped or doubled, a cut row."""
    rng = random.Random(seed)
    rows = [ln for ln in SYNTH.read_text().splitlines()[1:]]
    out = []
    for _ in range(n):
        cells = rng.choice(rows).split("|")
        k = rng.randrange(len(cells))
        kind = rng.randrange(4)
        if kind == 0:
            cells[k] = rng.choice(NASTY)
        elif kind == 1:
            del cells[k]
        elif kind == 2:
            cells.insert(k, cells[k])
        else:
            cells = "|".join(cells)[: rng.randrange(1, 60)].split("|")
        out.append("|".join(cells))
    return out


def test_fuzzed_sacct_rows_give_one_line_errors_never_a_traceback(tmp_path: Path, models: PerfModels) -> None:
    header = SYNTH.read_text().splitlines()[0]
    good = SYNTH.read_text().splitlines()[1:]
    rejected = accepted = 0
    for i, bad in enumerate(_corpus(0, 400)):
        f = tmp_path / f"f{i}.txt"
        f.write_text("\n".join([header, *good[: i % len(good)], bad]) + "\n", encoding="utf-8", errors="surrogatepass")
        try:
            load_workload(str(f), models)
            accepted += 1  # a mutation that is still a valid row (e.g. a blank cell where blank is allowed)
        except ElastischedError as e:
            rejected += 1
            assert "\n" not in str(e) and len(str(e)) < 600, str(e)
            if isinstance(e, WorkloadError):
                assert e.line >= 1 and e.column, str(e)
    print(f"sacct fuzz: 400 mutated rows, {rejected} rejected with a one-line error, {accepted} still valid")
    assert rejected > 200


def test_describe_plan_and_simulate_the_synthetic_log(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["trace", "describe", str(SYNTH), "--out", str(tmp_path / "d"), "--cluster", "4x4:t4"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "d" / "describe.json").is_file()
    r = runner.invoke(app, ["plan", "--workload", str(SYNTH), "--out", str(tmp_path / "p"), "--cluster-sizes",
                            "8,16", "--policies", "fifo"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "p" / "plan.json").is_file()
    r = runner.invoke(app, ["sim", "run", "--workload", str(SYNTH), "--policy", "fifo", "--cluster", "2x4:t4",
                            "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    jobs = (tmp_path / "s" / "jobs.csv").read_text().splitlines()
    assert len(jobs) == 1 + 12  # every kept job ran to its end in the simulation
