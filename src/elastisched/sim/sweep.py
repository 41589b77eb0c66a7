"""Simulation sweeps: policies × workloads × seeds (× clusters), one cell per simulation, run in parallel.

Cells run in a local process pool by default, or as Ray tasks on an existing cluster (`ray_address`), with
nothing home-made in between. Every cell is an independent, deterministic simulation (its seed is part of
the cell), so a parallel sweep gives exactly the summaries of a serial one. A cell that raises is recorded
with its error and the sweep goes on; aggregation uses the cells that finished and counts the others.
Each worker process loads a (workload, cluster) set-up once and reuses it for the cells it is given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from functools import lru_cache
from multiprocessing import get_context
from typing import Any

from elastisched.core.errors import ConfigError
from elastisched.sim.length_estimate import LengthEstimate

#: metrics aggregated per (policy, workload, cluster): name → header with unit
METRICS: dict[str, str] = {
    "avg_jct": "avg JCT (s)", "p95_jct": "p95 JCT (s)", "avg_queue": "avg queue (s)",
    "p95_queue": "p95 queue (s)", "makespan": "makespan (s)",
    "gpu_utilization": "GPU utilisation (%)", "gpu_hours": "GPU-hours", "restarts": "restarts",
    "n_finished": "jobs finished", "wall_seconds": "wall (s)",
}
_RANGE = re.compile(r"^(?P<head>.*?)(?P<lo>\d+)\.\.(?P<hi>\d+)$")


@dataclass(frozen=True, slots=True)
class Cell:
    workload: str
    cluster: str
    policy: str
    seed: int
    profiles: str | None = None
    restart_cost: float | None = None
    length_estimate: str = "exact"  # `sim.length_estimate` text: what jobs declare about their length


@dataclass(slots=True)
class CellResult:
    cell: Cell
    summary: dict[str, Any] | None  # the run's summary figures; None when the cell failed
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def expand(spec: str) -> list[str]:
    """`pollux:workload-1..8` → the eight names; anything else unchanged (one item)."""
    m = _RANGE.match(spec)
    if m is None:
        return [spec]
    lo, hi = int(m["lo"]), int(m["hi"])
    if hi < lo or hi - lo > 10_000:
        raise ConfigError("range", spec, "must be LO..HI with LO <= HI and at most 10,000 items")
    return [f"{m['head']}{i}" for i in range(lo, hi + 1)]


def parse_seeds(text: str) -> list[int]:
    """`0,1,2` or `0..4` → seeds (non-negative integers, duplicates removed, order kept)."""
    out: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        for item in expand(part) if ".." in part else [part]:
            if not item.isascii() or not item.isdigit():
                raise ConfigError("--seeds", text, f"{item!r} is not a non-negative integer (use 0,1,2 or 0..2)")
            if int(item) not in out:
                out.append(int(item))
    if not out:
        raise ConfigError("--seeds", text, "no seed given")
    return out


def make_cells(workloads: Sequence[str], policies: Sequence[str], seeds: Sequence[int],
               clusters: Sequence[str], profiles: str | None = None,
               restart_cost: float | None = None, length_estimate: str = "exact") -> list[Cell]:
    """The cross product, in a stable order (workload, cluster, policy, seed)."""
    LengthEstimate.parse(length_estimate)  # a bad value fails here, not in every cell
    for field, items in (("--workload", workloads), ("--policies", policies), ("--seeds", seeds),
                         ("--cluster", clusters)):
        if not items:
            raise ConfigError(field, "", "is empty")
    return [Cell(w, c, p, s, profiles, restart_cost, length_estimate)
            for w in workloads for c in clusters for p in policies for s in seeds]


@lru_cache(maxsize=8)
def _setup(workload: str, cluster: str, profiles: str | None, restart_cost: float | None) -> Any:
    from elastisched.sim.runner import setup

    return setup(workload, cluster, profiles, restart_cost)


def run_cell(cell: Cell) -> CellResult:
    """One simulation; any error becomes the cell's recorded error (the sweep goes on)."""
    try:
        from elastisched.sim.runner import run_policies

        s = _setup(cell.workload, cell.cluster, cell.profiles, cell.restart_cost)
        estimate = LengthEstimate.parse(cell.length_estimate)
        res = next(iter(run_policies(s, [cell.policy], cell.seed, length_estimate=estimate).values()))
        sm = {k: v for k, v in res.summary.items() if isinstance(v, int | float | str) and not isinstance(v, bool)}
        sm["gpu_hours"] = float(res.jobs["gpu_seconds"].sum()) / 3600.0 if len(res.jobs) else 0.0
        return CellResult(cell, sm)
    except Exception as e:  # a failed cell is reported, not fatal
        return CellResult(cell, None, f"{type(e).__name__}: {e}")


