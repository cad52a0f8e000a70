"""Which tables this replica holds, and the one way a copy of a table gets into its memory.

Ownership: each replica has a random owner id and a heartbeat row that it renews at every scan
(`BURACO_GAME_SESSION_TAKEOVER_SCAN_SECONDS`) for a lease (`BURACO_GAME_SESSION_LEASE_SECONDS`);
each table has a lease row naming its owner and a fencing epoch (`store`). A replica takes over a
live table whose owner's heartbeat ran out (or whose owner had this replica's address: that
process is gone), drops a table whose lease moved, and releases its tables when it stops.

Loading (docs/game-session.md, "Loading a table"): at most one copy of a table is installed in
this process, each with its actor (`actor.TableActor`), by construction:
- a copy is made only by a load from the log or by `adopt` (a table this replica has just
  created); every load of a table (a request, a takeover, the scan's reload of a table held but
  not in memory) goes through `_load_once`: a load under way is joined, never repeated; it runs in
  a task of its own, so a caller that goes away never leaves a lease taken over and its table
  half loaded; `adopt` installs nothing when a copy is installed or loading;
- installing (`_install`) is one synchronous step, and there is never an older copy to replace;
- a copy leaves only by its actor's retirement (`evict`, or the actor itself when a write
  failed); the next copy of that table reads the log only once the retired actor's last change
  has committed or been refused.
Callers reach a table through its actor; an operation whose actor retired before running it goes
to the copy installed next (`change`, `read`, `subscribe`), which a retry can do safely because
every change that matters to a caller is idempotent by its request id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from buraco.v1 import game_session_pb2
from services.common.db import Database
from services.common.errors import NotFoundError, NotOwnerError, UnavailableError
from services.common.interceptor import SHUTDOWN_MESSAGE
from services.game_session import store
from services.game_session.actor import Changed, Done, Hosting, RequestKey, Retired, TableActor, Work
from services.game_session.clock import Clock
from services.game_session.settings import GameSessionSettings
from services.game_session.streams import Opening, Subscriber
from services.game_session.table import LiveTable, State
from services.game_session.writer import Writer

log = logging.getLogger("buraco.game_session")
T = TypeVar("T")

#: How long a finished table stays in memory after its last event, once no stream follows it
#: (then any replica reads it from the log when asked): long enough for late replays and retries,
#: short enough that a busy replica's memory levels off.
FINISHED_KEPT_MS = 30_000
#: Attempts of an operation whose table copy retired before it ran (each on the copy installed next).
ATTEMPTS = 3


class Ownership:
    """The tables this replica holds (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        settings: GameSessionSettings,
        clock: Clock,
        registry: CollectorRegistry,
        *,
        address: Callable[[], str],
    ) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock
        self._address = address
        self.owner_id = uuid.uuid4().hex
        #: the installed copies' actors, by table id
        self.actors: dict[str, TableActor] = {}
        #: the load of each table under way (`_load_once`)
        self._loading: dict[str, asyncio.Future[TableActor | None]] = {}
        #: each table's last retired actor, until its task has ended (a new copy waits for it)
        self._retiring: dict[str, TableActor] = {}
        self.writer = Writer(db, settings.batch_max, settings.writers, settings.batch_wait_seconds)
        self._tasks: set[asyncio.Future[Any]] = set()
        self._maintain_task: asyncio.Task[None] | None = None
        #: clock time of the last heartbeat renewed (`fence_if_stale`)
        self._renewed_at = clock.now()
        self.stopping = False
        #: False only in tests that simulate a crash: the leases then run out instead.
        self.release_on_stop = True
        #: Called after a change that ended a match wrote outbox rows (wakes the deliverer).
        self.on_outbox: Callable[[], None] = lambda: None
        events_total = Counter(
            "buraco_table_events", "Events accepted into tables' event logs by this replica.", ["service"],
            registry=registry,
        ).labels("game_session")
        self.takeovers_total = Counter(
            "buraco_table_takeovers",
            "Tables this replica took over after another replica's lease ran out or was released.",
            ["service"], registry=registry,
        ).labels("game_session")
        Gauge("buraco_tables_active", "Live tables (not finished) owned by this replica.", ["service"],
              registry=registry).labels("game_session").set_function(self._active_count)
        Gauge("buraco_tables_oldest_idle_seconds",
              "Seconds since the last accepted event of the longest-idle live table this replica owns.",
              ["service"], registry=registry).labels("game_session").set_function(self._oldest_idle)
        self.hosting = Hosting(self.writer, settings, clock, self.owner_id, self._address,
                               lambda: self.on_outbox(), events_total)

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def handoff(self) -> store.Handoff:
        """Which released tables this replica may take over at once (`store.Handoff`)."""
        return store.Handoff(self.settings.revision, self.address, int(self.settings.handoff_wait_seconds * 1000))

    @property
    def address(self) -> str:
        return self._address()

    def now_ms(self) -> int:
        return int(self.clock.now() * 1000)

    async def start(self) -> None:
        """Register this replica's heartbeat (before serving: its new tables must not look
        orphaned), then start the log writer and the lease scans."""
        await self.heartbeat()
        self.writer.start()
        self._maintain_task = asyncio.get_running_loop().create_task(self._maintain(), name="game-session-leases")

    async def stop(self) -> None:
        """Graceful stop: no more changes, streams told to resume elsewhere, leases released."""
        self.stopping = True
        owned = sum(1 for actor in self.actors.values() if actor.table.live)
        if self._maintain_task is not None:
            self._maintain_task.cancel()
        for task in list(self._tasks):
            task.cancel()
        actors = list(self.actors.values())
        for actor in actors:  # their clients resume at whichever replica takes the tables over
            actor.retire(UnavailableError(SHUTDOWN_MESSAGE))
        await self.writer.stop()  # a change waiting for its write is refused now
        for actor in [*actors, *self._retiring.values()]:
            actor.cancel()
        if not self.release_on_stop:
            return
        try:
            await store.release(self.db, self.owner_id, self.now_ms())
            log.info("leases released", extra={"fields": {"tables": owned}})
        except Exception:
            log.exception("could not release the leases")

    async def heartbeat(self) -> None:
        ttl = int(self.settings.lease_seconds * 1000)
        started = self.clock.now()
        await store.heartbeat(self.db, self.owner_id, self.address, self.now_ms(), ttl, self.settings.revision)
        self._renewed_at = started

    async def _maintain(self) -> None:
        while True:
            try:
                await self.renew_and_scan()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lease maintenance failed")
                self.fence_if_stale()
            await asyncio.sleep(self.settings.scan_seconds)

    def fence_if_stale(self) -> None:
        """A replica whose heartbeat has not been renewed for a lease (the database unreachable,
        or the process starved) may have lost its tables to another replica: it drops its live
        copies rather than answer from them. They are loaded again, from the log and under the
        lease then on record, when next asked for."""
        stale = self.clock.now() - self._renewed_at
        if stale <= self.settings.lease_seconds:
            return
        live = [table_id for table_id, actor in self.actors.items() if actor.table.live]
        if live:
            log.error("heartbeat not renewed for a lease: live tables dropped",
                      extra={"fields": {"tables": len(live), "seconds": round(stale, 1)}})
        for table_id in live:
            self.evict(table_id)

    async def renew_and_scan(self) -> None:
        """Renew the heartbeat; drop the tables whose lease moved and the finished, quiet ones;
        load the live tables held but not in memory; take over those whose owner is gone."""
        now = self.now_ms()
        await self.heartbeat()
        # only copies installed before the query are checked against it (one made meanwhile is ours)
        known = list(self.actors.items())
        held = await store.held(self.db, self.owner_id)
        quiet = self._sort_out(known, held, now)
        await self._drop_erased([(table_id, actor) for table_id, actor in known if not actor.table.live])
        del known  # the evictions below drop the last references
        # finished and quiet: one at a time, the loop's other work between two (freeing a table
        # takes about a millisecond)
        for table_id in quiet:
            actor = self.actors.get(table_id)
            if actor is not None and self._finished_and_quiet(actor, now):
                self.evict(table_id)
            await asyncio.sleep(0)
        # held but not in memory (dropped after a write failed, or a load that failed): loaded
        # now, so that its timers and bots go on without waiting for a player to ask for it
        for table_id, epoch in held.items():
            if self.stopping:
                return
            if table_id in self.actors or table_id in self._loading:
                continue
            try:
                await self._load_once(table_id, lambda t, e=epoch: self._load(t, epoch=e))  # type: ignore[misc]
            except Exception:
                log.exception("loading a held table failed", extra={"fields": {"table": table_id}})
        expired = await store.expired_live(self.db, now, address=self.address, owner_id=self.owner_id,
                                           handoff=self.handoff)
        for table_id, epoch, force in expired:
            if self.stopping:
                return
            if table_id in self.actors or table_id in self._loading:
                continue
            try:
                await self._load_once(
                    table_id, lambda t, e=epoch, f=force: self._take_over(t, e, force=f))  # type: ignore[misc]
            except Exception:
                log.exception("takeover failed", extra={"fields": {"table": table_id}})

    def _sort_out(self, known: list[tuple[str, TableActor]], held: dict[str, int], now: int) -> list[str]:
        """Evict the live tables whose lease this replica lost; the ids of the finished, quiet ones."""
        quiet: list[str] = []
        for table_id, actor in known:
            if self.actors.get(table_id) is not actor:
                continue
            if self._finished_and_quiet(actor, now):
                quiet.append(table_id)
            elif actor.table.live and held.get(table_id) != actor.table.epoch:
                log.warning("lease lost", extra={"fields": {"table": table_id}})
                self.evict(table_id)
        return quiet

    async def _drop_erased(self, ended: list[tuple[str, TableActor]]) -> None:
        """Evict the ended copies whose rows are gone: a load-test run's erasure, made by any
        replica (`forget` drops them at once on the replica that erased them; here the others
        learn of it, at their next scan). Ended copies only: a live table is never erased."""
        if not ended:
            return
        gone = await store.erased(self.db, [table_id for table_id, _ in ended])
        for table_id, actor in ended:
            if table_id in gone and self.actors.get(table_id) is actor:
                log.info("erased table dropped", extra={"fields": {"table": table_id}})
                self.evict(table_id)

    def _finished_and_quiet(self, actor: TableActor, now: int) -> bool:
        """Finished more than FINISHED_KEPT_MS ago, and no stream follows it."""
        table = actor.table
        return not table.live and not actor.subscribers and now - table.last_event_ms > FINISHED_KEPT_MS

    # -- metrics --------------------------------------------------------------------------------
    def _active_count(self) -> float:
        return float(sum(1 for actor in self.actors.values() if actor.table.live))

    def _oldest_idle(self) -> float:
        live = [actor.table.last_event_ms for actor in self.actors.values() if actor.table.live]
        return max(0.0, (self.now_ms() - min(live)) / 1000.0) if live else 0.0

    # -- finding tables -------------------------------------------------------------------------
    async def get(self, table_id: str) -> TableActor:
        """The actor of the table's installed copy, loaded when needed; NotOwnerError when another
        replica owns the table."""
        for _ in range(ATTEMPTS):
            actor = self.actors.get(table_id)
            if actor is not None:
                return actor
            found = await self._load_once(table_id, self._find)
            if found is not None:  # None: it joined a takeover that another replica won
                return found
        raise NotOwnerError(f"tables/{table_id}", "", retry_after_ms=200)

    def installed(self, table_id: str) -> TableActor | None:
        """The installed copy's actor, if any (nothing is loaded)."""
        return self.actors.get(table_id)

    def loading(self, table_id: str) -> bool:
        """Whether a load of the table is under way."""
        return table_id in self._loading

    async def _load_once(
        self, table_id: str, load: Callable[[str], Awaitable[TableActor | None]]
    ) -> TableActor | None:
        """Run `load` for the table, unless a load of it is under way (then its outcome) or a copy
        is installed (then that copy)."""
        pending = self._loading.get(table_id)
        if pending is None:
            installed = self.actors.get(table_id)
            if installed is not None:
                return installed
            pending = self._loading[table_id] = asyncio.ensure_future(self._loading_task(table_id, load))
            self._tasks.add(pending)
            pending.add_done_callback(self._load_done)
        return await asyncio.shield(pending)

    async def _loading_task(
        self, table_id: str, load: Callable[[str], Awaitable[TableActor | None]]
    ) -> TableActor | None:
        try:
            return await load(table_id)
        finally:
            del self._loading[table_id]  # in the step that installed the copy, if any

    def _load_done(self, task: asyncio.Future[TableActor | None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the callers that waited have it; none may be left

    async def _find(self, table_id: str) -> TableActor:
        lease = await store.lease_of(self.db, table_id)
        if lease is None:
            raise NotFoundError(f"tables/{table_id} does not exist")
        if not lease.live:
            return await self._load(table_id, epoch=0)  # finished: read-only, any replica
        now = self.now_ms()
        if lease.owner_id == self.owner_id:
            return await self._load(table_id, epoch=lease.epoch)
        if lease.expires_ms >= now and lease.owner_address != self.address:
            raise NotOwnerError(f"tables/{table_id}", lease.owner_address, epoch=lease.epoch)
        actor = await self._take_over(table_id, lease.epoch, force=lease.expires_ms >= now)
        if actor is None:
            again = await store.lease_of(self.db, table_id)
            raise NotOwnerError(f"tables/{table_id}", again.owner_address if again else "",
                                epoch=again.epoch if again else 0, retry_after_ms=200)
        return actor

    async def _take_over(self, table_id: str, epoch: int, *, force: bool) -> TableActor | None:
        if self.stopping:
            return None
        new_epoch = await store.take_over(
            self.db, table_id, seen_epoch=epoch, owner_address=self.address, owner_id=self.owner_id,
            now_ms=self.now_ms(), force=force, handoff=self.handoff,
        )
        if new_epoch is None:
            return None
        self.takeovers_total.inc()
        log.info("table taken over", extra={"fields": {"table": table_id, "epoch": new_epoch}})
        return await self._load(table_id, epoch=new_epoch)

    async def _load(self, table_id: str, *, epoch: int) -> TableActor:
        """A copy from the log, installed (only ever run by `_load_once`)."""
        retiring = self._retiring.get(table_id)
        if retiring is not None:  # the last copy's last change: committed or refused first
            await retiring.stopped()
        stored = await store.load(self.db, table_id)
        if stored is None:
            raise NotFoundError(f"tables/{table_id} does not exist")
        mutes = await store.mutes_of(self.db, table_id)
        table = LiveTable(table_id, game_session_pb2.Table.FromString(stored.description), stored.created_ms,
                          expert_budget_ms=self.settings.expert_budget_ms)
        table.restore(stored.entries)
        if stored.state == State.STATE_CANCELLED:
            table.state = State.STATE_CANCELLED
        table.epoch = epoch
        table.chat.mutes = mutes
        actor = self._install(table)
        if table.live and epoch > 0:
            actor.resume()
        return actor

    def _install(self, table: LiveTable) -> TableActor:
        """Make `table` the installed copy of its table, with its actor, in one step."""
        if table.table_id in self.actors:  # not reached by construction; never two copies all the same
            log.error("a second copy of a table was about to be installed", extra={"fields": {"table": table.table_id}})
            self.evict(table.table_id)
        actor = TableActor(table, self.hosting, on_retire=self._retired)
        self.actors[table.table_id] = actor
        return actor

    def adopt(self, table: LiveTable) -> None:
        """A table this replica has just created (its lease is ours, epoch 1), committed. When a
        copy is installed already, or a load of it is under way (a request came first), that copy
        is the table: `table` is not installed."""
        if table.table_id in self.actors or table.table_id in self._loading:
            return
        table.epoch = 1
        self._install(table).schedule()

    def evict(self, table_id: str) -> None:
        """Drop the installed copy: its actor retires (see `actor.TableActor.retire`)."""
        actor = self.actors.pop(table_id, None)
        if actor is not None:
            actor.retire()

    async def forget(self, table_ids: Sequence[str]) -> None:
        """Tables whose rows this replica has just erased (committed): no copy of them stays
        installed here. A load under way may have read them before they went: it is waited for
        and its copy dropped; a load begun after the erasure finds nothing (NOT_FOUND). Other
        replicas drop their copies at their next scan (`_drop_erased`)."""
        for table_id in table_ids:
            pending = self._loading.get(table_id)
            if pending is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(pending)
            self.evict(table_id)

    def _retired(self, actor: TableActor) -> None:
        """An actor has retired (evicted, or its own write failed): it is no longer installed, and
        the table's next copy waits for its last change."""
        table_id = actor.table.table_id
        if self.actors.get(table_id) is actor:
            del self.actors[table_id]
        self._retiring[table_id] = actor

        def stopped() -> None:
            if self._retiring.get(table_id) is actor:
                del self._retiring[table_id]

        actor.when_stopped(stopped)

    # -- operations on a table, on its installed copy -------------------------------------------
    async def change(self, actor: TableActor, work: Work[T], request: RequestKey | None = None,
                     on_done: Done | None = None) -> Changed[T]:
        """`actor.change`, on the copy installed next if `actor` retired before running it."""
        for _ in range(ATTEMPTS - 1):
            try:
                return await actor.change(work, request, on_done)
            except Retired:
                actor = await self.get(actor.table.table_id)
        return await actor.change(work, request, on_done)

    async def read(self, actor: TableActor, view: Callable[[LiveTable], T]) -> T:
        """`actor.read`, on the copy installed next if `actor` retired before running it."""
        for _ in range(ATTEMPTS - 1):
            try:
                return await actor.read(view)
            except Retired:
                actor = await self.get(actor.table.table_id)
        return await actor.read(view)

    async def subscribe(self, actor: TableActor, viewer: int | None, player: str | None, after_seq: int) -> \
            tuple[TableActor, Subscriber, Opening]:
        """`actor.subscribe`, on the copy installed next if `actor` retired before running it;
        returns the actor the stream follows."""
        for _ in range(ATTEMPTS - 1):
            try:
                sub, opening = await actor.subscribe(viewer, player, after_seq)
                return actor, sub, opening
            except Retired:
                actor = await self.get(actor.table.table_id)
        sub, opening = await actor.subscribe(viewer, player, after_seq)
        return actor, sub, opening

    async def mute(self, actor: TableActor, viewer: str, player: str, muted: bool) -> None:
        """Record a mute (a copy loaded later reads it from the database), then tell the copy."""
        await store.set_mute(self.db, actor.table.table_id, viewer, player, muted)
        current = self.actors.get(actor.table.table_id)
        if current is not None:
            current.set_mute(viewer, player, muted)
