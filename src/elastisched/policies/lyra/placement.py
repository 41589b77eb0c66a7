"""Loan-aware best-fit-decreasing placement for Lyra (lyra.md §2.3, §7 row 4).

Input: per job a target GPU count, how many of those are *base* GPUs (an inelastic job's whole request, an
elastic job's `min_gpus`), its GPU type, and its current placement (with reclaimed servers already removed).

1. Running jobs keep their nodes. A job that shrinks sheds GPUs from loaned servers first, then from the
   nodes where it has the fewest GPUs (its workers stay consolidated).
2. New base parts, largest first (BFD), go to **training** servers first, loaned ones only when training
   servers of the type are full (lyra.md §7 row 4: inelastic jobs may use loaned servers, deprioritised).
3. Extra parts (elastic growth), largest first, go to **loaned** servers first ("flexible" workers,
   lyra.md §2.3 [P]) so that most reclaims become scale-ins, preferring nodes that already host the job.
   With `colocate=True` (Lyra's default) an extra part first fills the free GPUs of the nodes that already
   host the job, largest holding first, in either pool, and only the rest goes loaned-first: a worker beside
   its job's others syncs inside the server, while a sub-server job whose extras sit on another server often
   runs *slower* than without them (T4 profiles: cifar10 at 1+2 GPUs on two servers is 0.81× one GPU, 1.81×
   on one). Extras on a training server are never reclaimed. When the new bases of a GPU type would not
   all fit on training servers, a running job of that type that is resized anyway keeps only its base in
   step 1; its other kept GPUs are retaken after the new bases (where they were if still free, else placed
   as extras), so extras beside a job never push a new base onto a loaned server.
Within a pool a part goes to the node with the least free GPUs that holds it whole (best fit); if no node
holds it whole, the node with the most free GPUs takes what it can and the rest is placed the same way.
A base part that cannot be placed in full leaves the job unplaced; an extra part that cannot is not granted
(the caller's per-type GPU accounting makes both rare: they need more GPUs of a type than are free).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from elastisched.core.types import NodeId, NodeView, Pool

Placement = tuple[tuple[NodeId, int], ...]


@dataclass(frozen=True, slots=True)
class Want:
    job_id: str
    gpus: int  # target total GPUs
    base: int  # GPUs that prefer training servers
    gpu_type: str
    current: Placement = ()


Parts = list[tuple[Want, int]]  # (job, GPUs still to place for it)


class Board:
    """Free GPUs per node, with nodes bucketed by (type, pool, free GPUs) in lazy min-heaps of node positions,
    so a best-fit pick costs O(distinct free counts · log nodes), not a scan of every node."""

    def __init__(self, nodes: Sequence[NodeView], exclude: frozenset[NodeId] | set[NodeId] = frozenset()) -> None:
        self.nodes = tuple(nodes)
        self.pos = {n.node_id: i for i, n in enumerate(self.nodes)}
        self.free = [0 if n.node_id in exclude else n.num_gpus for n in self.nodes]
        self.loan = [n.pool is Pool.LOANABLE for n in self.nodes]
        self.type = [n.gpu_type for n in self.nodes]
        self.total: dict[str, int] = {}
        self.buckets: dict[tuple[str, bool], dict[int, list[int]]] = {}
        for i, f in enumerate(self.free):
            self.total[self.type[i]] = self.total.get(self.type[i], 0) + f
            if f > 0:
                self.buckets.setdefault((self.type[i], self.loan[i]), {}).setdefault(f, []).append(i)

    def take(self, i: int, k: int) -> None:
        self.free[i] -= k
        self.total[self.type[i]] -= k
        if self.free[i] > 0:
            heapq.heappush(self.buckets[(self.type[i], self.loan[i])].setdefault(self.free[i], []), i)

    def _top(self, heap: list[int], f: int) -> int:
        while heap and self.free[heap[0]] != f:
            heapq.heappop(heap)  # stale: that node's free count changed since it was pushed
        return heap[0] if heap else -1

    def _pick(self, key: tuple[str, bool], need: int) -> int:
        """Best fit (least free GPUs that hold `need`, lowest position); else the most free, lowest position."""
        b = self.buckets.get(key)
        if not b:
            return -1
        counts = sorted(b)
        for f in counts:
            if f >= need and (i := self._top(b[f], f)) >= 0:
                return i
        for f in reversed(counts):
            if (i := self._top(b[f], f)) >= 0:
                return i
        return -1

    def fill(self, need: int, gpu_type: str, prefer_loan: bool, hosts: Sequence[int] = (),
             colocate: bool = False) -> list[tuple[int, int]] | None:
        """Take `need` GPUs of one type (module docstring rules); None (and nothing taken) if impossible."""
        if self.total.get(gpu_type, 0) < need:
            return None
        taken: list[tuple[int, int]] = []
        if colocate:  # first the free GPUs beside the job's own workers, its largest host first
            for h in hosts:
                if need <= 0:
                    break
                if self.type[h] == gpu_type and self.free[h] > 0:
                    k = min(self.free[h], need)
                    self.take(h, k)
                    taken.append((h, k))
                    need -= k
        for loan in ((True, False) if prefer_loan else (False, True)):
            while need > 0:
                i = -1
                for h in hosts:  # a node already hosting the job that holds the rest whole
                    if self.loan[h] == loan and self.type[h] == gpu_type and self.free[h] >= need:
                        i = h
                        break
                if i < 0:
                    i = self._pick((gpu_type, loan), need)
                if i < 0:
                    break
                k = min(self.free[i], need)
                self.take(i, k)
                taken.append((i, k))
                need -= k
        return taken


def _shed(current: Placement, keep: int, board: Board) -> list[tuple[int, int]]:
    """Keep `keep` of the current GPUs: drop loaned nodes first, then the nodes with the fewest GPUs."""
    cur = [(board.pos[n], g) for n, g in current if n in board.pos]
    left = dict(cur)
    drop = sum(g for _, g in cur) - keep
    for i, g in sorted(cur, key=lambda x: (not board.loan[x[0]], x[1], -x[0])):  # first = dropped first
        if drop <= 0:
            break
        d = min(g, drop)
        left[i] -= d
        drop -= d
    return [(i, left[i]) for i, _ in cur if left[i] > 0]


def _split_base(kept: list[tuple[int, int]], base: int, board: Board
                ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(base part, the rest) of a kept placement: the base from training servers first, largest holding first."""
    core: list[tuple[int, int]] = []
    rest: list[tuple[int, int]] = []
    need = base
    for i, g in sorted(kept, key=lambda x: (board.loan[x[0]], -x[1], x[0])):
        k = min(g, max(need, 0))
        if k:
            core.append((i, k))
        if g - k:
            rest.append((i, g - k))
        need -= k
    return core, rest


