"""The game-session service's database work besides the log writer (`writer`): creating a
table, its lease and the replicas' heartbeats, loading a table back from its log, chat mutes.

Each replica has a heartbeat row (`game_session_replicas`) that it renews at every lease scan;
each table a lease row (`game_session_leases`: owner id and address, fencing epoch, live). A
table's lease lasts as long as its owner's heartbeat. Taking a table over is one conditional
UPDATE on the epoch seen, so two replicas never both win it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, func, select, update
from sqlalchemy.exc import IntegrityError

from buraco.v1 import game_session_pb2
from services.common.db import Database, LazyPool
from services.common.errors import AlreadyExistsError, NotFoundError
from services.common.idempotency import IdempotencyStore, request_hash
from services.game_session import models

State = game_session_pb2.Table

log = logging.getLogger("buraco.game_session.store")


_CREATE_TABLE_SQL = """
WITH prior AS (
    SELECT 1 FROM game_session_idempotency_keys WHERE scope = $1 AND request_id = $2
), created AS (
    INSERT INTO game_session_tables (id, match_id, description, state, seq, match_scores, created_ms, updated_ms)
    SELECT $3, $4, $5, $6, 0, '[0, 0]', $7, $7
    WHERE NOT EXISTS (SELECT 1 FROM prior)
    ON CONFLICT DO NOTHING
    RETURNING id
), seated AS (
    INSERT INTO game_session_seats (table_id, seat, player)
    SELECT created.id, p.seat, p.player FROM created, unnest($8::int[], $9::text[]) AS p(seat, player)
), leased AS (
    INSERT INTO game_session_leases (table_id, owner_address, owner_id, epoch, live)
    SELECT created.id, $10, $11, 1, 1 FROM created
), remembered AS (
    INSERT INTO game_session_idempotency_keys
        (scope, request_id, method, request_hash, response, created_at, expires_at)
    SELECT $1, $2, $12, $13, $14, $15, $16 FROM created
)
SELECT count(*) AS created FROM created
"""


@dataclass(frozen=True)
class NewTable:
    """A table to create: its row, its players' seats, and this replica's lease on it (epoch 1)."""

    table_id: str
    match_id: str
    description: bytes
    now_ms: int
    seats: Sequence[tuple[int, str]]
    owner_address: str
    owner_id: str


class Creator:
    """Writes new tables, idempotently (`CreateTable`): the table row, its seats, its lease and
    the call's idempotency key in one transaction. On PostgreSQL a new table is one statement on
    asyncpg connections of the creator's own (a replica in steady use creates tables all the
    time: every match ended is replaced); a call that statement does not write (a retry, a reused
    request id, an expired key, a clash) and every call on SQLite take the general path through
    the ORM and the idempotency store, which tells them apart."""

    def __init__(self, db: Database, idempotency: IdempotencyStore, size: int = 4) -> None:
        self.db = db
        self.idempotency = idempotency
        #: new tables in one statement (PostgreSQL), on a few asyncpg connections of the creator's own
        self.at_once = db.dialect == "postgresql"
        self._pool = LazyPool(db, "creator", max_size=size)

    async def create(self, *, scope: str, method: str, request: game_session_pb2.CreateTableRequest, table: NewTable,
                     reply: game_session_pb2.Table) -> tuple[game_session_pb2.Table, bool]:
        """The call's answer, and whether this call created the table (False: the answer of an
        earlier call with the same request id); ALREADY_EXISTS when the table id or the match id
        is taken, by another request."""
        if self.at_once:
            stored_at, expires_at = self.idempotency.window()
            if await self._create_at_once(
                scope=scope, request_id=request.request_id, method=method,
                digest=request_hash(method, request), table=table,
                response=reply.SerializeToString(deterministic=True), created_at=stored_at, expires_at=expires_at,
            ):
                return reply, True
        created: list[bool] = []

        async def work(session: Any) -> game_session_pb2.Table:
            tables = models.tables
            exists = (await session.execute(
                select(tables.c.id, tables.c.match_id).where(
                    (tables.c.id == table.table_id) | (tables.c.match_id == table.match_id))
            )).first()
            if exists is not None:
                what = f"tables/{table.table_id}" if exists.id == table.table_id else f"match_id {table.match_id!r}"
                raise AlreadyExistsError(f"{what} exists already")
            await session.execute(tables.insert().values(
                id=table.table_id, match_id=table.match_id, description=table.description,
                state=State.STATE_WAITING, seq=0, match_scores="[0, 0]", created_ms=table.now_ms,
                updated_ms=table.now_ms,
            ))
            if table.seats:
                await session.execute(models.seats.insert(), [
                    {"table_id": table.table_id, "seat": seat, "player": player} for seat, player in table.seats
                ])
            await session.execute(models.leases.insert().values(
                table_id=table.table_id, owner_address=table.owner_address, owner_id=table.owner_id, epoch=1, live=1,
            ))
            created.append(True)
            return reply

        try:
            answer = await self.idempotency.run(
                self.db, scope=scope, method=method, request=request, response_type=game_session_pb2.Table,
                work=work,
            )
        except IntegrityError:
            raise AlreadyExistsError(
                f"tables/{table.table_id} or match_id {table.match_id!r} exists already") from None
        return answer, bool(created) and answer.name == reply.name

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._pool.close()

    async def _create_at_once(
        self, *, scope: str, request_id: str, method: str, digest: str, table: NewTable, response: bytes,
        created_at: datetime, expires_at: datetime,
    ) -> bool:
        """Write a new table in one statement (`_CREATE_TABLE_SQL`); False when it wrote nothing
        (the key is known, or the table or match exists: the general path decides)."""
        import asyncpg

        pool = await self._pool.get()
        try:
            created = await pool.fetchval(
                _CREATE_TABLE_SQL, scope, request_id, table.table_id, table.match_id, table.description,
                State.STATE_WAITING, table.now_ms, [seat for seat, _ in table.seats],
                [player for _, player in table.seats], table.owner_address, table.owner_id,
                method, digest, response, created_at, expires_at,
            )
        except asyncpg.UniqueViolationError:  # the same key, committed meanwhile by a concurrent call
            return False
        return bool(created)


@dataclass
class LeaseRow:
    table_id: str
    owner_address: str
    owner_id: str
    epoch: int
    #: Until when the owner's heartbeat vouches for it (0: the owner is gone or stopped).
    expires_ms: int
    live: bool


def _alive(now_ms: int) -> Any:
    """The lease's owner has a heartbeat that has not run out."""
    replicas, leases = models.replicas, models.leases
    return (
        select(replicas.c.owner_id)
        .where(replicas.c.owner_id == leases.c.owner_id, replicas.c.expires_ms >= now_ms)
        .exists()
    )


