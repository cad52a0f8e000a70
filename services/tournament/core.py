"""The tournament service's domain logic for its calls: plain methods over explicit dependencies
(the database, the clock, `ports.Services`), returning contract messages or raising the errors of
`errors.py`. No grpc import here. The scheduler's steps (start, rounds, payouts, refunds) are in
`progress.py`.

Calls that move chips (Register, Unregister) are small sagas with the state in the database
(docs/tournaments.md, "Registration and the wallet"):
1. a transaction records the intent (a player row in `holding` or `releasing`) with the request
   id of the wallet call it will make, derived from the entry;
2. the wallet call, outside any transaction;
3. a transaction records the outcome and stores the call's answer (IdempotencyStore).
A crash or a lost answer between 1 and 3 leaves the intent in the database: a retry of the same
call, or the scheduler, repeats the wallet call with the same request id (applied once) and
finishes the step. Nothing is ever held without a row that says so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from google.protobuf.message import Message
from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import common_pb2, tournament_pb2
from services.common.db import Database
from services.common.errors import AlreadyExistsError, InvalidArgumentError
from services.common.idempotency import IdempotencyStore, request_hash
from services.common.validation import encode_page_token
from services.tournament import models, records, standings, views
from services.tournament.errors import (
    BusyError,
    InsufficientChipsError,
    PendingError,
    RegistrationError,
    ResultError,
    TournamentExistsError,
    TournamentNotFoundError,
    TournamentStateError,
)
from services.tournament.ports import Refused, Services, Unreachable
from services.tournament.records import ACTIVE_ENTRY, REGISTERED, Clock, Entry
from services.tournament.settings import TournamentSettings

R = TypeVar("R", bound=Message)

OPEN_STATES = ("scheduled", "registration")


@dataclass(frozen=True)
class TournamentSpec:
    """A checked CreateTournament request."""

    display_name: str
    table_options: bytes
    seats: int
    format: str
    swiss_rounds: int
    buy_in: int
    prizes: tuple[tuple[int, int], ...]
    registration_open_at: datetime
    registration_close_at: datetime
    start_at: datetime
    min_entrants: int
    max_entrants: int
    no_show_seconds: int


@dataclass(frozen=True)
class HoldPlan:
    """What Register does after its first transaction."""

    entrant: str
    position: int
    player: str
    #: Call the wallet (False: a free tournament, or the hold is known to be done).
    hold: bool


@dataclass(frozen=True)
class ReleasePlan:
    entrant: str
    #: (position, player) whose holds are to be released.
    holds: tuple[tuple[int, str], ...]


class Notifier:
    """Wakes WatchTournament streams of this replica when a tournament changes here (other
    replicas' changes are found by polling the version)."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def event(self, tournament: str) -> asyncio.Event:
        return self._events.setdefault(tournament, asyncio.Event())

    def changed(self, tournament: str) -> None:
        event = self._events.pop(tournament, None)
        if event is not None:
            event.set()


class Tournaments:
    def __init__(
        self,
        db: Database,
        services: Services,
        settings: TournamentSettings,
        clock: Clock,
        idempotency: IdempotencyStore,
        notifier: Notifier,
    ) -> None:
        self.db = db
        self.services = services
        self.settings = settings
        self.clock = clock
        self.idempotency = idempotency
        self.notifier = notifier
        #: Wakes the scheduler (set by the service once it has one).
        self.wake: Callable[[], None] = lambda: None

    @property
    def stale_after(self) -> timedelta:
        """How long a hold or release may be under way in a call before the scheduler finishes it
        (the call has certainly ended by then)."""
        return timedelta(seconds=3 * self.settings.call_timeout_seconds)

    def _due_for_intent(self, row: Any, now: datetime) -> datetime:
        """The tournament's due time once an intent (a hold or release under way) is recorded: no
        later than when the scheduler must finish it if the call that made it never does."""
        due = records.aware(row.due_at)
        finish_by = now + self.stale_after
        return finish_by if due is None or due > finish_by else due

    def changed(self, tournament: str) -> None:
        self.notifier.changed(tournament)
        self.wake()

    # -- idempotency ------------------------------------------------------------------------------

    async def _answered(self, scope: str, method: str, request: Message, response_type: type[R]) -> R | None:
        """The stored answer of an earlier call with this request id, if any (ALREADY_EXISTS when
        the id was used for another request)."""
        table = models.idempotency_keys
        async with self.db.transaction() as session:
            row = (
                await session.execute(
                    select(table.c.method, table.c.request_hash, table.c.response, table.c.expires_at).where(
                        table.c.scope == scope,
                        table.c.request_id == request.request_id,  # type: ignore[attr-defined]
                    )
                )
            ).first()
        if row is None or records.at(row.expires_at) <= self.clock():
            return None
        if row.method != method or row.request_hash != request_hash(method, request):
            raise AlreadyExistsError(
                f"request_id {request.request_id!r} was already used for a different request ({row.method})"  # type: ignore[attr-defined]
            )
        answer = response_type()
        answer.ParseFromString(row.response)
        return answer

    # -- tournaments ------------------------------------------------------------------------------

    async def create(
        self, scope: str, request: tournament_pb2.CreateTournamentRequest, tournament: str, spec: TournamentSpec
    ) -> tournament_pb2.Tournament:
        max_lead = timedelta(hours=self.settings.hold_ttl_hours - self.settings.max_duration_hours)

        async def work(session: AsyncSession) -> tournament_pb2.Tournament:
            now = self.clock()
            if spec.registration_close_at <= now:
                raise InvalidArgumentError("tournament.registration_close_time", "must be in the future")
            if spec.start_at - spec.registration_open_at > max_lead:
                raise InvalidArgumentError(
                    "tournament.start_time",
                    f"at most {max_lead.total_seconds() / 3600:g} hours after the registration opens"
                    " (buy-ins are held for BURACO_TOURNAMENT_HOLD_TTL_HOURS)",
                )
            t = models.tournaments
            if (await session.execute(select(t.c.id).where(t.c.id == tournament))).first() is not None:
                raise TournamentExistsError(f"tournaments/{tournament} already exists")
            await session.execute(
                insert(t).values(
                    id=tournament,
                    display_name=spec.display_name,
                    table_options=spec.table_options,
                    format=spec.format,
                    swiss_rounds=spec.swiss_rounds,
                    buy_in=spec.buy_in,
                    prizes=[list(p) for p in spec.prizes],
                    registration_open_at=spec.registration_open_at,
                    registration_close_at=spec.registration_close_at,
                    start_at=spec.start_at,
                    min_entrants=spec.min_entrants,
                    max_entrants=spec.max_entrants,
                    no_show_seconds=spec.no_show_seconds,
                    state="scheduled",
                    phase="",
                    chips_settled=False,
                    current_round=0,
                    total_rounds=0,
                    cancel_reason="",
                    pool_chips=0,
                    house_cut_chips=0,
                    prize_pool_chips=0,
                    next_entrant=1,
                    version=1,
                    due_at=min(spec.registration_open_at, spec.start_at),
                    failures=0,
                    last_error="",
                    created_by=scope,
                    created_at=now,
                    updated_at=now,
                )
            )
            return await self._message(session, await records.read(session, tournament))

        try:
            reply = await self.idempotency.run(
                self.db,
                scope=scope,
                method="CreateTournament",
                request=request,
                response_type=tournament_pb2.Tournament,
                work=work,
            )
        except IntegrityError:
            raise TournamentExistsError(f"tournaments/{tournament} already exists") from None
        self.changed(tournament)
        return reply

    async def _message(self, session: AsyncSession, row: Any) -> tournament_pb2.Tournament:
        """The Tournament message: with the complete entries counted and, until the start, the
        buy-ins held so far as the pool."""
        e, p = models.entrants, models.entrant_players
        complete = await session.scalar(
            select(func.count()).where(e.c.tournament_id == row.id, e.c.state == "complete")
        )
        message = views.tournament(row, int(complete or 0))
        if row.total_rounds == 0 and row.buy_in:
            held = await session.scalar(
                select(func.count()).where(p.c.tournament_id == row.id, p.c.hold_state == "held")
            )
            message.pool_chips = row.buy_in * int(held or 0)
        return message

    async def get(self, tournament: str) -> tournament_pb2.Tournament:
        async with self.db.transaction() as session:
            return await self._message(session, await records.read(session, tournament))

    async def list_tournaments(
        self, page_size: int, position: dict[str, Any], state: str | None
    ) -> tournament_pb2.ListTournamentsResponse:
        t = models.tournaments
        query = select(t)
        if state is not None:
            query = query.where(t.c.state == state)
        if position:
            after_time = datetime.fromisoformat(position["c"])
            after_id = position["i"]
            query = query.where(or_(t.c.created_at < after_time, and_(t.c.created_at == after_time, t.c.id < after_id)))
        query = query.order_by(t.c.created_at.desc(), t.c.id.desc()).limit(page_size + 1)
        async with self.db.transaction() as session:
            rows = list(await session.execute(query))
            page = rows[:page_size]
            out = tournament_pb2.ListTournamentsResponse()
            for row in page:
                out.tournaments.append(await self._message(session, row))
        if len(rows) > page_size:
            last = page[-1]
            out.next_page_token = encode_page_token({"c": records.at(last.created_at).isoformat(), "i": last.id})
        return out

    async def cancel(
        self, scope: str, request: tournament_pb2.CancelTournamentRequest, tournament: str, reason: str
    ) -> tournament_pb2.Tournament:
        async def work(session: AsyncSession) -> tournament_pb2.Tournament:
            now = self.clock()
            row = await records.lock(session, tournament)
            if row.state in ("finished", "cancelled"):
                raise TournamentStateError(f"tournaments/{tournament} is already {row.state}")
            await records.bump(
                session,
                tournament,
                now,
                state="cancelled",
                phase="",
                cancel_reason=reason,
                ended_at=now,
                due_at=now,
                failures=0,
            )
            return await self._message(session, await records.read(session, tournament))

        reply = await self.idempotency.run(
            self.db,
            scope=scope,
            method="CancelTournament",
            request=request,
            response_type=tournament_pb2.Tournament,
            work=work,
        )
        self.changed(tournament)
        return reply

    # -- registration -----------------------------------------------------------------------------

    def _check_window(self, row: Any, now: datetime, what: str) -> None:
        if row.state not in OPEN_STATES:
            raise RegistrationError(f"tournaments/{row.id} is {row.state}: {what} is closed")
        opens, closes = records.at(row.registration_open_at), records.at(row.registration_close_at)
        if now < opens:
            raise RegistrationError(f"registration for tournaments/{row.id} opens at {opens.isoformat()}")
        if now >= closes:
            raise RegistrationError(f"registration for tournaments/{row.id} closed at {closes.isoformat()}")

    async def _player_entry(self, session: AsyncSession, tournament: str, player: str) -> Entry | None:
        """The entry in which `player` has registered (a hold under way or held, or releasing)."""
        for entry in await records.entries(session, tournament):
            if entry.state not in ACTIVE_ENTRY:
                continue
            for p in entry.players:
                if p.player == player and p.hold_state in (*REGISTERED, "releasing"):
                    return entry
        return None

    async def _prepare_register(
        self, tournament: str, player: str, partner: str | None, request_id: str, digest: str
    ) -> HoldPlan:
        async with self.db.transaction() as session:
            now = self.clock()
            row = await records.lock(session, tournament)
            p = models.entrant_players
            retry = (
                await session.execute(
                    select(p).where(p.c.tournament_id == tournament, p.c.player == player, p.c.request_id == request_id)
                )
            ).first()
            if retry is not None:
                if retry.request_hash != digest:
                    raise AlreadyExistsError(f"request_id {request_id!r} was already used for a different request")
                return HoldPlan(retry.entrant_id, retry.position, player, retry.hold_state == "holding")
            self._check_window(row, now, "registration")
            seats = common_pb2.TableOptions.FromString(row.table_options).players
            if seats == 2 and partner is not None:
                raise InvalidArgumentError("partner", "only for pairs tournaments")
            if seats == 4 and partner is None:
                raise InvalidArgumentError("partner", "required: this is a pairs tournament")
            if partner == player:
                raise InvalidArgumentError("partner", "must be someone else")
            current = await self._player_entry(session, tournament, player)
            if current is not None:
                raise RegistrationError(
                    f"players/{player} is already registered ({views.entrant_name(tournament, current.id)})"
                )
            free = row.buy_in == 0
            state = "held" if free else "holding"
            everything = await records.entries(session, tournament)
            if partner is not None:
                for entry in everything:
                    if entry.state != "open" or entry.names != (partner, player):
                        continue
                    if entry.players[0].hold_state == "holding":
                        raise BusyError(f"partner: the registration of players/{partner} is under way; retry")
                    if entry.players[0].hold_state == "held" and entry.players[1].hold_state == "none":
                        await records.set_player(
                            session,
                            tournament,
                            entry.id,
                            1,
                            hold_state=state,
                            request_id=request_id,
                            request_hash=digest,
                            registered_at=now,
                            op_started_at=now,
                        )
                        await records.settle_entry_state(session, tournament, entry.id)
                        await records.bump(session, tournament, now, due_at=self._due_for_intent(row, now))
                        return HoldPlan(entry.id, 1, player, not free)
                taken = await self._player_entry(session, tournament, partner)
                if taken is not None:
                    raise RegistrationError(
                        f"partner: players/{partner} is registered with someone else"
                        f" ({views.entrant_name(tournament, taken.id)})"
                    )
            active = sum(1 for entry in everything if entry.state in ACTIVE_ENTRY)
            if active >= row.max_entrants:
                raise RegistrationError(f"tournaments/{tournament} is full ({row.max_entrants} entrants)")
            seq = row.next_entrant
            entrant = f"e{seq}"
            await session.execute(
                insert(models.entrants).values(
                    tournament_id=tournament,
                    id=entrant,
                    seq=seq,
                    state="complete" if free and partner is None else "open",
                    prize_chips=0,
                    registered_at=now,
                )
            )
            await session.execute(
                insert(p).values(
                    tournament_id=tournament,
                    entrant_id=entrant,
                    position=0,
                    player=player,
                    hold_state=state,
                    request_id=request_id,
                    request_hash=digest,
                    registered_at=now,
                    op_started_at=now,
                )
            )
            if partner is not None:
                await session.execute(
                    insert(p).values(
                        tournament_id=tournament, entrant_id=entrant, position=1, player=partner, hold_state="none"
                    )
                )
            await records.bump(session, tournament, now, next_entrant=seq + 1, due_at=self._due_for_intent(row, now))
            return HoldPlan(entrant, 0, player, not free)

    async def finish_hold(
        self, session: AsyncSession, tournament: str, entrant: str, position: int, held: bool
    ) -> bool:
        """Records a hold's outcome (True: held). False when it was already recorded."""
        now = self.clock()
        p = models.entrant_players
        values: dict[str, Any] = {"hold_state": "held", "op_started_at": None}
        if not held:
            # A refused hold: the row goes back to what it was before (a partner waits again; an
            # entry's creator fails it), and forgets the request id (errors are not stored: a
            # retry is a new attempt).
            values = {
                "hold_state": "failed" if position == 0 else "none",
                "request_id": None,
                "request_hash": None,
                "op_started_at": None,
            }
            if position:
                values["registered_at"] = None
        result = await session.execute(
            update(p)
            .where(
                p.c.tournament_id == tournament,
                p.c.entrant_id == entrant,
                p.c.position == position,
                p.c.hold_state == "holding",
            )
            .values(**values)
        )
        changed = bool(getattr(result, "rowcount", 0))
        if changed:
            await records.settle_entry_state(session, tournament, entrant)
            await records.bump(session, tournament, now, due_at=now)
        return changed

    async def _entrant_message(self, session: AsyncSession, tournament: str, entrant: str) -> tournament_pb2.Entrant:
        (entry,) = await records.entries(session, tournament, entrant=entrant)
        return views.entrant(tournament, entry)

    async def register(
        self, scope: str, request: tournament_pb2.RegisterRequest, tournament: str, player: str, partner: str | None
    ) -> tournament_pb2.Entrant:
        stored = await self._answered(scope, "Register", request, tournament_pb2.Entrant)
        if stored is not None:
            return stored
        plan = await self._prepare_register(
            tournament, player, partner, request.request_id, request_hash("Register", request)
        )
        self.changed(tournament)
        if plan.hold:
            row = await self.get(tournament)
            try:
                await self.services.hold_buy_in(
                    records.hold_request_id(tournament, plan.entrant, plan.position),
                    tournament,
                    player,
                    row.buy_in_chips,
                    int(self.settings.hold_ttl_hours * 3600),
                )
            except Refused as refused:
                async with self.db.transaction() as session:
                    await records.lock(session, tournament)
                    await self.finish_hold(session, tournament, plan.entrant, plan.position, held=False)
                self.changed(tournament)
                raise InsufficientChipsError(
                    f"the buy-in of {row.buy_in_chips} chips was refused: {refused.message}"
                ) from None
            except Unreachable:
                raise PendingError(
                    "the wallet did not answer; the registration is pending: retry with the same request_id"
                ) from None

        async def work(session: AsyncSession) -> tournament_pb2.Entrant:
            await records.lock(session, tournament)
            await self.finish_hold(session, tournament, plan.entrant, plan.position, held=True)
            return await self._entrant_message(session, tournament, plan.entrant)

        reply = await self.idempotency.run(
            self.db, scope=scope, method="Register", request=request, response_type=tournament_pb2.Entrant, work=work
        )
        self.changed(tournament)
        return reply

    async def _prepare_unregister(self, tournament: str, player: str) -> ReleasePlan:
        async with self.db.transaction() as session:
            now = self.clock()
            row = await records.lock(session, tournament)
            entry = await self._player_entry(session, tournament, player)
            if entry is None:
                raise RegistrationError(f"players/{player} is not registered in tournaments/{tournament}")
            releasing = tuple((p.position, p.player) for p in entry.players if p.hold_state == "releasing")
            if releasing:  # a retry of an unregistration that did not finish
                return ReleasePlan(entry.id, releasing)
            self._check_window(row, now, "unregistration")
            if any(p.hold_state == "holding" for p in entry.players):
                raise BusyError(
                    f"a registration of {views.entrant_name(tournament, entry.id)} is under way; retry in a moment"
                )
            held = tuple((p.position, p.player) for p in entry.players if p.hold_state == "held")
            for position, _ in held:
                await records.set_player(
                    session,
                    tournament,
                    entry.id,
                    position,
                    hold_state="released" if row.buy_in == 0 else "releasing",
                    op_started_at=now,
                )
            if row.buy_in == 0:
                await records.set_entry(session, tournament, entry.id, state="withdrawn")
                held = ()
            await records.bump(session, tournament, now, due_at=self._due_for_intent(row, now))
            return ReleasePlan(entry.id, held)

    async def finish_release(self, session: AsyncSession, tournament: str, entrant: str, position: int) -> bool:
        p = models.entrant_players
        result = await session.execute(
            update(p)
            .where(
                p.c.tournament_id == tournament,
                p.c.entrant_id == entrant,
                p.c.position == position,
                p.c.hold_state == "releasing",
            )
            .values(hold_state="released", op_started_at=None)
        )
        changed = bool(getattr(result, "rowcount", 0))
        if changed:
            now = self.clock()
            await records.settle_entry_state(session, tournament, entrant)
            await records.bump(session, tournament, now, due_at=now)
        return changed

    async def release(self, tournament: str, entrant: str, position: int, player: str, reason: str) -> None:
        """Releases one player's buy-in (the row is `releasing`). A refusal means nothing is held
        any more (released, expired, or the pot closed): the release is done either way."""
        with contextlib.suppress(Refused):
            await self.services.release_buy_in(
                records.release_request_id(tournament, entrant, position), tournament, player, reason
            )

    async def unregister(
        self, scope: str, request: tournament_pb2.UnregisterRequest, tournament: str, player: str
    ) -> tournament_pb2.Entrant:
        stored = await self._answered(scope, "Unregister", request, tournament_pb2.Entrant)
        if stored is not None:
            return stored
        plan = await self._prepare_unregister(tournament, player)
        self.changed(tournament)
        for position, holder in plan.holds:
            try:
                await self.release(tournament, plan.entrant, position, holder, "unregistered")
            except Unreachable:
                raise PendingError(
                    "the wallet did not answer; the unregistration is pending: retry with the same request_id"
                ) from None

        async def work(session: AsyncSession) -> tournament_pb2.Entrant:
            await records.lock(session, tournament)
            for position, _ in plan.holds:
                await self.finish_release(session, tournament, plan.entrant, position)
            return await self._entrant_message(session, tournament, plan.entrant)

        reply = await self.idempotency.run(
            self.db, scope=scope, method="Unregister", request=request, response_type=tournament_pb2.Entrant, work=work
        )
        self.changed(tournament)
        return reply

    # -- reads ------------------------------------------------------------------------------------

    async def entrants(self, tournament: str, page_size: int, after: int) -> tournament_pb2.ListEntrantsResponse:
        async with self.db.transaction() as session:
            row = await records.read(session, tournament)
            everything = await records.entries(session, tournament)
            out_of_it: dict[str, int] = {}
            if row.format == records.SINGLE_ELIMINATION:
                out_of_it = standings.knocked_out(records.results(await records.pairings(session, tournament)))
        shown = [e for e in everything if e.seq > after and (e.state in (*ACTIVE_ENTRY, "withdrawn", "dropped"))]
        page = shown[:page_size]
        out = tournament_pb2.ListEntrantsResponse(
            entrants=[views.entrant(tournament, e, e.id in out_of_it) for e in page]
        )
        if len(shown) > page_size:
            out.next_page_token = encode_page_token({"after": page[-1].seq})
        return out

    async def _standings(self, session: AsyncSession, row: Any) -> tournament_pb2.ListStandingsResponse:
        everything = await records.entries(session, row.id)
        if row.state in OPEN_STATES or row.phase == "starting" or (row.state == "cancelled" and row.total_rounds == 0):
            seeded = {e.id: e.seq for e in everything if e.state == "complete"}
        else:
            seeded = {e.id: e.seed for e in everything if e.seed is not None}
        table = records.table_standings(row.format, seeded, await records.pairings(session, row.id))
        players = {e.id: e.names for e in everything}
        prizes = {e.id: e.prize_chips for e in everything}
        return views.standings_message(row.id, row.format, table, players, prizes, row.state == "finished")

    async def standings(self, tournament: str, page_size: int, offset: int) -> tournament_pb2.ListStandingsResponse:
        async with self.db.transaction() as session:
            full = await self._standings(session, await records.read(session, tournament))
        out = tournament_pb2.ListStandingsResponse(
            standings=full.standings[offset : offset + page_size],
            tie_break_names=full.tie_break_names,
            final=full.final,
        )
        if offset + page_size < len(full.standings):
            out.next_page_token = encode_page_token({"offset": offset + page_size})
        return out

    async def bracket(self, tournament: str) -> tournament_pb2.Bracket:
        async with self.db.transaction() as session:
            await records.read(session, tournament)
            return views.bracket(
                tournament, await records.rounds(session, tournament), await records.pairings(session, tournament)
            )

    async def snapshot(self, tournament: str) -> tuple[bool, list[tournament_pb2.TournamentUpdate]]:
        """The tournament, its bracket and its standings now, read together; True when final."""
        async with self.db.transaction() as session:
            row = await records.read(session, tournament)
            message = await self._message(session, row)
            pairing_rows = await records.pairings(session, tournament)
            bracket = views.bracket(tournament, await records.rounds(session, tournament), pairing_rows)
            table = await self._standings(session, row)
        final = (
            row.state in ("finished", "cancelled")
            and row.chips_settled
            and all(p.state == "decided" for p in pairing_rows)
        )
        return final, [
            tournament_pb2.TournamentUpdate(tournament=message),
            tournament_pb2.TournamentUpdate(bracket=bracket),
            tournament_pb2.TournamentUpdate(standings=table),
        ]

    async def watch(self, tournament: str) -> AsyncIterator[tournament_pb2.TournamentUpdate]:
        """The current state, then every change, until the tournament is final."""
        sent: dict[str, bytes] = {}
        while True:
            event = self.notifier.event(tournament)
            final, updates = await self.snapshot(tournament)
            for update_ in updates:
                kind = update_.WhichOneof("update")
                assert kind is not None
                data = update_.SerializeToString(deterministic=True)
                if sent.get(kind) != data:
                    sent[kind] = data
                    yield update_
            if final:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), self.settings.watch_poll_seconds)

    # -- results ----------------------------------------------------------------------------------

    async def report(
        self,
        scope: str,
        request: tournament_pb2.ReportMatchResultRequest,
        tournament: str,
        outcomes: Sequence[tuple[str, int]],
        scores: tuple[int, int],
    ) -> tournament_pb2.ReportMatchResultResponse:
        """A table's result from the game-session service. `outcomes`: (player, Outcome)."""

        async def work(session: AsyncSession) -> tournament_pb2.ReportMatchResultResponse:
            m = models.matches
            known = (
                await session.execute(
                    select(m).where(m.c.match_id == request.match_id, m.c.tournament_id == tournament)
                )
            ).first()
            if known is None:
                raise TournamentNotFoundError(
                    f"match_id: {request.match_id!r} is not a match of tournaments/{tournament}"
                )
            row = await records.lock(session, tournament)
            pr = models.pairings
            pairing = (
                await session.execute(
                    select(pr).where(
                        pr.c.tournament_id == tournament, pr.c.round == known.round, pr.c.slot == known.slot
                    )
                )
            ).first()
            assert pairing is not None
            if pairing.state == "decided" or pairing.match_id != request.match_id or row.state != "running":
                return tournament_pb2.ReportMatchResultResponse()  # decided already, or an old table
            sides = await self._sides(session, tournament, pairing)
            seated = {player for side in sides for player in side}
            reported = [player for player, _ in outcomes]
            if sorted(reported) != sorted(seated):
                raise ResultError(
                    f"outcomes: the players {sorted(reported)} are not the match's players {sorted(seated)}"
                )
            winner_side = decide_side(sides, outcomes, scores)
            now = self.clock()
            if winner_side is None:  # annulled: the match is played again at a new table
                await records.replay(session, tournament, pairing, now)
            else:
                await records.decide(
                    session,
                    tournament,
                    pairing,
                    now,
                    winner=pairing.entrant_a if winner_side == 0 else pairing.entrant_b,
                    decided_by="report",
                    scores=scores,
                )
            return tournament_pb2.ReportMatchResultResponse()

        reply = await self.idempotency.run(
            self.db,
            scope=scope,
            method="ReportMatchResult",
            request=request,
            response_type=tournament_pb2.ReportMatchResultResponse,
            work=work,
        )
        self.changed(tournament)
        return reply

    async def _sides(self, session: AsyncSession, tournament: str, pairing: Any) -> tuple[tuple[str, ...], ...]:
        """The players of each side of a pairing's table (side 0: entrant a)."""
        out = []
        for entrant in (pairing.entrant_a, pairing.entrant_b):
            (entry,) = await records.entries(session, tournament, entrant=entrant)
            out.append(entry.names)
        return tuple(out)


def decide_side(
    sides: Sequence[Sequence[str]], outcomes: Sequence[tuple[str, int]], scores: tuple[int, int]
) -> int | None:
    """The winning side from a table's outcomes: the side with a WON player; else the side facing
    a LOST one; else the higher score. None when the match was annulled (every outcome VOID).
    A player who abandoned does not change the side's result: the side played on (with a bot)."""
    side_of = {player: i for i, side in enumerate(sides) for player in side}
    kinds = {outcome for _, outcome in outcomes}
    if kinds == {common_pb2.OUTCOME_VOID}:
        return None
    won = {side_of[p] for p, outcome in outcomes if outcome == common_pb2.OUTCOME_WON}
    if len(won) == 1:
        return won.pop()
    lost = {side_of[p] for p, outcome in outcomes if outcome == common_pb2.OUTCOME_LOST}
    if len(won) == 0 and len(lost) == 1:
        return 1 - lost.pop()
    if len(won) == 0 and scores[0] != scores[1]:
        return 0 if scores[0] > scores[1] else 1
    raise ResultError("outcomes: no single winning side (and the scores do not decide it)")
