"""The tournament's state machine, one step at a time: what the scheduler does when a tournament is
due. No grpc; the other services through `ports.Services`. docs/tournaments.md, "State machine
and recovery", draws it:

    scheduled -> registration -> running/starting -> running/playing -> finished (prizes paid)
         \\______________\\________________\\_______________\\-> cancelled (buy-ins refunded)

Every step reads the tournament from the database, calls other services outside transactions
with request ids derived from the rows, and records what happened in a transaction that checks
the state it started from (so a step repeated by a restarted process, or by two replicas, has its
effect once). A step that cannot reach another service leaves the state as it was and is retried
later with a growing delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import common_pb2
from services.tournament import models, pairing, prizes, records, standings
from services.tournament.core import OPEN_STATES, Tournaments
from services.tournament.ports import CallError, PrizeShare, Refused, TableState
from services.tournament.records import at

#: Calls to other services made at once for one tournament (tables created or read).
CONCURRENCY = 16

T = TypeVar("T")

log = logging.getLogger("buraco.tournament")


class Progress:
    def __init__(self, tournaments: Tournaments) -> None:
        self.core = tournaments
        self.db = tournaments.db
        self.services = tournaments.services
        self.settings = tournaments.settings
        self.clock = tournaments.clock

    def _seconds(self, seconds: float) -> timedelta:
        return timedelta(seconds=seconds)

    def _backoff(self, failures: int) -> timedelta:
        return self._seconds(
            min(self.settings.retry_seconds * 2 ** max(0, failures - 1), self.settings.max_retry_seconds)
        )

    async def _row(self, tournament: str) -> Any:
        async with self.db.transaction() as session:
            return await records.read(session, tournament)

    # -- the entry point ----------------------------------------------------------------------------

    async def advance(self, tournament: str) -> None:
        """Does everything that is due for the tournament, then records when it is due next."""
        try:
            await self._advance(tournament)
        except CallError as error:
            await self._retry_later(
                tournament, str(error), logging.ERROR if isinstance(error, Refused) else logging.WARNING
            )
            return
        except Exception as error:  # a bug or a database failure: logged, retried with backoff
            log.exception("advancing a tournament failed", extra={"fields": {"tournament": tournament}})
            await self._retry_later(tournament, f"{type(error).__name__}", logging.ERROR)
            return
        await self._schedule(tournament)

    async def _advance(self, tournament: str) -> None:
        row = await self._row(tournament)
        if row.state in OPEN_STATES:
            await self._registration(row)
            row = await self._row(tournament)
        if row.state == "running" and row.phase == "starting":
            await self._start(row)
            row = await self._row(tournament)
        if row.state == "running" and row.phase == "playing":
            await self._play(row)
            row = await self._row(tournament)
        if row.state == "finished" and not row.chips_settled:
            await self._pay(row)
        if row.state == "cancelled":
            await self._wind_up(row)

    async def _retry_later(self, tournament: str, error: str, level: int) -> None:
        async with self.db.transaction() as session:
            row = await records.lock(session, tournament)
            failures = row.failures + 1
            await session.execute(
                update(models.tournaments)
                .where(models.tournaments.c.id == tournament)
                .values(failures=failures, due_at=self.clock() + self._backoff(failures), last_error=error[:500])
            )
        log.log(
            level,
            "tournament step failed; will retry",
            extra={"fields": {"tournament": tournament, "failures": failures, "error": error[:500]}},
        )

    async def _schedule(self, tournament: str) -> None:
        """Records when the tournament is next due (none: nothing left to do). Under the lock, so
        a change made meanwhile (a result that makes it due now) is seen, never overwritten."""
        async with self.db.transaction() as session:
            row = await records.lock(session, tournament)
            now = self.clock()
            due: datetime | None = None
            if row.state == "scheduled":
                due = min(at(row.registration_open_at), at(row.start_at))
            elif row.state == "registration":
                due = at(row.start_at)
                started = await self._ops_started(session, tournament)
                if started:
                    due = min(due, min(started) + self._stale())
            elif row.state == "running":
                if row.phase == "playing":
                    current = await records.pairings(session, tournament, round_number=row.current_round)
                    checks = [at(p.next_check_at) for p in current if p.state != "decided" and p.next_check_at]
                    due = min(checks) if checks else (now if all(p.state == "decided" for p in current) else None)
                else:
                    due = now
            elif row.state == "finished":
                due = None if row.chips_settled else now
            elif row.state == "cancelled":
                open_pairings = [p for p in await records.pairings(session, tournament) if p.state != "decided"]
                due = None if row.chips_settled and not open_pairings else now
            await session.execute(
                update(models.tournaments)
                .where(models.tournaments.c.id == tournament)
                .values(due_at=due, failures=0, last_error="")
            )

    def _stale(self) -> timedelta:
        return self.core.stale_after

    async def _ops_started(self, session: AsyncSession, tournament: str) -> list[datetime]:
        p = models.entrant_players
        rows = await session.execute(
            select(p.c.op_started_at).where(
                p.c.tournament_id == tournament, p.c.hold_state.in_(("holding", "releasing"))
            )
        )
        return [at(r.op_started_at) for r in rows if r.op_started_at is not None]

    # -- registration -------------------------------------------------------------------------------

    async def _registration(self, row: Any) -> None:
        tournament = row.id
        now = self.clock()
        if row.state == "scheduled" and now >= at(row.registration_open_at):
            async with self.db.transaction() as session:
                locked = await records.lock(session, tournament)
                if locked.state == "scheduled":
                    await records.bump(session, tournament, now, state="registration")
            self.core.changed(tournament)
        await self._finish_holds_and_releases(tournament, only_stale=True)
        if now >= at(row.start_at):
            async with self.db.transaction() as session:
                locked = await records.lock(session, tournament)
                if locked.state in OPEN_STATES:
                    await records.bump(session, tournament, now, state="running", phase="starting", started_at=now)
            self.core.changed(tournament)

    async def _finish_holds_and_releases(self, tournament: str, *, only_stale: bool) -> None:
        """Finishes holds and releases left under way (a call that crashed or got no answer) by
        repeating the wallet call with the same request id."""
        now = self.clock()
        p = models.entrant_players
        async with self.db.transaction() as session:
            row = await records.read(session, tournament)
            query = select(p).where(p.c.tournament_id == tournament, p.c.hold_state.in_(("holding", "releasing")))
            if only_stale:
                query = query.where(p.c.op_started_at <= now - self._stale())
            pending = list(await session.execute(query))
        for player_row in pending:
            if player_row.hold_state == "holding":
                try:
                    await self.services.hold_buy_in(
                        records.hold_request_id(tournament, player_row.entrant_id, player_row.position),
                        tournament,
                        player_row.player,
                        row.buy_in,
                        int(self.settings.hold_ttl_hours * 3600),
                    )
                    held = True
                except Refused:
                    held = False
                async with self.db.transaction() as session:
                    await records.lock(session, tournament)
                    await self.core.finish_hold(session, tournament, player_row.entrant_id, player_row.position, held)
            else:
                await self.core.release(
                    tournament, player_row.entrant_id, player_row.position, player_row.player, "unregistered"
                )
                async with self.db.transaction() as session:
                    await records.lock(session, tournament)
                    await self.core.finish_release(session, tournament, player_row.entrant_id, player_row.position)
            self.core.changed(tournament)

    # -- the start ----------------------------------------------------------------------------------

    async def _start(self, row: Any) -> None:
        tournament = row.id
        await self._finish_holds_and_releases(tournament, only_stale=False)
        await self._drop_incomplete(row)
        async with self.db.transaction() as session:
            entries = [e for e in await records.entries(session, tournament) if e.state == "complete"]
        now = self.clock()
        if len(entries) < row.min_entrants:
            reason = f"too few entrants: {len(entries)} of the {row.min_entrants} needed"
            async with self.db.transaction() as session:
                locked = await records.lock(session, tournament)
                if locked.state == "running" and locked.phase == "starting":
                    await records.bump(
                        session, tournament, now, state="cancelled", phase="", cancel_reason=reason, ended_at=now
                    )
            self.core.changed(tournament)
            log.info("tournament cancelled", extra={"fields": {"tournament": tournament, "reason": reason}})
            return
        ratings = await self._ratings(row, entries)
        seeded = sorted(
            entries,
            key=lambda e: (
                0 if e.id in ratings else 1,
                -ratings.get(e.id, 0.0),
                e.seq,
            ),
        )
        seats = common_pb2.TableOptions.FromString(row.table_options).players
        async with self.db.transaction() as session:
            locked = await records.lock(session, tournament)
            if locked.state != "running" or locked.phase != "starting":
                return
            for seed, entry in enumerate(seeded, start=1):
                await records.set_entry(session, tournament, entry.id, seed=seed, rating=ratings.get(entry.id))
            if row.format == records.SWISS:
                total = row.swiss_rounds
                first = pairing.swiss_round(
                    [pairing.SwissEntrant(e.id, 0, seed) for seed, e in enumerate(seeded, start=1)]
                )
                slots = _swiss_slots(first)
            else:
                total = pairing.elimination_rounds(len(seeded))
                slots = list(enumerate(pairing.first_round([e.id for e in seeded])))
            await self._create_round(session, tournament, 1, slots, now)
            await records.bump(
                session,
                tournament,
                now,
                phase="playing",
                current_round=1,
                total_rounds=total,
                pool_chips=row.buy_in * len(seeded) * (2 if seats == 4 else 1),
            )
        self.core.changed(tournament)
        log.info(
            "tournament started",
            extra={"fields": {"tournament": tournament, "entrants": len(seeded), "rounds": total}},
        )

    async def _drop_incomplete(self, row: Any) -> None:
        """Entries still incomplete at the start (a partner who never registered) are dropped and
        their buy-ins released."""
        tournament = row.id
        async with self.db.transaction() as session:
            incomplete = [e for e in await records.entries(session, tournament) if e.state == "open"]
        for entry in incomplete:
            now = self.clock()
            async with self.db.transaction() as session:
                await records.lock(session, tournament)
                for p in entry.players:
                    if p.hold_state == "held":
                        await records.set_player(
                            session,
                            tournament,
                            entry.id,
                            p.position,
                            hold_state="releasing" if row.buy_in else "released",
                            op_started_at=now,
                        )
            for p in entry.players:
                if p.hold_state == "held" and row.buy_in:
                    await self.core.release(tournament, entry.id, p.position, p.player, "partner never registered")
                    async with self.db.transaction() as session:
                        await records.lock(session, tournament)
                        await self.core.finish_release(session, tournament, entry.id, p.position)
            async with self.db.transaction() as session:
                await records.lock(session, tournament)
                await records.set_entry(session, tournament, entry.id, state="dropped")
                await records.bump(session, tournament, self.clock())
            self.core.changed(tournament)

    async def _ratings(self, row: Any, entries: Sequence[records.Entry]) -> dict[str, float]:
        """Each entry's rating (a pair's: the mean of the partners'); {} when the ranking service
        has not answered within the seeding wait (then the seeds follow the registration order)."""
        options = common_pb2.TableOptions.FromString(row.table_options)
        players = [p for e in entries for p in e.names]
        try:
            found = await self.services.ratings(players, options.ruleset.preset, options.players)
        except CallError as error:
            now = self.clock()
            since = records.aware(row.seeding_since)
            if since is None:
                since = now
                async with self.db.transaction() as session:
                    await session.execute(
                        update(models.tournaments).where(models.tournaments.c.id == row.id).values(seeding_since=since)
                    )
            if now - since < self._seconds(self.settings.seeding_wait_seconds):
                raise
            log.warning(
                "no ratings for the seeding; seeding by registration order",
                extra={"fields": {"tournament": row.id, "error": str(error)[:300]}},
            )
            return {}
        return {e.id: sum(found.get(p, 0.0) for p in e.names) / len(e.names) for e in entries}

    async def _create_round(
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

    async def _play(self, row: Any) -> None:
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
            .values(failures=failures, next_check_at=self.clock() + self._backoff(failures))
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
                    await self._create_round(session, tournament, number + 1, _swiss_slots(chosen), now)
                    await records.bump(session, tournament, now, current_round=number + 1, due_at=now)
            else:
                slots = (1 << locked.total_rounds) >> number
                winners: list[str | None] = [None] * slots
                for p in current:
                    winners[p.slot] = p.winner
                if number >= locked.total_rounds or sum(1 for w in winners if w) <= 1:
                    await self._finish(session, locked, seeds, everything, now)
                else:
                    await self._create_round(
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

    # -- the end ------------------------------------------------------------------------------------

    async def _pay(self, row: Any) -> None:
        tournament = row.id
        async with self.db.transaction() as session:
            entries = [e for e in await records.entries(session, tournament) if e.place is not None]
        placed = [
            prizes.Placed(e.id, e.place or 0, e.names)
            for e in sorted(entries, key=lambda e: (e.place or 0, e.seed or 0, e.seq))
        ]
        shares = prizes.shares(placed, {place: share for place, share in row.prizes})
        payout = await self.services.pay_prizes(
            records.prizes_request_id(tournament),
            tournament,
            [PrizeShare(s.player, s.place, s.share_bp) for s in shares],
        )
        now = self.clock()
        async with self.db.transaction() as session:
            locked = await records.lock(session, tournament)
            if locked.chips_settled:
                return
            for entry in entries:
                won = sum(payout.prizes.get(player, 0) for player in entry.names)
                await records.set_entry(session, tournament, entry.id, prize_chips=won)
            await records.bump(
                session,
                tournament,
                now,
                chips_settled=True,
                house_cut_chips=payout.house_cut_chips,
                prize_pool_chips=payout.pool_chips - payout.house_cut_chips,
            )
        self.core.changed(tournament)
        log.info(
            "prizes paid",
            extra={
                "fields": {"tournament": tournament, "pool": payout.pool_chips, "house_cut": payout.house_cut_chips}
            },
        )

    async def _wind_up(self, row: Any) -> None:
        """A cancelled tournament: every buy-in refunded, then its open tables cancelled."""
        tournament = row.id
        if not row.chips_settled:
            await self._finish_holds_and_releases(tournament, only_stale=False)
            if row.buy_in:
                try:
                    await self.services.refund_all(
                        records.refund_request_id(tournament), tournament, "tournament cancelled"
                    )
                except Refused as refused:
                    # No pot (nobody ever held a buy-in) or a pot already closed by this refund.
                    if refused.code not in ("NOT_FOUND", "FAILED_PRECONDITION"):
                        raise
            now = self.clock()
            async with self.db.transaction() as session:
                await records.lock(session, tournament)
                p = models.entrant_players
                await session.execute(
                    update(p)
                    .where(p.c.tournament_id == tournament, p.c.hold_state.in_(("held", "releasing")))
                    .values(hold_state="released", op_started_at=None)
                )
                await records.bump(session, tournament, now, chips_settled=True)
            self.core.changed(tournament)
            log.info("buy-ins refunded", extra={"fields": {"tournament": tournament}})
        async with self.db.transaction() as session:
            open_pairings = [p for p in await records.pairings(session, tournament) if p.state != "decided"]
        for p in open_pairings:
            # Refused: no such table, or its match is under way: it plays on, its result unused.
            with contextlib.suppress(Refused):
                await self.services.cancel_table(
                    records.cancel_table_request_id(p.match_id), f"tables/{p.match_id}", "tournament cancelled"
                )
            async with self.db.transaction() as session:
                await records.lock(session, tournament)
                await records.decide(session, tournament, p, self.clock(), winner=None, decided_by="cancelled")
            self.core.changed(tournament)


def _swiss_slots(chosen: pairing.SwissRound) -> list[tuple[int, pairing.Slot]]:
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
