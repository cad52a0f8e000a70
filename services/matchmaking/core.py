"""The matchmaking service's domain logic: tickets and parties (this module), the lobby
(`lobby.py`), the start saga (`saga.py`) and the matching loop (`loop.py`), over explicit
dependencies (a database, the clock, the other services through `ports.Platform`), returning
protobuf answers or raising the errors of `errors.py`. No grpc import here.

Calls to other services are never made inside a write transaction: eligibility and ratings are
read first, then the change is written (idempotently) in one transaction that checks its starting
state again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import and_, delete, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import common_pb2, matchmaking_pb2
from services.common.db import Database
from services.common.idempotency import IdempotencyStore, request_hash
from services.matchmaking import models
from services.matchmaking.errors import (
    DependencyUnavailableError,
    IneligibleError,
    NotAllowedError,
    PartyNotFoundError,
    StateError,
    TicketNotFoundError,
)
from services.matchmaking.matcher import BucketKey
from services.matchmaking.ports import CallError, Platform, Unreachable
from services.matchmaking.settings import MatchmakingSettings

R = TypeVar("R", bound=Message)
Clock = Callable[[], datetime]

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


def aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back; they were stored as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def timestamp(moment: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(aware(moment))
    return out


def new_id() -> str:
    return uuid.uuid4().hex


class Notifier:
    """Wakes this replica's watch streams when a ticket, party or lobby table changes here (other
    replicas' changes are found by polling)."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def event(self, key: str) -> asyncio.Event:
        return self._events.setdefault(key, asyncio.Event())

    def changed(self, *keys: str) -> None:
        for key in keys:
            event = self._events.pop(key, None)
            if event is not None:
                event.set()


@dataclass(frozen=True)
class Viewer:
    """Who reads: a player (their own tickets, parties, tables) or a service or admin (any)."""

    player: str | None
    privileged: bool = False


@dataclass(frozen=True)
class Preferences:
    """What a quick-match ticket is for (checked by the API layer)."""

    preset: str
    seats: int
    length: int
    target_points: int
    mode: int
    bet_chips: int

    @property
    def key(self) -> BucketKey:
        return (self.preset, self.seats, self.length, self.target_points, self.mode, self.bet_chips)

    @property
    def competitive(self) -> bool:
        return self.mode == common_pb2.TABLE_MODE_COMPETITIVE

    def table_options(self) -> common_pb2.TableOptions:
        return common_pb2.TableOptions(
            ruleset=common_pb2.RulesetRef(preset=self.preset),
            players=self.seats,
            length=self.length,  # type: ignore[arg-type]
            target_points=self.target_points,
            mode=self.mode,  # type: ignore[arg-type]
            bet_chips=self.bet_chips,
        )

    def pb(self) -> matchmaking_pb2.MatchPreferences:
        return matchmaking_pb2.MatchPreferences(
            preset=self.preset,
            players=self.seats,
            length=self.length,  # type: ignore[arg-type]
            target_points=self.target_points,
            mode=self.mode,  # type: ignore[arg-type]
            bet_chips=self.bet_chips,
        )


def preferences_of(row: Any) -> Preferences:
    return Preferences(row.preset, row.seats, row.length, row.target_points, row.mode, row.bet_chips)


