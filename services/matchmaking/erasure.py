"""Erasing a load-test run (EraseLoadTestRun; docs/matchmaking.md, "Erasing a load-test run").

A run's players are the ids `{run}-{n}` (services.common.loadtest_runs). A record belongs to the run
when its people include a run player; it is erased when they are all run players (or bots):

    tickets       its players
    parties       its leader, members and invited players, and the players of its tickets
    sagas         its seated players; a lobby table's start also belongs to that table's people
    lobby_tables  its chief, seated players and onlookers, and the players seated by its starts (a
                  closed table that never started keeps nobody: its invitations say whose it was)
    recent        the run players' own rows (outside players' rows that name run players are
                  their own memory and stay)

with what only indexes them: the run players' `queue_members` and `party_members` rows (each
exists only while its ticket or party is live, so normally none) and the erased tables' invitations.

Nothing is erased (StateError, FAILED_PRECONDITION, the message counting what blocks) while a
record of the run is live (a ticket searching or proposed, a start not ended, an open party, a
lobby table not closed), or when a record of the run also names a player outside it (or a run
player is invited to a table outside the run): erasing it would take the outside player's
record with it.

Every record erased is final, and a final ticket, party, saga or lobby table is never written
again: normal traffic cannot change what the erasure deletes. The erasure reads on one snapshot
and deletes exactly the rows it read, in one transaction: on SQLite that is the process's one
writer (no other write interleaves); on PostgreSQL it is REPEATABLE READ, so a record created
meanwhile (a run player's new ticket) is neither seen nor touched, and stays whole; a row read
that another transaction changed before the erasure deletes it (a recent row rewritten by a new
match) makes the erasure ABORTED, nothing erased, to be retried.

Candidates are found set-based: the JSON lists of players as text (`%"{run}-%`) and the player
columns with the run's LIKE prefix, a few statements whatever the run's size; the exact form
`is_run_player` then decides. The JSON columns have no index: each erasure scans the tickets,
sagas, parties and lobby tables once.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Text, cast, delete, or_, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import common_pb2
from services.common.db import Database
from services.common.idempotency import IdempotencyStore
from services.common.loadtest_runs import is_run_player, like_prefix, response
from services.matchmaking import models
from services.matchmaking.core import Core, Executor
from services.matchmaking.errors import ErasureConflictError, StateError
from services.matchmaking.saga import ACTIVE
from services.matchmaking.tickets import LIVE_TICKET, Tickets

log = logging.getLogger("buraco.matchmaking")

#: The kinds of records erased, in the order of the answer (matchmaking.proto).
KINDS = ("tickets", "parties", "sagas", "lobby_tables", "recent")
#: Ids per DELETE statement.
CHUNK = 500
#: Ids named in a refusal's message, per reason.
EXAMPLES = 3
#: PostgreSQL's serialization failure and deadlock: a row read changed before it was deleted.
RETRY_SQLSTATES = frozenset({"40001", "40P01"})


def _chunks(values: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(values), CHUNK):
        yield values[start : start + CHUNK]


def _reason(ids: Iterable[str], one: str, many: str, name: Callable[[str], str]) -> str | None:
    """`3 tickets searching or proposed (tickets/a, tickets/b, tickets/c, ...)`, None for none."""
    ordered = sorted(set(ids))
    if not ordered:
        return None
    examples = ", ".join(name(i) for i in ordered[:EXAMPLES]) + (", ..." if len(ordered) > EXAMPLES else "")
    return f"{len(ordered)} {one if len(ordered) == 1 else many} ({examples})"


@dataclass
class Plan:
    """What erasing a run would delete, and what keeps it from being erased."""

    run: str
    tickets: list[str] = field(default_factory=list)
    parties: list[str] = field(default_factory=list)
    sagas: list[str] = field(default_factory=list)
    lobby_tables: list[str] = field(default_factory=list)
    recent: list[str] = field(default_factory=list)
    #: The (player, ticket id) and (player, party id) rows of run players.
    queue_members: list[tuple[str, str]] = field(default_factory=list)
    party_members: list[tuple[str, str]] = field(default_factory=list)
    #: What is live, and what is shared with players outside the run: one reason per entry.
    live: list[str] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)

    def counts(self) -> list[tuple[str, int]]:
        return [(kind, len(getattr(self, kind))) for kind in KINDS]

    def check(self) -> None:
        """Raises StateError (FAILED_PRECONDITION) naming what blocks the erasure, if anything does."""
        if not self.live and not self.shared:
            return
        parts = []
        if self.live:
            parts.append("still in progress: " + "; ".join(self.live))
        if self.shared:
            parts.append("shared with players outside the run: " + "; ".join(self.shared))
        raise StateError(f"load-test run {self.run} was not erased (nothing changed): {'. '.join(parts)}")


def _is_run(run: str) -> Callable[[str], bool]:
    return lambda player: is_run_player(run, player)


async def plan_erasure(session: Executor, run: str) -> Plan:
    """Reads everything of the run (eight statements on one snapshot) and decides what to erase."""
    t, p, s, lt, inv = models.tickets, models.parties, models.sagas, models.lobby_tables, models.lobby_invitations
    prefix = like_prefix(run)  # a player column: `{run}-%`
    listed = f'%"{prefix}'  # a JSON list of players, as text: `...,"{run}-...`
    ours = _is_run(run)
    plan = Plan(run)

    tickets: Sequence[Any] = (
        await session.execute(
            select(t.c.id, t.c.state, t.c.players, t.c.party).where(cast(t.c.players, Text).like(listed))
        )
    ).all()
    # The lobby tables of the run: named by a player column or list, by a start's seats, or by an
    # invitation (aliases: these subqueries are also used inside reads of the sagas and invitations).
    started, invitation = models.sagas.alias("started"), inv.alias("invitation")
    table_named = or_(
        lt.c.chief.like(prefix),
        cast(lt.c.seats, Text).like(listed),
        cast(lt.c.onlookers, Text).like(listed),
        lt.c.id.in_(select(started.c.lobby_table).where(cast(started.c.seats, Text).like(listed))),
        lt.c.id.in_(select(invitation.c.table_id).where(invitation.c.player.like(prefix))),
    )
    tables: Sequence[Any] = (
        await session.execute(
            select(lt.c.id, lt.c.state, lt.c.chief, lt.c.seats, lt.c.onlookers).where(table_named)
        )
    ).all()
    sagas: Sequence[Any] = (
        await session.execute(
            select(s.c.id, s.c.state, s.c.seats, s.c.lobby_table).where(
                or_(cast(s.c.seats, Text).like(listed), s.c.lobby_table.in_(select(lt.c.id).where(table_named)))
            )
        )
    ).all()
    invitations: Sequence[Any] = (
        await session.execute(
            select(inv.c.table_id, inv.c.player).where(
                or_(inv.c.player.like(prefix), inv.c.table_id.in_(select(lt.c.id).where(table_named)))
            )
        )
    ).all()
    parties: Sequence[Any] = (
        await session.execute(
            select(p.c.id, p.c.state, p.c.leader, p.c.members, p.c.invited).where(
                or_(
                    p.c.leader.like(prefix),
                    cast(p.c.members, Text).like(listed),
                    cast(p.c.invited, Text).like(listed),
                    p.c.id.in_(select(t.c.party).where(cast(t.c.players, Text).like(listed))),
                )
            )
        )
    ).all()
    r, qm, pm = models.recent, models.queue_members, models.party_members
    recent: Iterable[Any] = await session.execute(select(r.c.player).where(r.c.player.like(prefix)))
    queued: Iterable[Any] = await session.execute(select(qm).where(qm.c.player.like(prefix)))
    in_party: Iterable[Any] = await session.execute(select(pm).where(pm.c.player.like(prefix)))

    def judge(people: dict[str, set[str]]) -> tuple[list[str], list[str]]:
        """(the records that name a run player, those of them that also name an outside player)."""
        mine = [i for i, names in people.items() if any(ours(x) for x in names)]
        return mine, [i for i in mine if not all(ours(x) for x in people[i])]

    # Tickets.
    ticket_people = {row.id: set(row.players) for row in tickets}
    plan.tickets, shared_tickets = judge(ticket_people)
    states = {row.id: row.state for row in tickets}
    live_tickets = [i for i in plan.tickets if states[i] in LIVE_TICKET]

    # Lobby tables: people now and at every start; a table left by everyone keeps only its starts
    # and its invitations.
    saga_people = {row.id: {seat["player"] for seat in row.seats if seat.get("player")} for row in sagas}
    invited: dict[str, set[str]] = {}
    for row in invitations:
        invited.setdefault(row.table_id, set()).add(row.player)
    table_people: dict[str, set[str]] = {}
    for row in tables:
        people = {row.chief} if row.chief else set()
        people |= {seat["player"] for seat in row.seats if seat.get("player")} | set(row.onlookers)
        table_people[row.id] = people
    for row in sagas:
        if row.lobby_table in table_people:
            table_people[row.lobby_table] |= saga_people[row.id]
    for table_id, people in table_people.items():
        if not people:
            people |= invited.get(table_id, set())
    plan.lobby_tables, shared_tables = judge(table_people)
    table_states = {row.id: row.state for row in tables}
    live_tables = [i for i in plan.lobby_tables if table_states[i] != "closed"]
    run_tables = set(plan.lobby_tables)
    outside_invitations = [row.table_id for row in invitations if ours(row.player) and row.table_id not in run_tables]

    # Sagas: a start belongs to the run through its seats, or through its lobby table (a start of
    # bots only, the chief looking on).
    for row in sagas:
        if row.lobby_table in run_tables and not saga_people[row.id]:
            saga_people[row.id] = {seat for seat in table_people[row.lobby_table] if ours(seat)}
    plan.sagas, shared_sagas = judge(saga_people)
    saga_states = {row.id: row.state for row in sagas}
    live_sagas = [i for i in plan.sagas if saga_states[i] in ACTIVE]

    # Parties: their tickets were queued by their leader with the members of the time.
    party_people = {row.id: {row.leader, *row.members, *row.invited} for row in parties}
    for row in tickets:
        if row.party in party_people:
            party_people[row.party] |= set(row.players)
    plan.parties, shared_parties = judge(party_people)
    party_states = {row.id: row.state for row in parties}
    live_parties = [i for i in plan.parties if party_states[i] == "open"]

    plan.recent = [row.player for row in recent if ours(row.player)]
    plan.queue_members = [(row.player, row.ticket_id) for row in queued if ours(row.player)]
    plan.party_members = [(row.player, row.party_id) for row in in_party if ours(row.player)]

    reasons = [
        (plan.live, live_tickets, "ticket searching or proposed", "tickets searching or proposed", "tickets/{}"),
        (plan.live, live_sagas, "match start not ended", "match starts not ended", "match {}"),
        (plan.live, live_parties, "open party", "open parties", "parties/{}"),
        (plan.live, live_tables, "lobby table not closed", "lobby tables not closed", "lobbyTables/{}"),
        (plan.shared, shared_tickets, "ticket", "tickets", "tickets/{}"),
        (plan.shared, shared_sagas, "match start", "match starts", "match {}"),
        (plan.shared, shared_parties, "party", "parties", "parties/{}"),
        (plan.shared, shared_tables, "lobby table", "lobby tables", "lobbyTables/{}"),
        (
            plan.shared,
            outside_invitations,
            "lobby table outside the run that invited a run player",
            "lobby tables outside the run that invited run players",
            "lobbyTables/{}",
        ),
    ]
    for into, ids, one, many, form in reasons:
        reason = _reason(ids, one, many, form.format)
        if reason is not None:
            into.append(reason)
    return plan


async def erase_planned(session: Executor, plan: Plan) -> None:
    """Deletes exactly what `plan` found (its records, and the rows that only index them)."""
    t, p, s, lt, inv = models.tickets, models.parties, models.sagas, models.lobby_tables, models.lobby_invitations
    qm, pm, r = models.queue_members, models.party_members, models.recent
    for ids in _chunks(plan.lobby_tables):
        await session.execute(delete(inv).where(inv.c.table_id.in_(ids)))
        await session.execute(delete(lt).where(lt.c.id.in_(ids)))
    # A player's index row is deleted only with the very ticket or party it was read with.
    for pairs in _chunks(plan.queue_members):
        await session.execute(
            delete(qm).where(qm.c.player.in_({a for a, _ in pairs}), qm.c.ticket_id.in_({b for _, b in pairs}))
        )
    for pairs in _chunks(plan.party_members):
        await session.execute(
            delete(pm).where(pm.c.player.in_({a for a, _ in pairs}), pm.c.party_id.in_({b for _, b in pairs}))
        )
    for table, column, values in (
        (t, t.c.id, plan.tickets),
        (p, p.c.id, plan.parties),
        (s, s.c.id, plan.sagas),
        (r, r.c.player, plan.recent),
    ):
        for ids in _chunks(values):
            await session.execute(delete(table).where(column.in_(ids)))


@asynccontextmanager
async def _snapshot_write(db: Database) -> AsyncIterator[AsyncSession]:
    """A write transaction that reads on one snapshot: `Database.write` (on SQLite the process's
    one writer), REPEATABLE READ on PostgreSQL."""
    async with db.write() as session:
        if db.dialect == "postgresql":
            await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
        yield session


async def _nothing() -> None:
    return None


class Erasure:
    """EraseLoadTestRun: dry runs read a snapshot; erasures run once per request id (the
    service's idempotency store, in a snapshot write)."""

    def __init__(self, core: Core, tickets: Tickets) -> None:
        self.core = core
        self.tickets = tickets
        self._store = IdempotencyStore(
            core.idempotency.table,
            retention=core.idempotency.retention,
            clock=core.clock,
            writes=_snapshot_write,
        )
        #: Tests: awaited inside the erasure's transaction, after the plan was read and checked and
        #: before anything is deleted (to run other calls meanwhile).
        self.before_deleting: Callable[[], Awaitable[None]] = _nothing

    async def erase(
        self, scope: str, request: common_pb2.EraseLoadTestRunRequest, run: str
    ) -> common_pb2.EraseLoadTestRunResponse:
        """Erases the run (or, for a dry run, counts what would be erased: the same checks, nothing
        written); StateError naming what blocks it, ErasureConflictError when it must be retried."""
        fields: dict[str, Any] = {"run": run, "by": scope, "dry_run": request.dry_run}
        try:
            reply = await (self._count(run) if request.dry_run else self._erase(scope, request, run))
        except StateError as refused:
            log.info("load-test run erasure refused", extra={"fields": {**fields, "reason": refused.message}})
            raise
        counts = {record.kind: record.count for record in reply.erased}
        log.info("load-test run erased", extra={"fields": {**fields, **counts}})
        return reply

    async def _count(self, run: str) -> common_pb2.EraseLoadTestRunResponse:
        async with self.core.db.read() as session:
            plan = await plan_erasure(session, run)
        plan.check()
        return response(run, True, plan.counts())

    async def _erase(
        self, scope: str, request: common_pb2.EraseLoadTestRunRequest, run: str
    ) -> common_pb2.EraseLoadTestRunResponse:
        async def work(session: AsyncSession) -> common_pb2.EraseLoadTestRunResponse:
            plan = await plan_erasure(session, run)
            plan.check()
            await self.before_deleting()
            await erase_planned(session, plan)
            return response(run, False, plan.counts())

        try:
            reply = await self._store.run(
                self.core.db,
                scope=scope,
                method="EraseLoadTestRun",
                request=request,
                response_type=common_pb2.EraseLoadTestRunResponse,
                work=work,
            )
        except DBAPIError as error:
            if getattr(error.orig, "sqlstate", None) not in RETRY_SQLSTATES:
                raise
            raise ErasureConflictError(f"load-test run {run} changed while it was being erased; retry") from None
        # The erased tickets' waits leave the estimated-wait history: this replica's means go too.
        self.tickets.forget_mean_waits()
        return reply