@dataclass(frozen=True)
class Handoff:
    """Who may take over the tables of a replica that stopped gracefully (`release`), and when.

    In a rolling update every old replica stops in turn: a table taken over by another old
    replica would move again when that one stops. So for `wait_ms` after a release, its tables
    are left to a replica of another revision than the releaser's (the new release) or at the
    releaser's address (its replacement); after that, to any replica (a scale-down, or a rollout
    whose new replicas are late). A replica whose heartbeat simply ran out (a crash) is not
    waited for. `wait_ms` 0: any replica at once.
    """

    revision: str = ""
    address: str = ""
    wait_ms: int = 0


def _held_back(now_ms: int, handoff: Handoff) -> Any:
    """The lease's owner released its tables within the wait, for a replica other than this one."""
    replicas, leases = models.replicas, models.leases
    return (
        select(replicas.c.owner_id)
        .where(replicas.c.owner_id == leases.c.owner_id, replicas.c.released_ms > 0,
               replicas.c.released_ms + handoff.wait_ms > now_ms, replicas.c.revision == handoff.revision,
               replicas.c.address != handoff.address)
        .exists()
    )


async def lease_of(db: Database, table_id: str) -> LeaseRow | None:
    leases, replicas = models.leases, models.replicas
    async with db.read() as session:
        row = (
            await session.execute(
                select(leases, replicas.c.expires_ms)
                .select_from(leases.outerjoin(replicas, replicas.c.owner_id == leases.c.owner_id))
                .where(leases.c.table_id == table_id)
            )
        ).first()
    if row is None:
        return None
    return LeaseRow(
        row.table_id, row.owner_address, row.owner_id, int(row.epoch), int(row.expires_ms or 0), bool(row.live)
    )


