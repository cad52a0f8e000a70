"""Registration: Register and Unregister, the calls that move chips, and how a hold or release
left under way is finished. No grpc here; the wallet through `ports.Services`.

Each is a small saga with the state in the database (docs/tournaments.md, "Registration and the
wallet"):
1. a transaction records the intent (a player row in `holding` or `releasing`) with the request
   id of the wallet call it will make, derived from the entry;
2. the wallet call, outside any transaction;
3. a transaction records the outcome and stores the call's answer (IdempotencyStore).
A crash or a lost answer between 1 and 3 leaves the intent in the database: a retry of the same
call, or the scheduler (`progress.py`, with `finish_hold` and `finish_release`), repeats the
wallet call with the same request id (applied once) and finishes the step. Nothing is ever held
without a row that says so.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from google.protobuf.message import Message
from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import common_pb2, tournament_pb2
from services.common.errors import AlreadyExistsError, InvalidArgumentError
from services.common.idempotency import request_hash
from services.tournament import models, records, views
from services.tournament.core import OPEN_STATES, Tournaments
from services.tournament.errors import BusyError, InsufficientChipsError, PendingError, RegistrationError
from services.tournament.ports import Refused, Unreachable
from services.tournament.records import ACTIVE_ENTRY, REGISTERED, Entry

R = TypeVar("R", bound=Message)


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


class Registrations:
    """Register and Unregister, over the same database, clock and services as `Tournaments`."""

    def __init__(self, tournaments: Tournaments) -> None:
        self.core = tournaments
        self.db = tournaments.db
        self.services = tournaments.services
        self.settings = tournaments.settings
        self.clock = tournaments.clock
        self.idempotency = tournaments.idempotency

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

    # -- idempotency ------------------------------------------------------------------------------

    async def _answered(self, scope: str, method: str, request: Message, response_type: type[R]) -> R | None:
        """The stored answer of an earlier call with this request id, if any (ALREADY_EXISTS when
        the id was used for another request)."""
        async with self.db.transaction() as session:
            row = await self.idempotency.lookup(session, scope, request.request_id)  # type: ignore[attr-defined]
        if row is None or records.at(row.expires_at) <= self.clock():
            return None
        if row.method != method or row.request_hash != request_hash(method, request):
            raise AlreadyExistsError(
                f"request_id {request.request_id!r} was already used for a different request ({row.method})"  # type: ignore[attr-defined]
            )
        answer = response_type()
        answer.ParseFromString(row.response)
        return answer

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
        self.core.changed(tournament)
        if plan.hold:
            row = await self.core.get(tournament)
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
                self.core.changed(tournament)
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
        self.core.changed(tournament)
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
        self.core.changed(tournament)
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
        self.core.changed(tournament)
        return reply
