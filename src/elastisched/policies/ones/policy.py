"""ONES (SC'21): online evolutionary search over per-job GPU counts (= batch sizes), ones.md §2, docs/ones.md.

One generation per round on a population of K slot arrays kept across rounds (`state_dict`): refresh to caps,
K uniform-crossover children (ξ), K job-drop mutants (θ), three-stage pad, truncation selection on predicted
remaining GPU-time, contiguous min-disruption reorder. Elasticity limits (§2.7) set the caps first; the best
individual is deployed only when every job it moves has done δ epochs since its last change (§2.9).

Online only: throughput comes from `JobView.observed_throughput` (one reading per finished epoch), progress
from the Beta-regression predictor on the job's per-epoch loss/accuracy log (`attrs` of the ONES trace,
indexed by epochs done = progress / `epoch_work`). `JobView.total_work` (the hidden convergence point) is
never read while a job runs. Bug fixes and readings: docs/ones.md.

Options and presets (`ones.presets`: "tuned" default, "faithful", "artifact"; docs/ones.md "Presets"): D1 `start`,
D2 `growth`, D3 `samples`, D4-D5 `fitness` (`ones.jct`), D6-D8, the artifact's rules, the restart-aware ones.
No I/O: the predictor's bootstrap data (`ones.history.FoldedHistory`, split by run so no job is
predicted by a model that saw it, or a `history_table`) arrives as `history=` or `ctx.options["ones_history"]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from elastisched.core.errors import ConfigError
from elastisched.core.types import Allocation, ClusterSnapshot, Decision, JobSpec, JobView, PendingReason
from elastisched.policies.base import Policy, PolicyContext, register
from elastisched.policies.ones import artifact as art
from elastisched.policies.ones import backfill as ones_backfill
from elastisched.policies.ones import deploy as dep
from elastisched.policies.ones import jct, ops
from elastisched.policies.ones import layout as ones_layout
from elastisched.policies.ones import predict as pred
from elastisched.policies.ones import state as ones_state
from elastisched.policies.ones.history import FoldedHistory
from elastisched.policies.ones.jobstate import OnesJobState
from elastisched.policies.ones.limits import big_jobs, no_log, start_size
from elastisched.policies.ones.limits import caps as limit_caps
from elastisched.policies.ones.online_throughput import OnlineThroughput
from elastisched.policies.ones.ops import job_batch
from elastisched.policies.ones.presets import PRESETS, build
from elastisched.policies.ones.presets import declared_options as ones_declared_options
from elastisched.policies.ones.progress_predictor import BetaProgressPredictor, HistoryTable

if TYPE_CHECKING:
    from elastisched.policies.options import Option

EMPTY = ops.EMPTY
HISTORY_OPTION = "ones_history"  # context option carrying the predictor's bootstrap table (loaded by the caller)
__all__ = ["EMPTY", "HISTORY_OPTION", "PRESETS", "OnesPolicy", "job_batch"]



#: finished jobs' run times kept for the scale-down median, the most recent ones (ones.md §2.7: "median
#: execution time over all jobs that have started"): a live service running for months must not save one
#: float per job it ever ran. Our bound, not the paper's; a run with fewer finished jobs decides as before.
FINISHED_RUN_TIMES_KEPT = 10_000


@register
class OnesPolicy(Policy):
    name = "ones"
    description = "ONES: online evolutionary search of per-job batch size / GPU count with online prediction."
    interval = 5.0
    elastic = True
    needs_progress = True

    @classmethod
    def declared_options(cls) -> tuple[Option, ...]:
        return ones_declared_options()

    def __init__(self, preset: str = "tuned", history: HistoryTable | FoldedHistory | None = None,
                 **options: Any) -> None:
        """`preset` with `options` on top (`OnesOptions`); `history` is the predictor's bootstrap data (loaded by
        the caller: policies do no I/O), else `ctx.options["ones_history"]` at the first round."""
        self.preset, self.opts = preset, build(preset, **options)
        self.options = self.opts.as_dict()
        self.interval = self.opts.interval  # type: ignore[misc]
        if history is not None and not isinstance(history, FoldedHistory) and not (isinstance(history, tuple)
                                                                              and len(history) == 2):
            raise ConfigError("history", type(history).__name__, "must be the (features, rho) table from "
                              "ones.progress_predictor.history_table, loaded by the caller (policies do no I/O)")
        self.history = history if self.opts.bootstrap else None
        self._idle = 0
        self._jct: tuple[np.ndarray, ...] = (np.zeros((1, 0)), np.zeros(0, dtype=np.int64), np.zeros(0, bool))
        self._quiet: dict[str, Any] | None = None  # signature of the last settled round (`quiet_s`)
        self.thr = OnlineThroughput()
        self._tab: tuple[list[str], np.ndarray, np.ndarray, np.ndarray] | None = None  # cached throughput tables
        self._xtab = np.zeros((1, 0))
        self._xcols: dict[str, tuple[Any, np.ndarray]] = {}  # `_xtable` columns per job
        self._layouts: tuple[Any, list[str], dict[bytes, np.ndarray]] = (None, [], {})  # reorder memo
        self.pred = BetaProgressPredictor()
        self.preds = [self.pred]  # one model per held-out fold of a `FoldedHistory` (no leakage), else one
        self._folds = history if isinstance(history, FoldedHistory) else None
        self._rng: np.random.Generator | None = None
        self.ids: list[str] = []  # job order of the genome columns (active jobs of the last round)
        self._specs: list[JobSpec] = []  # specs in the same order (this round)
        self._node_gpus = 0  # GPUs of the largest node (this round; 0 = unknown)
        self.pop: np.ndarray | None = None  # (K, C) job indices into `ids`
        self.slots: dict[str, list[int]] = {}  # deployed slots per job
        self.js: dict[str, OnesJobState] = {}  # per-job ONES state (ones.md §2.3)
        self.finished_run_times: list[float] = []
        self.capacity = 0

    def _ensure(self, ctx: PolicyContext) -> np.random.Generator:
        if self._rng is None:
            self._rng = np.random.default_rng(ctx.seed)
            table = self.history
            if table is None and self.opts.bootstrap:
                table = ctx.options.get(HISTORY_OPTION)
            if table is None and self.opts.require_history:
                raise ConfigError(HISTORY_OPTION, None, "ONES must bootstrap its progress predictor but no history "
                                  "table was given (load job_history.csv with history_table, pass history=)")
            if isinstance(table, FoldedHistory):  # a job is predicted by the model that never saw its run
                self._folds = table
            if table is not None and self.opts.bootstrap:
                self.preds = pred.bootstrap(self.preds, table, ctx.seed)
                self.pred = self.preds[0]
        return self._rng

    def on_finish(self, job_id: str, now: float) -> None:
        st = self.js.pop(job_id, None)
        self.thr.forget(job_id)
        self._xcols.pop(job_id, None)
        self.slots.pop(job_id, None)
        self._tab = None
        if st is None:
            return
        self.finished_run_times.append(st.run_time)
        if len(self.finished_run_times) > FINISHED_RUN_TIMES_KEPT:
            del self.finished_run_times[0]
        pred.learn(self.preds, st, self.opts.refit)

    # ------------------------------------------------------------------ per-job bookkeeping
    def _start_size(self, spec: JobSpec) -> int:
        """GPUs a new job is admitted with (D1, D9: `ones.limits.start_size`)."""
        idle = self._idle if self.opts.big_start else -1
        return start_size(spec, self.opts.start, self._node_gpus, idle, self.opts.big_start)

    def _observe(self, job: JobView) -> OnesJobState:
        """This round's view of a job in its ONES state (created on first sight); logs the epochs it finished."""
        jid, a = job.job_id, job.spec.attrs
        st = self.js.get(jid)
        if st is None:
            st = self.js[jid] = OnesJobState(self._start_size(job.spec), epoch_size=a.get("epoch_size"),
                                             fold=self._folds.fold_of_job(a) if self._folds is not None else 0)
        ew = float(a.get("epoch_work", 0.0))
        e = job.progress / ew if ew > 0 else float(job.epoch)
        st.e, st.run_time, st.samples = e, job.run_time, job.samples_done
        st.total_epochs = job.total_work / ew if ew > 0 else max(e, 1.0)  # read at completion only
        k = int(e + 1e-9)
        if k > st.logged:
            # a reading only for an epoch the job ran whole at its current size (no reading before a real epoch)
            if job.gpus and job.gpus in job.observed_throughput and st.last_change <= k - 1 + 1e-9:
                self.thr.observe(jid, job.gpus, job.observed_throughput[job.gpus])
                self._tab = None
            st.log_epochs(a, k)
        if job.gpus:
            st.ran = True
        return st

    def _caps(self, jobs: list[JobView], sts: list[OnesJobState], executed: np.ndarray, c: int,
              med_pool: list[float], tp_limit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """GA caps and max sizes (`ones.limits.caps`, ones.md §2.7)."""
        o = self.opts
        return limit_caps(jobs, sts, executed, c, med_pool, tp_limit, cap_factor=o.cap_factor,
                          artifact_gate=o.artifact_scale_gate, scale_gate=o.scale_gate_epochs, growth=o.growth,
                          sd_factor=o.scale_down_factor, once_per_epoch=o.double_once_per_epoch, soak=o.soak)

    # ------------------------------------------------------------------ layout helpers
    def _current(self, snap: ClusterSnapshot, index: dict[str, int], node_first: dict[str, int]) -> np.ndarray:
        """Deployed slot array (job indices) rebuilt from the snapshot and the slots we assigned."""
        return ones_layout.current(snap, self.slots, index, node_first, self._node_ids, self._node_of, self.capacity)

    def _allowed(self, job: JobView, sl: np.ndarray) -> bool:
        """Elastic bounds and GPU types (the genome is type-agnostic, like the artifact's one-type cluster)."""
        spec = job.spec
        if spec.elastic and not spec.min_gpus <= sl.size <= spec.gpu_cap:
            return False
        return not spec.gpu_types or all(self._node_types[int(n)] in spec.gpu_types for n in self._node_of[sl])

    def _allocation(self, spec: JobSpec, slot_list: np.ndarray) -> Allocation:
        nodes, cnt = np.unique(self._node_of[slot_list], return_counts=True)
        placement = tuple((self._node_ids[int(n)], int(g)) for n, g in zip(nodes, cnt, strict=True))
        return Allocation(placement, batch_size=job_batch(spec, int(slot_list.size)))

    # ------------------------------------------------------------------ one round
    def schedule(self, snap: ClusterSnapshot, ctx: PolicyContext) -> Decision:
        """One round: observe, lay out, one generation on the predicted remaining work, deploy (ones.md §2)."""
        rng = self._ensure(ctx)
        c = snap.total_gpus
        self._node_gpus = max((n.num_gpus for n in snap.nodes), default=0)
        jobs = list(snap.jobs.values())
        ids = [j.job_id for j in jobs]
        sts = [self._observe(j) for j in jobs]
        if jobs and c == self.capacity and ids == self.ids:  # nothing below would change a quiet round (speed)
            quiet = self._quiet_round(snap, ids, sts, jobs)
            if quiet is not None:
                return quiet
        cur = self._layout_round(snap, jobs, ids, c)
        if not jobs:
            return Decision({})
        quiet = self._quiet_round(snap, ids, sts, jobs)
        if quiet is not None:
            return quiet
        e = np.array([st.e for st in sts])
        running = np.array([j.gpus > 0 for j in jobs])
        new = ~running & ((e < 1.0) | np.array([not st.ran for st in sts]))
        executed = ~new & (e >= 1.0)
        med_pool = [j.run_time for j in jobs if j.start_time is not None] + self.finished_run_times
        pts_n, pts_x, limit, free = self._throughput_round(ids, c)
        caps, maxs = self._caps(jobs, sts, executed, c, med_pool, limit)
        rem = pred.remaining(sts, executed, self.preds, self.opts.samples, self.opts.sample_rho, rng)
        if self.pop is None:
            self.pop = np.repeat(cur[None, :], self.opts.population, axis=0)
        if self.opts.fitness in ("jct", "mixed"):  # D5: predicted completion times, queued jobs included (`ones.jct`)
            self._jct = self._completion_inputs(jobs, running, caps, rem, pts_n, free, c)
        best = self._generation(cur, caps, maxs, new, executed, rem, pts_n, pts_x, rng, running)
        held = (dep.hold(cur, best, running, rem, pts_n, pts_x, self.opts.resize_cost,
                         np.where(free, self.opts.hold_free_factor, self.opts.hold_factor), self._xtab)
                if self.opts.restart_aware else None)
        dec = self._deploy(snap, jobs, sts, cur, best, e, executed, held)
        after = [dec.allocations[j.job_id].placement if j.job_id in dec.allocations else () for j in jobs]
        self._quiet = {"sig": self._sig(ids, sts, after), "t": snap.now,
                       "reasons": {k: str(v) for k, v in dec.reasons.items()}}
        return dec

    def _layout_round(self, snap: ClusterSnapshot, jobs: list[JobView], ids: list[str], c: int) -> np.ndarray:
        """This round's slot → node maps and deployed slot array; the kept population remapped to `ids`."""
        self._node_of = np.repeat(np.arange(len(snap.nodes)), [n.num_gpus for n in snap.nodes])
        self._node_ids = [n.node_id for n in snap.nodes]
        self._node_types = [n.gpu_type for n in snap.nodes]
        firsts = np.cumsum([0] + [x.num_gpus for x in snap.nodes])
        node_first = {n.node_id: int(s) for n, s in zip(snap.nodes, firsts, strict=False)}
        self._specs = [j.spec for j in jobs]
        index = {jid: i for i, jid in enumerate(ids)}
        if c != self.capacity:
            self.capacity, self.pop, self.slots = c, None, {}
        cur = self._current(snap, index, node_first)
        self._idle = int((cur < 0).sum())
        if self.pop is not None:
            remap = np.array([index.get(jid, EMPTY) for jid in self.ids] + [EMPTY], dtype=np.int64)
            self.pop = remap[np.where(self.pop >= 0, self.pop, len(self.ids))]
        self.ids = ids
        return cur

    def _throughput_round(self, ids: list[str], c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None,
                                                                  np.ndarray]:
        """(readings n, readings x, scaling limit, jobs without a progress log); sets `_xtab`, x(n) for n = 0..C."""
        if self._tab is None or self._tab[0] != ids or self._tab[3].shape[0] != c + 1:
            # the throughput tables change only with a reading; x(n) for n = 0..C is looked up, not interpolated
            pn, px = self.thr.tables(ids)
            self._tab = (ids, pn, px, self._xtable(ids, pn, px, c))
        pts_n, pts_x, self._xtab = self._tab[1], self._tab[2], self._tab[3]
        limit = ops.scaling_limit(pts_n, pts_x, self.opts.min_gain) if self.opts.throughput_limit else None
        free = self._no_log = np.array([no_log(s) for s in self._specs], dtype=bool)  # read by D5, D12, D13
        big = self.opts.big_explore > 0 and big_jobs(self._specs, self._node_gpus, self.opts.big_explore)
        probe = free & (self.opts.explore or big)
        if probe.any():  # D8 (D10: jobs requesting ≥ big_explore nodes): optimistic sizes above the largest observed
            self._xtab, limit = jct.explore(self._xtab, limit, pts_n, pts_x, probe)
        return pts_n, pts_x, limit, free

    def _completion_inputs(self, jobs: list[JobView], running: np.ndarray, caps: np.ndarray, rem: np.ndarray,
                           pts_n: np.ndarray, free: np.ndarray, c: int) -> tuple[np.ndarray, ...]:
        """D5's (time table, sizes, jobs without a log): a queued job counted at its cap, else its start size."""
        n_now = np.array([j.gpus for j in jobs], dtype=np.int64)
        start = np.array([self._start_size(s) for s in self._specs], dtype=np.int64)
        size = np.clip(np.where(running, n_now, np.where(caps > 0, caps, start)), 1, c)
        prior = np.maximum([j.attained_service for j in jobs], self.opts.prior_s * size)
        return jct.time_table(rem, self._xtab, np.isfinite(pts_n).any(axis=1), prior), size, free

    def _xtable(self, ids: list[str], pn: np.ndarray, px: np.ndarray, c: int) -> np.ndarray:
        """(C + 1, J) x(n) for n = 0..C. A job's column is kept until its next reading; the stale ones are
        interpolated together (each entry depends only on its own job's points: the values of the whole table)."""
        stale: list[tuple[int, Any]] = []
        for i, jid in enumerate(ids):
            pts = self.thr.points(jid)  # the same tuple object until the job's next reading
            key = pts if pts[0].size else None
            hit = self._xcols.get(jid)
            if hit is None or hit[0] is not key or hit[1].shape[0] != c + 1:
                stale.append((i, key))
        if stale:
            idx = np.array([i for i, _ in stale])
            tab = ops.interp_throughput(pn[idx], px[idx], np.repeat(np.arange(c + 1.0)[:, None], idx.size, 1))
            for k, (i, key) in enumerate(stale):
                self._xcols[ids[i]] = (key, tab[:, k])
        return np.stack([self._xcols[jid][1] for jid in ids], axis=1)

    _quiet_round, _sig = ones_state.quiet_round, ones_state.sig

    def _generation(self, cur: np.ndarray, caps: np.ndarray, maxs: np.ndarray, new: np.ndarray,
                    executed: np.ndarray, rem: np.ndarray, pts_n: np.ndarray, pts_x: np.ndarray,
                    rng: np.random.Generator, running: np.ndarray) -> np.ndarray:
        """One generation (ones.md §2.8); returns the best slot array and keeps the K survivors."""
        assert self.pop is not None
        c, j = cur.shape[0], caps.shape[0]
        parents = ops.trim_to_caps(self.pop, caps, self.opts.refresh_keep_first)
        pairs = np.array([rng.choice(parents.shape[0], 2, replace=False) for _ in range(self.opts.population // 2)])
        c1, c2 = ops.crossover(parents[pairs[:, 0]], parents[pairs[:, 1]], caps, rng, self.opts.xi)
        mutants = ops.mutate(parents, executed, rng, self.opts.theta)
        cand = np.concatenate([parents, c1, c2, mutants])
        x1 = self._xtab[1]
        key = np.where(executed, np.nan_to_num(rem, nan=0.0) / x1, np.inf)
        exec_order = np.flatnonzero(executed)[np.argsort(key[executed], kind="stable")]
        start = None if self.opts.start == "one" else np.array([min(self._start_size(self._specs[i]), c)
                                                            for i in range(j)], dtype=np.int64)
        counts, new_order = ops.counts(cand, j), np.flatnonzero(new)
        if self.opts.start_whole and start is not None:  # D6: all or nothing, with backfill
            counts, new_order = jct.admit_whole(counts, c, new_order, start), new_order[:0]
        counts = ops.pad(counts, c, new_order, exec_order, caps, np.where(executed, maxs, 0), start)
        free = self._jct[2] if self.opts.fitness == "mixed" else np.ones(j, dtype=bool)  # jobs without a log
        resume_area = self.opts.queue_area == "resume"
        if self.opts.fitness == "jct":
            score = jct.fitness(counts, self._jct[0], self._jct[1], c, None, resume_area)
        elif self.opts.fitness == "mixed":  # D4 for jobs with a log (exactly "time" when all have one), D5 else
            score = ops.fitness(counts, np.where(free, np.nan, rem), pts_n, pts_x, "time", self._xtab)
            if free.any():
                score = score + jct.fitness(counts, self._jct[0], self._jct[1], c, free, resume_area)
        else:
            score = ops.fitness(counts, rem, pts_n, pts_x, self.opts.fitness, self._xtab)
        if self.opts.restart_aware:  # tuned: each change to a running job pays its restart / resize cost
            stop = self.opts.restart_cost * np.where(free, self.opts.preempt_factor, 1.0)
            score = score + dep.move_cost(counts, dep.slot_counts(cur, j), running, stop,  # type: ignore[arg-type]
                                          self.opts.resize_factor * self.opts.resize_cost,
                                          "gpu_time" if self.opts.fitness == "gpu_time" else "time")
        keep = ops.select(score, self.opts.population)
        # reorder depends only on the counts: lay out each distinct survivor once (survivors repeat often)
        uniq, inv = jct.unique_rows(counts[keep])
        key = (cur.tobytes(), self._node_of.tobytes())
        if self._layouts[0] != key or self._layouts[1] != self.ids:  # layouts are exact for one (cur, job order)
            self._layouts = (key, self.ids, {})
        memo = self._layouts[2]
        laid = np.stack([memo[b] if (b := u.tobytes()) in memo else memo.setdefault(
            b, ops.reorder(u, cur, self._node_of)) for u in uniq])
        self.pop = laid[inv.reshape(-1)]
        return ones_layout.pack(self.pop[0], self._node_of, running) if self.opts.pack_nodes else self.pop[0]

    def _deploy(self, snap: ClusterSnapshot, jobs: list[JobView], sts: list[OnesJobState], cur: np.ndarray,
                best: np.ndarray, e: np.ndarray, executed: np.ndarray, held: np.ndarray | None = None) -> Decision:
        """Apply `best` (ones.md §2.9, `ones.deploy.plan`): immediate starts on idle GPUs always; the rest only
        when every job whose placement changes has done ≥ δ epochs since its last (re)placement."""
        j = len(jobs)
        running = np.array([job.gpus > 0 for job in jobs])
        since = art.since(sts) if self.opts.delta_clock == "epochs" else e - np.array([st.last_placed for st in sts])
        out, full = dep.plan(cur, best, running, since, self.opts.delta_epochs, self.opts.throttle, held)
        if self.opts.backfill:  # D12: waiting jobs without a progress log start on the GPUs `out` leaves idle
            out, self.pop = ones_backfill.admit(out, self._node_of, jobs, sts, self.pop, self._no_log)
        for i in np.flatnonzero(dep.scale_in(cur, out, running, executed, full, self.opts.scale_in)):
            if sts[i].resume:
                sts[i].resume = max(1, sts[i].resume // 2)
                sts[i].max_size = sts[i].resume
        changed = dep.changed_jobs(cur, out, j)
        reset_all = self.opts.delta_reset == "all" and changed.any()  # artifact: a new schedule stamps every job
        if self.opts.delta_clock == "epochs":  # the artifact's epoch count (`ones.artifact`)
            art.stamp(sts, changed, dep.slot_counts(out, j) > 0, reset_all)
        allocs: dict[str, Allocation] = {}
        reasons: dict[str, PendingReason] = {}
        self.slots = {}
        for i, job in enumerate(jobs):
            sl = np.flatnonzero(out == i)
            st = sts[i]
            if sl.size == 0:
                if job.gpus:
                    st.resume = st.max_size  # stopped: resume at max_size (worker_complete)
                reasons[job.job_id] = PendingReason.NOT_SELECTED if full else PendingReason.THROTTLED
                continue
            if job.gpus and not changed[i]:
                self.slots[job.job_id] = sl.tolist()
                allocs[job.job_id] = job.allocation
                if reset_all:
                    st.last_placed = st.e
                continue
            if not self._allowed(job, sl):
                reasons[job.job_id] = PendingReason.GPU_TYPE
                continue
            self.slots[job.job_id] = sl.tolist()
            if sl.size != job.gpus:
                st.last_change = st.e
            st.last_placed = st.e
            allocs[job.job_id] = self._allocation(job.spec, sl)
        return Decision(allocs, reasons)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return ones_state.dump(self)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        ones_state.load(self, state)