def _base_contention(board: Board, wants: Sequence[Want], kept: dict[str, list[tuple[int, int]]]) -> set[str]:
    """GPU types whose new bases would not all fit on training servers beside what running jobs keep."""
    need: dict[str, int] = {}
    free: dict[str, int] = {}
    for i, f in enumerate(board.free):
        if not board.loan[i]:
            free[board.type[i]] = free.get(board.type[i], 0) + f
    for w in wants:
        if w.gpus <= 0:
            continue
        if w.job_id in kept:
            for i, g in kept[w.job_id]:
                if not board.loan[i]:
                    free[board.type[i]] -= g
        else:
            need[w.gpu_type] = need.get(w.gpu_type, 0) + min(w.base, w.gpus)
    return {t for t, n in need.items() if n > free.get(t, 0)}


def place(nodes: Sequence[NodeView], wants: Sequence[Want],
          exclude: frozenset[NodeId] | set[NodeId] = frozenset(), colocate: bool = False) -> dict[str, Placement]:
    """Placements for `wants` (module docstring); jobs that cannot be placed are absent."""
    board = Board(nodes, exclude)
    held, todo_base, todo_extra, soft = _hold_running(board, wants, colocate)
    failed: set[str] = set()  # base part did not fit: the job is not placed this round
    _fill_parts(board, todo_base, False, held, failed, colocate)
    todo_extra.extend(_retake_soft(board, soft, held))
    _fill_parts(board, todo_extra, True, held, failed, colocate)
    out: dict[str, Placement] = {}
    for w in wants:
        lst = held.get(w.job_id)
        if not lst or w.job_id in failed:
            continue
        merged: dict[int, int] = {}
        for i, g in lst:
            merged[i] = merged.get(i, 0) + g
        out[w.job_id] = tuple((board.nodes[i].node_id, g) for i, g in merged.items() if g > 0)
    return out