async def heartbeat(db: Database, owner_id: str, address: str, now_ms: int, ttl_ms: int, revision: str = "") -> None:
    """Register or renew this replica: one row, whatever the number of tables it owns (so a
    renewal never waits for, or holds up, the log appends that lock lease rows)."""
    replicas = models.replicas
    async with db.write() as session:
        result = await session.execute(
            update(replicas).where(replicas.c.owner_id == owner_id).values(address=address, expires_ms=now_ms + ttl_ms)
        )
        if getattr(result, "rowcount", 0) != 1:
            await session.execute(
                replicas.insert().values(owner_id=owner_id, address=address, expires_ms=now_ms + ttl_ms,
                                         revision=revision)
            )


async def take_over(
    db: Database,
    table_id: str,
    *,
    seen_epoch: int,
    owner_address: str,
    owner_id: str,
    now_ms: int,
    force: bool = False,
    handoff: Handoff = Handoff(),
) -> int | None:
    """Become the owner of a table whose owner's heartbeat ran out, unless its owner released it
    for another replica (`Handoff`), or (`force`) whose owner is known gone: the new epoch, or
    None when another replica got there first or the table waits for another."""
    leases = models.leases
    condition = and_(leases.c.table_id == table_id, leases.c.epoch == seen_epoch)
    if not force:
        condition = and_(condition, ~_alive(now_ms), ~_held_back(now_ms, handoff))
    async with db.write() as session:
        result = await session.execute(
            update(leases).where(condition).values(owner_address=owner_address, owner_id=owner_id, epoch=seen_epoch + 1)
        )
    return seen_epoch + 1 if getattr(result, "rowcount", 0) == 1 else None


async def held(db: Database, owner_id: str) -> dict[str, int]:
    """{table id: epoch} of the live tables' leases this replica holds (a finished table's lease
    row stays, with live 0: without the filter the scan would grow with every match played)."""
    leases = models.leases
    async with db.read() as session:
        rows = (
            await session.execute(
                select(leases.c.table_id, leases.c.epoch).where(leases.c.live == 1, leases.c.owner_id == owner_id)
            )
        ).all()
    return {row.table_id: int(row.epoch) for row in rows}


async def expired_live(
    db: Database, now_ms: int, *, address: str, owner_id: str, limit: int = 200, handoff: Handoff = Handoff()
) -> list[tuple[str, int, bool]]:
    """Live tables whose owner's heartbeat ran out (and that are not held back for another
    replica: `Handoff`), or whose owner had this replica's address (a previous process at this
    address is gone: it cannot hold the port we bound): (id, epoch, force)."""
    leases = models.leases
    async with db.read() as session:
        rows = (
            await session.execute(
                select(leases.c.table_id, leases.c.epoch, leases.c.owner_address, _alive(now_ms).label("alive"))
                .where(leases.c.live == 1, leases.c.owner_id != owner_id)
                .where((~_alive(now_ms) & ~_held_back(now_ms, handoff)) | (leases.c.owner_address == address))
                .limit(limit)
            )
        ).all()
    return [(row.table_id, int(row.epoch), bool(row.alive)) for row in rows]


async def release(db: Database, owner_id: str, now_ms: int) -> None:
    """Give up every table this replica owns (graceful stop): its heartbeat ends now, so others
    take its tables over at once, or, within the handoff wait, the replicas it is left to (`Handoff`)."""
    async with db.write() as session:
        replicas = models.replicas
        await session.execute(
            update(replicas).where(replicas.c.owner_id == owner_id).values(expires_ms=0, released_ms=max(1, now_ms))
        )


@dataclass
class StoredTable:
    """A table as its rows hold it (`load`)."""

    table_id: str
    description: bytes
    created_ms: int
    state: int
    #: the log's entries, as JSON texts, in order
    entries: list[str]


