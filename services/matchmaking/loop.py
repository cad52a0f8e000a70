"""The matching loop: one background task per replica that advances the start sagas that are due
and runs a matching pass over every searching ticket, every BURACO_MATCHMAKING_TICK_SECONDS or
when woken (a new ticket, a confirmation). Nothing it needs is only in memory: tickets and sagas
are rows, so a restarted replica carries on where the last one stopped.

Several replicas may run the loop at once: a proposal only takes tickets still searching at the
version the pass read (a conditional write), and every saga step moves its saga on from the state
it read, so no ticket is proposed twice and no step's effect is asked for twice under two ids.

Shutdown: `stop()` asks the loop to end after the step under way, waits for it at most
`stop_timeout_seconds`, then cancels it (and waits for the cancellation, also bounded). Waits
use `asyncio.timeout`, not `asyncio.wait_for` (which on Python 3.11 can swallow the task's own
cancellation and hang the shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from services.common.db import first_in_line
from services.matchmaking import models
from services.matchmaking.core import Core, aware
from services.matchmaking.matcher import BucketKey, Waiting, match_pass
from services.matchmaking.saga import Sagas
from services.matchmaking.tickets import Tickets

log = logging.getLogger("buraco.matchmaking")

#: Start sagas advanced concurrently within a pass.
SAGAS_AT_ONCE = 32
#: Proposals written per transaction (one commit each; the SQLite writer is held no longer).
PROPOSALS_PER_TRANSACTION = 50
#: Whole ticket rows read per statement when the index catches up.
FETCH_CHUNK = 500
#: How old the last pass's view of the queue may be for a ticket's position to be taken from it.
POSITION_MAX_AGE_SECONDS = 2.0
#: The shortest time between two passes (the tick, if shorter).
MIN_PASS_GAP_SECONDS = 0.25


@dataclass(frozen=True)
class _Searching:
    """A searching ticket in the replica's index, at `version`."""

    ticket: str
    version: int
    key: BucketKey
    players: tuple[str, ...]
    rating: float
    queued_at: datetime
    front: bool
    recent: frozenset[str]


