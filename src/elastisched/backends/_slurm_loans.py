"""Loaned servers on Slurm: a server that goes back to inference is drained, and resumed once empty.

While a loanable node (one of `--slurm loan-partition=`) is on loan, elastisched's jobs run on it. When the loan
ends (a reclaim returned it, or the offer lapsed) the backend drains it (`scontrol update State=DRAIN`, reason
`elastisched: loan returned`), so no generation submitted in the meantime can land there, and once none of
elastisched's jobs is left on it, resumes it (`State=RESUME`): the node is back with the partition's other
users (the inference side). A node lent again before that is resumed at once. Only nodes this backend drained
are resumed; an admin's drain is left alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from elastisched.backends._slurm_cli import LIVE, SlurmCli, SlurmError, SlurmJob
from elastisched.backends.base import BackendEvent

log = logging.getLogger("elastisched.service")
REASON = "elastisched: loan returned"


class LoanDrains:
    def __init__(self, cli: SlurmCli) -> None:
        self.cli = cli
        self.on_loan: set[str] = set()
        self.waiting: dict[str, float] = {}  # drained by us, to resume once empty: node -> when drained
        self.history: list[tuple[float, str, str]] = []  # (time, node, DRAIN|RESUME), for tests and logs

    def lent(self, lent: set[str], loanable: set[str], ours: set[str] | None = None) -> None:
        """`lent`: on loan now; `loanable`: the loan partition's nodes; `ours`: drained with our reason (a drain
        this backend set before a restart), to be resumed like the ones it drains now."""
        for node in sorted((ours or set()) - set(self.waiting)):
            self.waiting[node] = time.monotonic()
        for node in sorted((self.on_loan - lent) & loanable):
            self._set(node, "DRAIN", REASON)
            self.waiting[node] = time.monotonic()
        for node in sorted(lent & set(self.waiting)):
            self._set(node, "RESUME")
            self.waiting.pop(node, None)
        self.on_loan = set(lent)

    def settle(self, jobs: Mapping[str, list[SlurmJob]]) -> list[BackendEvent]:
        """Resume the drained nodes none of our live jobs uses any more (`jobs`: ours, by name)."""
        if not self.waiting:
            return []
        busy = {n for parts in jobs.values() for j in parts if j.state in LIVE for n in _names(j.nodes)}
        for node in sorted(set(self.waiting) - busy):
            self._set(node, "RESUME")
            self.waiting.pop(node, None)
        return []

    def _set(self, node: str, state: str, reason: str = "") -> None:
        try:
            self.cli.set_node(node, state, reason)
            self.history.append((time.time(), node, state))
            log.info("Slurm node %s: %s (%s)", node, state, reason or "loan")
        except SlurmError as e:  # an admin's own drain, or slurmctld busy: say so, keep going
            log.warning("Slurm node %s: could not set %s: %s", node, state, e)


def _names(nodelist: str) -> list[str]:
    """Node names of a squeue node list; `n[1-3]` ranges are expanded by scontrol only where they occur."""
    if "[" not in nodelist:
        return [n for n in nodelist.split(",") if n]
    out: list[str] = []
    for part in _split_top(nodelist):
        if "[" not in part:
            out.append(part)
            continue
        head, rest = part.split("[", 1)
        for r in rest.rstrip("]").split(","):
            lo, _, hi = r.partition("-")
            out += [f"{head}{i:0{len(lo)}d}" for i in range(int(lo), int(hi or lo) + 1)]
    return out


def _split_top(s: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in s:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return [*out, cur] if cur else out
