"""The loans and reclaims part of the `Store` (a mixin over its `tx` and `read`): servers lent by the inference
cluster and requests to give them back.

The loans are read at every submission (the cluster a job must fit) and every engine step, and change only
when a server is lent or given back: they are kept in memory, read again after a transaction that wrote them
commits (`_loans_committed`, called by `Store.tx`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, insert, select, update

from elastisched.core.enums import LoanState, RequestState
from elastisched.service.tables import loans, reclaims


def _row(r: Any) -> dict[str, Any]:
    return dict(r._mapping)


class LoanStore:
    _loans: tuple[int, list[dict[str, Any]]] | None = None  # (generation it was read at, every loan row)
    _loan_gen = 0  # bumped by every write of a loan and every commit of one
    _loan_txs: frozenset[int] = frozenset()  # ids of the open transactions that wrote loans

    def tx(self) -> AbstractContextManager[Connection]: ...

    def _in_tx(self) -> bool: ...

    def read(self) -> AbstractContextManager[Connection]: ...

    @staticmethod
    def _event(c: Connection, t: float, job_id: str | None, kind: str, data: Mapping[str, Any]) -> None: ...

    def add_loans(self, nodes: Sequence[tuple[str, str, int]], conn: Connection | None = None
                  ) -> list[dict[str, Any]]:
        """Lend `nodes` (id, GPU type, GPUs) now, each with its `loan_offered` event; the rows as written."""
        if conn is None:
            with self.tx() as c:
                return self.add_loans(nodes, c)
        now = time.time()
        self._wrote_loans(conn)
        for node_id, gpu_type, n in nodes:
            conn.execute(insert(loans).values(node_id=node_id, gpu_type=gpu_type, num_gpus=n, state=LoanState.LOANED,
                                              offered_at=now))
            self._event(conn, now, None, "loan_offered", {"node": node_id, "gpus": n, "gpu_type": gpu_type})
        ids = [n for n, _, _ in nodes]
        return [_row(r) for r in conn.execute(select(loans).where(loans.c.node_id.in_(ids)))]

    def list_loans(self, states: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The loans (in `states`), in the order they were offered: fresh dicts from the kept rows."""
        got, gen = self._loans, self._loan_gen
        if got is None or got[0] != gen or self._in_tx():
            with self.read() as c:
                got = (gen, [_row(r) for r in c.execute(select(loans).order_by(loans.c.offered_at,
                                                                                  loans.c.node_id))])
            if gen == self._loan_gen and not self._in_tx():  # no write began meanwhile: keep them
                self._loans = got
        return [dict(r) for r in got[1] if not states or r["state"] in states]

    def _wrote_loans(self, conn: Connection) -> None:
        self._loan_txs = self._loan_txs | {id(conn)}
        self._loan_gen += 1

    def _loans_committed(self, conn: Connection) -> None:
        """After a transaction commits: if it wrote loans, the kept rows are stale (and read again)."""
        if id(conn) in self._loan_txs:
            self._loan_txs = self._loan_txs - {id(conn)}
            self._loan_gen += 1

    def loan_ids(self) -> set[str]:
        with self.read() as c:
            return {r[0] for r in c.execute(select(loans.c.node_id))}

    def update_loan(self, node_id: str, conn: Connection | None = None, **fields: Any) -> None:
        q = update(loans).where(loans.c.node_id == node_id).values(**fields)
        if conn is not None:
            self._wrote_loans(conn)
            conn.execute(q)
            return
        with self.tx() as c:
            self._wrote_loans(c)
            c.execute(q)

    def add_reclaim(self, count: int, deadline: float) -> dict[str, Any]:
        now = time.time()
        with self.tx() as c:
            rid = c.execute(insert(reclaims).values(count=count, deadline=deadline, state=RequestState.PENDING,
                                                    nodes=[],
                                                    created_at=now)).inserted_primary_key[0]
            self._event(c, now, None, "reclaim_requested", {"reclaim": rid, "count": count, "deadline": deadline})
            return _row(c.execute(select(reclaims).where(reclaims.c.id == rid)).one())

    def list_reclaims(self, states: Sequence[str] | None = None) -> list[dict[str, Any]]:
        q = select(reclaims).order_by(reclaims.c.id)
        if states:
            q = q.where(reclaims.c.state.in_(list(states)))
        with self.read() as c:
            return [_row(r) for r in c.execute(q)]

    def update_reclaim(self, rid: int, conn: Connection | None = None, **fields: Any) -> None:
        q = update(reclaims).where(reclaims.c.id == rid).values(**fields)
        if conn is not None:
            conn.execute(q)
            return
        with self.tx() as c:
            c.execute(q)
