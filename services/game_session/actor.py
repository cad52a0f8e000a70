"""A table's actor: the one writer of one installed copy of a table.

Everything that changes a table (a move, a bot's turn, a timeout, a seat taken or given back, a
vote, a chat message), every stream that registers on it and every read of its state is a
command, run by the actor's own task one at a time, in the order submitted. So there is one
writer per live table by design, with no lock to take and nothing to know about which path a
caller is on:
- a change computes its entries in memory, persists them through the group-committing log writer
  (`writer.Writer`) under the copy's lease epoch, publishes them to the table's streams, seals
  them, and sets the table's timer for what is due next (`timers`);
- a read runs between two changes, so it never sees a state whose events are not committed;
- a caller awaits its command's future: a caller that goes away (a cancelled call, a stream that
  ended) only stops waiting. A change once begun always runs to its end; a command whose caller
  left before it began is skipped.

An actor is retired (`retire`) when its copy may no longer be trusted or used: its lease moved, a
write of it failed (memory must never run ahead of the log), its replica stops. It then fails the
commands still queued (`Retired`: the caller finds the copy installed next), ends its streams and
stops its timers; a change already under way finishes first, and the copy loaded next waits for
that (`stopped`) before reading the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from prometheus_client import Counter

from services.common.errors import AlreadyExistsError, FailedPreconditionError, NotOwnerError, UnavailableError
from services.game_session import social, timers, wire
from services.game_session.clock import Clock, TimerHandle
from services.game_session.events import FINAL_TYPES, TableEvent, muted_chat, timestamp
from services.game_session.log import Entry, Request
from services.game_session.outbox import outbox_requests
from services.game_session.settings import GameSessionSettings
from services.game_session.streams import MAX_QUEUED, Opening, StreamEnd, Subscriber
from services.game_session.table import LiveTable, State, TurnKey
from services.game_session.writer import LeaseLostError, Write, Writer

log = logging.getLogger("buraco.game_session")
T = TypeVar("T")

#: The replica's decision thread: search bots (the expert) decide there, one decision at a time,
#: while the event loop serves every table (docs/game-session.md, "Bot levels").
DECISIONS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bot-decisions")

#: A change's work: given the table, it changes it and appends the entries it makes to `out`
#: (raising leaves nothing changed, or the copy is retired); its return value goes to the caller.
Work = Callable[[LiveTable, list[Entry]], T]


class Retired(NotOwnerError):
    """The command's table copy was retired before the command ran (retry: the copy installed
    next, here or at the replica that took the table over, answers)."""

    def __init__(self, table: str) -> None:
        super().__init__(table, "", retry_after_ms=200)


class RequestKey(NamedTuple):
    """An idempotent change's request: who sent it (`scope`), its id, and its content's digest."""

    scope: str
    request_id: str
    digest: str


class Changed(NamedTuple, Generic[T]):
    """What a change came to: its work's value and the entries it made; `replayed`: a retry of a
    request already applied, answered with the entries of the first time (the work did not run)."""

    value: T | None
    entries: list[Entry]
    replayed: bool = False


@dataclass(frozen=True)
class Hosting:
    """What every actor of a replica shares."""

    writer: Writer
    settings: GameSessionSettings
    clock: Clock
    owner_id: str
    address: Callable[[], str]
    #: called after a change that ended a match wrote outbox rows (wakes the deliverer)
    on_outbox: Callable[[], None]
    events_total: Counter


#: Called when a command is done, in the actor's task, in its place among the changes (a `Play`
#: stream answers its request there): the change's outcome, or its error.
Done = Callable[["Changed[Any] | None", "BaseException | None"], None]


class _Command:
    __slots__ = ("future",)
    #: `run` returns a coroutine to await (a change: it waits for its write)
    awaits = False

    def __init__(self) -> None:
        self.future: asyncio.Future[Any] | None = None

    def run(self, actor: TableActor) -> Any:
        raise NotImplementedError

    def done(self, result: Any, error: BaseException | None) -> None:
        future = self.future
        if future is None or future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)


class _Change(_Command):
    __slots__ = ("on_done", "request", "work")
    awaits = True

    def __init__(self, work: Work[Any], request: RequestKey | None, on_done: Done | None) -> None:
        super().__init__()
        self.work, self.request, self.on_done = work, request, on_done

    def run(self, actor: TableActor) -> Awaitable[Changed[Any]]:
        return actor._change(self.work, self.request)

    def done(self, result: Any, error: BaseException | None) -> None:
        if self.on_done is not None:
            self.on_done(result, error)
        super().done(result, error)


class _Read(_Command):
    __slots__ = ("view",)

    def __init__(self, view: Callable[[LiveTable], Any]) -> None:
        super().__init__()
        self.view = view

    def run(self, actor: TableActor) -> Any:
        return self.view(actor.table)


class _Subscribe(_Command):
    __slots__ = ("after_seq", "player", "viewer")

    def __init__(self, viewer: int | None, player: str | None, after_seq: int) -> None:
        super().__init__()
        self.viewer, self.player, self.after_seq = viewer, player, after_seq

    def run(self, actor: TableActor) -> tuple[Subscriber, Opening]:
        return actor._subscribe(self.viewer, self.player, self.after_seq)


class _Call(_Command):
    __slots__ = ("call",)

    def __init__(self, call: Callable[[TableActor], Any]) -> None:
        super().__init__()
        self.call = call

    def run(self, actor: TableActor) -> Any:
        return self.call(actor)


class TableActor:
    """The one writer of one installed table copy (see the module docstring)."""

    def __init__(self, table: LiveTable, hosting: Hosting, *, on_retire: Callable[[TableActor], None]) -> None:
        self.table = table
        self.hosting = hosting
        self.settings = hosting.settings
        self.clock = hosting.clock
        self.subscribers: list[Subscriber] = []
        self.timer = timers.TurnTimer(hosting.clock)
        self._proposal_timer: tuple[str, TimerHandle] | None = None
        #: each human seat's disconnection grace, from its last stream's end until a bot takes it
        self.grace: dict[int, TimerHandle] = {}
        self._on_retire = on_retire
        self._queue: deque[_Command] = deque()
        self._wakeup: asyncio.Future[None] | None = None
        self._busy = False
        self._retired: Exception | None = None
        self._task = asyncio.get_running_loop().create_task(self._drain(), name=f"table-{table.table_id}")

    # -- facts ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.table.name

    @property
    def retired(self) -> bool:
        return self._retired is not None

    def now_ms(self) -> int:
        return int(self.clock.now() * 1000)

    # -- submitting -----------------------------------------------------------------------------
    def _submit(self, command: _Command) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._retired is not None:
            future.set_exception(Retired(self.name))
            return future
        command.future = future
        self._enqueue(command)
        return future

    def _enqueue(self, command: _Command) -> None:
        self._queue.append(command)
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            if not wakeup.done():
                wakeup.set_result(None)

    async def change(self, work: Work[T], request: RequestKey | None = None, on_done: Done | None = None) -> \
            Changed[T]:
        """Run `work` as a change of the table (see the module docstring); `request` makes it
        idempotent: a retry gets the entries of the first time, and `work` does not run again."""
        result: Changed[T] = await self._submit(_Change(work, request, on_done))
        return result

    def post_change(self, work: Work[Any], request: RequestKey | None = None, on_done: Done | None = None) -> None:
        """A change nobody waits for: a timer's, or a `Play` move, which `on_done` answers on its
        stream (with `Retired` at once when the actor has retired)."""
        if self._retired is None:
            self._enqueue(_Change(work, request, on_done))
        elif on_done is not None:
            on_done(None, Retired(self.name))

    async def read(self, view: Callable[[LiveTable], T]) -> T:
        """`view` of the table's committed state: at once when no change is under way or queued,
        otherwise after the changes submitted before it."""
        if not self._busy and not self._queue and self._retired is None:
            return view(self.table)
        result: T = await self._submit(_Read(view))
        return result

    async def subscribe(self, viewer: int | None, player: str | None, after_seq: int) -> tuple[Subscriber, Opening]:
        """Register a stream (`viewer`: a seat, None for a spectator): what it sends first (a
        snapshot for `after_seq` 0, else the events after `after_seq`, up to the table's final
        event), and from then on every committed entry on its inbox."""
        result: tuple[Subscriber, Opening] = await self._submit(_Subscribe(viewer, player, after_seq))
        return result

    def unsubscribe(self, sub: Subscriber) -> None:
        """The stream has ended (its seat's disconnection grace starts when it was the last)."""
        if self._retired is None:
            self._enqueue(_Call(lambda actor: actor._unsubscribe(sub)))

    def set_mute(self, viewer: str, player: str, muted: bool) -> None:
        """`viewer` (`*`: everyone) no longer sees (or sees again) `player`'s chat text."""
        def apply(actor: TableActor) -> None:
            mutes = actor.table.chat.mutes
            (mutes.add if muted else mutes.discard)((viewer, player))

        if self._retired is None:
            self._enqueue(_Call(apply))

    # -- the task -------------------------------------------------------------------------------
    async def _drain(self) -> None:
        queue, loop = self._queue, asyncio.get_running_loop()
        while True:
            if not queue:
                if self._retired is not None:
                    return
                wakeup = self._wakeup = loop.create_future()
                await wakeup
                continue
            command = queue.popleft()
            future = command.future
            if future is not None and future.done():  # its caller left before it began
                continue
            if self._retired is not None:
                command.done(None, Retired(self.name))
                continue
            self._busy = True
            try:
                result = command.run(self)
                if command.awaits:
                    result = await result
            except asyncio.CancelledError:  # the replica stops: this command gets no answer
                command.done(None, Retired(self.name))
                raise
            except Exception as error:
                command.done(None, error)
            else:
                command.done(result, None)
            finally:
                self._busy = False
            # nothing of a done command stays alive while the actor waits (the collector would
            # find it young at its next pass, and keep it)
            command = future = result = None  # type: ignore[assignment]

    def retire(self, error: Exception | None = None) -> None:
        """Stop using this copy (see the module docstring); `error` is what its streams end with."""
        if self._retired is not None:
            return
        self._retired = error or Retired(self.name)
        self.timer.cancel()
        for handle in self.grace.values():
            handle.cancel()
        self.grace.clear()
        if self._proposal_timer is not None:
            self._proposal_timer[1].cancel()
            self._proposal_timer = None
        for sub in self.subscribers:
            sub.inbox.put(StreamEnd(self._retired))
        self.subscribers.clear()
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        self._on_retire(self)

    async def stopped(self) -> None:
        """Once retired: until its last command has finished (its write committed or refused)."""
        await asyncio.wait({self._task})

    def when_stopped(self, callback: Callable[[], None]) -> None:
        """Call `callback` once the actor's task has ended (it ends only once retired)."""
        self._task.add_done_callback(lambda _: callback())

    def cancel(self) -> None:
        """The replica stops: retire, and stop a change waiting for its write."""
        self.retire()
        self._task.cancel()

    # -- changes --------------------------------------------------------------------------------
    async def _change(self, work: Work[Any], request: RequestKey | None) -> Changed[Any]:
        table = self.table
        if request is not None:
            done = table.requests.get((request.scope, request.request_id))
            if done is not None:
                if done.digest != request.digest:
                    raise AlreadyExistsError(
                        f"request_id {request.request_id!r} was already used for a different request")
                return Changed(None, table.entries[done.first_seq - 1 : done.last_seq], replayed=True)
        if not table.live:
            raise FailedPreconditionError(f"{table.name} is {State.State.Name(table.state)}; nothing can change")  # type: ignore[arg-type]
        was_state = table.state
        out: list[Entry] = []
        try:
            value = work(table, out)
            if table.live:
                table.after_change(self.now_ms(), self.settings.deal_seed, out)
        except BaseException:
            if out:  # memory changed but nothing was written: the copy loaded next is the table
                self.retire()
            raise
        if not out:
            return Changed(value, out)
        if request is not None:
            out[0].mark_request(request.scope, request.request_id, request.digest, len(out))
            table.requests[(request.scope, request.request_id)] = Request(request.digest, out[0].seq, out[-1].seq)
        await self._persist(out, state_changed=table.state != was_state)
        self._publish(out)
        watched = any(sub.viewer is None for sub in self.subscribers)
        for entry in out:
            entry.seal(table.players, watched)
        if any(e.type in FINAL_TYPES for e in out):  # the match is over
            table.compact_finished(keep=len(out))
        self.schedule()
        return Changed(value, out)

    async def _persist(self, out: list[Entry], *, state_changed: bool) -> None:
        table = self.table
        now = self.now_ms()
        write = Write(table.table_id, table.epoch, self.hosting.owner_id, [(e.seq, e.text()) for e in out])
        if state_changed or any(e.type in ("hand_ended", "match_ended") for e in out):
            write.table_update = {"state": table.state, "seq": table.seq, "updated_ms": now,
                                  "match_scores": json.dumps(table.match.totals)}
        if not table.live:
            write.finished = True
            write.outbox = outbox_requests(table, out, now)
        try:
            await self.hosting.writer.submit(write)
        except LeaseLostError:
            self.retire()
            raise Retired(self.name) from None
        except BaseException:
            self.retire()
            raise
        self.hosting.events_total.inc(len(out))
        if write.outbox:
            self.hosting.on_outbox()

    def _publish(self, out: list[Entry]) -> None:
        subscribers = self.subscribers
        for sub in list(subscribers):
            inbox = sub.inbox
            if inbox.qsize() > MAX_QUEUED:
                subscribers.remove(sub)
                inbox.put(StreamEnd(UnavailableError("stream ended (too far behind); resume with after_seq")))
                continue
            for entry in out:
                inbox.put(entry)

    def event_for(self, entry: Entry, sub: Subscriber) -> bytes:
        """The entry's event as the subscriber may see it, framed (`wire.frame`)."""
        if entry.type == "chat" and sub.player is not None and \
                self.table.chat.hides(sub.player, entry.data["x"]["sender"]):
            return muted_chat(entry)
        return entry.framed(sub.viewer)

    # -- streams --------------------------------------------------------------------------------
    def _subscribe(self, viewer: int | None, player: str | None, after_seq: int) -> tuple[Subscriber, Opening]:
        from services.common.errors import OutOfRangeError

        table = self.table
        if after_seq > table.seq:
            raise OutOfRangeError(f"after_seq {after_seq} is past the table's last event ({table.seq})")
        sub = Subscriber(viewer, player)
        joining = viewer if table.live else None  # a seat's player joining a live table
        if joining is not None:  # counted first, so that the snapshot shows the seat connected
            table.seats[joining].streams += 1
        if after_seq == 0:
            snapshot = TableEvent(seq=table.seq, time=timestamp(self.now_ms()),
                                  snapshot=table.snapshot(viewer, self.hosting.address()))
            opening = Opening([wire.frame(snapshot.SerializeToString())], table.seq, not table.live)
        else:
            frames: list[bytes] = []
            last, final = after_seq, False
            for entry in table.entries[after_seq:]:
                frames.append(self.event_for(entry, sub))
                last = entry.seq
                if entry.type in FINAL_TYPES:
                    final = True
                    break
            opening = Opening(frames, last, final)
        if table.live or after_seq < table.seq:
            self.subscribers.append(sub)
        if joining is not None:
            seat = joining
            grace = self.grace.pop(seat, None)
            if grace is not None:
                grace.cancel()
            if table.state == State.STATE_WAITING:
                self.schedule()  # everyone may be here now: deal
            else:
                self.post_change(lambda t, out: social.returned(t, seat, self.now_ms(), out))
        return sub, opening

    def _unsubscribe(self, sub: Subscriber) -> None:
        if sub not in self.subscribers:
            return
        self.subscribers.remove(sub)
        table = self.table
        if sub.viewer is None or not table.live:
            return
        seat = table.seats[sub.viewer]
        seat.streams = max(0, seat.streams - 1)
        if seat.streams == 0 and not seat.bot_controlled:
            self.start_grace(seat.seat)

    def start_grace(self, seat: int) -> None:
        """The seat's player has no stream: after the grace period a bot takes the seat."""
        def expired() -> None:
            self.grace.pop(seat, None)
            self.post_change(lambda t, out: social.disconnected(
                t, seat, self.now_ms(), int(self.settings.reconnect_window_seconds * 1000), out))

        previous = self.grace.pop(seat, None)
        if previous is not None:
            previous.cancel()
        self.grace[seat] = self.clock.call_later(self.settings.disconnect_grace_seconds, expired)

    # -- timers ---------------------------------------------------------------------------------
    def schedule(self) -> None:
        """Set the table's timer for what is due next (after every change), and the open
        annulment proposal's deadline."""
        if self._retired is not None:
            return
        table = self.table
        due = timers.next_due(table, self.settings, self.clock.now())
        if due is None:
            self.timer.clear()
        elif due.kind == "think":
            turn = due.turn
            assert turn is not None
            self.timer.set(due.at, lambda: self._enqueue(_Call(lambda actor: actor._think(turn))))
        else:
            work = self._due_work(due)
            self.timer.set(due.at, lambda: self.post_change(work))
        self._schedule_proposal()

    def _think(self, turn: TurnKey) -> None:
        """A search bot's decision (`timers.SearchDecision`): captured here, between two changes;
        made in the replica's one decision thread, so that the event loop goes on serving every
        table meanwhile; its move applied by a change of its own when it is made."""
        if self._retired is not None:
            return
        decision = timers.think(self.table, turn)
        if decision is None:
            self.schedule()
            return
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(DECISIONS, decision.choose)

        def made(done: asyncio.Future[Any]) -> None:
            action = None
            if done.cancelled() or done.exception() is not None:
                log.error("a search bot's decision failed; the heuristic bot's move stands in",
                          exc_info=None if done.cancelled() else done.exception(),
                          extra={"fields": {"table": self.table.table_id, "seat": turn.seat}})
            else:
                action = done.result()
            self.post_change(lambda t, out: timers.decided(t, decision, action, self.now_ms(), out),
                             on_done=lambda changed, error: self.schedule())

        future.add_done_callback(made)

    def _due_work(self, due: timers.Due) -> Work[None]:
        """The change the table's timer makes when `due` comes."""
        if due.kind == "deal":
            return lambda t, out: timers.deal_first_hand(t, self.now_ms(), self.settings.deal_seed, out)
        turn = due.turn
        assert turn is not None
        if due.kind == "bot":
            return lambda t, out: timers.bot_turn(t, turn, self.now_ms(), out)
        max_auto_plays = self.settings.max_auto_plays
        return lambda t, out: timers.auto_play(t, turn, self.now_ms(), max_auto_plays, out)

    def _schedule_proposal(self) -> None:
        proposal = self.table.proposal
        current = self._proposal_timer
        if current is not None and (proposal is None or current[0] != proposal.proposal_id):
            current[1].cancel()
            self._proposal_timer = current = None
        if proposal is None or current is not None:
            return
        proposal_id = proposal.proposal_id

        def expired() -> None:
            self._proposal_timer = None
            self.post_change(lambda t, out: social.expire(t, proposal_id, self.now_ms(), out))

        handle = self.clock.call_later(proposal.deadline_ms / 1000 - self.clock.now(), expired)
        self._proposal_timer = (proposal_id, handle)

    def resume(self) -> None:
        """A copy loaded from the log after a takeover or a restart: a turn whose time ran out
        meanwhile gets its full time again (the players were not to blame), and every human seat
        starts its disconnection grace until its player's stream comes back."""
        table = self.table
        hand = table.match.hand
        now = self.now_ms()
        if table.state == State.STATE_PLAYING:
            if hand is not None and table.turn_deadline_ms <= now:
                seconds = table.draw_seconds if hand.phase == "draw" else table.play_seconds
                table.turn_deadline_ms = now + int(seconds * 1000)
            for seat in table.seats:
                if seat.human and not seat.bot_controlled:
                    self.start_grace(seat.seat)
        self.schedule()
