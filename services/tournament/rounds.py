"""A running tournament's rounds: each round's pairings and tables, read until every pairing is
decided (by the game-session service's report, by a no-show, or by the table itself when a report
is overdue), then the next round or the final standings. `progress.Progress` runs these steps
when the tournament is due, with the same rules as its other steps: calls to other services
outside transactions, with request ids derived from the rows; outcomes recorded in a transaction
that checks the state it started from; a failed call retried later with a growing delay
(docs/tournaments.md, "Tables and results", "No-shows and forfeits").
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from services.tournament import models, pairing, records, standings
from services.tournament.core import Tournaments
from services.tournament.ports import CallError, Refused, TableState
from services.tournament.records import at

#: Calls to other services made at once for one tournament (tables created or read).
CONCURRENCY = 16

T = TypeVar("T")

log = logging.getLogger("buraco.tournament")


class Rounds:
    def __init__(self, tournaments: Tournaments) -> None:
        self.core = tournaments
        self.db = tournaments.db
        self.services = tournaments.services
        self.settings = tournaments.settings
        self.clock = tournaments.clock

    def _seconds(self, seconds: float) -> timedelta:
        return timedelta(seconds=seconds)

    async def create_round(
        self,
        session: AsyncSession,
        tournament: str,
        number: int,
        slots: Iterable[tuple[int, pairing.Slot]],
        now: datetime,
    ) -> None:
        await session.execute(insert(models.rounds).values(tournament_id=tournament, number=number, started_at=now))
        for slot, (a, b) in slots:
            if a is None:
                a, b = b, None
            if a is None:  # both slots empty (an elimination pair whose players both forfeited)
                continue
            common: dict[str, Any] = {
                "tournament_id": tournament,
                "round": number,
                "slot": slot,
                "entrant_a": a,
                "entrant_b": b,
                "attempt": 1,
                "forfeit": False,
                "showed": [],
                "no_shows": [],
                "failures": 0,
            }
            if b is None:
                await session.execute(
                    insert(models.pairings).values(
                        **common, state="decided", winner=a, decided_by="bye", decided_at=now
                    )
                )
                continue
            match = records.match_id(tournament, number, slot, 1)
            await session.execute(
                insert(models.pairings).values(**common, state="creating", match_id=match, next_check_at=now)
            )
            await session.execute(
                insert(models.matches).values(
                    match_id=match, tournament_id=tournament, round=number, slot=slot, attempt=1
                )
            )

    # -- playing ------------------------------------------------------------------------------------

    async def play(self, row: Any) -> None:
        """Creates the round's tables and reads those due; closes the round once all is decided.
        The calls go out together; their outcomes are recorded in one transaction."""
        tournament = row.id
        now = self.clock()
        async with self.db.transaction() as session:
            current = await records.pairings(session, tournament, round_number=row.current_round)
            sides = {e.id: e.names for e in await records.entries(session, tournament)}
        due = [
            p for p in current if p.state != "decided" and p.next_check_at is not None and at(p.next_check_at) <= now
        ]
        creating = [p for p in due if p.state == "creating"]
        reading = [p for p in due if p.state == "playing"]
        created = await _each(
            [
                functools.partial(
                    self.services.create_table,
                    records.table_request_id(p.match_id),
                    p.match_id,
                    p.match_id,
                    row.table_options,
                    self._seats(p, sides),
                    tournament,
                )
                for p in creating
            ]
        )
        read = await _each([functools.partial(self.services.get_table, p.table_name) for p in reading])
        forfeited: list[Any] = []
        if creating or reading:
            async with self.db.transaction() as session:
                await records.lock(session, tournament)
                for p, outcome in zip(creating, created, strict=True):
                    if isinstance(outcome, CallError):
                        await self._pairing_failed(session, tournament, p, outcome)
                    else:
                        await self._table_created(session, row, p, outcome)
                for p, outcome in zip(reading, read, strict=True):
                    if isinstance(outcome, CallError):
                        await self._pairing_failed(session, tournament, p, outcome)
                        continue
                    fresh = await self._current(session, tournament, p, "playing")
                    if fresh is not None and await self._observe(session, row, fresh, outcome, sides):
                        forfeited.append(fresh)
                await records.bump(session, tournament, self.clock())
            self.core.changed(tournament)
        for p in forfeited:  # no-shows: their tables are cancelled (best effort)
            try:
                await self.services.cancel_table(
                    records.cancel_table_request_id(p.match_id), p.table_name, "a player did not show"
                )
            except CallError as error:  # the match may have started: it plays on, its result unused
                log.info(
                    "could not cancel a forfeited table",
                    extra={"fields": {"table": p.table_name, "error": str(error)[:300]}},
                )
        async with self.db.transaction() as session:
            current = await records.pairings(session, tournament, round_number=row.current_round)
        if all(p.state == "decided" for p in current):
            await self._close_round(row)

    @staticmethod
    def _seats(p: Any, sides: dict[str, tuple[str, ...]]) -> list[str]:
        """Seat order: 2 players, entrant a at seat 0; pairs, entrant a's partners at seats 0 and 2
        (side 0), entrant b's at seats 1 and 3."""
        a, b = sides[p.entrant_a], sides[p.entrant_b]
        if len(a) == 1:
            return [a[0], b[0]]
        return [a[0], b[0], a[1], b[1]]

    @staticmethod
    def _where(tournament: str, p: Any) -> tuple[Any, ...]:
        pr = models.pairings
        return (pr.c.tournament_id == tournament, pr.c.round == p.round, pr.c.slot == p.slot, pr.c.attempt == p.attempt)

    async def _current(self, session: AsyncSession, tournament: str, p: Any, state: str) -> Any:
        """The pairing as it is now, if it is still at the same table and in `state`."""
        pr = models.pairings
        query = select(pr).where(*self._where(tournament, p), pr.c.state == state)
        return (await session.execute(query)).first()

    async def _pairing_failed(self, session: AsyncSession, tournament: str, p: Any, error: CallError) -> None:
        failures = p.failures + 1
        await session.execute(
            update(models.pairings)
            .where(*self._where(tournament, p), models.pairings.c.state != "decided")
            .values(failures=failures, next_check_at=self.clock() + self.settings.retry_delay(failures))
        )
        log.log(
            logging.ERROR if isinstance(error, Refused) else logging.WARNING,
            "a table call failed; will retry",
            extra={"fields": {"tournament": tournament, "match_id": p.match_id, "error": str(error)[:300]}},
        )

    async def _table_created(self, session: AsyncSession, row: Any, p: Any, table: TableState) -> None:
        now = self.clock()
        pr = models.pairings
        await session.execute(
            update(pr)
            .where(*self._where(row.id, p), pr.c.state == "creating")
            .values(
                state="playing",
                table_name=table.name,
                table_created_at=now,
                no_show_deadline=now + self._seconds(row.no_show_seconds),
                next_check_at=now + self._seconds(min(self.settings.poll_seconds, row.no_show_seconds)),
                showed=sorted({s.player for s in table.seats if s.connected}),
                failures=0,
            )
        )

    async def _observe(
        self, session: AsyncSession, row: Any, p: Any, table: TableState, sides: dict[str, tuple[str, ...]]
    ) -> bool:
        """Applies what a table read showed; True when the table should be cancelled (forfeit)."""
        tournament = row.id
        now = self.clock()
        showed = set(p.showed or []) | {s.player for s in table.seats if s.connected}
        pair = (sides[p.entrant_a], sides[p.entrant_b])
        absent = [player for side in pair for player in side if player not in showed]
        deadline = at(p.no_show_deadline)
        pr = models.pairings
        where = self._where(tournament, p)
        if table.state == "finished":
            seen = records.aware(p.finished_seen_at) or now
            grace = self._seconds(self.settings.result_grace_seconds)
            scores = table.scores
            if now - seen >= grace and len(scores) == 2 and scores[0] != scores[1]:
                # The report is overdue (lost, or refused by mistake): the table says who won.
                winner = p.entrant_a if scores[0] > scores[1] else p.entrant_b
                await records.decide(
                    session, tournament, p, now, winner=winner, decided_by="table", scores=(scores[0], scores[1])
                )
                log.warning(
                    "result read from the table: no report arrived",
                    extra={"fields": {"tournament": tournament, "match_id": p.match_id}},
                )
                return False
            retry = seen + grace if now - seen < grace else now + self._seconds(self.settings.reconcile_seconds)
            await session.execute(
                update(pr).where(*where).values(showed=sorted(showed), finished_seen_at=seen, next_check_at=retry)
            )
            return False
        if table.state == "cancelled" or now >= deadline:
            if absent:
                await self._forfeit(session, tournament, p, pair, absent, now)
                return table.state != "cancelled"
            if table.state == "cancelled":  # cancelled by someone else with everyone present
                await records.replay(session, tournament, p, now)
                return False
        poll = self.settings.poll_seconds if now < deadline else self.settings.reconcile_seconds
        next_check = now + self._seconds(poll)
        if now < deadline:
            next_check = min(next_check, deadline)
        await session.execute(update(pr).where(*where).values(showed=sorted(showed), next_check_at=next_check))
        return False

    async def _forfeit(
        self,
        session: AsyncSession,
        tournament: str,
        p: Any,
        pair: tuple[tuple[str, ...], tuple[str, ...]],
        absent: Sequence[str],
        now: datetime,
    ) -> None:
        """A side with a player who did not show loses; when both sides have one, nobody wins."""
        missing = {i for i, side in enumerate(pair) for player in side if player in absent}
        winner = None
        if missing == {0}:
            winner = p.entrant_b
        elif missing == {1}:
            winner = p.entrant_a
        await records.decide(
            session, tournament, p, now, winner=winner, decided_by="no_show", forfeit=True, no_shows=absent
        )
        log.info(
            "no-show forfeit",
            extra={"fields": {"tournament": tournament, "match_id": p.match_id, "no_shows": sorted(absent)}},
        )

    async def _close_round(self, row: Any) -> None:
        """Every pairing of the round is decided: the next round, or the end."""
        tournament = row.id
        now = self.clock()
        async with self.db.transaction() as session:
            locked = await records.lock(session, tournament)
            number = locked.current_round
            if locked.state != "running" or locked.phase != "playing":
                return
            everything = await records.pairings(session, tournament)
            current = [p for p in everything if p.round == number]
            if any(p.state != "decided" for p in current):
                return
            r = models.rounds
            await session.execute(
                update(r).where(r.c.tournament_id == tournament, r.c.number == number).values(finished_at=now)
            )
            entries = {e.id: e for e in await records.entries(session, tournament) if e.seed is not None}
            seeds = {e.id: e.seed for e in entries.values() if e.seed is not None}
            if locked.format == records.SWISS:
                if number >= locked.total_rounds:
                    await self._finish(session, locked, seeds, everything, now)
                else:
                    done = records.results(everything)
                    points = standings.swiss_points(list(seeds), done)
                    met: dict[str, set[str]] = {e: set() for e in seeds}
                    byes = dict.fromkeys(seeds, 0)
                    for result in done:
                        if result.bye:
                            byes[result.entrants[0]] += 1
                        else:
                            a, b = result.entrants
                            met[a].add(b)
                            met[b].add(a)
                    chosen = pairing.swiss_round(
                        [pairing.SwissEntrant(e, points[e], seeds[e], frozenset(met[e]), byes[e]) for e in seeds]
                    )
                    await self.create_round(session, tournament, number + 1, swiss_slots(chosen), now)
                    await records.bump(session, tournament, now, current_round=number + 1, due_at=now)
            else:
                slots = (1 << locked.total_rounds) >> number
                winners: list[str | None] = [None] * slots
                for p in current:
                    winners[p.slot] = p.winner
                if number >= locked.total_rounds or sum(1 for w in winners if w) <= 1:
                    await self._finish(session, locked, seeds, everything, now)
                else:
                    await self.create_round(
                        session, tournament, number + 1, enumerate(pairing.next_round(winners)), now
                    )
                    await records.bump(session, tournament, now, current_round=number + 1, due_at=now)
        self.core.changed(tournament)

    async def _finish(
        self, session: AsyncSession, row: Any, seeds: dict[str, int], everything: Sequence[Any], now: datetime
    ) -> None:
        """Final standings: the places, then the prizes to pay (the next step)."""
        table = records.table_standings(row.format, seeds, everything)
        for standing in table:
            await records.set_entry(session, row.id, standing.entrant, place=standing.rank)
        await records.bump(
            session,
            row.id,
            now,
            state="finished",
            phase="",
            ended_at=now,
            chips_settled=row.buy_in == 0,
            due_at=now,
        )
        log.info("tournament finished", extra={"fields": {"tournament": row.id, "entrants": len(table)}})


def swiss_slots(chosen: pairing.SwissRound) -> list[tuple[int, pairing.Slot]]:
    slots: list[tuple[int, pairing.Slot]] = [(i, (a, b)) for i, (a, b) in enumerate(chosen.pairs)]
    if chosen.bye is not None:
        slots.append((len(slots), (chosen.bye, None)))
    return slots


async def _each(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | CallError]:
    """Runs the calls, at most CONCURRENCY at a time; each one's result or CallError, in order."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(call: Callable[[], Awaitable[T]]) -> T | CallError:
        async with gate:
            try:
                return await call()
            except CallError as error:
                return error

    return list(await asyncio.gather(*(one(call) for call in calls)))
