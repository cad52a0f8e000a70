"""Quick-match tickets: a player's (or a party's) request for one kind of table, from creation
through the matching loop's proposal and every player's confirmation to the start saga's outcome;
their views (window, position, estimated wait) and their watch streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

from google.protobuf.duration_pb2 import Duration
from sqlalchemy import String, and_, bindparam, delete, func, insert, literal, null, or_, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import matchmaking_pb2
from services.common.db import Database, DriverStatement
from services.common.idempotency import request_hash
from services.matchmaking import models
from services.matchmaking.core import Core, Executor, Preferences, Viewer, aware, new_id, preferences_of, timestamp
from services.matchmaking.errors import DependencyUnavailableError, NotAllowedError, StateError, TicketNotFoundError
from services.matchmaking.matcher import BucketKey
from services.matchmaking.parties import party_row
from services.matchmaking.ports import CallError, Unreachable
from services.matchmaking.saga import confirmed_values

Ticket = matchmaking_pb2.Ticket
#: Ticket states in the database and on the wire.
TICKET_STATES = {
    "searching": Ticket.STATE_SEARCHING,
    "proposed": Ticket.STATE_PROPOSED,
    "matched": Ticket.STATE_MATCHED,
    "failed": Ticket.STATE_FAILED,
    "cancelled": Ticket.STATE_CANCELLED,
}
LIVE_TICKET = ("searching", "proposed")
#: How far back finished waits count for the estimated wait.
WAIT_HISTORY = timedelta(hours=1)
#: How often a watch stream rebuilds a searching ticket's view when nothing else changed.
REFRESH_SECONDS = 5.0
#: Ticket ids per statement of a batched read.
FETCH_CHUNK = 500
#: How long a replica reuses a kind of ticket's mean recent wait (an hour's mean, for an estimate)
#: rather than reading it again for every view.
MEAN_WAIT_TTL = timedelta(seconds=5)


def _position_statements() -> tuple[Any, Any, Any]:
    """The statements of a ticket's place and its bucket's mean wait, built once: building a
    statement costs more CPU than running it (each ticket's creation and views run them)."""
    t = models.tickets
    bucket = and_(
        t.c.preset == bindparam("preset"),
        t.c.seats == bindparam("seats"),
        t.c.length == bindparam("length"),
        t.c.target_points == bindparam("target_points"),
        t.c.mode == bindparam("mode"),
        t.c.bet_chips == bindparam("bet_chips"),
    )
    queued_at: Any = bindparam("queued_at")
    ticket_id: Any = bindparam("id")
    earlier = or_(t.c.queued_at < queued_at, and_(t.c.queued_at == queued_at, t.c.id < ticket_id))
    searching = and_(t.c.state == "searching", bucket)
    # requeued tickets (front) come first, then by time queued, then by id
    ahead_of_front = select(func.count()).where(searching, t.c.front.is_(True), earlier)
    ahead_of_back = select(func.count()).where(searching, or_(t.c.front.is_(True), and_(t.c.front.is_(False), earlier)))
    mean_wait = select(func.avg(t.c.wait_seconds)).where(
        bucket, t.c.wait_seconds.is_not(None), t.c.update_time > bindparam("since")
    )
    return ahead_of_front, ahead_of_back, mean_wait


#: A read both ways: the statement, and the same compiled for the driver (PostgreSQL)
_Read = tuple[Any, DriverStatement]
_AHEAD_OF_FRONT, _AHEAD_OF_BACK, _MEAN_WAIT = ((statement, DriverStatement(statement))
                                               for statement in _position_statements())
_TICKET = select(models.tickets).where(models.tickets.c.id == bindparam("ticket_id"))
_LIVE_TICKETS = select(models.queue_members).where(
    models.queue_members.c.player.in_(bindparam("players", expanding=True)))
_RECENT_OPPONENTS = select(models.recent).where(models.recent.c.player.in_(bindparam("players", expanding=True)))
_QUEUE = insert(models.queue_members)
_NEW_TICKET = insert(models.tickets)
_CONFIRM = (
    update(models.tickets)
    .where(models.tickets.c.id == bindparam("ticket_id"))
    .values(confirmed=bindparam("now_confirmed"), version=bindparam("new_version"), update_time=bindparam("now"))
)
_SAGA_FOR_UPDATE = select(models.sagas).where(models.sagas.c.id == bindparam("saga_id")).with_for_update()
_OTHER_TICKETS = select(models.tickets.c.players, models.tickets.c.confirmed).where(
    models.tickets.c.id.in_(bindparam("tickets", expanding=True)), models.tickets.c.id != bindparam("ticket_id")
)


def _create_at_once() -> Any:
    """A lone player's new ticket in one statement (PostgreSQL): its queue membership (the key
    refuses a second live ticket), the ticket, and the call's answer under its idempotency key
    (the key refuses a concurrent call's second answer), as data-modifying CTEs; a statement is
    atomic by itself, so it needs no transaction. Parameters: the ticket's columns as `t_<name>`,
    the key's as `k_<name>`."""
    t, q, k = models.tickets, models.queue_members, models.idempotency_keys
    queued = insert(q).values(player=bindparam("t_owner"), ticket_id=bindparam("t_id")).returning(q.c.player).cte("q")
    ticket = insert(t).values({c.name: bindparam(f"t_{c.name}", type_=c.type) for c in t.c}).returning(t.c.id).cte("n")
    key = insert(k).values({c.name: bindparam(f"k_{c.name}", type_=c.type) for c in k.c}).returning(k.c.scope).cte("k")
    return select(*(select(func.count()).select_from(part).scalar_subquery() for part in (queued, ticket, key)))


_CREATE_AT_ONCE = DriverStatement(_create_at_once())


def _create_reads(counting: bool) -> Any:
    """What a lone player's new ticket reads first, in one statement (PostgreSQL): the answer stored
    under the call's idempotency key, if any (`scope`, `request_id`; its columns NULL when none),
    the player's recent opponents (`player`; NULL when none) and, `counting`, how many tickets are
    ahead of a new one at the back of its bucket (`_AHEAD_OF_BACK`'s parameters; a scan of the
    bucket, for when the matching loop cannot tell)."""
    k, r = models.idempotency_keys, models.recent
    one = select(literal(1).label("one")).subquery("one")
    stored = one.outerjoin(k, and_(k.c.scope == bindparam("scope"), k.c.request_id == bindparam("request_id")))
    recent = select(r.c.others).where(r.c.player == bindparam("player")).scalar_subquery()
    ahead = _AHEAD_OF_BACK[0].scalar_subquery() if counting else null()
    return select(k.c.method, k.c.request_hash, k.c.response, k.c.expires_at,
                  ahead.label("ahead"), recent.label("recent")).select_from(stored)


_CREATE_READS, _CREATE_READS_COUNTING = (DriverStatement(_create_reads(counting)) for counting in (False, True))


def _confirm_at_once() -> Any:
    """A confirmation in one statement (PostgreSQL): the ticket's confirmed players and version
    written if it is still proposed at the version read (`t_id`, `t_version`, `t_confirmed`,
    `t_new_version`, `t_now`), and the call's answer stored under its idempotency key (`k_<name>`)
    only if the ticket was written. Returns (tickets written, answers stored): (1, 1) or (0, 0)."""
    t, k = models.tickets, models.idempotency_keys
    written = (
        update(t)
        .where(t.c.id == bindparam("t_id"), t.c.version == bindparam("t_version"), t.c.state == "proposed")
        .values(confirmed=bindparam("t_confirmed", type_=t.c.confirmed.type), version=bindparam("t_new_version"),
                update_time=bindparam("t_now"))
        .returning(t.c.id)
        .cte("u")
    )
    answer = select(*(bindparam(f"k_{c.name}", type_=c.type) for c in k.c)).select_from(written)
    key = insert(k).from_select([c.name for c in k.c], answer).returning(k.c.scope).cte("k")
    return select(*(select(func.count()).select_from(part).scalar_subquery() for part in (written, key)))


_CONFIRM_AT_ONCE = DriverStatement(_confirm_at_once())


def _confirm_reads() -> Any:
    """What a confirmation reads first, in one statement (PostgreSQL): the ticket's row (`ticket_id`;
    NULLs when there is none) and the answer stored under the call's key, if any (`scope`,
    `request_id`; as `k_method`, `k_request_hash`, `k_response`, `k_expires_at`)."""
    t, k = models.tickets, models.idempotency_keys
    one = select(literal(1).label("one")).subquery("one")
    joined = one.outerjoin(t, t.c.id == bindparam("ticket_id")).outerjoin(
        k, and_(k.c.scope == bindparam("scope"), k.c.request_id == bindparam("request_id")))
    stored = [k.c.method.label("k_method"), k.c.request_hash.label("k_request_hash"),
              k.c.response.label("k_response"), k.c.expires_at.label("k_expires_at")]
    return select(*t.c, *stored).select_from(joined)


_CONFIRM_READS = DriverStatement(_confirm_reads())
_TICKET_COLUMNS = tuple(c.name for c in models.tickets.c)

#: The quick-match saga `saga` moved on once every player of every one of its tickets has
#: confirmed (PostgreSQL): what `confirmed_values` writes, as one conditional statement. Run after
#: a confirmation committed, on a snapshot taken after it: of two last confirmations landing at
#: once, the later one's statement sees both (the other's finds the saga moved, or moves it
#: first). Returns the saga's id when it moved it. The tickets are looked up by key (`= ANY` of
#: an array): as `IN (SELECT ...)` of a set-returning function the planner scans the whole table.
_START_IF_ALL_CONFIRMED = DriverStatement(text("""
    UPDATE matchmaking_sagas AS s
       SET state = CASE WHEN s.bet_chips > 0 THEN 'holding' ELSE 'creating' END,
           held = s.bet_chips > 0, table_requested = TRUE,
           deadline = :deadline, next_attempt_at = :now, attempts = 0, update_time = :now
     WHERE s.id = :saga AND s.state = 'confirming'
       AND NOT EXISTS (
           SELECT 1 FROM matchmaking_tickets AS t
            WHERE t.id = ANY (ARRAY(SELECT json_array_elements_text(s.tickets)))
              AND NOT (t.confirmed::jsonb @> t.players::jsonb))
 RETURNING s.id
"""))


#: Tickets' rows by id (PostgreSQL: `ids`, a list).
_TICKETS_BY_ID = DriverStatement(
    select(models.tickets).where(models.tickets.c.id == func.any(bindparam("ids", type_=ARRAY(String)))))


def _bucket_params(row: Any) -> dict[str, Any]:
    return {"preset": row.preset, "seats": row.seats, "length": row.length,
            "target_points": row.target_points, "mode": row.mode, "bet_chips": row.bet_chips}


class TicketRows:
    """Reads ticket rows for many callers at once: the ids asked for while a read is under way are
    read together by the next one (one transaction, a statement per FETCH_CHUNK ids). A read
    always begins after every request it answers was made, so a caller woken by a committed
    change sees that change."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._pending: dict[str, list[asyncio.Future[Any]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def read(self, ticket_id: str) -> Any:
        """The ticket's row, or None if there is no such ticket."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(ticket_id, []).append(future)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="matchmaking-ticket-rows")
        return await future

    async def _run(self) -> None:
        t = models.tickets
        while self._pending:
            batch, self._pending = self._pending, {}
            names = list(batch)
            try:
                rows: dict[str, Any] = {}
                if self.db.dialect == "postgresql":
                    async with self.db.driver_connection() as driver:
                        for start in range(0, len(names), FETCH_CHUNK):
                            found = await _TICKETS_BY_ID.fetch(driver, {"ids": names[start : start + FETCH_CHUNK]})
                            rows.update((row.id, row) for row in found)
                else:
                    async with self.db.read_each() as connection:
                        for start in range(0, len(names), FETCH_CHUNK):
                            chunk = names[start : start + FETCH_CHUNK]
                            rows.update(
                                (row.id, row) for row in await connection.execute(select(t).where(t.c.id.in_(chunk)))
                            )
            except Exception as error:
                for futures in batch.values():
                    for future in futures:
                        if not future.done():
                            future.set_exception(error)
                continue
            for name, futures in batch.items():
                for future in futures:
                    if not future.done():
                        future.set_result(rows.get(name))


class _Places:
    """Places given to new tickets, by ticket and version: a bounded memory (emptied when full),
    since a stream that never opens never takes its ticket's place out."""

    LIMIT = 20_000

    def __init__(self) -> None:
        self._places: dict[str, tuple[int, int]] = {}

    def remember(self, ticket_id: str, version: int, place: int) -> None:
        if len(self._places) >= self.LIMIT:
            self._places.clear()
        self._places[ticket_id] = (version, place)

    def take(self, ticket_id: str) -> tuple[int, int] | None:
        """The version and place given to the ticket, taken out (a stream's first view uses it)."""
        return self._places.pop(ticket_id, None)


class Tickets:
    """A replica's tickets. One instance serves the API and the matching loop: the loop's
    `poll_watched` reads the versions of the tickets this instance's watch streams follow."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.db = core.db
        self.clock = core.clock
        self.settings = core.settings
        self.platform = core.platform
        #: Watched tickets: open streams per ticket, and the version each last sent.
        self._watchers: dict[str, int] = {}
        self._watched_versions: dict[str, int] = {}
        self._rows = TicketRows(core.db)
        #: The places CreateTicket gave the tickets it made, for their watch streams' first views.
        self._placed = _Places()
        #: The mean recent wait per kind of ticket, and until when it is reused (MEAN_WAIT_TTL).
        self._mean_waits: dict[BucketKey, tuple[datetime, float | None]] = {}

    # -- views and streams ------------------------------------------------------------------------

    async def _ticket_row(self, session: Executor, ticket_id: str, viewer: Viewer) -> Any:
        row = (await session.execute(_TICKET, {"ticket_id": ticket_id})).first()
        if row is None or not (viewer.privileged or viewer.player in row.players):
            raise TicketNotFoundError(f"tickets/{ticket_id} not found")
        return row

    async def _position(self, session: Executor | None, row: Any, known: int | None = None,
                        last: int | None = None) -> tuple[int, float | None]:
        """The ticket's place in its bucket (1 is next) and the mean recent wait there. The place
        is `known` when given, else the matching loop's (`Core.queue_position`) when it has the
        ticket at this version, else `last` (the place a stream last sent) when given, else
        counted in `session` (or a read of its own); the mean is reused for MEAN_WAIT_TTL."""
        now = self.clock()
        key = preferences_of(row).key
        position = known if known is not None else self.core.queue_position(row.id, row.version)
        if position is None:
            position = last
        cached = self._mean_waits.get(key)
        if cached is not None and cached[0] <= now:
            # This call reads the mean again; the calls until it has are answered with the last
            # one (the read scans the bucket's recent history: once per MEAN_WAIT_TTL, not once
            # per view asked for while it runs).
            self._mean_waits[key] = (now + MEAN_WAIT_TTL, cached[1])
            cached = None
        if position is not None and cached is not None:
            return position, cached[1]
        params = _bucket_params(row)
        async with contextlib.AsyncExitStack() as stack:
            # the count and the mean are estimates: no snapshot in common needed
            if session is None and self.db.dialect == "postgresql":
                driver = await stack.enter_async_context(self.db.driver_connection())

                async def scalar(statement: _Read, values: dict[str, Any]) -> Any:
                    return await statement[1].fetchval(driver, values)
            else:
                reader = session if session is not None else await stack.enter_async_context(self.db.read_each())

                async def scalar(statement: _Read, values: dict[str, Any]) -> Any:
                    return (await reader.execute(statement[0], values)).scalar_one()

            if position is None:
                ahead = _AHEAD_OF_FRONT if row.front else _AHEAD_OF_BACK
                position = int(await scalar(ahead, {**params, "queued_at": row.queued_at, "id": row.id})) + 1
            if cached is not None:
                return position, cached[1]
            mean = await scalar(_MEAN_WAIT, {**params, "since": now - WAIT_HISTORY})
        mean_wait = None if mean is None else float(mean)
        self._mean_waits[key] = (now + MEAN_WAIT_TTL, mean_wait)
        return position, mean_wait

    async def ticket_view(self, session: Executor | None, row: Any, viewer: Viewer,
                          position: int | None = None, last: int | None = None) -> matchmaking_pb2.Ticket:
        """The ticket's view from its row; a searching ticket's position is `position` when given,
        else the matching loop's, else `last` when given, else read in `session` (or, without one,
        in a read of its own)."""
        now = self.clock()
        out = matchmaking_pb2.Ticket(
            name=f"tickets/{row.id}",
            players=[f"players/{p}" for p in row.players],
            party=f"parties/{row.party}" if row.party else "",
            preferences=preferences_of(row).pb(),
            state=TICKET_STATES[row.state],
            failure_reason=row.failure_reason,
            create_time=timestamp(row.create_time),
            update_time=timestamp(row.update_time),
        )
        if row.state == "searching":
            waited = (now - aware(row.queued_at)).total_seconds()
            half = self.settings.windows.half_width(waited)
            out.rating_low = row.rating - half
            out.rating_high = row.rating + half
            position, mean_wait = await self._position(session, row, position, last)
            out.position = position
            windows = self.settings.windows
            expected = mean_wait if mean_wait is not None else windows.open_seconds or windows.step_seconds
            out.estimated_wait.CopyFrom(Duration(seconds=max(0, math.ceil(expected - waited))))
        if row.state in ("proposed", "matched") and row.saga_id:
            player = viewer.player if viewer.player in row.seat_of else row.players[0]
            out.assignment.CopyFrom(
                matchmaking_pb2.MatchAssignment(
                    table=row.game_table,
                    game_session_address=row.game_address,
                    match_id=row.saga_id,
                    seat=int(row.seat_of.get(player, 0)),
                )
            )
        if row.state == "proposed" and row.confirm_deadline is not None:
            out.confirm_deadline.CopyFrom(timestamp(row.confirm_deadline))
        return out

    async def get_ticket(self, ticket_id: str, viewer: Viewer) -> matchmaking_pb2.Ticket:
        async with self.db.read_connection() as session:
            return await self.ticket_view(session, await self._ticket_row(session, ticket_id, viewer), viewer)

    async def watch_ticket(self, ticket_id: str, viewer: Viewer) -> AsyncIterator[matchmaking_pb2.Ticket]:
        """The ticket now, then every change, until it is final. Woken by this replica's changes,
        and by `poll_watched` (the matching loop's one query for every watched ticket's version)
        for changes made by other replicas; a searching ticket's view is also rebuilt every
        REFRESH_SECONDS (its window, position and estimated wait move with time)."""
        # (NOT_FOUND ends the stream before it sends anything.) The rows come from `_rows`: the
        # streams woken together (a pass's proposals, a saga's tickets) are read together.
        # A refresh with no wake-up reuses the row: every change to it wakes the stream, this
        # replica's at once and another's through `poll_watched` (the version it reads). It sends
        # no statement at all: the place comes from the matching loop, or stays the one last sent
        # when the loop's reading is old (a pass held up by a burst). Counting it again in the
        # database would cost every waiting stream a scan of its bucket every REFRESH_SECONDS, and
        # more the longer the queue: work that grows as the square of a burst.
        key = f"ticket:{ticket_id}"
        sent = b""
        row: Any = None
        woken = True
        given = self._placed.take(ticket_id)  # (version, place) from CreateTicket, if made here
        place: int | None = None
        self._watchers[ticket_id] = self._watchers.get(ticket_id, 0) + 1
        try:
            while True:
                event = self.core.notifier.event(key)
                if woken:
                    row = await self._rows.read(ticket_id)
                    if row is None or not (viewer.privileged or viewer.player in row.players):
                        raise TicketNotFoundError(f"tickets/{ticket_id} not found")
                    # a changed row's place is the loop's or counted; the given one only at its version
                    place = given[1] if given is not None and given[0] == row.version else None
                    given = None
                view = await self.ticket_view(None, row, viewer, last=place)
                place = view.position if row.state == "searching" else None
                self._watched_versions[ticket_id] = row.version
                data = view.SerializeToString(deterministic=True)
                if data != sent:
                    sent = data
                    yield view
                if row.state not in LIVE_TICKET:
                    return
                woken = False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(REFRESH_SECONDS):
                        await event.wait()
                        woken = True
        finally:
            left = self._watchers.pop(ticket_id, 1) - 1
            if left > 0:
                self._watchers[ticket_id] = left
            else:
                self._watched_versions.pop(ticket_id, None)

    async def poll_watched(self) -> int:
        """Wakes the streams of watched tickets whose version changed in the database (another
        replica changed them): one query per 500 watched tickets. Returns how many changed."""
        t = models.tickets
        watched = dict(self._watched_versions)
        changed: list[str] = []
        names = list(watched)
        for start in range(0, len(names), 500):
            async with self.db.read_each() as session:
                rows = await session.execute(select(t.c.id, t.c.version).where(t.c.id.in_(names[start : start + 500])))
                changed += [row.id for row in rows if row.version != watched[row.id]]
        self.core.notifier.changed(*(f"ticket:{ticket_id}" for ticket_id in changed))
        return len(changed)

    def forget_mean_waits(self) -> None:
        """Drops the reused mean waits: the next view of each kind of ticket reads its history again
        (after an erasure has removed tickets from it)."""
        self._mean_waits.clear()

    # -- changes ----------------------------------------------------------------------------------

    async def _rating(self, players: Sequence[str], preferences: Preferences) -> float:
        try:
            ratings = await self.platform.ratings(players, preferences.preset, preferences.seats)
        except Unreachable as error:
            raise DependencyUnavailableError(f"ranking did not answer ({error.code}); retry") from None
        except CallError as error:
            raise DependencyUnavailableError(f"ranking refused to answer ({error.code})") from None
        return sum(ratings.get(p, 0.0) for p in players) / len(players)

    async def _party_members(self, party_id: str, player: str) -> list[str]:
        async with self.db.read_each() as session:
            party = await party_row(session, party_id, Viewer(player))
        if party.leader != player:
            raise NotAllowedError(f"only the party's leader (players/{party.leader}) queues it")
        if party.state != "open" or len(party.members) != 2:
            raise StateError(f"parties/{party_id} needs two members to queue; it has {len(party.members)}")
        return list(party.members)

    async def create_ticket(
        self,
        scope: str,
        player: str,
        request: matchmaking_pb2.CreateTicketRequest,
        preferences: Preferences,
        party_id: str | None,
    ) -> matchmaking_pb2.Ticket:
        if self.db.dialect == "postgresql" and not party_id:
            made = await self._create_at_once(scope, player, request, preferences)
            if made is not None:
                self.core.wake()
                return made
        stored = await self.core.prior_answer(scope, "CreateTicket", request, matchmaking_pb2.Ticket)
        if stored is not None:
            return stored
        players = await self._party_members(party_id, player) if party_id else [player]
        if preferences.competitive:
            await self.core.check_eligible(players, preferences.bet_chips)
        rating = await self._rating(players, preferences)
        ticket_id = new_id()

        reply = await self.core.once(
            scope, "CreateTicket", request, matchmaking_pb2.Ticket,
            lambda session: self._create_in(session, ticket_id, player, players, party_id, preferences, rating))
        self.core.wake()
        return reply

    async def _create_in(self, session: Executor, ticket_id: str, player: str, players: list[str],
                         party_id: str | None, preferences: Preferences, rating: float) -> matchmaking_pb2.Ticket:
        """The ticket written in the idempotent call's transaction (`session`)."""
        if party_id:  # the party may have changed while the other services answered
            party = await party_row(session, party_id, Viewer(player))
            if party.state != "open" or list(party.members) != players:
                raise StateError(f"parties/{party_id} changed; queue again")
        live = (await session.execute(_LIVE_TICKETS, {"players": players})).first()
        if live is not None:
            raise StateError(f"players/{live.player} already has a live ticket: tickets/{live.ticket_id}")
        values = await self._new_ticket(session, ticket_id, player, players, party_id, preferences, rating)
        try:
            # No savepoint: a clash fails the call, and the whole transaction is rolled back.
            await session.execute(_QUEUE, [{"player": p, "ticket_id": ticket_id} for p in players])
        except IntegrityError:
            raise StateError("a player of this ticket was queued by another call just now") from None
        await session.execute(_NEW_TICKET, values)
        return await self.ticket_view(session, SimpleNamespace(**values), Viewer(player))

    async def _new_ticket(self, session: Executor, ticket_id: str, player: str, players: list[str],
                          party_id: str | None, preferences: Preferences, rating: float) -> dict[str, Any]:
        """A new searching ticket's row, with the players its players met in their last match."""
        seen = await session.execute(_RECENT_OPPONENTS, {"players": players})
        others = [other for row in seen for other in row.others]
        return self._ticket_values(ticket_id, player, players, party_id, preferences, rating, others)

    def _ticket_values(self, ticket_id: str, player: str, players: list[str], party_id: str | None,
                       preferences: Preferences, rating: float, met: list[str]) -> dict[str, Any]:
        """A new searching ticket's row; `met`: the players its players met in their last match."""
        now = self.clock()
        return dict(
            id=ticket_id,
            owner=player,
            players=players,
            party=party_id,
            preset=preferences.preset,
            seats=preferences.seats,
            length=preferences.length,
            target_points=preferences.target_points,
            mode=preferences.mode,
            bet_chips=preferences.bet_chips,
            rating=rating,
            state="searching",
            front=False,
            queued_at=now,
            recent=sorted(set(met) - set(players)),
            saga_id=None,
            confirmed=[],
            seat_of={},
            confirm_deadline=None,
            game_table="",
            game_address="",
            failure_reason="",
            wait_seconds=None,
            version=1,
            create_time=now,
            update_time=now,
        )

    async def _create_at_once(self, scope: str, player: str, request: matchmaking_pb2.CreateTicketRequest,
                              preferences: Preferences) -> matchmaking_pb2.Ticket | None:
        """A lone player's ticket on PostgreSQL in two statements: what it reads (`_CREATE_READS`:
        an answer stored under the call's key, its place in the queue, the player's recent
        opponents), then, after the other services' checks, the queue membership, the ticket and
        the answer (`_CREATE_AT_ONCE`). The stored answer of a retry is answered as it is. None,
        for the transactional path to answer, when something else is stored under the key (an
        expired answer, another request's) or the write clashed on a key (the player has a live
        ticket, or a concurrent call with this request id stored its answer first; nothing written)."""
        now = self.clock()
        ticket_id = new_id()
        prefs = preferences
        # Its place at the back of its bucket, from the matching loop when it can tell (counting
        # it here scans the bucket: work that grows with the queue, at every ticket of a burst).
        place = self.core.new_place(prefs.key)
        reads = _CREATE_READS if place is not None else _CREATE_READS_COUNTING
        async with self.db.driver_connection() as driver:
            found = await reads.fetchrow(driver, {
                "scope": scope, "request_id": request.request_id, "player": player, "queued_at": now, "id": ticket_id,
                "preset": prefs.preset, "seats": prefs.seats, "length": prefs.length,
                "target_points": prefs.target_points, "mode": prefs.mode, "bet_chips": prefs.bet_chips,
            })
        assert found is not None  # one row, whatever it finds
        if place is None:
            place = found.ahead + 1
        digest = request_hash("CreateTicket", request)
        if found.method is not None:
            if found.method == "CreateTicket" and found.request_hash == digest and aware(found.expires_at) > now:
                return matchmaking_pb2.Ticket.FromString(found.response)
            return None
        if preferences.competitive:
            await self.core.check_eligible([player], preferences.bet_chips)
        rating = await self._rating([player], preferences)
        values = self._ticket_values(ticket_id, player, [player], None, preferences, rating, found.recent or [])
        view = await self.ticket_view(None, SimpleNamespace(**values), Viewer(player), position=place)
        stored_at, expires = self.core.idempotency.window()
        key = {"scope": scope, "request_id": request.request_id, "method": "CreateTicket", "request_hash": digest,
               "response": view.SerializeToString(deterministic=True), "created_at": stored_at, "expires_at": expires}
        try:
            async with self.db.driver_connection() as driver:
                await _CREATE_AT_ONCE.fetch(driver, {
                    **{f"t_{name}": value for name, value in values.items()},
                    **{f"k_{name}": value for name, value in key.items()},
                })
        except IntegrityError:
            # A key clash wrote nothing: the transactional path answers it (the concurrent call's
            # stored answer, or the player's live ticket named).
            return None
        self.core.queued_here(prefs.key)
        self._placed.remember(ticket_id, values["version"], place)
        return view

    async def cancel_ticket(
        self, scope: str, request: matchmaking_pb2.CancelTicketRequest, ticket_id: str, viewer: Viewer
    ) -> matchmaking_pb2.Ticket:
        saga_to_fail: list[str] = []

        async def work(session: AsyncSession) -> matchmaking_pb2.Ticket:
            row = await self._ticket_row(session, ticket_id, viewer)
            if row.state == "cancelled":
                return await self.ticket_view(session, row, viewer)
            if row.state in ("matched", "failed"):
                raise StateError(f"tickets/{ticket_id} is {row.state}: it can no longer be cancelled")
            if row.state == "proposed":
                saga = (
                    await session.execute(select(models.sagas.c.state).where(models.sagas.c.id == row.saga_id))
                ).scalar_one()
                if saga != "confirming":
                    raise StateError(f"tickets/{ticket_id}: the match is starting; it can no longer be cancelled")
                # Declining a proposal: the start compensates, requeueing the others at the front.
                saga_to_fail.append(row.saga_id)
            now = self.clock()
            await session.execute(
                update(models.tickets)
                .where(models.tickets.c.id == ticket_id)
                .values(state="cancelled", saga_id=row.saga_id, version=row.version + 1, update_time=now)
            )
            await session.execute(delete(models.queue_members).where(models.queue_members.c.ticket_id == ticket_id))
            if saga_to_fail:
                await session.execute(
                    update(models.sagas)
                    .where(models.sagas.c.id == row.saga_id, models.sagas.c.state == "confirming")
                    .values(
                        state="compensating",
                        failure_reason="a player declined the match",
                        next_attempt_at=now,
                        update_time=now,
                    )
                )
            row = await self._ticket_row(session, ticket_id, viewer)
            return await self.ticket_view(session, row, viewer)

        reply = await self.core.once(scope, "CancelTicket", request, matchmaking_pb2.Ticket, work)
        self.core.notifier.changed(f"ticket:{ticket_id}")
        if saga_to_fail:
            self.core.wake()
        return reply

    async def confirm_ticket(
        self, scope: str, request: matchmaking_pb2.ConfirmTicketRequest, ticket_id: str, viewer: Viewer
    ) -> matchmaking_pb2.Ticket:
        if self.db.dialect == "postgresql":
            confirmed = await self._confirm_at_once(scope, request, ticket_id, viewer)
            if confirmed is not None:
                return confirmed
        return await self._confirm_in_transaction(scope, request, ticket_id, viewer)

    async def _confirm_at_once(
        self, scope: str, request: matchmaking_pb2.ConfirmTicketRequest, ticket_id: str, viewer: Viewer
    ) -> matchmaking_pb2.Ticket | None:
        """A confirmation on PostgreSQL: the ticket and any answer stored under the call's key read
        in one statement (`_CONFIRM_READS`), the ticket checked as `_confirm_in_transaction`
        checks it, then written with the answer in one statement if it is still at the version read
        (`_CONFIRM_AT_ONCE`), then the saga moved on if every player has now confirmed
        (`_START_IF_ALL_CONFIRMED`). The stored answer of a retry is answered as it is, the start
        checked again (the first call may have stopped before it). None when something else is
        stored under the key, the ticket changed since it was read, or a concurrent call with this
        request id stored its answer first: the transactional path answers then."""
        now = self.clock()
        async with self.db.driver_connection() as driver:
            found = await _CONFIRM_READS.fetchrow(driver, {
                "ticket_id": ticket_id, "scope": scope, "request_id": request.request_id})
        assert found is not None  # one row, whatever it finds
        if found.k_method is not None:
            if (found.k_method != "ConfirmTicket" or found.k_request_hash != request_hash("ConfirmTicket", request)
                    or aware(found.k_expires_at) <= now):
                return None
            stored = matchmaking_pb2.Ticket.FromString(found.k_response)
            if stored.state == Ticket.STATE_PROPOSED and stored.assignment.match_id:
                await self._start_if_all_confirmed(stored.assignment.match_id)
            return stored
        if found.id is None or not (viewer.privileged or viewer.player in found.players):
            raise TicketNotFoundError(f"tickets/{ticket_id} not found")
        row = SimpleNamespace(**{name: getattr(found, name) for name in _TICKET_COLUMNS})
        confirmed = self._confirmation(row, ticket_id, viewer, now)
        written = SimpleNamespace(
            **{**vars(row), "confirmed": confirmed, "version": row.version + 1, "update_time": now})
        view = await self.ticket_view(None, written, viewer)
        stored_at, expires = self.core.idempotency.window()
        key = {"scope": scope, "request_id": request.request_id, "method": "ConfirmTicket",
               "request_hash": request_hash("ConfirmTicket", request),
               "response": view.SerializeToString(deterministic=True), "created_at": stored_at, "expires_at": expires}
        try:
            async with self.db.driver_connection() as driver:
                tickets = await _CONFIRM_AT_ONCE.fetchval(driver, {  # tickets written: 1 or 0
                    "t_id": ticket_id, "t_version": row.version, "t_confirmed": confirmed,
                    "t_new_version": row.version + 1, "t_now": now,
                    **{f"k_{name}": value for name, value in key.items()},
                })
        except IntegrityError:
            return None  # a concurrent call with this request id answered first: the transaction finds it
        if tickets != 1:
            return None
        self.core.notifier.changed(f"ticket:{ticket_id}")
        if set(row.players) <= set(confirmed):
            await self._start_if_all_confirmed(row.saga_id)
        return view

    async def _start_if_all_confirmed(self, saga_id: str) -> None:
        """The saga moved on if every player of its tickets has confirmed (PostgreSQL); the matching
        loop's next pass then holds the bets."""
        now = self.clock()
        async with self.db.driver_connection() as driver:
            moved = await _START_IF_ALL_CONFIRMED.fetchrow(driver, {
                "saga": saga_id, "now": now, "deadline": now + timedelta(seconds=self.settings.start_seconds),
            })
        if moved is not None:
            self.core.wake()

    def _confirmation(self, row: Any, ticket_id: str, viewer: Viewer, now: datetime) -> list[str]:
        """The ticket's confirmed players once the viewer has confirmed (a player for themself; a
        service or admin for every player of the ticket); StateError if it cannot be confirmed."""
        if row.state != "proposed":
            raise StateError(f"tickets/{ticket_id} is {row.state}: only a proposed match is confirmed")
        if row.confirm_deadline is not None and aware(row.confirm_deadline) < now:
            raise StateError(f"tickets/{ticket_id}: the time to confirm has passed")
        confirming: list[str] = (
            [viewer.player] if viewer.player is not None and viewer.player in row.players else list(row.players)
        )
        return sorted(set(row.confirmed) | set(confirming))

    async def _confirm_in_transaction(
        self, scope: str, request: matchmaking_pb2.ConfirmTicketRequest, ticket_id: str, viewer: Viewer
    ) -> matchmaking_pb2.Ticket:
        complete: list[bool] = []

        async def work(session: AsyncSession) -> matchmaking_pb2.Ticket:
            row = await self._ticket_row(session, ticket_id, viewer)
            now = self.clock()
            confirmed = self._confirmation(row, ticket_id, viewer, now)
            change = {"ticket_id": ticket_id, "now_confirmed": confirmed, "new_version": row.version + 1, "now": now}
            await session.execute(_CONFIRM, change)
            saga = (await session.execute(_SAGA_FOR_UPDATE, {"saga_id": row.saga_id})).one()
            others = (
                await session.execute(_OTHER_TICKETS, {"tickets": list(saga.tickets), "ticket_id": ticket_id})
            ).all()
            everyone = set(row.players) <= set(confirmed) and all(set(p) <= set(c) for p, c in others)
            if everyone and saga.state == "confirming":
                # The last confirmation moves the start on itself (the saga row is locked): the
                # matching loop's next pass holds the bets.
                await session.execute(
                    update(models.sagas)
                    .where(models.sagas.c.id == saga.id)
                    .values(**confirmed_values(saga, self.settings.start_seconds, now))
                )
                complete.append(True)
            written = SimpleNamespace(
                **{**row._asdict(), "confirmed": confirmed, "version": row.version + 1, "update_time": now}
            )
            return await self.ticket_view(session, written, viewer)

        reply = await self.core.once(scope, "ConfirmTicket", request, matchmaking_pb2.Ticket, work)
        self.core.notifier.changed(f"ticket:{ticket_id}")
        if complete:
            self.core.wake()
        return reply
