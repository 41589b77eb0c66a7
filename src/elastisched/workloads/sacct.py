"""A Slurm cluster's own accounting (`sacct --parsable2`) as a workload: its GPU jobs, replayed by the simulator.

`sacct -a -S 2026-11-01 -E 2026-12-01 --parsable2 -o JobID,JobName,Submit,Start,End,Elapsed,State,AllocTRES,
ReqTRES` (docs/slurm.md, "Your cluster's history"). Columns are found by sacct's names in the header, in any
order; `JobID`, `Submit`, `Start`, `State` and one of `AllocTRES`/`ReqTRES` are required, `End` or `Elapsed`
gives the run time (`End` − `Start` when both are known). How rows become jobs (our readings, written down):

- A job step (`123.batch`, `123.extern`, `123.0`) is skipped: the job's own row holds its allocation.
- An array element (`123_4`) is a job of its own; a pending array's summary row (`123_[5-9%2]`) never ran.
- The components of a heterogeneous job (`123+0`, `123+1`) are one job: their GPUs add up, it starts at the
  first component's start and ends at the last one's end.
- A job run more than once (requeued; `sacct --duplicates`) keeps each run, named `123`, `123~2`, ...
- GPUs come from `AllocTRES` (what the job held), else `ReqTRES`: `gres/gpu=N`, else the sum of the typed
  `gres/gpu:TYPE=N`. A job without a GPU is not a GPU job and is left out.
- Only jobs that ran are kept: a start and a run time above zero. Jobs still PENDING or RUNNING, and those
  cancelled before they started, have no length. `ended=all` (the default) keeps every job that ran, whatever
  its end (FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED held their GPUs for their elapsed
  time, which is the load the cluster carried); `ended=completed` keeps COMPLETED jobs only.
- GPU type: the TRES's type (`gres/gpu:a100`), mapped by `map=a100:t4+h100:t4` to a profiled type; a type the
  profiles know is kept, anything else (or no type) becomes `default_type` (t4, the bundled profiles' type).
  The job's length is priced on that type; its Slurm type is kept in `attrs["slurm_gpu_type"]`.
- The application, batch and amount of work follow the raw-trace rule (`traces.py`): an application by GPU-time
  bucket, and a `work_scale` such that at its Slurm size it runs exactly its elapsed time.

Times without a zone (sacct prints the cluster's local time) are read as UTC and rebased to the first
submission, so only differences matter. Every bad cell is one `WorkloadError` naming the line and column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from elastisched.core.errors import ConfigError, WorkloadError
from elastisched.core.types import JobSpec
from elastisched.models.registry import PerfModels
from elastisched.workloads._sacct_rows import read_runs
from elastisched.workloads.schema import MAX_TIME, Workload, file_digest, finish, read_text
from elastisched.workloads.traces import application_for

ENDED = ("all", "completed")


@dataclass(frozen=True)
class SacctOptions:
    ended: str = "all"
    default_type: str = "t4"
    gpu_map: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def parse(opts: Mapping[str, str]) -> SacctOptions:
        ended = opts.get("ended", "all")
        if ended not in ENDED:
            raise ConfigError("sacct:ended", ended, f"must be one of {', '.join(ENDED)}")
        pairs: dict[str, str] = {}
        for part in filter(None, opts.get("map", "").split("+")):
            src, sep, dst = part.partition(":")
            if not sep or not src.strip() or not dst.strip():
                raise ConfigError("sacct:map", part, "must be SLURM_TYPE:PROFILED_TYPE pairs joined by '+'")
            pairs[src.strip().lower()] = dst.strip().lower()
        return SacctOptions(ended, opts.get("default_type", "t4").lower(), pairs)




def load_sacct(path: str | Path, models: PerfModels, opts: SacctOptions | None = None, *,
               gpus_per_node: int = 4, name: str | None = None) -> Workload:
    """The GPU jobs of a `sacct --parsable2` file as a workload (module docstring: what is kept and how)."""
    opts = opts or SacctOptions()
    path = Path(path)
    p = str(path)
    runs = read_runs(p, read_text(path))
    keep = [r for r in runs if r.gpus > 0 and r.start is not None and r.end is not None and r.end > r.start
            and (opts.ended == "all" or r.state == "COMPLETED")]
    if not keep:
        why = "" if any(r.gpus for r in runs) else (" and no row has gres/gpu in its TRES (the cluster's "
                                                   "AccountingStorageTRES must list gres/gpu; docs/slurm.md)")
        raise WorkloadError(p, 1, "rows", len(runs), f"no GPU job that ran (of {len(runs)} jobs; ended="
                            f"{opts.ended}): pending, running and CPU-only jobs are left out{why}")
    t0 = min(r.submit for r in keep)
    profiled = {t for a in models.apps for t in models.app(a).gpu_types}
    cache: dict[tuple[str, str, int], float] = {}
    jobs: list[tuple[int, JobSpec]] = []
    for r in keep:
        if r.submit - t0 > MAX_TIME:
            raise WorkloadError(p, r.line, "Submit", r.submit, f"{r.submit - t0:.0f} s after the first job; a "
                                f"workload may span at most {MAX_TIME:.0f} s")
        gtype = opts.gpu_map.get(r.gpu_type or "", r.gpu_type)
        gtype = gtype if gtype in profiled else opts.default_type
        d = float(r.end - r.start)  # type: ignore[operator]
        app_name = application_for(d * r.gpus / 3600.0, r.line)
        app = models.app(app_name)
        g = min(r.gpus, app.max_batch_size // app.min_local_bsz)
        batch = int(min(max(app.init_batch_size * g, app.init_batch_size), app.max_batch_size))
        key = (app_name, gtype, g)
        if key not in cache:
            cache[key] = app.run_seconds(gtype, g, batch, gpus_per_node)
        jobs.append((r.line, JobSpec(job_id=r.name, submit_time=max(0.0, r.submit - t0), application=app_name,
                                     num_gpus=g, batch_size=batch, min_gpus=g, max_gpus=g, work_scale=d / cache[key],
                                     duration=d, attrs={"slurm_gpu_type": r.gpu_type or "", "slurm_state": r.state,
                                                        "gpus": r.gpus})))
    return finish(p, name or path.name.split(".")[0], jobs, file_digest(path))
