"""The tournament service's domain logic for its calls: plain methods over explicit dependencies
(the database, the clock, `ports.Services`), returning contract messages or raising the errors of
`errors.py`. No grpc import here. Register and Unregister, the calls that move chips, are in
`registration.py`; the scheduler's steps (start, rounds, payouts, refunds) in `progress.py` and
`rounds.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, insert, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import common_pb2, tournament_pb2
from services.common.db import Database
from services.common.errors import InvalidArgumentError
from services.common.idempotency import IdempotencyStore
from services.common.validation import encode_page_token
from services.tournament import models, records, standings, views
from services.tournament.errors import (
    ResultError,
    TournamentExistsError,
    TournamentNotFoundError,
    TournamentStateError,
)
from services.tournament.ports import Services
from services.tournament.records import ACTIVE_ENTRY, Clock
from services.tournament.settings import TournamentSettings

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
    """Tournaments created, cancelled and read, and the results the game-session service reports."""

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

    def changed(self, tournament: str) -> None:
        self.notifier.changed(tournament)
        self.wake()

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
