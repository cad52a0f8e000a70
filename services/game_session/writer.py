"""The group-committing log writer: every table's changes, appended to their logs in batches.

Changes of many tables queue up; a writer worker takes every change waiting (up to `batch_max`)
and commits them in one transaction: it locks the lease rows of those tables (`SELECT ... FOR
UPDATE`, in table id order), keeps only the changes made under the epoch and owner still on record
(fencing: a replica that lost a table can never append to its log), and inserts their entries,
table-row updates and outbox rows. Each change's caller (its table's actor) waits for its batch to
commit before anyone is told about its events.

On PostgreSQL a batch is one statement (`_APPEND_SQL`): one round trip, one implicit transaction,
its match ends (outbox rows, the lease no longer live) included; SQLite's goes through the ORM, a
statement per row. One worker is the default (`BURACO_GAME_SESSION_WRITERS`): the batch grows with
the load while a commit is in flight, so a busy replica makes few, large transactions; more
workers commit side by side (each on its own connection), for a database whose commit latency
rather than its CPU is the limit. A table has at most one change in flight (its actor runs one at a
time), so two batches never hold the same lease row, and they lock their rows in table id order:
no deadlock. Under load (the worker's last batch carried more than one write), a worker that finds
a write waits `BURACO_GAME_SESSION_BATCH_WAIT_MS` for others to join it before it commits, as
PostgreSQL's own `commit_delay` does only while other transactions are active; a lone write at a
quiet moment commits at once. docs/game-session.md ("Speed") gives the figures behind these
defaults. Leases are renewed through one heartbeat row per replica, never by touching the lease
rows, so renewals and appends do not wait for each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update

from services.common.db import Database, asyncpg_connect
from services.game_session import models

log = logging.getLogger("buraco.game_session.writer")


class LeaseLostError(Exception):
    """The table's lease changed hands (or epochs): this replica may not append any more."""


@dataclass
class Write:
    table_id: str
    epoch: int
    owner_id: str
    rows: list[tuple[int, str]]
    #: New values of the table row (state, seq, match_scores, updated_ms), when they changed.
    table_update: dict[str, Any] | None = None
    #: Outbox rows (target, serialised request) owed by this change (a match end).
    outbox: list[tuple[str, bytes]] = field(default_factory=list)
    #: Whether the table stops being live (its lease no longer needs to be taken over).
    finished: bool = False
    future: asyncio.Future[None] | None = None


#: `Writer._commit_asyncpg`'s statement. The lease rows are locked (FOR UPDATE, in table id
#: order, so two batches never deadlock) only where epoch and owner still match; a lease taken over
#: meanwhile is re-read once its lock is free and then no longer matches (PostgreSQL re-checks a
#: locked row's conditions on its newest version), so its table's rows are not written.
_APPEND_SQL = """
WITH ok AS (
    SELECT l.table_id
    FROM game_session_leases AS l
    JOIN unnest($1::text[], $2::bigint[], $3::text[]) AS w(table_id, epoch, owner_id)
        ON l.table_id = w.table_id AND l.epoch = w.epoch AND l.owner_id = w.owner_id
    ORDER BY l.table_id
    FOR UPDATE OF l
), appended AS (
    INSERT INTO game_session_events (table_id, seq, data)
    SELECT e.table_id, e.seq, e.data
    FROM unnest($4::text[], $5::bigint[], $6::text[]) AS e(table_id, seq, data)
    WHERE e.table_id IN (SELECT table_id FROM ok)
), updated AS (
    UPDATE game_session_tables AS t
    SET state = u.state, seq = u.seq, match_scores = u.match_scores, updated_ms = u.updated_ms
    FROM unnest($7::text[], $8::int[], $9::bigint[], $10::text[], $11::bigint[])
        AS u(id, state, seq, match_scores, updated_ms)
    WHERE t.id = u.id AND u.id IN (SELECT table_id FROM ok)
), queued AS (
    INSERT INTO game_session_outbox
        (table_id, target, request, state, attempts, next_attempt_ms, created_ms, last_error)
    SELECT o.table_id, o.target, o.request, 'pending', 0, 0, o.created_ms, ''
    FROM unnest($12::text[], $13::text[], $14::bytea[], $15::bigint[])
        AS o(table_id, target, request, created_ms)
    WHERE o.table_id IN (SELECT table_id FROM ok)
), ended AS (
    UPDATE game_session_leases AS l
    SET live = 0
    FROM unnest($16::text[]) AS f(table_id)
    WHERE l.table_id = f.table_id AND f.table_id IN (SELECT table_id FROM ok)
)
SELECT table_id FROM ok
"""


