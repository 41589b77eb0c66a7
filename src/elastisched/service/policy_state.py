"""The policy's saved state in the store (`meta` rows), so that a restarted daemon continues the same policy.

Saved after a round that acted and after any step in which a job entered or left the engine, with the wall
time it was taken at (`policy_state_at:`). A crash can lose the ends recorded after the last save: at restart
the engine ends again every job the store shows ended since then (`on_finish` is idempotent by contract), so
the restored state holds only active jobs. Active jobs are announced again by the first snapshot
(`service.live_view`).
"""

from __future__ import annotations

import logging
import time

from elastisched.engine.loop import Engine
from elastisched.service.store import TERMINAL, Store

log = logging.getLogger("elastisched.service")


def _keys(policy_name: str) -> tuple[str, str]:
    return f"policy_state:{policy_name}", f"policy_state_at:{policy_name}"


def restore(store: Store, engine: Engine, now: float) -> None:
    """Load the saved state into the engine's policy and end the jobs that ended after it was saved."""
    key, at_key = _keys(engine.policy.name)
    state = store.get_meta(key)
    if not state:
        return
    try:
        engine.policy.load_state_dict(state)
    except Exception as e:  # a policy may change its state format between versions
        log.warning("policy state not restored: %s", e)
        return
    saved_at = store.get_meta(at_key)
    if saved_at is None:  # saved by a version that did not record when: end every job the store shows ended
        saved_at = -float("inf")
    for row in store.list_jobs(TERMINAL):
        if row["end_time"] is not None and float(row["end_time"]) >= float(saved_at):
            engine.ended(row["id"], now)


def save(store: Store, engine: Engine) -> None:
    """Persist the policy's state (a policy without state, or with non-JSON state, restarts cold)."""
    key, at_key = _keys(engine.policy.name)
    taken_at = time.time()  # before reading the state: every end recorded earlier is in it
    try:
        state = engine.policy.state_dict()
        if state:
            store.set_meta(key, state)
            store.set_meta(at_key, taken_at)
    except Exception as e:  # non-JSON state: the policy restarts cold, which is allowed
        log.debug("policy state not saved: %s", e)