class Core:
    def __init__(
        self,
        db: Database,
        platform: Platform,
        settings: MatchmakingSettings,
        clock: Clock,
        idempotency: IdempotencyStore,
        notifier: Notifier | None = None,
    ) -> None:
        #: Writes through `db.write()` (on SQLite the process's one writer), reads through
        #: `db.read()` (never waiting for it); see services.common.db.
        self.db = db
        self.platform = platform
        self.settings = settings
        self.clock = clock
        self.idempotency = idempotency
        self.notifier = notifier or Notifier()
        #: Wakes the matching loop (set by the service once it has one).
        self.wake: Callable[[], None] = lambda: None
        #: Watched tickets: open streams per ticket, and the version each last sent.
        self._watchers: dict[str, int] = {}
        self._watched_versions: dict[str, int] = {}

    # -- idempotency ------------------------------------------------------------------------------

    async def prior_answer(self, scope: str, method: str, request: Message, response_type: type[R]) -> R | None:
        """The stored answer of a retried call, read before calling other services, so a retry
        answers as the first call did even when eligibility has changed since."""
        table = self.idempotency.table
        async with self.db.read() as session:
            row = (
                await session.execute(
                    select(table.c.method, table.c.request_hash, table.c.response, table.c.expires_at).where(
                        table.c.scope == scope, table.c.request_id == getattr(request, "request_id", "")
                    )
                )
            ).first()
        if row is None or aware(row.expires_at) <= self.clock():
            return None
        if row.method != method or row.request_hash != request_hash(method, request):
            return None  # the idempotent run reports ALREADY_EXISTS
        return response_type.FromString(row.response)

    async def once(
        self,
        scope: str,
        method: str,
        request: Message,
        response_type: type[R],
        work: Callable[[AsyncSession], Any],
    ) -> R:
        reply: R = await self.idempotency.run(
            self.db, scope=scope, method=method, request=request, response_type=response_type, work=work
        )
        return reply

    # -- tickets: views ---------------------------------------------------------------------------

    async def _ticket_row(self, session: AsyncSession, ticket_id: str, viewer: Viewer) -> Any:
        row = (await session.execute(select(models.tickets).where(models.tickets.c.id == ticket_id))).first()
        if row is None or not (viewer.privileged or viewer.player in row.players):
            raise TicketNotFoundError(f"tickets/{ticket_id} not found")
        return row

    async def _position(self, session: AsyncSession, row: Any) -> tuple[int, float | None]:
        """The ticket's place in its bucket (1 is next) and the mean recent wait there."""
        t = models.tickets
        bucket = and_(
            t.c.preset == row.preset,
            t.c.seats == row.seats,
            t.c.length == row.length,
            t.c.target_points == row.target_points,
            t.c.mode == row.mode,
            t.c.bet_chips == row.bet_chips,
        )
        later_same_front = or_(t.c.queued_at < row.queued_at, and_(t.c.queued_at == row.queued_at, t.c.id < row.id))
        ahead = and_(t.c.front == row.front, later_same_front)
        if not row.front:
            ahead = or_(t.c.front.is_(True), ahead)
        position = (
            await session.execute(select(func.count()).where(t.c.state == "searching", bucket, ahead))
        ).scalar_one()
        since = self.clock() - WAIT_HISTORY
        mean_wait = (
            await session.execute(
                select(func.avg(t.c.wait_seconds)).where(bucket, t.c.wait_seconds.is_not(None), t.c.update_time > since)
            )
        ).scalar_one()
        return int(position) + 1, None if mean_wait is None else float(mean_wait)

    async def ticket_view(self, session: AsyncSession, row: Any, viewer: Viewer) -> matchmaking_pb2.Ticket:
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
            position, mean_wait = await self._position(session, row)
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
        async with self.db.read() as session:
            return await self.ticket_view(session, await self._ticket_row(session, ticket_id, viewer), viewer)

    async def watch_ticket(self, ticket_id: str, viewer: Viewer) -> AsyncIterator[matchmaking_pb2.Ticket]:
        """The ticket now, then every change, until it is final. Woken by this replica's changes,
        and by `poll_watched` (the matching loop's one query for every watched ticket's version)
        for changes made by other replicas; a searching ticket's view is also rebuilt every
        REFRESH_SECONDS (its window, position and estimated wait move with time)."""
        # (The first read is a full one: NOT_FOUND ends the stream before it sends anything.)
        key = f"ticket:{ticket_id}"
        sent = b""
        self._watchers[ticket_id] = self._watchers.get(ticket_id, 0) + 1
        try:
            while True:
                event = self.notifier.event(key)
                async with self.db.read() as session:
                    row = await self._ticket_row(session, ticket_id, viewer)
                    view = await self.ticket_view(session, row, viewer)
                self._watched_versions[ticket_id] = row.version
                data = view.SerializeToString(deterministic=True)
                if data != sent:
                    sent = data
                    yield view
                if row.state not in LIVE_TICKET:
                    return
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(REFRESH_SECONDS):
                        await event.wait()
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
            async with self.db.read() as session:
                rows = await session.execute(select(t.c.id, t.c.version).where(t.c.id.in_(names[start : start + 500])))
                changed += [row.id for row in rows if row.version != watched[row.id]]
        self.notifier.changed(*(f"ticket:{ticket_id}" for ticket_id in changed))
        return len(changed)

    # -- tickets: changes -------------------------------------------------------------------------

    async def check_eligible(self, players: Sequence[str], bet_chips: int) -> None:
        """Competitive play: every player has a wallet account (is registered) that covers the
        bet now (the hold at the start is what really reserves the chips)."""
        try:
            accounts = await asyncio.gather(*(self.platform.account(p) for p in players))
        except Unreachable as error:
            raise DependencyUnavailableError(f"the wallet did not answer ({error.code}); retry") from None
        except CallError as error:
            raise DependencyUnavailableError(f"the wallet refused to answer ({error.code})") from None
        for player, account in zip(players, accounts, strict=True):
            if account is None:
                raise IneligibleError(f"players/{player} is not registered: competitive tables need a wallet account")
            if account.available_chips < bet_chips:
                raise IneligibleError(
                    f"players/{player} has insufficient chips: the bet is {bet_chips},"
                    f" {account.available_chips} available"
                )

    async def _rating(self, players: Sequence[str], preferences: Preferences) -> float:
        try:
            ratings = await self.platform.ratings(players, preferences.preset, preferences.seats)
        except Unreachable as error:
            raise DependencyUnavailableError(f"ranking did not answer ({error.code}); retry") from None
        except CallError as error:
            raise DependencyUnavailableError(f"ranking refused to answer ({error.code})") from None
        return sum(ratings.get(p, 0.0) for p in players) / len(players)

    async def _party_members(self, party_id: str, player: str) -> list[str]:
        async with self.db.read() as session:
            party = await self._party_row(session, party_id, Viewer(player))
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
        stored = await self.prior_answer(scope, "CreateTicket", request, matchmaking_pb2.Ticket)
        if stored is not None:
            return stored
        players = await self._party_members(party_id, player) if party_id else [player]
        if preferences.competitive:
            await self.check_eligible(players, preferences.bet_chips)
        rating = await self._rating(players, preferences)
        ticket_id = new_id()

        async def work(session: AsyncSession) -> matchmaking_pb2.Ticket:
            now = self.clock()
            if party_id:  # the party may have changed while the other services answered
                party = await self._party_row(session, party_id, Viewer(player))
                if party.state != "open" or list(party.members) != players:
                    raise StateError(f"parties/{party_id} changed; queue again")
            live = (
                await session.execute(select(models.queue_members).where(models.queue_members.c.player.in_(players)))
            ).first()
            if live is not None:
                raise StateError(f"players/{live.player} already has a live ticket: tickets/{live.ticket_id}")
            seen = await session.execute(select(models.recent).where(models.recent.c.player.in_(players)))
            met = sorted({other for row in seen for other in row.others} - set(players))
            try:
                async with session.begin_nested():
                    await session.execute(
                        insert(models.queue_members), [{"player": p, "ticket_id": ticket_id} for p in players]
                    )
            except IntegrityError:
                raise StateError("a player of this ticket was queued by another call just now") from None
            await session.execute(
                insert(models.tickets).values(
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
                    recent=met,
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
            )
            row = await self._ticket_row(session, ticket_id, Viewer(player))
            return await self.ticket_view(session, row, Viewer(player))

        reply = await self.once(scope, "CreateTicket", request, matchmaking_pb2.Ticket, work)
        self.wake()
        return reply

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

        reply = await self.once(scope, "CancelTicket", request, matchmaking_pb2.Ticket, work)
        self.notifier.changed(f"ticket:{ticket_id}")
        if saga_to_fail:
            self.wake()
        return reply

    async def confirm_ticket(
        self, scope: str, request: matchmaking_pb2.ConfirmTicketRequest, ticket_id: str, viewer: Viewer
    ) -> matchmaking_pb2.Ticket:
        complete: list[bool] = []

        async def work(session: AsyncSession) -> matchmaking_pb2.Ticket:
            row = await self._ticket_row(session, ticket_id, viewer)
            if row.state != "proposed":
                raise StateError(f"tickets/{ticket_id} is {row.state}: only a proposed match is confirmed")
            now = self.clock()
            if row.confirm_deadline is not None and aware(row.confirm_deadline) < now:
                raise StateError(f"tickets/{ticket_id}: the time to confirm has passed")
            # A player confirms for themself; a service or admin for every player of the ticket.
            confirming: list[str] = (
                [viewer.player] if viewer.player is not None and viewer.player in row.players else list(row.players)
            )
            confirmed = sorted(set(row.confirmed) | set(confirming))
            await session.execute(
                update(models.tickets)
                .where(models.tickets.c.id == ticket_id)
                .values(confirmed=confirmed, version=row.version + 1, update_time=now)
            )
            saga = (
                await session.execute(select(models.sagas).where(models.sagas.c.id == row.saga_id).with_for_update())
            ).one()
            others = (
                await session.execute(
                    select(models.tickets.c.players, models.tickets.c.confirmed).where(
                        models.tickets.c.id.in_(saga.tickets), models.tickets.c.id != ticket_id
                    )
                )
            ).all()
            everyone = set(row.players) <= set(confirmed) and all(set(p) <= set(c) for p, c in others)
            if everyone and saga.state == "confirming":
                await session.execute(
                    update(models.sagas).where(models.sagas.c.id == saga.id).values(next_attempt_at=now)
                )
                complete.append(True)
            row = await self._ticket_row(session, ticket_id, viewer)
            return await self.ticket_view(session, row, viewer)

        reply = await self.once(scope, "ConfirmTicket", request, matchmaking_pb2.Ticket, work)
        self.notifier.changed(f"ticket:{ticket_id}")
        if complete:
            self.wake()
        return reply

    # -- parties ----------------------------------------------------------------------------------

    async def _party_row(self, session: AsyncSession, party_id: str, viewer: Viewer) -> Any:
        row = (await session.execute(select(models.parties).where(models.parties.c.id == party_id))).first()
        if row is None or not (viewer.privileged or viewer.player in row.members or viewer.player in row.invited):
            raise PartyNotFoundError(f"parties/{party_id} not found")
        return row

    @staticmethod
    def party_view(row: Any) -> matchmaking_pb2.Party:
        return matchmaking_pb2.Party(
            name=f"parties/{row.id}",
            members=[f"players/{p}" for p in row.members],
            invited=[f"players/{p}" for p in row.invited],
            create_time=timestamp(row.create_time),
        )

    async def get_party(self, party_id: str, viewer: Viewer) -> matchmaking_pb2.Party:
        async with self.db.read() as session:
            return self.party_view(await self._party_row(session, party_id, viewer))

    async def create_party(
        self, scope: str, request: matchmaking_pb2.CreatePartyRequest, player: str
    ) -> matchmaking_pb2.Party:
        party_id = new_id()

        async def work(session: AsyncSession) -> matchmaking_pb2.Party:
            now = self.clock()
            current = (
                await session.execute(
                    select(models.party_members.c.party_id).where(models.party_members.c.player == player)
                )
            ).scalar_one_or_none()
            if current is not None:
                raise StateError(f"players/{player} is already in parties/{current}; leave it first")
            await session.execute(insert(models.party_members).values(player=player, party_id=party_id))
            await session.execute(
                insert(models.parties).values(
                    id=party_id,
                    leader=player,
                    members=[player],
                    invited=[],
                    state="open",
                    create_time=now,
                    update_time=now,
                )
            )
            return self.party_view(await self._party_row(session, party_id, Viewer(player)))

        return await self.once(scope, "CreateParty", request, matchmaking_pb2.Party, work)

    async def _party_change(
        self,
        scope: str,
        method: str,
        request: Message,
        party_id: str,
        viewer: Viewer,
        change: Callable[[AsyncSession, Any], Any],
    ) -> matchmaking_pb2.Party:
        async def work(session: AsyncSession) -> matchmaking_pb2.Party:
            row = await self._party_row(session, party_id, viewer)
            if row.state != "open":
                raise StateError(f"parties/{party_id} was disbanded")
            values = await change(session, row)
            await session.execute(
                update(models.parties).where(models.parties.c.id == party_id).values(**values, update_time=self.clock())
            )
            return self.party_view(await self._party_row(session, party_id, Viewer(None, True)))

        return await self.once(scope, method, request, matchmaking_pb2.Party, work)

    async def _queued(self, session: AsyncSession, players: Sequence[str]) -> None:
        live = (
            await session.execute(select(models.queue_members).where(models.queue_members.c.player.in_(players)))
        ).first()
        if live is not None:
            raise StateError(f"players/{live.player} is queued (tickets/{live.ticket_id}); cancel the ticket first")

    async def invite_to_party(
        self, scope: str, request: matchmaking_pb2.InviteToPartyRequest, party_id: str, player: str, invitee: str
    ) -> matchmaking_pb2.Party:
        async def change(session: AsyncSession, row: Any) -> dict[str, Any]:
            if row.leader != player:
                raise NotAllowedError(f"only the party's leader (players/{row.leader}) invites")
            if invitee in row.members:
                raise StateError(f"players/{invitee} is already a member")
            if len(row.members) >= 2:
                raise StateError(f"parties/{party_id} is full (two players)")
            return {"invited": sorted(set(row.invited) | {invitee})}

        return await self._party_change(scope, "InviteToParty", request, party_id, Viewer(player), change)

    async def join_party(
        self, scope: str, request: matchmaking_pb2.JoinPartyRequest, party_id: str, player: str
    ) -> matchmaking_pb2.Party:
        async def change(session: AsyncSession, row: Any) -> dict[str, Any]:
            if player in row.members:
                return {}
            if player not in row.invited:
                raise NotAllowedError(f"players/{player} was not invited to parties/{party_id}")
            if len(row.members) >= 2:
                raise StateError(f"parties/{party_id} is full (two players)")
            await self._queued(session, [row.leader, player])
            try:
                async with session.begin_nested():
                    await session.execute(insert(models.party_members).values(player=player, party_id=party_id))
            except IntegrityError:
                raise StateError(f"players/{player} is already in another party; leave it first") from None
            return {"members": [*row.members, player], "invited": [p for p in row.invited if p != player]}

        return await self._party_change(scope, "JoinParty", request, party_id, Viewer(player), change)

    async def leave_party(
        self, scope: str, request: matchmaking_pb2.LeavePartyRequest, party_id: str, player: str
    ) -> matchmaking_pb2.Party:
        async def change(session: AsyncSession, row: Any) -> dict[str, Any]:
            if player not in row.members:
                if player in row.invited:  # declining the invitation
                    return {"invited": [p for p in row.invited if p != player]}
                raise StateError(f"players/{player} is not a member of parties/{party_id}")
            await self._queued(session, row.members)
            if player == row.leader:  # the leader leaving disbands the party
                await session.execute(delete(models.party_members).where(models.party_members.c.party_id == party_id))
                return {"state": "disbanded", "members": [], "invited": []}
            await session.execute(delete(models.party_members).where(models.party_members.c.player == player))
            return {"members": [p for p in row.members if p != player]}

        return await self._party_change(scope, "LeaveParty", request, party_id, Viewer(player), change)
