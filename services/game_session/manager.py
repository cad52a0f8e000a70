"""The tables this replica owns: ownership, changes, streams, timers and bots.

Every change of a table (a player's move, a bot's turn, a timeout, a seat change, a vote, a chat
message) runs under the table's lock through `Manager.change`: it computes the new entries in
memory, persists them through the group-committing writer (`store.Writer`) under the replica's
lease epoch, then publishes them to the table's streams, and finally re-arms the table's timer
(the turn timer, or a bot's turn). If the write fails, the table is dropped from memory (it is
rebuilt from its log when next needed) so memory never runs ahead of the log.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from buraco.v1 import common_pb2, game_session_pb2, ranking_pb2, tournament_pb2, wallet_pb2
from engine.actions import DRAW, Discard
from engine.bots.heuristic import HeuristicBot
from services.common.db import Database
from services.common.errors import (
    FailedPreconditionError,
    NotFoundError,
    NotOwnerError,
    ResourceExhaustedError,
)
from services.game_session import store, wire
from services.game_session.clock import Clock, TimerHandle
from services.game_session.events import FINAL_TYPES, TableEvent, muted_chat, timestamp
from services.game_session.log import Entry, Request
from services.game_session.settings import GameSessionSettings
from services.game_session.table import MAX_TURN_ACTIONS as MAX_BOT_TURN_ACTIONS
from services.game_session.table import LiveTable, Proposal, State

log = logging.getLogger("buraco.game_session")
T = TypeVar("T")

#: How long a finished table stays in memory after its last event, once no stream follows it
#: (then any replica reads it from the log when asked). Ten minutes held every table that finished
#: under load: at 3,000 actions/s of the bench's express matches the replica grew by about
#: 11 MiB/s; with 30 s it levels off (about 700 MiB at that rate).
FINISHED_KEPT_MS = 30_000
#: Most entries a stream may have queued before it is ended (the client resumes with after_seq).
MAX_QUEUED = 2000


class Inbox:
    """A stream's queue: what the table's changes put for one stream, taken by that stream alone.
    asyncio.Queue's work for many getters and bounded sizes is not needed here, and was some 2%
    of a busy replica's CPU (a put and a get per event per stream)."""

    __slots__ = ("_items", "_loop", "_waiter")

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: Any) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def qsize(self) -> int:
        return len(self._items)

    async def _wait(self) -> None:
        """Until an item is queued."""
        while not self._items:
            waiter = self._waiter = self._loop.create_future()
            await waiter

    async def get(self) -> Any:
        """The next item, waiting for one."""
        await self._wait()
        return self._items.popleft()

    async def get_all(self) -> list[Any]:
        """Every item queued, at least one (waiting for it): a change's entries are put together,
        synchronously (`Manager._publish`), so these are one or more whole changes."""
        await self._wait()
        items = list(self._items)
        self._items.clear()
        return items


@dataclass(eq=False)
class Subscriber:
    viewer: int | None
    player: str | None
    #: entries to deliver; None: the stream must end (too far behind, or the table was lost). A
    #: `Play` stream's own answers (`PlayUpdate`) and failures (`StreamFailure`) pass here too, so
    #: that they keep their place among the changes.
    queue: Inbox = field(default_factory=Inbox)


@dataclass(frozen=True)
class Opening:
    """What a new stream sends first (`Manager.subscribe`): the snapshot, or the events after the
    caller's `after_seq`, framed (`wire.frame`)."""

    frames: list[bytes]
    #: the sequence number of the last event included
    last_seq: int
    #: nothing follows: the replay reached the table's final event, or the snapshot is of a
    #: table that changes no more
    final: bool


@dataclass(frozen=True)
class StreamFailure:
    """Ends a `Play` stream with `error`'s status (its request side broke the protocol, or the
    table moved)."""

    error: Exception