def _hold_running(board: Board, wants: Sequence[Want], colocate: bool
                  ) -> tuple[dict[str, list[tuple[int, int]]], Parts, Parts, list[tuple[Want, list[tuple[int, int]]]]]:
    """Step 1: running jobs take back what they keep. Returns (held GPUs per job, new base parts, extra
    parts, and per resized job of a contended type the kept extras to retake after the new bases)."""
    held: dict[str, list[tuple[int, int]]] = {}
    todo_base: Parts = []
    todo_extra: Parts = []
    soft: list[tuple[Want, list[tuple[int, int]]]] = []
    totals = {w.job_id: sum(g for n, g in w.current if n in board.pos) for w in wants if w.gpus > 0}
    keeps = {w.job_id: _shed(w.current, min(totals[w.job_id], w.gpus), board)
             for w in wants if w.gpus > 0 and totals[w.job_id]}
    contended = _base_contention(board, wants, keeps) if colocate else set()
    for w in wants:
        if w.gpus <= 0:
            continue
        cur_total = totals[w.job_id]
        if cur_total:
            kept = keeps[w.job_id]
            if w.gpu_type in contended and w.gpus != cur_total:
                # Resized anyway (a restart): only the base stays put now; its kept extras come back after the
                # new bases, so extras beside a job never push another job's base onto a loaned server.
                kept, rest = _split_base(kept, w.base, board)
                soft.append((w, rest))
            for i, g in kept:
                board.take(i, g)
            held[w.job_id] = kept
            if w.gpus > cur_total:
                todo_extra.append((w, w.gpus - cur_total))
        else:
            held[w.job_id] = []
            todo_base.append((w, min(w.base, w.gpus)))
            if w.gpus > w.base:
                todo_extra.append((w, w.gpus - w.base))
    return held, todo_base, todo_extra, soft


def _retake_soft(board: Board, soft: list[tuple[Want, list[tuple[int, int]]]],
                 held: dict[str, list[tuple[int, int]]]) -> Parts:
    """Kept extras of resized jobs go back where they were if still free; the shortfall is placed as extras."""
    short_parts: Parts = []
    for w, rest in soft:
        short = 0
        for i, g in rest:
            k = min(g, board.free[i])
            if k:
                board.take(i, k)
                held[w.job_id].append((i, k))
            short += g - k
        if short:
            short_parts.append((w, short))
    return short_parts


def _fill_parts(board: Board, parts: Parts, prefer_loan: bool, held: dict[str, list[tuple[int, int]]],
                failed: set[str], colocate: bool) -> None:
    """Place base parts (training first) or extra parts (loaned first), largest first; a base that does not
    fit marks its job `failed`, an extra that does not is simply not granted."""
    for w, need in sorted(parts, key=lambda x: -x[1]):
        if w.job_id in failed:
            continue
        hosts = [i for i, _ in held[w.job_id]]
        if colocate:  # largest host first; without colocation the order stays as before
            hosts = [i for i, _ in sorted(held[w.job_id], key=lambda x: -x[1])]
        got = board.fill(need, w.gpu_type, prefer_loan, hosts, colocate and prefer_loan)
        if got is not None:
            held[w.job_id].extend(got)
        elif not prefer_loan:
            failed.add(w.job_id)
