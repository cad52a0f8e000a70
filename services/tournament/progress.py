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

The steps of a running tournament's rounds (tables, results, no-shows, the next round) are in
`rounds.py`; the registration saga's own steps, which the scheduler finishes when a call left them
under way, in `registration.py`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import common_pb2
from services.tournament import models, pairing, prizes, records
from services.tournament.core import OPEN_STATES, Tournaments
from services.tournament.ports import CallError, PrizeShare, Refused
from services.tournament.records import at
from services.tournament.registration import Registrations
from services.tournament.rounds import Rounds, swiss_slots

log = logging.getLogger("buraco.tournament")


class Progress:
    def __init__(self, tournaments: Tournaments, registrations: Registrations) -> None:
        self.core = tournaments
        self.registrations = registrations
        self.rounds = Rounds(tournaments)
        self.db = tournaments.db
        self.services = tournaments.services
        self.settings = tournaments.settings
        self.clock = tournaments.clock

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
            await self.rounds.play(row)
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
                .values(
                    failures=failures, due_at=self.clock() + self.settings.retry_delay(failures), last_error=error[:500]
                )
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
        return self.registrations.stale_after

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
                    await self.registrations.finish_hold(
                        session, tournament, player_row.entrant_id, player_row.position, held
                    )
            else:
                await self.registrations.release(
                    tournament, player_row.entrant_id, player_row.position, player_row.player, "unregistered"
                )
                async with self.db.transaction() as session:
                    await records.lock(session, tournament)
                    await self.registrations.finish_release(
                        session, tournament, player_row.entrant_id, player_row.position
                    )
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
                slots = swiss_slots(first)
            else:
                total = pairing.elimination_rounds(len(seeded))
                slots = list(enumerate(pairing.first_round([e.id for e in seeded])))
            await self.rounds.create_round(session, tournament, 1, slots, now)
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
                    await self.registrations.release(
                        tournament, entry.id, p.position, p.player, "partner never registered"
                    )
                    async with self.db.transaction() as session:
                        await records.lock(session, tournament)
                        await self.registrations.finish_release(session, tournament, entry.id, p.position)
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
            if now - since < timedelta(seconds=self.settings.seeding_wait_seconds):
                raise
            log.warning(
                "no ratings for the seeding; seeding by registration order",
                extra={"fields": {"tournament": row.id, "error": str(error)[:300]}},
            )
            return {}
        return {e.id: sum(found.get(p, 0.0) for p in e.names) / len(e.names) for e in entries}

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