@dataclass
class Runtime:
    """What a live table has besides its state: lock, streams, timers."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: a change holds the lock (`Manager._change`), its write perhaps in flight
    changing: bool = False
    subscribers: list[Subscriber] = field(default_factory=list)
    #: the one timer of the table (`Manager.schedule`): it fires at `timer_at`; what is then due,
    #: and when, is `due` and `due_at` (later than `timer_at` when the turn moved on meanwhile)
    timer: TimerHandle | None = None
    timer_at: float = 0.0
    due: Callable[[], None] | None = None
    due_at: float = 0.0
    proposal_timer: TimerHandle | None = None
    grace: dict[int, TimerHandle] = field(default_factory=dict)
    mutes: set[tuple[str, str]] = field(default_factory=set)
    chat_times: dict[str, list[float]] = field(default_factory=dict)


class Manager:
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
        self.tables: dict[str, LiveTable] = {}
        self.runtime: dict[str, Runtime] = {}
        #: the load of each table under way (`_load_once`): joined by every other request for it
        self._loading: dict[str, asyncio.Future[LiveTable | None]] = {}
        #: the runtime of a table's copy dropped while one of its changes was in flight: a new copy
        #: is read from the log only once that change has resolved (its lock is free)
        self._retired: dict[str, Runtime] = {}
        #: clock time of the last heartbeat that was renewed (`_maintain` fences itself after a lease)
        self._renewed_at = clock.now()
        self.writer = store.Writer(db, settings.batch_max, settings.writers, settings.batch_wait_seconds)
        #: the API's own statements on PostgreSQL (None on SQLite: the ORM's path)
        self.direct = store.Direct(db) if db.dialect == "postgresql" else None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._settle_task: asyncio.Task[None] | None = None
        self.stopping = False
        #: False only in tests that simulate a crash: the leases then run out instead.
        self.release_on_stop = True
        self._owned_at_stop: list[str] = []
        #: Called after a change that ended a match wrote outbox rows (wakes the deliverer).
        self.on_outbox: Callable[[], None] = lambda: None
        self.events_total = Counter(
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

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        return self._address()

    def now_ms(self) -> int:
        return int(self.clock.now() * 1000)

    async def start(self) -> None:
        """Register this replica's heartbeat (before serving: its new tables must not look
        orphaned), then start the writer and the maintenance loop."""
        await self.heartbeat()
        self.writer.start()
        self._loop_task = asyncio.get_running_loop().create_task(self._maintain(), name="game-session-leases")
        if FREEZE_SURVIVORS:
            self._settle_task = asyncio.get_running_loop().create_task(self._settle(), name="game-session-gc")

    async def heartbeat(self) -> None:
        ttl = int(self.settings.lease_seconds * 1000)
        started = self.clock.now()
        await store.heartbeat(self.db, self.owner_id, self.address, self.now_ms(), ttl)
        self._renewed_at = started

    async def stop(self) -> None:
        """Graceful stop: no more changes, streams told to resume elsewhere, leases released."""
        self.stopping = True
        self._owned_at_stop = [t for t, table in self.tables.items() if table.live]
        if self._loop_task is not None:
            self._loop_task.cancel()
        if self._settle_task is not None:
            self._settle_task.cancel()
        for table_id in list(self.tables):
            self._evict(table_id)
        for task in list(self._tasks):
            task.cancel()
        await self.writer.stop()
        if self.direct is not None:
            await self.direct.close()
        if not self.release_on_stop:
            return
        try:
            await store.release(self.db, self.owner_id)
            log.info("leases released", extra={"fields": {"tables": len(self._owned_at_stop)}})
        except Exception:
            log.exception("could not release the leases")

    def spawn(self, coro: Awaitable[Any]) -> None:
        async def guarded() -> None:
            try:
                await coro
            except (NotOwnerError, store.LeaseLostError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("background table work failed")

        task = asyncio.ensure_future(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _maintain(self) -> None:
        """Renew this replica's leases; take over tables whose lease ran out."""
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
        live = [table_id for table_id, table in self.tables.items() if table.live]
        if live:
            log.error("heartbeat not renewed for a lease: live tables dropped",
                      extra={"fields": {"tables": len(live), "seconds": round(stale, 1)}})
        for table_id in live:
            self._evict(table_id)

    async def _settle(self) -> None:
        """The service's process: the young generations collected and frozen, often (below)."""
        while True:
            await asyncio.sleep(GC_SETTLE_SECONDS)
            settle_garbage_collector()

    async def renew_and_scan(self) -> None:
        now = self.now_ms()
        await self.heartbeat()
        # only tables known before the query are checked against it (one created meanwhile is ours)
        known = list(self.tables.items())
        held = await store.held(self.db, self.owner_id)
        quiet = self._sort_out(known, held, now)
        del known  # the evictions below drop the last references
        # Finished and quiet: any replica reloads it from the log if asked. One table at a time,
        # the loop's other work between two: freeing a table takes about a millisecond (tens
        # of them freed together paused the replica for 15-35 ms at 1,500 actions/s).
        for table_id in quiet:
            if self._finished_and_quiet(table_id, now):
                self._evict(table_id)
            await asyncio.sleep(0)
        # Held but not in memory (dropped after a write failed, or a load that failed): loaded
        # now, so that its timers and bots go on without waiting for a player to ask for it.
        for table_id, epoch in held.items():
            if self.stopping:
                return
            if table_id in self.tables or table_id in self._loading:
                continue
            try:
                await self._load_once(table_id, lambda t, e=epoch: self._load(t, epoch=e))  # type: ignore[misc]
            except Exception:
                log.exception("loading a held table failed", extra={"fields": {"table": table_id}})
        expired = await store.expired_live(self.db, now, address=self.address, owner_id=self.owner_id)
        for table_id, epoch, force in expired:
            if self.stopping:
                return
            if table_id in self.tables or table_id in self._loading:
                continue
            try:
                await self._load_once(
                    table_id, lambda t, e=epoch, f=force: self._take_over(t, e, force=f))  # type: ignore[misc]
            except Exception:
                log.exception("takeover failed", extra={"fields": {"table": table_id}})

    def _sort_out(self, known: list[tuple[str, LiveTable]], held: dict[str, int], now: int) -> list[str]:
        """Evict the live tables whose lease this replica lost; the ids of the finished, quiet ones."""
        quiet: list[str] = []
        for table_id, table in known:
            if self.tables.get(table_id) is not table:
                continue
            if self._finished_and_quiet(table_id, now):
                quiet.append(table_id)
            elif table.live and held.get(table_id) != table.epoch:
                log.warning("lease lost", extra={"fields": {"table": table_id}})
                self._evict(table_id)
        return quiet

    def _finished_and_quiet(self, table_id: str, now: int) -> bool:
        """Finished more than FINISHED_KEPT_MS ago, and no stream follows it."""
        table = self.tables.get(table_id)
        if table is None or table.live:
            return False
        runtime = self.runtime_of(table)
        return (runtime is None or not runtime.subscribers) and now - table.last_event_ms > FINISHED_KEPT_MS

    # -- metrics --------------------------------------------------------------------------------
    def _active_count(self) -> float:
        return float(sum(1 for t in self.tables.values() if t.live))

    def _oldest_idle(self) -> float:
        live = [t.last_event_ms for t in self.tables.values() if t.live]
        return max(0.0, (self.now_ms() - min(live)) / 1000.0) if live else 0.0

    # -- finding tables -------------------------------------------------------------------------
    # The rule (docs/game-session.md, "Loading a table"): at most one copy of a table is installed
    # in this process. A copy is made only by a load from the log (`_load`, always through
    # `_load_once`, which a request for a table being loaded joins) or by `adopt` (a table this
    # replica has just created, when no load of it is under way); it is installed in one step
    # (`_install`: no await between dropping an older copy and installing the new one); a copy
    # is dropped only by `_evict`, which ends its streams. Everything that touches a table's
    # runtime (streams, timers, changes) goes through `runtime_of`, which answers only for the
    # installed copy.

    async def get(self, table_id: str) -> LiveTable:
        """The table's installed copy, loaded when needed; NotOwnerError when another replica owns it."""
        for _ in range(3):
            table = self.tables.get(table_id)
            if table is not None:
                return table
            found = await self._load_once(table_id, self._find)
            if found is not None:  # None: it joined a takeover that another replica won
                return found
        raise NotOwnerError(f"tables/{table_id}", "", retry_after_ms=200)

    def runtime_of(self, table: LiveTable) -> Runtime | None:
        """The runtime of `table` if it is the installed copy of its table (None otherwise)."""
        if self.tables.get(table.table_id) is not table:
            return None
        return self.runtime.get(table.table_id)

    def not_owner(self, table: LiveTable) -> NotOwnerError:
        """The error for a call about a copy that is no longer installed here (retry: it is loaded
        again, or the call is redirected to the replica that took it over)."""
        return NotOwnerError(table.name, "", retry_after_ms=200)

    async def _load_once(
        self, table_id: str, load: Callable[[str], Awaitable[LiveTable | None]]
    ) -> LiveTable | None:
        """Run `load` for the table, unless a load of it is under way (then its outcome) or a copy
        is installed (then that copy). The load runs in a task of its own: a caller that goes away
        never leaves a lease taken over and its table half loaded."""
        pending = self._loading.get(table_id)
        if pending is None:
            installed = self.tables.get(table_id)
            if installed is not None:
                return installed
            pending = self._loading[table_id] = asyncio.ensure_future(self._loading_task(table_id, load))
            self._tasks.add(pending)
            pending.add_done_callback(self._load_done)
        return await asyncio.shield(pending)

    async def _loading_task(
        self, table_id: str, load: Callable[[str], Awaitable[LiveTable | None]]
    ) -> LiveTable | None:
        try:
            return await load(table_id)
        finally:
            del self._loading[table_id]  # in the step that installed the copy, if any

    def _load_done(self, task: asyncio.Future[LiveTable | None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the callers that waited have it; none may be left

    async def _find(self, table_id: str) -> LiveTable:
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
        table = await self._take_over(table_id, lease.epoch, force=lease.expires_ms >= now)
        if table is None:
            again = await store.lease_of(self.db, table_id)
            raise NotOwnerError(f"tables/{table_id}", again.owner_address if again else "",
                                epoch=again.epoch if again else 0, retry_after_ms=200)
        return table

    async def _take_over(self, table_id: str, epoch: int, *, force: bool) -> LiveTable | None:
        if self.stopping:
            return None
        new_epoch = await store.take_over(
            self.db, table_id, seen_epoch=epoch, owner_address=self.address, owner_id=self.owner_id,
            now_ms=self.now_ms(), force=force,
        )
        if new_epoch is None:
            return None
        self.takeovers_total.inc()
        log.info("table taken over", extra={"fields": {"table": table_id, "epoch": new_epoch}})
        return await self._load(table_id, epoch=new_epoch)

    async def _load(self, table_id: str, *, epoch: int) -> LiveTable:
        """A copy from the log, installed (only ever run by `_load_once`)."""
        retired = self._retired.get(table_id)
        if retired is not None:  # the dropped copy's last change: committed or refused first
            async with retired.lock:
                pass
        stored = await store.load(self.db, table_id)
        if stored is None:
            raise NotFoundError(f"tables/{table_id} does not exist")
        mutes = await store.mutes_of(self.db, table_id)
        description = game_session_pb2.Table.FromString(stored.description)
        table = LiveTable(table_id, description, stored.created_ms)
        table.restore(stored.entries)
        if stored.state == State.STATE_CANCELLED:
            table.state = State.STATE_CANCELLED
        table.epoch = epoch
        runtime = Runtime(mutes=mutes)
        self._install(table, runtime)
        if table.live and epoch > 0:
            self._resume_timers(table, runtime)
        return table

    def _install(self, table: LiveTable, runtime: Runtime) -> None:
        """Make `table` the installed copy of its table, in one step."""
        if table.table_id in self.tables:  # not reached by construction; never two copies all the same
            log.error("a second copy of a table was about to be installed", extra={"fields": {"table": table.table_id}})
            self._evict(table.table_id)
        self._retired.pop(table.table_id, None)
        self.tables[table.table_id] = table
        self.runtime[table.table_id] = runtime

    def _resume_timers(self, table: LiveTable, runtime: Runtime) -> None:
        """After a takeover or a restart: a turn whose time ran out meanwhile gets its full time
        again (the players were not to blame), and every human seat starts its disconnection grace
        until its player's stream comes back (here)."""
        hand = table.match.hand
        now = self.now_ms()
        if table.state == State.STATE_PLAYING and hand is not None and table.turn_deadline_ms <= now:
            seconds = table.draw_seconds if hand.phase == "draw" else table.play_seconds
            table.turn_deadline_ms = now + int(seconds * 1000)
        if table.state == State.STATE_PLAYING:
            for seat in table.seats:
                if seat.human and not seat.bot_controlled:
                    number = seat.seat
                    runtime.grace[number] = self.clock.call_later(
                        self.settings.disconnect_grace_seconds,
                        lambda n=number: self.spawn(self._disconnected(table, n)),  # type: ignore[misc]
                    )
        self.schedule(table)

    def adopt(self, table: LiveTable) -> None:
        """A table this replica has just created (its lease is ours, epoch 1), committed. When a
        copy is installed already, or a load of it is under way (a request came first), that copy
        is the table: `table` is not installed."""
        if table.table_id in self.tables or table.table_id in self._loading:
            return
        table.epoch = 1
        self._install(table, Runtime())
        self.schedule(table)

    def _evict(self, table_id: str) -> None:
        """Drop the installed copy: it never writes again, its timers stop, its streams end (their
        clients resume on the copy loaded next, here or at the replica that took it over)."""
        table = self.tables.pop(table_id, None)
        runtime = self.runtime.pop(table_id, None)
        if table is not None:
            table.lost = True
        if runtime is not None:
            if runtime.changing:
                self._retired[table_id] = runtime
            self._cancel_timers(runtime)
            for sub in runtime.subscribers:
                sub.queue.put_nowait(None)
            runtime.subscribers.clear()

    def _cancel_timers(self, runtime: Runtime) -> None:
        for handle in (runtime.timer, runtime.proposal_timer, *runtime.grace.values()):
            if handle is not None:
                handle.cancel()
        runtime.timer = runtime.proposal_timer = runtime.due = None
        runtime.grace.clear()

    # -- changes --------------------------------------------------------------------------------
    async def change(
        self, table: LiveTable, work: Callable[[list[Entry]], Any], *, request: tuple[str, str, str] | None = None,
        inline: bool = False,
    ) -> tuple[Any, list[Entry]]:
        """Run `work(out)` under the table's lock, persist the entries it (and what follows by
        itself) appended, publish them. `request` = (scope, request_id, hash) makes the change
        idempotent: a retry gets the entries of the first call (`work` does not run again).

        A change, once begun, runs to its end even when its caller goes away (a client that
        cancels its call): stopping it between the append's submission and its commit would
        leave the log ahead of the table in memory. So it runs in a task of its own, shielded
        from the caller's cancellation; `inline`: in the caller's task, for a caller that is never
        cancelled during a change (a `Play` stream's reader, api.PlayReader). A task and a
        shield per change cost about 15 us of a replica's CPU per action (measured with the
        transport alone: 85 -> 100 us per action at 4,000 actions/s)."""
        if inline:
            return await self._change(table, work, request)
        task = asyncio.ensure_future(self._change(table, work, request))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_retrieve)  # the caller left; the change's own errors are logged
            raise

    async def _change(
        self, table: LiveTable, work: Callable[[list[Entry]], Any], request: tuple[str, str, str] | None
    ) -> tuple[Any, list[Entry]]:
        runtime = self.runtime_of(table)
        if runtime is None:
            raise self.not_owner(table)
        async with runtime.lock:
            if self.runtime_of(table) is not runtime:
                raise self.not_owner(table)
            runtime.changing = True
            try:
                return await self._change_locked(table, runtime, work, request)
            finally:
                runtime.changing = False
                if self._retired.get(table.table_id) is runtime:
                    del self._retired[table.table_id]  # a load waiting for this change holds it still

    async def _change_locked(
        self, table: LiveTable, runtime: Runtime, work: Callable[[list[Entry]], Any],
        request: tuple[str, str, str] | None,
    ) -> tuple[Any, list[Entry]]:
        """The change itself, under the table's lock (`_change`)."""
        if request is not None:
            done = table.requests.get((request[0], request[1]))
            if done is not None:
                if done.digest != request[2]:
                    from services.common.errors import AlreadyExistsError

                    raise AlreadyExistsError(
                        f"request_id {request[1]!r} was already used for a different request"
                    )
                return None, table.entries[done.first_seq - 1 : done.last_seq]
        if not table.live:
            state_name = State.State.Name(table.state)  # type: ignore[arg-type]
            raise FailedPreconditionError(f"{table.name} is {state_name}; nothing can change")
        was_state = table.state
        out: list[Entry] = []
        try:
            result = work(out)
            if table.live:
                table.after_change(self.now_ms(), self.settings.deal_seed, out)
        except BaseException:
            if out:  # memory changed but nothing was written: rebuild from the log next time
                self._evict(table.table_id)
            raise
        if not out:
            return result, out
        if request is not None:
            out[0].mark_request(request[0], request[1], request[2], len(out))
            table.requests[(request[0], request[1])] = store_request(request[2], out)
        await self._persist(table, out, state_changed=table.state != was_state)
        self._publish(table, runtime, out)
        watched = any(sub.viewer is None for sub in runtime.subscribers)
        for entry in out:
            entry.seal(table.players, watched)
        if any(e.type in FINAL_TYPES for e in out):  # the match is over
            table.compact_finished(keep=len(out))
        self.schedule(table)
        return result, out

    async def _persist(self, table: LiveTable, out: list[Entry], *, state_changed: bool) -> None:
        now = self.now_ms()
        write = store.Write(table.table_id, table.epoch, self.owner_id, [(e.seq, e.text()) for e in out])
        if state_changed or any(e.type in ("hand_ended", "match_ended") for e in out):
            write.table_update = {"state": table.state, "seq": table.seq, "updated_ms": now,
                                  "match_scores": json.dumps(table.match.totals)}
        if not table.live:
            write.finished = True
            write.outbox = outbox_requests(table, out, now)
        try:
            await self.writer.submit(write)
        except store.LeaseLostError:
            self._evict(table.table_id)
            raise self.not_owner(table) from None
        except BaseException:
            self._evict(table.table_id)
            raise
        self.events_total.inc(len(out))
        if write.outbox:
            self.on_outbox()

    def _publish(self, table: LiveTable, runtime: Runtime, out: list[Entry]) -> None:
        for sub in list(runtime.subscribers):
            if sub.queue.qsize() > MAX_QUEUED:
                runtime.subscribers.remove(sub)
                sub.queue.put_nowait(None)
                continue
            for entry in out:
                sub.queue.put_nowait(entry)

    def event_for(self, table: LiveTable, entry: Entry, sub: Subscriber) -> bytes:
        """The entry's event as the subscriber may see it, framed (`wire.frame`)."""
        if entry.type == "chat" and sub.player is not None:
            runtime = self.runtime_of(table)
            sender = entry.data["x"]["sender"]
            if runtime is not None and (sub.player, sender) in runtime.mutes:
                return muted_chat(entry)
        return entry.framed(sub.viewer)

    # -- streams ----------------------------------------------------------------------------------
    async def subscribe(
        self, table: LiveTable, viewer: int | None, player: str | None, after_seq: int
    ) -> tuple[LiveTable, Subscriber, Opening]:
        """Register a stream on the table's installed copy (`table`, or the copy that replaced it);
        returns that copy, the stream and what comes first: a snapshot (after_seq 0) or the events
        after after_seq, up to the table's final event. Later events arrive on the subscriber's
        queue (deduplicated by the caller by seq), until the copy is dropped (None: resume)."""
        from services.common.errors import OutOfRangeError

        for _ in range(3):
            runtime = self.runtime_of(table)
            if runtime is None:
                table = await self.get(table.table_id)
                continue
            async with runtime.lock:
                if self.runtime_of(table) is not runtime:  # dropped while this waited
                    continue
                if after_seq > table.seq:
                    raise OutOfRangeError(f"after_seq {after_seq} is past the table's last event ({table.seq})")
                sub = Subscriber(viewer, player)
                if after_seq == 0:
                    snapshot = TableEvent(seq=table.seq, time=timestamp(self.now_ms()),
                                          snapshot=table.snapshot(viewer, self.address))
                    opening = Opening([wire.frame(snapshot.SerializeToString())], table.seq, not table.live)
                else:
                    frames: list[bytes] = []
                    last, final = after_seq, False
                    for entry in table.entries[after_seq:]:
                        frames.append(self.event_for(table, entry, sub))
                        last = entry.seq
                        if entry.type in FINAL_TYPES:
                            final = True
                            break
                    opening = Opening(frames, last, final)
                if table.live or after_seq < table.seq:
                    runtime.subscribers.append(sub)
                if viewer is not None and table.live:
                    table.seats[viewer].streams += 1
                    grace = runtime.grace.pop(viewer, None)
                    if grace is not None:
                        grace.cancel()
            if viewer is not None and table.live:
                self.spawn(self._connected(table, viewer))
            return table, sub, opening
        raise self.not_owner(table)

    async def read(self, table: LiveTable, view: Callable[[LiveTable], T]) -> T:
        """`view` of the table's installed copy (`table`, or the copy that replaced it), taken
        under its lock: never a state whose events are not committed yet (a change holds the lock
        from its first move in memory to its commit)."""
        for _ in range(3):
            runtime = self.runtime_of(table)
            if runtime is None:
                table = await self.get(table.table_id)
                continue
            async with runtime.lock:
                if self.runtime_of(table) is runtime:
                    return view(table)
        raise self.not_owner(table)

    def unsubscribe(self, table: LiveTable, sub: Subscriber) -> None:
        runtime = self.runtime_of(table)
        if runtime is None or sub not in runtime.subscribers:
            return
        runtime.subscribers.remove(sub)
        if sub.viewer is None or not table.live:
            return
        seat = table.seats[sub.viewer]
        seat.streams = max(0, seat.streams - 1)
        if seat.streams == 0 and not seat.bot_controlled and not self.stopping:
            runtime.grace[seat.seat] = self.clock.call_later(
                self.settings.disconnect_grace_seconds, lambda: self.spawn(self._disconnected(table, seat.seat))
            )

    async def _connected(self, table: LiveTable, seat_number: int) -> None:
        seat = table.seats[seat_number]
        if table.state == State.STATE_WAITING:
            self.schedule(table)
            return
        if seat.bot_controlled and seat.takeover_reason == "disconnected" and \
                self.now_ms() <= seat.return_deadline_ms:
            def work(out: list[Entry]) -> None:
                if not (seat.bot_controlled and seat.takeover_reason == "disconnected"):
                    return
                seat.bot_controlled = False
                seat.takeover_reason = ""
                table.add({"t": "seat_returned", "ms": self.now_ms(),
                           "x": {"seat": seat.seat, "player": seat.player}}, out)

            await self.change(table, work)

    async def _disconnected(self, table: LiveTable, seat_number: int) -> None:
        seat = table.seats[seat_number]
        runtime = self.runtime_of(table)
        if runtime is None:
            return  # the copy was dropped; the copy loaded next starts its own graces
        runtime.grace.pop(seat_number, None)
        if seat.streams > 0 or seat.bot_controlled or table.state != State.STATE_PLAYING:
            return

        def work(out: list[Entry]) -> None:
            if seat.streams > 0 or seat.bot_controlled:
                return
            now = self.now_ms()
            deadline = now + int(self.settings.reconnect_window_seconds * 1000)
            self._take_seat(table, seat.seat, "disconnected", now, out, return_deadline_ms=deadline)

        await self.change(table, work)

    def _take_seat(self, table: LiveTable, seat_number: int, reason: str, now: int, out: list[Entry],
                   *, return_deadline_ms: int = 0) -> None:
        seat = table.seats[seat_number]
        seat.bot_controlled = True
        seat.takeover_reason = reason
        seat.abandoned = reason != "disconnected"
        seat.return_deadline_ms = return_deadline_ms
        x: dict[str, Any] = {"seat": seat_number, "reason": reason}
        if return_deadline_ms:
            x["return_deadline_ms"] = return_deadline_ms
        table.add({"t": "seat_taken_over", "ms": now, "x": x}, out)

    # -- timers and bots --------------------------------------------------------------------------
    def schedule(self, table: LiveTable) -> None:
        """Set what the table's one timer does next, and when: the first deal, a bot's turn, or the
        turn timer. Called after every change; the timer itself is re-armed only when it must fire
        sooner (`_arm`), so a turn's many changes cost one loop timer, not one each."""
        runtime = self.runtime_of(table)
        if runtime is None or self.stopping:
            return
        now = self.clock.now()
        runtime.due = None  # until set below: a timer that fires now finds nothing to do
        if table.state == State.STATE_WAITING:
            humans = table.humans()
            start_at = now if all(s.streams > 0 for s in humans) else \
                table.created_ms / 1000 + self.settings.start_wait_seconds
            self._arm(runtime, start_at, lambda: self.spawn(self._start(table)), now)
            return
        if table.state != State.STATE_PLAYING:
            return
        seat = table.to_act()
        hand = table.match.hand
        if seat < 0 or hand is None:
            return
        key = (hand.hand_number, seat, hand.phase, table.seq)
        if table.seats[seat].acts_by_bot:
            self._arm(runtime, now + self.settings.bot_delay_seconds,
                      lambda: self.spawn(self._bot_turn(table, key)), now)
        else:
            self._arm(runtime, table.turn_deadline_ms / 1000, lambda: self.spawn(self._timeout(table, key)), now)
        if table.proposal is not None and runtime.proposal_timer is None:
            proposal = table.proposal
            runtime.proposal_timer = self.clock.call_later(
                proposal.deadline_ms / 1000 - now,
                lambda: self.spawn(self._proposal_expired(table, proposal.proposal_id)),
            )

    def _arm(self, runtime: Runtime, at: float, action: Callable[[], None], now: float) -> None:
        """`action` is due at clock time `at`. A timer already set to fire no later is kept: when it
        fires it re-arms itself for `at` (`_fire`)."""
        runtime.due_at, runtime.due = at, action
        timer = runtime.timer
        if timer is not None:
            if runtime.timer_at <= at:
                return
            timer.cancel()
        runtime.timer_at = at
        runtime.timer = self.clock.call_later(at - now, lambda: self._fire(runtime))

    def _fire(self, runtime: Runtime) -> None:
        runtime.timer = None
        if runtime.due is None:
            return
        now = self.clock.now()
        if runtime.due_at > now:  # moved later since this timer was set (or the loop fired it early)
            runtime.timer_at = runtime.due_at
            runtime.timer = self.clock.call_later(runtime.due_at - now, lambda: self._fire(runtime))
            return
        action, runtime.due = runtime.due, None
        action()

    def _same_turn(self, table: LiveTable, key: tuple[int, int, str, int]) -> bool:
        hand = table.match.hand
        return (hand is not None and not hand.is_terminal() and table.state == State.STATE_PLAYING
                and (hand.hand_number, hand.to_act, hand.phase) == key[:3])

    async def _start(self, table: LiveTable) -> None:
        if table.state != State.STATE_WAITING:
            return

        def work(out: list[Entry]) -> None:
            if table.state == State.STATE_WAITING:
                table.start_hand(self.now_ms(), self.settings.deal_seed, out)

        await self.change(table, work)

    async def _bot_turn(self, table: LiveTable, key: tuple[int, int, str, int]) -> None:
        if not self._same_turn(table, key):
            return

        def work(out: list[Entry]) -> None:
            if not self._same_turn(table, key):
                return
            seat = key[1]
            now = self.now_ms()
            for _ in range(MAX_BOT_TURN_ACTIONS):
                hand = table.match.hand
                if hand is None or hand.is_terminal() or hand.to_act != seat or not table.seats[seat].acts_by_bot:
                    break
                action = table.bot(seat).choose(hand.view(seat), hand.legal_actions())
                table.apply_action(action, seat, "bot", now, out)
                if table.match.hand is not hand or hand.is_terminal():
                    break

        await self.change(table, work)

    async def _timeout(self, table: LiveTable, key: tuple[int, int, str, int]) -> None:
        if not self._same_turn(table, key):
            return

        def work(out: list[Entry]) -> None:
            if not self._same_turn(table, key) or self.now_ms() < table.turn_deadline_ms:
                return
            seat_number = key[1]
            seat = table.seats[seat_number]
            if seat.acts_by_bot:
                return
            now = self.now_ms()
            hand = table.match.hand
            assert hand is not None
            if hand.phase == "draw":
                table.apply_action(DRAW, seat_number, "auto", now, out)
            helper = HeuristicBot(f"{table.table_id}|{table.seq}", table.rules)
            for _ in range(MAX_BOT_TURN_ACTIONS):
                if table.match.hand is not hand or hand.is_terminal() or hand.to_act != seat_number:
                    break
                legal = hand.legal_actions()
                discards = [a for a in legal if isinstance(a, Discard)]
                view = hand.view(seat_number)
                action = helper.choose_discard(view, legal) if discards else helper.choose(view, legal)
                table.apply_action(action, seat_number, "auto", now, out)
            seat.auto_plays += 1
            table.add({"t": "auto_played", "ms": now, "x": {"seat": seat_number, "count": seat.auto_plays}}, out)
            if seat.auto_plays >= self.settings.max_auto_plays and table.live:
                self._take_seat(table, seat_number, "timeouts", now, out)

        await self.change(table, work)

    # -- annulment ------------------------------------------------------------------------------
    def propose(self, table: LiveTable, seat: int, out: list[Entry]) -> str:
        if table.state != State.STATE_PLAYING:
            raise FailedPreconditionError(f"{table.name}: the match has not started")
        if table.proposal is not None:
            raise FailedPreconditionError(f"{table.name}: an annulment proposal is open already")
        voters = [s.seat for s in table.seats if s.human and not s.bot_controlled]
        table.proposals_made += 1
        now = self.now_ms()
        proposal = Proposal(f"{table.table_id}-a{table.proposals_made}", seat, voters,
                            now + int(self.settings.annulment_seconds * 1000))
        table.proposal = proposal
        table.add({"t": "annulment_proposed", "ms": now,
                   "x": {"proposal_id": proposal.proposal_id, "proposer_seat": seat, "voters": voters,
                         "deadline_ms": proposal.deadline_ms}}, out)
        self.vote(table, seat, proposal.proposal_id, True, out)
        return proposal.proposal_id

    def vote(self, table: LiveTable, seat: int, proposal_id: str, approve: bool, out: list[Entry]) -> None:
        proposal = table.proposal
        if proposal is None or proposal.proposal_id != proposal_id:
            raise FailedPreconditionError(f"proposal {proposal_id!r} is not open at {table.name}")
        if seat not in proposal.voters:
            raise FailedPreconditionError(f"seat {seat} does not vote on {proposal_id!r}")
        if seat in proposal.votes:
            raise FailedPreconditionError(f"seat {seat} has voted on {proposal_id!r} already")
        now = self.now_ms()
        proposal.votes[seat] = approve
        table.add({"t": "annulment_voted", "ms": now,
                   "x": {"proposal_id": proposal_id, "seat": seat, "approve": approve}}, out)
        if not approve:
            self._resolve(table, False, now, out)
        elif all(proposal.votes.get(v) for v in proposal.voters):
            self._resolve(table, True, now, out)

    def _resolve(self, table: LiveTable, approved: bool, now: int, out: list[Entry]) -> None:
        proposal = table.proposal
        assert proposal is not None
        table.proposal = None
        runtime = self.runtime_of(table)
        if runtime is not None and runtime.proposal_timer is not None:
            runtime.proposal_timer.cancel()
            runtime.proposal_timer = None
        table.add({"t": "annulment_resolved", "ms": now,
                   "x": {"proposal_id": proposal.proposal_id, "approved": approved}}, out)
        if not approved:
            return
        hand = table.match.hand
        if hand is not None and not hand.is_terminal():
            table.add({"t": "hand_ended", "ms": now,
                       "x": {"hand_number": hand.hand_number, "reason": "aborted", "seed": table.seed,
                             "match_scores": table.match.totals[:],
                             "hands": [_cards(hand, s) for s in range(table.players)]}}, out)
        table.state = State.STATE_FINISHED
        table.add({"t": "match_ended", "ms": now,
                   "x": {"outcomes": table.outcomes(annulled=True), "annulled": True,
                         "match_scores": table.match.totals[:]}}, out)

    async def _proposal_expired(self, table: LiveTable, proposal_id: str) -> None:
        def work(out: list[Entry]) -> None:
            proposal = table.proposal
            if proposal is None or proposal.proposal_id != proposal_id or self.now_ms() < proposal.deadline_ms:
                return
            self._resolve(table, False, self.now_ms(), out)

        runtime = self.runtime_of(table)
        if runtime is not None:
            runtime.proposal_timer = None
        await self.change(table, work)

    # -- chat -----------------------------------------------------------------------------------
    def chat(self, table: LiveTable, sender: str, seat: int | None, text: str, out: list[Entry]) -> None:
        runtime = self.runtime_of(table)
        if runtime is None:
            raise self.not_owner(table)
        if ("*", sender) in runtime.mutes:
            from services.common.errors import PermissionDeniedError

            raise PermissionDeniedError(f"players/{sender} is muted at {table.name}")
        now = self.clock.now()
        recent = [t for t in runtime.chat_times.get(sender, []) if t > now - 60]
        if len(recent) >= self.settings.chat_per_minute:
            raise ResourceExhaustedError(
                f"at most {self.settings.chat_per_minute} chat messages a minute; wait a little",
                metadata=(("retry-after-ms", str(int((recent[0] + 60 - now) * 1000) + 1)),),
            )
        recent.append(now)
        runtime.chat_times[sender] = recent
        x: dict[str, Any] = {"sender": sender, "text": text}
        if seat is not None:
            x["seat"] = seat
        table.add({"t": "chat", "ms": self.now_ms(), "x": x}, out)

    async def mute(self, table: LiveTable, viewer: str, player: str, muted: bool) -> None:
        await store.set_mute(self.db, table.table_id, viewer, player, muted)
        runtime = self.runtime_of(table)
        if runtime is not None:  # a copy loaded later reads the mutes from the database
            (runtime.mutes.add if muted else runtime.mutes.discard)((viewer, player))

    # -- leaving ----------------------------------------------------------------------------------
    def leave(self, table: LiveTable, seat_number: int, out: list[Entry]) -> None:
        if table.state != State.STATE_PLAYING:
            raise FailedPreconditionError(f"{table.name}: the match is not being played")
        seat = table.seats[seat_number]
        if seat.abandoned:
            raise FailedPreconditionError(f"you left {table.name} already")
        now = self.now_ms()
        if seat.bot_controlled:
            seat.abandoned = True
            seat.takeover_reason = "left"
            table.add({"t": "seat_taken_over", "ms": now, "x": {"seat": seat_number, "reason": "left"}}, out)
        else:
            self._take_seat(table, seat_number, "left", now, out)
        if table.proposal is not None and seat_number in table.proposal.voters:
            table.proposal.voters.remove(seat_number)
            table.proposal.votes.pop(seat_number, None)
            proposal = table.proposal
            if proposal.voters and all(proposal.votes.get(v) for v in proposal.voters):
                self._resolve(table, True, now, out)


#: Set by the service's own process (`__main__`): the collector is process-wide, so an in-process
#: server (tests) leaves it alone.
FREEZE_SURVIVORS = False
#: The collector's thresholds in the service's process (and the bench's driver): young collections
#: every 10,000 allocations, not 700. A change allocates hundreds of short-lived containers (dicts,
#: lists, futures), nearly all freed by reference counting, so most young passes found nothing to
#: free (about 3% of a busy replica's CPU at 700).
GC_THRESHOLDS = (10_000, 10, 10)
#: How often the service's process settles the collector (below). The pause is the time to scan
#: what was allocated, and is still alive, since the last one: every 3 s (with the lease scan) it
#: was about 60,000 objects and 30-50 ms at 500 to 2,000 actions/s on the bench's machine, a pause
#: every table felt (the 1,000-table bench's p99); every half second it is a sixth of that.
GC_SETTLE_SECONDS = 0.5


def settle_garbage_collector() -> None:
    """Collect the young generations, then move every survivor out of the collector's sight
    (`gc.freeze`): tables and their logs live long, and a full collection over them all would
    pause every table (hundreds of milliseconds at a thousand tables). Cycles that become garbage
    later in frozen objects are not collected; the service makes few (asyncio's are young)."""
    if FREEZE_SURVIVORS:
        collect_young_and_freeze()


def collect_young_and_freeze() -> None:
    """One settle, whatever the process (the bench's driver settles its own collector with it)."""
    gc.collect(1)
    gc.freeze()


def _cards(hand: Any, seat: int) -> list[str]:
    from engine.cards import format_many

    return list(format_many(hand.hand_of(seat)))


def store_request(digest: str, out: list[Entry]) -> Request:
    return Request(digest, out[0].seq, out[-1].seq)


def outbox_requests(table: LiveTable, out: list[Entry], now_ms: int) -> list[tuple[str, bytes]]:
    """What a match end owes the other services: the tournament's ReportMatchResult for a
    tournament's table; wallet Settle (or Void) for a competitive match with stakes, ranking
    RecordMatch for a competitive match; nothing else for a practice table. The match id is every
    call's idempotency key. Bots are never reported: a seat's result belongs to its player."""
    ended = next((e for e in out if e.type == "match_ended"), None)
    if ended is None:
        return []
    x = ended.data.get("x", {})
    annulled = bool(x.get("annulled", False))
    outcomes = x["outcomes"]
    match_id = table.description.match_id
    owed: list[tuple[str, bytes]] = []
    player_outcomes = [
        common_pb2.PlayerOutcome(player=f"players/{o['player']}", seat=o["seat"], outcome=_OUTCOME[o["outcome"]])
        for o in outcomes
    ]
    if table.description.tournament:
        report = tournament_pb2.ReportMatchResultRequest(
            request_id=match_id, tournament=table.description.tournament, match_id=match_id,
            outcomes=player_outcomes, match_scores=table.match.totals,
        )
        owed.append(("tournament.ReportMatchResult", report.SerializeToString()))
    if not table.competitive:
        return owed
    won = any(o["outcome"] == "won" for o in outcomes)
    if table.options.bet_chips > 0 and outcomes:
        if annulled or not won:
            # annulled, or every player of the winning side abandoned (a bot won for them): the
            # stakes go back, except those of the players who abandoned, which go to the others
            # (to the house when everyone abandoned): the wallet's Void with penalties
            reason = (
                "match annulled by its players"
                if annulled
                else "no winner left at the table: every player of the winning side abandoned"
            )
            void = wallet_pb2.VoidRequest(
                request_id=match_id, match_id=match_id, reason=reason,
                penalised_players=[f"players/{o['player']}" for o in outcomes if o["player"] in _abandoned(table)],
            )
            owed.append(("wallet.Void", void.SerializeToString()))
        else:
            settle = wallet_pb2.SettleRequest(
                request_id=match_id, match_id=match_id, outcomes=player_outcomes,
                first_seat=(table.match.first_dealer + 1) % table.players,
            )
            owed.append(("wallet.Settle", settle.SerializeToString()))
    if outcomes:
        totals = table.match.totals
        record = ranking_pb2.RecordMatchRequest(
            request_id=match_id, match_id=match_id, options=table.options, annulled=annulled,
            end_time=timestamp(now_ms),
            participants=[
                ranking_pb2.RecordMatchRequest.Participant(
                    player=f"players/{o['player']}", seat=o["seat"], outcome=_OUTCOME[o["outcome"]],
                    score=totals[o["seat"] & 1],
                )
                for o in outcomes
            ],
        )
        owed.append(("ranking.RecordMatch", record.SerializeToString()))
    return owed


def _abandoned(table: LiveTable) -> set[str]:
    return {
        s.player for s in table.seats
        if s.player is not None and (s.abandoned or (s.bot_controlled and s.takeover_reason == "disconnected"))
    }


_OUTCOME = {
    "won": common_pb2.OUTCOME_WON,
    "lost": common_pb2.OUTCOME_LOST,
    "abandoned": common_pb2.OUTCOME_ABANDONED,
    "void": common_pb2.OUTCOME_VOID,
}


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Reads the outcome of a change whose caller left, so a failure is logged, not lost."""
    if not task.cancelled() and task.exception() is not None:
        log.warning("a change whose caller left failed", exc_info=task.exception())