class Loop:
    def __init__(self, core: Core, sagas: Sagas, tickets: Tickets) -> None:
        self.core = core
        self.sagas = sagas
        self.tickets = tickets
        self.settings = core.settings
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        #: Passes made, and an event set at the end of each (`next_pass`).
        self.passes = 0
        self._passed = asyncio.Event()
        #: Seconds the last matching pass's matcher took, and the tables it proposed.
        self.last_match_seconds = 0.0
        self.last_proposals = 0
        #: When the watched tickets' versions were last read (event-loop time).
        self._polled = 0.0
        #: The searching tickets as the last pass read them, by id (`_searching`), and when
        #: (event-loop time); each one's place in its bucket, computed when first asked for.
        self._index: dict[str, _Searching] = {}
        self._index_time = -math.inf
        self._positions: dict[str, int] | None = None
        #: The searching tickets per bucket in the index (computed with `_positions`), and the
        #: tickets queued by this replica (`queued_here`) since the reading under way began and,
        #: while it is under way, between the index's reading and that one.
        self._sizes: dict[BucketKey, int] = {}
        self._queued_since: dict[BucketKey, int] = {}
        self._queued_before: dict[BucketKey, int] = {}

    @property
    def stopping(self) -> bool:
        return self._stopping

    def wake(self) -> None:
        """Something changed: run a pass now rather than at the next tick."""
        self._wake.set()

    async def next_pass(self) -> None:
        """Returns once a whole pass has run after this call."""
        target = self.passes + 2  # a pass under way may have looked before this call
        self.wake()
        while self.passes < target:
            passed = self._passed
            await passed.wait()

    def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="matchmaking-loop")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        self._wake.set()
        limit = self.settings.stop_timeout_seconds
        try:
            async with asyncio.timeout(limit):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(limit):
                    await task
        # Whoever waits for a pass is let go.
        self._passed.set()

    async def _run(self) -> None:
        # The loop's statements go before the calls' (a burst of CreateTicket would otherwise
        # hold every pass, and every match start, until the whole burst is in the queue).
        with first_in_line():
            await self._run_passes()

    async def _run_passes(self) -> None:
        log.info("matching loop started")
        clock = asyncio.get_running_loop()
        # Passes are at least this far apart, however often the loop is woken: under a burst of
        # new tickets one pass takes them all, rather than a pass per ticket.
        gap = min(self.settings.tick_seconds, MIN_PASS_GAP_SECONDS)
        while not self._stopping:
            started = clock.time()
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:
                log.exception("matching pass failed; retrying at the next tick")
                self._end_pass()
            if self.stopping:
                break
            rest = gap - (clock.time() - started)
            if rest > 0:
                await asyncio.sleep(rest)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(self.settings.tick_seconds - gap, 0.0)):
                    await self._wake.wait()

    def _end_pass(self) -> None:
        self.passes += 1
        passed, self._passed = self._passed, asyncio.Event()
        passed.set()

    async def run_once(self) -> int:
        """Advances every due saga, then runs one matching pass; returns the tables proposed."""
        gate = asyncio.Semaphore(SAGAS_AT_ONCE)

        async def advance(saga: Any) -> None:
            async with gate:
                if self._stopping:
                    return
                try:
                    await self.sagas.advance_row(saga)
                except Exception:
                    log.exception("a start saga step failed", extra={"fields": {"saga": saga.id}})

        # Sagas are independent: their calls to the wallet and game sessions overlap.
        await asyncio.gather(*(advance(saga) for saga in await self.sagas.due_rows()))
        now = asyncio.get_running_loop().time()
        if now - self._polled >= self.settings.watch_poll_seconds:
            self._polled = now
            try:
                await self.tickets.poll_watched()
            except Exception:
                log.exception("polling the watched tickets failed")
        proposed = 0 if self._stopping else await self.match_once()
        self._end_pass()
        return proposed

    async def _searching(self) -> list[_Searching]:
        """Every searching ticket, as the database has it now (one snapshot): the ids and versions
        of all of them, and the whole row only of those this replica's index does not hold at that
        version (every change to a ticket increments its version). The index is rebuilt from the
        database by the first pass after a start and follows it at every pass; it is never the
        record: a proposal takes its tickets only if they are still searching in the database."""
        t = models.tickets
        async with self.core.db.read_connection() as connection:
            # Tickets queued from here on are either in this reading or counted anew (a ticket
            # committed just before may be both: a new place is at most a few too far back).
            self._queued_before, self._queued_since = self._queued_since, {}
            versions = dict(
                (row.id, row.version)
                for row in await connection.execute(select(t.c.id, t.c.version).where(t.c.state == "searching"))
            )
            index = self._index
            stale = [
                ticket
                for ticket, version in versions.items()
                if (ticket not in index or index[ticket].version != version)
            ]
            for start in range(0, len(stale), FETCH_CHUNK):
                rows = await connection.execute(
                    select(
                        t.c.id,
                        t.c.version,
                        t.c.players,
                        t.c.preset,
                        t.c.seats,
                        t.c.length,
                        t.c.target_points,
                        t.c.mode,
                        t.c.bet_chips,
                        t.c.rating,
                        t.c.queued_at,
                        t.c.front,
                        t.c.recent,
                    ).where(t.c.id.in_(stale[start : start + FETCH_CHUNK]), t.c.state == "searching")
                )
                for row in rows:
                    index[row.id] = _Searching(
                        ticket=row.id,
                        version=row.version,
                        key=(row.preset, row.seats, row.length, row.target_points, row.mode, row.bet_chips),
                        players=tuple(row.players),
                        rating=row.rating,
                        queued_at=aware(row.queued_at),
                        front=row.front,
                        recent=frozenset(row.recent),
                    )
        for ticket in [ticket for ticket in index if ticket not in versions]:
            del index[ticket]
        self._index_time = asyncio.get_running_loop().time()
        self._positions = None
        self._queued_before = {}
        return [entry for ticket, entry in index.items() if entry.version == versions.get(ticket)]

    def position(self, ticket: str, version: int) -> int | None:
        """The ticket's place in its bucket (1 is next: requeued tickets first, then by waiting
        time) as the last pass read the queue, if that pass held the ticket at `version` and was
        at most POSITION_MAX_AGE_SECONDS ago; else None (the caller counts in the database)."""
        entry = self._index.get(ticket)
        if entry is None or entry.version != version or not self._recent():
            return None
        return self._places().get(ticket)

    def new_place(self, key: BucketKey) -> int | None:
        """The place of a ticket about to be queued at the back of bucket `key`: behind the tickets
        the last pass read there and those queued by this replica since, if that pass was at most
        POSITION_MAX_AGE_SECONDS ago; else None (the caller counts in the database). An estimate,
        as a count would be: other replicas' new tickets are in the next pass's reading."""
        if not self._recent():
            return None
        self._places()
        return self._sizes.get(key, 0) + self._queued_before.get(key, 0) + self._queued_since.get(key, 0) + 1

    def queued_here(self, key: BucketKey) -> None:
        """A ticket was queued at the back of bucket `key` by this replica (`new_place`)."""
        self._queued_since[key] = self._queued_since.get(key, 0) + 1

    def _recent(self) -> bool:
        return asyncio.get_running_loop().time() - self._index_time <= POSITION_MAX_AGE_SECONDS

    def _places(self) -> dict[str, int]:
        """Each indexed ticket's place in its bucket, and the buckets' sizes, computed once per reading."""
        if self._positions is None:
            buckets: dict[BucketKey, list[_Searching]] = {}
            for searching in self._index.values():
                buckets.setdefault(searching.key, []).append(searching)
            self._positions = {}
            for members in buckets.values():
                members.sort(key=lambda m: (not m.front, m.queued_at, m.ticket))
                self._positions.update((m.ticket, place) for place, m in enumerate(members, start=1))
            self._sizes = {key: len(members) for key, members in buckets.items()}
        return self._positions

    async def match_once(self) -> int:
        now = self.core.clock()
        waited: dict[str, float] = {}
        waiting: list[Waiting] = []
        for entry in await self._searching():
            seconds = (now - entry.queued_at).total_seconds()
            waited[entry.ticket] = seconds
            waiting.append(
                Waiting(
                    ticket=entry.ticket,
                    key=entry.key,
                    players=entry.players,
                    rating=entry.rating,
                    waited_seconds=seconds,
                    front=entry.front,
                    recent=entry.recent,
                )
            )
        started = time.perf_counter()
        proposals = match_pass(waiting, self.settings.windows)
        self.last_match_seconds = time.perf_counter() - started
        proposed = 0
        for start in range(0, len(proposals), PROPOSALS_PER_TRANSACTION):
            if self._stopping:
                break
            made = await self.sagas.propose_many(proposals[start : start + PROPOSALS_PER_TRANSACTION], waited)
            proposed += sum(1 for saga_id in made if saga_id is not None)
        self.last_proposals = proposed
        metrics = self.sagas.metrics
        metrics.observe_pass(waited.values(), self.last_match_seconds)
        metrics.proposed.inc(proposed)
        if proposed:
            log.info("matches proposed", extra={"fields": {"tables": proposed, "waiting": len(waiting)}})
        return proposed
