"""Tiresias's queues in blocks, so that a round walks what changed and not every running job (issue 22).

The walk (`policy.py`) admits jobs in queue order while their GPUs fit. A running job that fits where it is
only subtracts its GPUs from its type's free count (and, in queue 0, offers its demotion instant as the
round's wake-up). So a stretch of the queue made of running jobs that all fit, none of them due for
demotion, changes nothing but those sums: this index keeps each queue as blocks of `BLOCK` jobs, and groups
of `GROUP` blocks, with the sums of each: the GPUs its ordinary running jobs hold per type, their count, the
least instant at which one of them reaches the threshold (`key`: updated_at + (threshold - attained) / GPUs),
and the number of jobs that must be walked one by one (`special`: pending jobs, running jobs on several types
or with other than their GPUs, jobs that can never fit). A round adds a group's (else a block's) sums when it
has no special job, no job due and every type's free GPUs cover its sums (then each of its jobs fits, in any
order); any other block is walked job by job, with the very rules of the plain walk. The result is the plain
walk's, allocation for allocation and in the same order (tests/policies/test_tiresias_walk.py runs both in
lockstep).

The index is kept up to date from `ClusterSnapshot.changed` (the jobs whose view is new since the previous
snapshot) and the hooks; it is rebuilt when a snapshot number is skipped or the node set changes, and not
used at all by a body that does not report changes (the live service): that walks the queues as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any

BLOCK = 32  # jobs in a block
GROUP = 16  # blocks in a group
TOL = 1e-3  # seconds: float noise between a job's `key` and the walk's exact threshold test, many times over
INF = float("inf")
# a job's part in its block: (ordinary?, GPU type, GPUs, key); special jobs: (False, None, 0, INF)
Part = tuple[bool, str | None, int, float]
SPECIAL: Part = (False, None, 0, INF)


class Sums:
    """What the walk needs of consecutive jobs of one queue as a whole (a block's, or a group of blocks')."""

    __slots__ = ("count", "gpus", "key", "run", "special")

    def __init__(self) -> None:
        self.run: dict[str, int] = {}  # GPU type -> GPUs its ordinary running jobs hold (types with some only)
        self.gpus = 0  # their sum
        self.count = 0  # ordinary running jobs
        self.special = 0
        self.key: float | None = INF  # least `key` of its ordinary running jobs; None: to be recomputed

    def add(self, part: Part, sign: int) -> None:
        ordinary, t, g, key = part
        if not ordinary:
            self.special += sign
            return
        assert t is not None
        g_t = self.run.get(t, 0) + sign * g
        if g_t:
            self.run[t] = g_t
        else:
            del self.run[t]
        self.gpus += sign * g
        self.count += sign
        if sign > 0:
            if self.key is not None and key < self.key:
                self.key = key
        elif self.key is not None and key <= self.key:
            self.key = None  # it may have been the least


class Block(Sums):
    """Up to `BLOCK` consecutive jobs of one queue."""

    __slots__ = ("group", "jobs")

    def __init__(self, group: Group) -> None:
        super().__init__()
        self.jobs: list[str] = []
        self.group = group


class Group(Sums):
    """Up to `GROUP` consecutive blocks: the walk adds a group up whole as it does a block."""

    __slots__ = ("blocks",)

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[Block] = []


class QueueIndex:
    """Both queues (`[0]`: queue 0, `[1]`: queue 1) as groups of blocks, with each job's block and part."""

    def __init__(self, queues: tuple[Iterable[str], Iterable[str]], parts: dict[str, Part]) -> None:
        self.groups: tuple[list[Group], list[Group]] = ([], [])
        self.where: dict[str, Block] = {}
        self.parts = parts
        for q, jids in enumerate(queues):
            for jid in jids:
                self.append(q, jid, parts.get(jid, SPECIAL))

    def append(self, q: int, jid: str, part: Part) -> None:
        groups = self.groups[q]
        if not groups or (len(groups[-1].blocks) >= GROUP and len(groups[-1].blocks[-1].jobs) >= BLOCK):
            groups.append(Group())
        g = groups[-1]
        if not g.blocks or len(g.blocks[-1].jobs) >= BLOCK:
            g.blocks.append(Block(g))
        b = g.blocks[-1]
        b.jobs.append(jid)
        if part[0]:
            b.add(part, +1)
            g.add(part, +1)
        else:  # (`add` of a special part, written out: a job arrives as one)
            b.special += 1
            g.special += 1
        self.where[jid] = b
        self.parts[jid] = part

    def remove(self, q: int, jid: str) -> None:
        b = self.where.pop(jid, None)
        if b is None:
            return
        part = self.parts.pop(jid, SPECIAL)
        b.jobs.remove(jid)
        b.add(part, -1)
        b.group.add(part, -1)
        if not b.jobs:
            b.group.blocks.remove(b)
            if not b.group.blocks:
                self.groups[q].remove(b.group)

    def update(self, jid: str, part: Part) -> None:
        b = self.where.get(jid)
        if b is None:
            return
        old = self.parts.get(jid, SPECIAL)
        if old != part:
            g = b.group
            if old[0]:
                b.add(old, -1)
                g.add(old, -1)
            else:  # (`add` of a special part, written out)
                b.special -= 1
                g.special -= 1
            b.add(part, +1)
            g.add(part, +1)
            self.parts[jid] = part

    def least_key(self, s: Sums) -> float:
        if s.key is None:
            if isinstance(s, Block):
                s.key = min((self.parts[j][3] for j in s.jobs if self.parts[j][0]), default=INF)
            else:
                s.key = min((self.least_key(b) for b in s.blocks), default=INF)  # type: ignore[attr-defined]
        return s.key

    def after(self, q: int, g: int, b: int, then: Iterable[str]) -> Iterator[str]:
        """The jobs of queue `q` after block `b` of group `g`, then `then` (the walk's rest when it stops there)."""
        groups = self.groups[q]
        blocks = chain(groups[g].blocks[b + 1:], chain.from_iterable(grp.blocks for grp in groups[g + 1:]))
        # (lazily: the walk reads them only when the GPUs run out in this block, before the index changes)
        return chain(chain.from_iterable(x.jobs for x in blocks), then)


def part_of(view: Any, need: int, ok: bool, t: str | None, takes: tuple[tuple[str, int], ...],
            threshold: float) -> Part:
    """A job's part in its block: ordinary when it runs on one type with exactly the GPUs it asks and can fit
    the cluster; its key is the instant its attained service reaches `threshold` (-inf when it has)."""
    if t is None or not ok or takes != ((t, need),):
        return SPECIAL
    attained = view.attained_service
    key = -INF if attained >= threshold else view.updated_at + (threshold - attained) / view.allocation.gpus
    return True, t, need, key