class Writer:
    """Group commit of log appends (see the module docstring)."""

    def __init__(self, db: Database, batch_max: int = 256, workers: int = 1, batch_wait: float = 0.0) -> None:
        self.db = db
        self.batch_max = batch_max
        #: seconds a worker waits, once a write is waiting, for more to join its batch
        self.batch_wait = batch_wait
        self.workers = workers if db.dialect == "postgresql" else 1  # SQLite has one writer
        self._queue: asyncio.Queue[Write] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._connections: list[Any] = [None] * self.workers
        if db.dialect == "postgresql":  # one connection of its own per worker
            db.register_pool("writer", lambda: sum(c is not None for c in self._connections), self.workers)
        self.committed_batches = 0
        #: writes in the worker's last batch: more than one means load, and the next batch waits
        self.last_batch = 0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(i), name=f"game-session-writer-{i}") for i in range(self.workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for index in range(self.workers):
            await self._close_connection(index)
        while not self._queue.empty():
            write = self._queue.get_nowait()
            if write.future is not None and not write.future.done():
                write.future.set_exception(LeaseLostError("the replica is stopping"))

    async def submit(self, write: Write) -> None:
        write.future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(write)
        await write.future

    async def _run(self, index: int) -> None:
        while True:
            batch = [await self._queue.get()]
            try:
                if self.batch_wait > 0 and (self.last_batch > 1 or not self._queue.empty()):
                    await asyncio.sleep(self.batch_wait)  # under load, let the batch grow: fewer, larger commits
                while len(batch) < self.batch_max and not self._queue.empty():
                    batch.append(self._queue.get_nowait())
                self.last_batch = len(batch)
                await self._settle(batch, index)
            except asyncio.CancelledError:
                for write in batch:
                    if write.future is not None and not write.future.done():
                        write.future.set_exception(LeaseLostError("the replica is stopping"))
                raise

    async def _settle(self, batch: list[Write], index: int) -> None:
        """Commit a batch; when it fails as a whole, commit its writes one by one, so that one bad
        write (or a transient error) fails only its own caller."""
        try:
            refused = await self._commit(batch, index)
        except Exception as error:
            if len(batch) > 1:
                log.warning("batch append failed; retrying its writes one by one",
                            extra={"fields": {"tables": len(batch), "error": repr(error)[:300]}})
                for write in batch:
                    await self._settle([write], index)
                return
            log.exception("log append failed", extra={"fields": {"table": batch[0].table_id}})
            if batch[0].future is not None and not batch[0].future.done():
                batch[0].future.set_exception(error)
            return
        self.committed_batches += 1
        for write in batch:
            if write.future is None or write.future.done():
                continue
            if write.table_id in refused:
                write.future.set_exception(LeaseLostError(write.table_id))
            else:
                write.future.set_result(None)

    async def _commit(self, batch: Sequence[Write], index: int) -> set[str]:
        if self.db.dialect == "postgresql":
            return await self._commit_asyncpg(batch, index)
        return await self._commit_orm(batch)

    async def _connection(self, index: int) -> Any:
        """A worker's own asyncpg connection (PostgreSQL): the hot path skips the ORM layers."""
        connection = self._connections[index]
        if connection is None or connection.is_closed():
            connection = self._connections[index] = await asyncpg_connect(self.db)
        return connection

    async def _commit_asyncpg(self, batch: Sequence[Write], index: int) -> set[str]:
        """A batch in one statement, so one round trip and one implicit transaction: lock the lease
        rows that still carry the writes' epochs and owner (in table id order); for those tables
        only, insert the events, update the table rows, queue the outbox rows of the match ends
        and mark their leases no longer live. A table whose lease moved is left out: it is
        refused."""
        connection = await self._connection(index)
        updates = [(w.table_id, u) for w in batch if (u := w.table_update) is not None]
        owed = [(w.table_id, target, request, int(w.table_update["updated_ms"]) if w.table_update else 0)
                for w in batch for target, request in w.outbox]
        try:
            rows = await connection.fetch(
                _APPEND_SQL,
                [w.table_id for w in batch],
                [w.epoch for w in batch],
                [w.owner_id for w in batch],
                [w.table_id for w in batch for _ in w.rows],
                [seq for w in batch for seq, _ in w.rows],
                [data for w in batch for _, data in w.rows],
                [table_id for table_id, _ in updates],
                [int(u["state"]) for _, u in updates],
                [int(u["seq"]) for _, u in updates],
                [str(u["match_scores"]) for _, u in updates],
                [int(u["updated_ms"]) for _, u in updates],
                [table_id for table_id, _, _, _ in owed],
                [target for _, target, _, _ in owed],
                [request for _, _, request, _ in owed],
                [created for _, _, _, created in owed],
                [w.table_id for w in batch if w.finished],
            )
        except BaseException:
            await self._close_connection(index)
            raise
        accepted = {row["table_id"] for row in rows}
        return {w.table_id for w in batch if w.table_id not in accepted}

    async def _close_connection(self, index: int) -> None:
        connection, self._connections[index] = self._connections[index], None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close()

    async def _commit_orm(self, batch: Sequence[Write]) -> set[str]:
        """A batch through the ORM (SQLite), in the process's one write transaction: the lease rows
        read first, the writes of the tables whose lease still matches applied."""
        leases = models.leases
        ids = sorted({w.table_id for w in batch})
        async with self.db.write() as session:
            query = (
                select(leases.c.table_id, leases.c.epoch, leases.c.owner_id)
                .where(leases.c.table_id.in_(ids))
                .order_by(leases.c.table_id)
            )
            current = {row.table_id: (row.epoch, row.owner_id) for row in (await session.execute(query)).all()}
            refused = {w.table_id for w in batch if current.get(w.table_id) != (w.epoch, w.owner_id)}
            rows = [
                {"table_id": w.table_id, "seq": seq, "data": data}
                for w in batch
                if w.table_id not in refused
                for seq, data in w.rows
            ]
            if rows:
                await session.execute(models.events.insert(), rows)
            for w in batch:
                if w.table_id in refused:
                    continue
                if w.table_update is not None:
                    await session.execute(
                        update(models.tables).where(models.tables.c.id == w.table_id).values(**w.table_update)
                    )
                if w.outbox:
                    now = int(w.table_update["updated_ms"]) if w.table_update else 0
                    await session.execute(
                        models.outbox.insert(),
                        [
                            {
                                "table_id": w.table_id,
                                "target": target,
                                "request": request,
                                "state": "pending",
                                "attempts": 0,
                                "next_attempt_ms": 0,
                                "created_ms": now,
                                "last_error": "",
                            }
                            for target, request in w.outbox
                        ],
                    )
                if w.finished:
                    await session.execute(
                        update(models.leases).where(models.leases.c.table_id == w.table_id).values(live=0)
                    )
            return refused