Progress = Callable[[int, int], None]  # (cells done, cells total)


def run_sweep(cells: Sequence[Cell], workers: int = 1, ray_address: str | None = None,
              progress: Progress | None = None) -> list[CellResult]:
    """Every cell's result, in the order of `cells`."""
    if workers < 1:
        raise ConfigError("--workers", workers, "must be >= 1")
    if ray_address is not None:
        return _run_ray(cells, ray_address, progress)
    if workers == 1 or len(cells) <= 1:
        out = []
        for i, c in enumerate(cells):
            out.append(run_cell(c))
            if progress:
                progress(i + 1, len(cells))
        return out
    return _run_pool(cells, workers, progress)


def _run_pool(cells: Sequence[Cell], workers: int, progress: Progress | None) -> list[CellResult]:
    results: list[CellResult | None] = [None] * len(cells)
    # spawn: a clean interpreter per worker (no inherited threads or locks from the caller's process)
    with ProcessPoolExecutor(max_workers=min(workers, len(cells)), mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(run_cell, c): i for i, c in enumerate(cells)}
        for done, fut in enumerate(as_completed(futures), 1):
            i = futures[fut]
            try:
                results[i] = fut.result()
            except BrokenProcessPool as e:  # a worker died (killed, out of memory): its cells are failures
                results[i] = CellResult(cells[i], None, f"worker process died: {e}")
            if progress:
                progress(done, len(cells))
    return [r for r in results if r is not None]


def _run_ray(cells: Sequence[Cell], address: str, progress: Progress | None) -> list[CellResult]:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray-address", address, "Ray is not installed (pip install 'elastisched[ray]')") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(run_cell)
        refs = {remote.remote(c): i for i, c in enumerate(cells)}
        results: list[CellResult | None] = [None] * len(cells)
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                i = refs[ref]
                try:
                    results[i] = ray.get(ref)
                except Exception as e:  # the task's worker or node died
                    results[i] = CellResult(cells[i], None, f"Ray task failed: {type(e).__name__}: {e}")
            if progress:
                progress(len(cells) - len(pending), len(cells))
        return [r for r in results if r is not None]
    finally:
        if started:
            ray.shutdown()


def _t95(n: int) -> float:
    """Two-sided 95 % Student-t quantile for n samples (n - 1 degrees of freedom)."""
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1)) if n > 1 else math.nan


def aggregate(results: Iterable[CellResult]) -> list[dict[str, Any]]:
    """One row per (policy, workload, cluster): mean and 95 % interval half-width of every metric."""
    groups: dict[tuple[str, str, str], list[CellResult]] = {}
    for r in results:
        groups.setdefault((r.cell.policy, r.cell.workload, r.cell.cluster), []).append(r)
    rows = []
    for (pol, wl, cl), rs in groups.items():
        ok = [r.summary for r in rs if r.summary is not None]
        row: dict[str, Any] = {"policy": pol, "workload": wl, "cluster": cl, "seeds": len(ok),
                               "failed": len(rs) - len(ok), "seed_invariant": seed_invariant(ok)}
        for m in METRICS:
            xs = [float(s[m]) for s in ok if m in s and math.isfinite(float(s[m]))]
            mean = sum(xs) / len(xs) if xs else math.nan
            if len(xs) > 1:
                sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
                half = _t95(len(xs)) * sd / math.sqrt(len(xs))
            else:
                half = math.nan
            row[m], row[f"{m}_ci95"] = mean, half
        rows.append(row)
    return rows


def seed_invariant(summaries: Sequence[dict[str, Any]]) -> bool:
    """Whether several seeds gave the very same run (every figure but the wall time): the policy and the
    workload ignore the seed, so its interval says nothing."""
    def key(s: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(s.get(m) for m in METRICS if m != "wall_seconds")

    return len(summaries) > 1 and len({key(s) for s in summaries}) == 1


def cell_rows(results: Iterable[CellResult]) -> list[dict[str, Any]]:
    """Every cell as one flat row (config, status, error, metrics) for `cells.csv`."""
    out = []
    for r in results:
        row: dict[str, Any] = {**asdict(r.cell), "status": "ok" if r.ok else "failed", "error": r.error or ""}
        for m in METRICS:
            row[m] = (r.summary or {}).get(m, math.nan)
        out.append(row)
    return out
