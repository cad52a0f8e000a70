"""The scheduler: one loop per replica that picks due tournaments from the database and advances
them (`progress.Progress.advance`). Nothing it needs is only in memory: a tournament is due when
its `due_at` has passed, so a restarted (or another) replica finds the same work.

Replicas share the work through a lease per tournament (`lease_owner`, `lease_until`): a replica
advances a tournament only while it holds the lease, and takes a lease that has expired. The
lease only saves duplicate work: every step is idempotent and checks its starting state, so two
replicas advancing the same tournament would still have each effect once. A replica restarted
under the same BURACO_TOURNAMENT_REPLICA_ID takes its leases back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from sqlalchemy import or_, select, update

from services.tournament import models
from services.tournament.progress import Progress

log = logging.getLogger("buraco.tournament")

#: Tournaments advanced per pass at most (the rest on the next pass).
BATCH = 50


class Scheduler:
    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.db = progress.db
        self.settings = progress.settings
        self.clock = progress.clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        #: Passes made, and an event set at the end of each (`next_pass`).
        self.passes = 0
        self._passed = asyncio.Event()

    def wake(self) -> None:
        """Something changed: look for due work now rather than at the next tick."""
        self._wake.set()

    async def next_pass(self) -> None:
        """Returns once a whole pass has run after this call (what was due then is done)."""
        target = self.passes + 2  # a pass under way may have looked before this call
        self.wake()
        while self.passes < target:
            await self._passed.wait()

    def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="tournament-scheduler")

    async def stop(self, timeout: float = 10.0) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        log.info("scheduler started", extra={"fields": {"replica": self.settings.replica_id}})
        while not self._stopping:
            self._wake.clear()
            try:
                await self.run_once()
            except Exception:
                log.exception("scheduler pass failed; retrying at the next tick")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.tick_seconds)

    async def run_once(self) -> int:
        """Advances every due tournament this replica can lease; returns how many."""
        now = self.clock()
        t = models.tournaments
        me = self.settings.replica_id
        free = or_(t.c.lease_until.is_(None), t.c.lease_until < now, t.c.lease_owner == me)
        async with self.db.transaction() as session:
            due = [
                row.id
                for row in await session.execute(
                    select(t.c.id).where(t.c.due_at <= now, free).order_by(t.c.due_at).limit(BATCH)
                )
            ]
        advanced = 0
        for tournament in due:
            if self._stopping:
                break
            if not await self._lease(tournament):
                continue
            try:
                await self.progress.advance(tournament)
            except Exception:
                log.exception("advancing a tournament failed", extra={"fields": {"tournament": tournament}})
            advanced += 1
        self.passes += 1
        passed, self._passed = self._passed, asyncio.Event()
        passed.set()
        return advanced

    async def _lease(self, tournament: str) -> bool:
        now = self.clock()
        t = models.tournaments
        me = self.settings.replica_id
        async with self.db.transaction() as session:
            result = await session.execute(
                update(t)
                .where(
                    t.c.id == tournament,
                    or_(t.c.lease_until.is_(None), t.c.lease_until < now, t.c.lease_owner == me),
                )
                .values(lease_owner=me, lease_until=now + timedelta(seconds=self.settings.lease_seconds))
            )
        return bool(getattr(result, "rowcount", 0))
