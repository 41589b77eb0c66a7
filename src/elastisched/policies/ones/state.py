"""`state_dict` / `load_state_dict` and the quiet-round test of the `ones` policy (split from `ones.py`).

Everything a restarted daemon needs to continue the same search: the population, deployed slots, per-job
ONES state, the RNG, online throughput readings, the fitted predictor(s) and the quiet-round signature.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from elastisched.core.types import ClusterSnapshot, Decision, JobView, PendingReason
from elastisched.policies.ones.jobstate import OnesJobState
from elastisched.policies.ones.progress_predictor import BetaProgressPredictor


def dump(pol: Any) -> dict[str, Any]:
    """The policy's state as plain JSON-able values."""
    return {"ids": list(pol.ids), "pop": None if pol.pop is None else pol.pop.tolist(),
            "capacity": pol.capacity, "slots": {k: list(v) for k, v in pol.slots.items()},
            "jobs": {k: v.to_dict() for k, v in pol.js.items()}, "finished": list(pol.finished_run_times),
            "rng": None if pol._rng is None else pol._rng.bit_generator.state,
            "thr": pol.thr.state_dict(), "pred": pol.pred.state_dict() if pol.pred.params else None,
            "preds": [p.state_dict() if p.params else None for p in pol.preds],
            "quiet": None if pol._quiet is None else dict(pol._quiet)}


def load(pol: Any, state: Mapping[str, Any]) -> None:
    """Restore what `dump` wrote into a freshly constructed policy."""
    pol.ids = list(state["ids"])
    pol.pop = None if state["pop"] is None else np.asarray(state["pop"], dtype=np.int64).reshape(-1, state[
        "capacity"])
    pol.capacity = int(state["capacity"])
    pol.slots = {k: list(v) for k, v in state["slots"].items()}
    pol.js = {k: OnesJobState.from_dict(v) for k, v in state["jobs"].items()}
    pol.finished_run_times = list(state["finished"])
    if state["rng"] is not None:
        pol._rng = np.random.default_rng()
        pol._rng.bit_generator.state = state["rng"]
    pol.thr.load_state_dict(state["thr"])
    pol._tab = None
    pol._quiet = None if state.get("quiet") is None else dict(state["quiet"])
    if state["pred"] is not None:
        pol.pred.load_state_dict(state["pred"])
    if len(state.get("preds", [])) > 1:
        pol.preds = [BetaProgressPredictor() for _ in state["preds"]]
        for p, ps in zip(pol.preds, state["preds"], strict=True):
            if ps is not None:
                p.load_state_dict(ps)
        pol.pred = pol.preds[0]


def sig(pol: Any, ids: list[str], sts: list[OnesJobState], placements: list[Any]) -> str:
    """What a round's outcome depends on besides random draws: jobs, epochs done, placements, and whether
    each job's δ clock and scale-up gate are open."""
    return repr((ids, placements, [(int(st.e + 1e-9), st.e - st.last_placed >= pol.opts.delta_epochs,
                                    st.e - st.last_change >= pol.opts.scale_gate_epochs) for st in sts]))


def quiet_round(pol: Any, snap: ClusterSnapshot, ids: list[str], sts: list[OnesJobState],
                jobs: list[JobView]) -> Decision | None:
    """The last decision again if nothing it depends on changed (no arrival, completion, finished epoch or
    change since a settled deployment) and it is younger than `quiet_s` (tuned preset); else None."""
    q = pol._quiet
    if pol.opts.quiet_s <= 0 or q is None or snap.now - q["t"] >= pol.opts.quiet_s:
        return None
    if q["sig"] != sig(pol, ids, sts, [j.allocation.placement for j in jobs]):
        return None
    return Decision({j.job_id: j.allocation for j in jobs if j.gpus},
                    {k: PendingReason(v) for k, v in q["reasons"].items()})
