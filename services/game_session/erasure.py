"""Erasing a load-test run's tables (`EraseLoadTestRun`, common.proto's EraseLoadTestRunRequest).

Which tables: those at which a run player sat (`loadtest_runs.is_run_player`) and whose every
seat is a run player's or a bot's. They are found by their seats, never by their ids (matchmaking
names its tables itself): `game_session_seats` holds the seats of players only (a bot seat has no
row), so a table belongs to the run when it has a seat row and every one of them is a run player.
A table of bots alone has no player and belongs to no run.

When: only when every such table has ended (FINISHED or CANCELLED, its lease no longer live) and
owes nothing: every outbox row delivered. A row the target refused for good (`failed`, a dead
letter) still owes its settlement; a person must deal with it first, so it refuses the erasure as
a pending row does (erasing it would drop the only record of the debt). A run player who sat at a
table with a player outside the run refuses it too (that player's table is not the run's to
erase). Each refusal is FAILED_PRECONDITION naming what and how many, with nothing erased.

What: the tables' rows, seats, leases, event logs, outbox rows and chat mutes, in the caller's
transaction (all or nothing). The idempotency keys of the `CreateTable` calls that made them stay
until they expire: erased, a late retry of such a call would make the table again.

No lock is needed for the checks: each one, once passed, stays passed (an ended table never lives
again, its outbox rows are written with its end and a delivered row stays delivered, seats never
change), and a table whose rows are gone takes no write (the log writer appends only under a lease
row on record). The table rows are deleted first: a mute recorded meanwhile (`store.set_mute`
reads its table row FOR SHARE) either commits before that delete, and is erased with the rest, or
finds the table gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import game_session_pb2
from services.common import loadtest_runs
from services.game_session import models, store
from services.game_session.errors import RunNotErasableError

State = game_session_pb2.Table
#: The kinds the answer counts, in order (common.proto, `ErasedRecords.kind`).
KINDS = ("tables", "events", "outbox")
#: Tables named per reason in a refusal's message.
NAMED = 5
_ENDED = (State.STATE_FINISHED, State.STATE_CANCELLED)


@dataclass(frozen=True)
class Erasure:
    """What an erasure found (and, unless a dry run, erased)."""

    #: the run's tables, in id order
    table_ids: list[str]
    tables: int
    events: int
    outbox: int

    def counts(self) -> list[tuple[str, int]]:
        return list(zip(KINDS, (self.tables, self.events, self.outbox), strict=True))


async def erase_run(session: AsyncSession, run: str, *, dry_run: bool) -> Erasure:
    """Find the run's tables, check that they may go, count their records and (unless `dry_run`)
    delete them, in `session`'s transaction; RunNotErasableError, with nothing changed, when one
    of them may not go."""
    ids = await _run_tables(session, run)
    survey = _Survey()
    for chunk in store.id_chunks(ids):
        await survey.read(session, run, chunk)
    survey.check(run)
    if not dry_run:
        for chunk in store.id_chunks(ids):
            await _delete(session, chunk)
    return Erasure(ids, survey.tables, survey.events, survey.outbox)


async def _run_tables(session: AsyncSession, run: str) -> list[str]:
    """The ids of the tables at which a run player sat, in order."""
    seats = models.seats
    rows = await session.execute(
        select(seats.c.table_id, seats.c.player).where(seats.c.player.like(loadtest_runs.like_prefix(run))))
    return sorted({row.table_id for row in rows if loadtest_runs.is_run_player(run, row.player)})


@dataclass
class _Survey:
    """The run's tables as their rows stand: what would be erased, and what forbids it."""

    tables: int = 0
    events: int = 0
    outbox: int = 0
    #: tables where a player outside the run sat
    shared: set[str] = field(default_factory=set)
    #: tables not ended (waiting or playing, or their lease still live)
    in_play: set[str] = field(default_factory=set)
    #: outbox rows not delivered, by state (`pending`, `failed`), and the tables that owe them
    owed: dict[str, int] = field(default_factory=dict)
    owing: set[str] = field(default_factory=set)

    async def read(self, session: AsyncSession, run: str, chunk: Sequence[str]) -> None:
        seats, tables, leases, events, outbox = (
            models.seats, models.tables, models.leases, models.events, models.outbox)
        rows = await session.execute(select(seats.c.table_id, seats.c.player).where(seats.c.table_id.in_(chunk)))
        self.shared.update(row.table_id for row in rows if not loadtest_runs.is_run_player(run, row.player))
        rows = await session.execute(
            select(tables.c.id, tables.c.state, leases.c.live)
            .select_from(tables.outerjoin(leases, leases.c.table_id == tables.c.id))
            .where(tables.c.id.in_(chunk)))
        for row in rows:
            self.tables += 1
            if row.state not in _ENDED or row.live:
                self.in_play.add(row.id)
        found = await session.execute(select(func.count()).where(events.c.table_id.in_(chunk)))
        self.events += int(found.scalar_one())
        rows = await session.execute(
            select(outbox.c.table_id, outbox.c.state, func.count().label("rows"))
            .where(outbox.c.table_id.in_(chunk))
            .group_by(outbox.c.table_id, outbox.c.state))
        for row in rows:
            self.outbox += int(row.rows)
            if row.state != "delivered":
                self.owed[row.state] = self.owed.get(row.state, 0) + int(row.rows)
                self.owing.add(row.table_id)

    def check(self, run: str) -> None:
        """RunNotErasableError when a table seated a player outside the run, is in play, or owes a
        delivery."""
        reasons = []
        if self.shared:
            reasons.append(f"{_tables(self.shared)} with players outside the run")
        if self.in_play:
            reasons.append(f"{_tables(self.in_play)} not ended (waiting or playing)")
        if self.owing:
            rows = ", ".join(f"{count} {_OWED.get(state, state)}" for state, count in sorted(self.owed.items()))
            reasons.append(f"{_tables(self.owing)} owing deliveries to other services ({rows})")
        if reasons:
            raise RunNotErasableError(f"run {run!r} cannot be erased, nothing was erased: " + "; ".join(reasons))


#: How a refusal names the outbox rows not delivered, by state.
_OWED = {"pending": "pending", "failed": "failed (dead letters: a person settles them first)"}


def _tables(ids: set[str]) -> str:
    """`3 tables (tables/a, tables/b, tables/c)`, at most NAMED of them named."""
    named = sorted(ids)[:NAMED]
    listed = ", ".join(f"tables/{table_id}" for table_id in named)
    more = ", ..." if len(ids) > NAMED else ""
    return f"{len(ids)} table{'s' if len(ids) != 1 else ''} ({listed}{more})"


async def _delete(session: AsyncSession, chunk: Sequence[str]) -> None:
    """The tables' rows first (see the module docstring), then every row keyed to them."""
    await session.execute(delete(models.tables).where(models.tables.c.id.in_(chunk)))
    for table in (models.leases, models.seats, models.events, models.outbox, models.mutes):
        await session.execute(delete(table).where(table.c.table_id.in_(chunk)))

