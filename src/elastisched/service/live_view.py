"""What the policy sees in the live body: a frozen `ClusterSnapshot` built from the store's rows and the
engine's `JobState` of each job (as the simulator's: running jobs are brought up to now when the policy reads
progress), with each job's own performance model.

It is also where the daemon learns of a submission: the first time an active job's row is read, the job is
announced to the engine (`Engine.submitted`, which calls `policy.on_submit` once); after a restart every
active job is announced again on the first read, which the hook contract makes harmless.
"""

from __future__ import annotations

from typing import Any

from elastisched.core.clock import Clock
from elastisched.core.nodes import node_set
from elastisched.core.types import ClusterSnapshot, JobSpec, JobView, NodeView
from elastisched.engine.loop import Engine
from elastisched.models.application import Application
from elastisched.service.live_jobs import LiveJobs
from elastisched.service.store import Store
from elastisched.service.submission import job_spec, placement


class LiveView:
    """Specs and engine bookkeeping of the active jobs, and the models they are priced with."""

    def __init__(self, store: Store, engine: Engine, clock: Clock, epoch: float, models: Any = None,
                 profiles_dir: str | None = None) -> None:
        self.store = store
        self.engine = engine
        self.clock = clock
        self.epoch = epoch
        self.profiles_dir = profiles_dir
        self._perf: Any = models
        self._apps: set[str] | None = None
        self._specs: dict[str, tuple[int | None, JobSpec]] = {}  # immutable but for an admin size (resize_to)
        self.jobs = LiveJobs(self.model_of)  # the engine's bookkeeping (JobState) per active job
        # job -> the store row its state was last synced with: an unchanged row (the very same dict, the store's
        # mirror replaces a row when it changes) needs no sync; key "": the node tuple they were synced on
        self._seen: dict[str, Any] = {}

    def snapshot(self, nodes: tuple[NodeView, ...], reclaim_demand: int = 0) -> ClusterSnapshot:
        """The policy's view now: every active job but the held and the cancelled ones."""
        rows = self.store.active_light()
        self._read_specs(rows)
        now = self.clock.now()
        types = node_set(nodes).gpu_type
        fresh = self.engine.policy.needs_progress
        jobs: dict[str, JobView] = {}
        seen, states = self._seen, self.jobs.states
        if seen.get("", (nodes,))[0] is not nodes:  # other nodes: their GPU types may differ; sync every job
            seen.clear()
            seen[""] = (nodes,)
        for row in rows:
            if row["cancel_requested"] or row["held"]:
                continue
            jid = row["id"]
            st = states.get(jid)
            if st is None or seen.get(jid) is not row:  # the store's rows are replaced when they change
                place = placement(row["placement"]) if row["placement"] else ()
                st = self.jobs.sync(self._specs[jid][1], place, row["batch_size"], now, types, int(row["restarts"]))
                seen[jid] = row
            if fresh and row["placement"]:
                st.advance(now)
            jobs[jid] = st.make_view(now)
        return ClusterSnapshot(now, nodes, jobs, reclaim_demand)

    def _read_specs(self, rows: list[dict[str, Any]]) -> None:
        """(Re)build the spec of each row seen for the first time or resized by an admin since; announce the
        new jobs to the engine, in submission order (the store's), as the simulator does on arrival."""
        missing = [r["id"] for r in rows if self._specs.get(r["id"], (0,))[0] != r["resize_to"]]
        if not missing:
            return
        raw = self.store.specs(missing)
        now = self.clock.now()
        for r in rows:
            if r["id"] in raw:
                spec = job_spec(r["id"], r["name"], r["submit_time"] - self.epoch, raw[r["id"]], r["resize_to"])
                self._specs[r["id"]] = (r["resize_to"], spec)
                self.engine.submitted(spec, now)

    def model_of(self, spec: JobSpec) -> Application | None:
        """The job's own performance model, None when its application has no profile (the policy's model-free
        fallback then applies to this job alone); the models are loaded on the first profiled job."""
        if spec.application not in self.known_apps():
            return None
        perf = self.models()
        self.engine.ctx.perf = perf
        return perf.app(spec.application) if spec.application in perf else None

    def models(self) -> Any:
        """The bundled profiles plus `--profiles` (built on first use: a fit per application)."""
        if self._perf is None:
            from elastisched.service.profiles import load_models

            self._perf = load_models(self.profiles_dir)
        return self._perf

    def known_apps(self) -> set[str]:
        if self._apps is None:
            if self._perf is not None:
                self._apps = set(self._perf.apps)
            else:
                from elastisched.service.profiles import app_names

                self._apps = app_names(self.profiles_dir)
        return self._apps

    def forget(self, job_id: str) -> None:
        """The job ended: drop its bookkeeping and spec."""
        self.jobs.forget(job_id)
        self._specs.pop(job_id, None)
        self._seen.pop(job_id, None)