async def load(db: Database, table_id: str) -> StoredTable | None:
    async with db.read() as session:
        row = (await session.execute(select(models.tables).where(models.tables.c.id == table_id))).first()
        if row is None:
            return None
        events = (
            await session.execute(
                select(models.events.c.data).where(models.events.c.table_id == table_id).order_by(models.events.c.seq)
            )
        ).all()
    return StoredTable(
        row.id, row.description, int(row.created_ms), int(row.state), [str(e.data) for e in events]
    )


#: Table ids per `IN` list: well under both databases' limit on a statement's parameters.
IN_CHUNK = 500


def id_chunks(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    """`ids` in slices of at most IN_CHUNK, for statements that name them in an `IN` list."""
    for start in range(0, len(ids), IN_CHUNK):
        yield ids[start : start + IN_CHUNK]


async def erased(db: Database, table_ids: Sequence[str]) -> set[str]:
    """Those of `table_ids` whose table row is gone (a load-test run's erasure, on any replica)."""
    tables = models.tables
    found: set[str] = set()
    async with db.read() as session:
        for chunk in id_chunks(table_ids):
            rows = await session.execute(select(tables.c.id).where(tables.c.id.in_(chunk)))
            found.update(row.id for row in rows)
    return set(table_ids) - found


async def mutes_of(db: Database, table_id: str) -> set[tuple[str, str]]:
    async with db.read() as session:
        rows = (
            await session.execute(
                select(models.mutes.c.viewer, models.mutes.c.player).where(models.mutes.c.table_id == table_id)
            )
        ).all()
    return {(row.viewer, row.player) for row in rows}


async def set_mute(db: Database, table_id: str, viewer: str, player: str, muted: bool) -> None:
    """Record or drop a mute; NOT_FOUND when the table's rows are gone (erased, `erasure`): its
    row is read FOR SHARE, so an erasure either deletes the mute with the table or is seen here."""
    tables, mutes = models.tables, models.mutes
    async with db.write() as session:
        found = await session.execute(select(tables.c.id).where(tables.c.id == table_id).with_for_update(read=True))
        if found.first() is None:
            raise NotFoundError(f"tables/{table_id} does not exist")
        await session.execute(
            delete(mutes).where(mutes.c.table_id == table_id, mutes.c.viewer == viewer, mutes.c.player == player)
        )
        if muted:
            await session.execute(mutes.insert().values(table_id=table_id, viewer=viewer, player=player))


@dataclass(frozen=True)
class ListedTable:
    """A table as `ListTables` reads it from its rows: its description, state and scores, and
    the last event in its log (the table row's `seq` moves only with the table's state)."""

    table_id: str
    description: bytes
    state: int
    seq: int
    match_scores: str


async def list_tables(
    db: Database, *, player: str | None, state: int, after: str | None, size: int
) -> list[ListedTable]:
    """Up to `size` tables in id order after `after`: those `player` sits at (any when None), in
    `state` (any when 0)."""
    tables, events = models.tables, models.events
    query = select(tables.c.id, tables.c.description, tables.c.state, tables.c.seq, tables.c.match_scores)
    if player is not None:
        query = query.where(tables.c.id.in_(select(models.seats.c.table_id).where(models.seats.c.player == player)))
    if state:
        query = query.where(tables.c.state == state)
    if after is not None:
        query = query.where(tables.c.id > after)
    query = query.order_by(tables.c.id).limit(size)
    async with db.read() as session:
        rows = (await session.execute(query)).all()
        last_seq: dict[str, int] = {}
        if rows:  # the primary key's index answers
            found = await session.execute(
                select(events.c.table_id, func.max(events.c.seq))
                .where(events.c.table_id.in_([row.id for row in rows]))
                .group_by(events.c.table_id)
            )
            last_seq = {table_id: int(seq) for table_id, seq in found.all()}
    return [
        ListedTable(row.id, row.description, int(row.state), max(int(row.seq), last_seq.get(row.id, 0)),
                    row.match_scores)
        for row in rows
    ]
