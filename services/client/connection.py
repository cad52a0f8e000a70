"""One participant's live connection to a table, over the real gRPC API (grpc.aio).

`TableConnection` follows the table's `SubscribeChanges` stream into a `TableModel`, a whole change
at a time (so the model, and whoever waits on it, never sees a table between two events of one
change, and an action's `expected_seq` is never taken mid-change): on a dropped stream
(UNAVAILABLE: a replica stopping or dying, or a redirect to the table's owner) it reconnects, at the
owner's address when the status names one, and resumes with `after_seq` = the last sequence number
applied, so nothing is missed or applied twice. Actions carry a fresh idempotency key and the
`expected_seq` the client saw; a retry after UNAVAILABLE or ABORTED reuses the same key, so the
server applies it once. With `play=True` the connection follows the `Play` stream instead and sends
its actions on it (no call per action); actions in flight when the stream drops are sent again,
with the same keys, on the resumed stream. `play_seat` plays a seat with one of the engine's bots,
deciding from what the stream told the seat (`model.shadow_state`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from buraco.v1 import game_session_pb2, game_session_pb2_grpc
from engine.actions import Action, AddCards, Discard, Draw, MeldCards, TakePile
from engine.bots.base import Bot
from engine.cards import to_str
from engine.rules import Ruleset
from services.client.calls import trailer
from services.client.channels import ChannelPool
from services.client.model import TableModel, actions_from_hints, shadow_state
from services.client.redirects import redirect_of

CURRENT_SEQ_HEADER = "buraco-current-seq"
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED, grpc.StatusCode.DEADLINE_EXCEEDED)
#: the statuses gRPC gives a call whose connection broke under a write (not a server's answer)
TRANSPORT_FAILURES = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNAVAILABLE,
                      grpc.StatusCode.CANCELLED)


class ActionRefused(Exception):
    """The server refused an action; `message` is its status message, for people."""

    def __init__(self, code: grpc.StatusCode, message: str, current_seq: int | None) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.current_seq = current_seq


@dataclass
class _PendingAction:
    """An action sent (or to be sent) on a `Play` stream, until the stream answers it."""

    message: game_session_pb2.PlayRequest
    answer: asyncio.Future[game_session_pb2.ActionResult]
    sent_on: Any = None  # the call it was last written on


#: the unary method -> its request's field in a PlayRequest
PLAY_FIELDS = {"Draw": "draw", "TakeDiscard": "take_discard", "Meld": "meld", "AddToMeld": "add_to_meld",
               "Discard": "discard", "LeaveTable": "leave"}


@dataclass
class Timing:
    """When each action was sent, to measure the time until its first event arrives on the stream."""

    pending: dict[tuple[str, int], float] = field(default_factory=dict)  # (table, first event seq) -> sent
    samples: list[tuple[float, float]] = field(default_factory=list)  # (send time, latency), perf_counter


class TableConnection:
    """A player's (or a spectator's) connection to one table."""

    def __init__(
        self,
        address: str,
        token: str,
        table: str,
        on_event: Callable[[game_session_pb2.TableEvent], None] | None = None,
        retry_seconds: float = 30.0,
        channels: ChannelPool | None = None,
        by_change: bool = True,
        play: bool = False,
        model: TableModel | None = None,
    ) -> None:
        self.address = address  # where calls go now: the entry address, or the owner it redirected to
        self.home = address  # the entry address (a load balancer in production), to fall back to
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.table = table
        #: what the stream has told (a `StreamPosition` for a relay that keeps no game state)
        self.model = model if model is not None else TableModel(table)
        self.on_event = on_event
        self.retry_seconds = retry_seconds
        #: the longest pause between two attempts to reconnect or retry (they start at 50 ms and
        #: double): a client of many seats keeps it long, so that a restarted replica is not met
        #: by all of them at once
        self.retry_delay_max = 1.0
        self.channels = channels
        #: follow SubscribeChanges (a whole change per message); False: Subscribe, an event at a
        #: time (its waiters may then see a table mid-change: benchmarks and comparisons only)
        self.by_change = by_change
        #: follow the Play stream and send the actions on it (a seated player only)
        self.play = play
        self._play_call: Any = None  # the Play stream's call, once joined
        #: a Play call a write failed on: its connection broke (the server died), and gRPC ends
        #: such a call with a status of its own making (INTERNAL), which is a reason to resume
        self._broken_call: Any = None
        self._last_call: Any = None  # the Play call made last (that an error then came from)
        self._pending: dict[str, _PendingAction] = {}
        self._write_lock = asyncio.Lock()
        self.timing: Timing | None = None
        self.received: list[game_session_pb2.TableEvent] = []  # every event applied, in order
        self.keep_received = False
        self.accepted: list[tuple[str, Any, game_session_pb2.ActionResult]] = []  # kept with keep_received
        # every message as it arrives (stream events, duplicates included, and unary responses)
        self.on_message: Callable[[str, Any], None] | None = None
        #: each change once applied: its new events (none repeated across a resume), in order
        self.on_change: Callable[[list[game_session_pb2.TableEvent]], None] | None = None
        self._change: list[game_session_pb2.TableEvent] = []
        self.reconnects = 0
        self.stream_error: BaseException | None = None
        #: futures of the tasks waiting for the model's next change (`wait_until`), all woken by it
        self._waiters: list[asyncio.Future[None]] = []
        self._channel: grpc.aio.Channel | None = None
        self._channel_address = ""
        self._stub: game_session_pb2_grpc.GameSessionServiceAsyncStub | None = None
        self._follower: asyncio.Task[None] | None = None
        self._closed = False
        self._ready = asyncio.Event()
        # request ids: a random prefix per connection and a counter (one urandom read, not one per action)
        self._request_prefix = uuid.uuid4().hex
        self._request_numbers = itertools.count(1)

    # --- the channel ------------------------------------------------------------------------------
    @property
    def stub(self) -> game_session_pb2_grpc.GameSessionServiceAsyncStub:
        if self._stub is None or self._channel_address != self.address:
            if self.channels is not None:
                self._stub = game_session_pb2_grpc.GameSessionServiceStub(self.channels.get(self.address))
            else:
                if self._channel is not None:
                    old = self._channel
                    asyncio.get_running_loop().create_task(old.close(None))
                self._channel = grpc.aio.insecure_channel(self.address)
                self._stub = game_session_pb2_grpc.GameSessionServiceStub(self._channel)
            self._channel_address = self.address
        return self._stub

    def set_token(self, token: str) -> None:
        """Send `token` from the next call or resumed stream on (a refreshed one)."""
        self.metadata = (("authorization", f"Bearer {token}"),)

    def retarget(self, address: str) -> None:
        """Use another entry address from now on (the service moved)."""
        self.home = self.address = address

    def _redirect(self, error: grpc.aio.AioRpcError) -> None:
        """After UNAVAILABLE: to the owner the status names (`redirects.redirect_of`), else back to
        the entry address (an owner named earlier may have died; the entry address reaches whoever
        takes over)."""
        redirect = redirect_of(error)
        self.address = (redirect.owner_address if redirect is not None else "") or self.home

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def follower(self) -> asyncio.Task[None] | None:
        """The task following the stream (done when the stream has ended for good)."""
        return self._follower

    # --- the stream -------------------------------------------------------------------------------
    async def start(self, wait: bool = True) -> None:
        """Start following the stream; returns once the first event (the snapshot) is applied
        (`wait`), or at once (a stream resumed at its last event has nothing to send yet)."""
        self._follower = asyncio.get_running_loop().create_task(self._follow())
        if not wait:
            return
        ready = asyncio.get_running_loop().create_task(self._ready.wait())
        done, _ = await asyncio.wait({ready, self._follower}, return_when=asyncio.FIRST_COMPLETED)
        if ready not in done:
            ready.cancel()
            self._follower.result()  # raises the stream's error
            raise ConnectionError(f"the stream of {self.table} ended before its first event")

    async def _follow(self) -> None:
        try:
            await self._follow_stream()
        finally:  # the stream has ended for good (or the connection closed)
            self._notify()
            self._fail_pending()

    async def _follow_stream(self) -> None:
        delay = min(0.05, self.retry_delay_max)
        give_up = time.monotonic() + self.retry_seconds
        while not self._closed:
            try:
                async for method, events, update in self._messages():
                    for event in events:
                        if self.on_message is not None:
                            self.on_message(method, event)
                        self._apply(event)
                    await self._applied()
                    if self._change:
                        change, self._change = self._change, []
                        if self.on_change is not None:
                            self.on_change(change)
                    if update is not None:
                        self._answered(update)
                    delay = min(0.05, self.retry_delay_max)
                    give_up = time.monotonic() + self.retry_seconds
                if self.model.finished:
                    break
                # The server ended the stream without an error: resume.
            except grpc.aio.AioRpcError as error:
                if self.closed:
                    return
                broken = self._broken_call is not None and self._broken_call is self._last_call
                self._broken_call = None
                if (error.code() not in RETRYABLE and not broken) or time.monotonic() > give_up:
                    self.stream_error = error
                    raise
                self._redirect(error)
            if self.model.finished or self.closed:
                break
            self.reconnects += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_delay_max)

    async def _messages(self) -> AsyncIterator[
            tuple[str, Sequence[game_session_pb2.TableEvent], game_session_pb2.PlayUpdate | None]]:
        """The stream's messages from the last applied event on, as (method, their events, the
        Play update they came in)."""
        if self.play:
            call = self._last_call = self.stub.Play(None, metadata=self.metadata)
            async with self._write_lock:
                join = game_session_pb2.SubscribeChangesRequest(table=self.table, after_seq=self.model.seq)
                try:
                    await call.write(game_session_pb2.PlayRequest(join=join))
                    for pending in list(self._pending.values()):  # in flight when the last stream dropped
                        await call.write(pending.message)
                        pending.sent_on = call
                except grpc.aio.AioRpcError as error:
                    self._write_failed(call, error)
                    raise
                self._play_call = call
            try:
                async for update in call:
                    yield "Play", update.changes.events, update
            finally:
                self._play_call = None
        elif self.by_change:
            changes = self.stub.SubscribeChanges(
                game_session_pb2.SubscribeChangesRequest(table=self.table, after_seq=self.model.seq),
                metadata=self.metadata,
            )
            async for message in changes:
                yield "SubscribeChanges", message.events, None
        else:
            events = self.stub.Subscribe(
                game_session_pb2.SubscribeRequest(table=self.table, after_seq=self.model.seq), metadata=self.metadata
            )
            async for event in events:
                yield "Subscribe", (event,), None

    def _answered(self, update: game_session_pb2.PlayUpdate) -> None:
        """Settle the actions a Play update answers (once their change is in the model)."""
        if update.HasField("error"):
            error = update.error
            pending = self._pending.pop(error.request_id, None)
            if pending is not None and not pending.answer.done():
                code = next((c for c in grpc.StatusCode if c.value[0] == error.code), grpc.StatusCode.UNKNOWN)
                pending.answer.set_exception(ActionRefused(code, error.message, error.current_seq or None))
        if update.request_ids:
            events = update.changes.events
            result = game_session_pb2.ActionResult(seq=events[-1].seq if events else self.model.seq, events=events)
            for request_id in update.request_ids:
                pending = self._pending.pop(request_id, None)
                if pending is not None and not pending.answer.done():
                    pending.answer.set_result(result)

    def _apply(self, event: game_session_pb2.TableEvent) -> None:
        """One event of a change into the model (waiters are woken once the change is whole)."""
        if not self.model.apply(event):
            return
        if self.keep_received:
            self.received.append(event)
        timing = self.timing
        if timing is not None and timing.pending:
            sent = timing.pending.pop((self.table, event.seq), None)
            if sent is not None:
                timing.samples.append((sent, time.perf_counter() - sent))
        if self.on_event is not None:
            self.on_event(event)
        if self.on_change is not None:
            self._change.append(event)

    async def _applied(self) -> None:
        """A whole change is in the model: wake whoever waits on it."""
        self._ready.set()
        self._notify()

    def _notify(self) -> None:
        """Wake every task waiting for the model to change (or the stream to end)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_until(self, predicate: Callable[[TableModel], bool], timeout: float | None = None) -> None:
        """Wait until the model satisfies `predicate` (or the stream fails for good)."""
        if timeout is None:
            await self._wait_until(predicate)
        else:
            await asyncio.wait_for(self._wait_until(predicate), timeout)

    async def _wait_until(self, predicate: Callable[[TableModel], bool]) -> None:
        # a future of its own per waiter and change (a cancelled waiter cancels no other), woken
        # by `_notify`: an asyncio.Condition's lock and bookkeeping cost a busy client more
        loop = asyncio.get_running_loop()
        while not predicate(self.model):
            if self.stream_error is not None:
                raise self.stream_error
            if self._follower is not None and self._follower.done() and not predicate(self.model):
                raise ConnectionError(f"the stream of {self.table} ended")
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            await waiter

    async def close(self) -> None:
        self._closed = True
        for pending in self._pending.values():
            pending.answer.cancel()
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError, ConnectionError):
                await self._follower
        if self._channel is not None:
            await self._channel.close(None)

    # --- calls ------------------------------------------------------------------------------------
    async def _unary(self, method: str, request: Any) -> Any:
        """Call with retries on UNAVAILABLE/ABORTED (the same request, so the same request_id)."""
        delay = min(0.05, self.retry_delay_max)
        give_up = time.monotonic() + self.retry_seconds
        while True:
            try:
                response = await getattr(self.stub, method)(request, metadata=self.metadata, timeout=10)
                if self.on_message is not None:
                    self.on_message(method, response)
                return response
            except grpc.aio.AioRpcError as error:
                if error.code() not in RETRYABLE or time.monotonic() > give_up:
                    raise
                self._redirect(error)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.retry_delay_max)

    def request_for(self, action: Action, request_id: str | None = None) -> tuple[str, Any]:
        """The RPC name and request that make `action`, based on the model's sequence number."""
        common: dict[str, Any] = {
            "table": self.table,
            "request_id": request_id or f"{self._request_prefix}-{next(self._request_numbers)}",
            "expected_seq": self.model.seq,
        }
        if isinstance(action, Draw):
            return "Draw", game_session_pb2.DrawRequest(**common)
        if isinstance(action, TakePile):
            return "TakeDiscard", game_session_pb2.TakeDiscardRequest(**common)
        if isinstance(action, MeldCards):
            wild = to_str(action.wild_as) if action.wild_as is not None else ""
            return "Meld", game_session_pb2.MeldRequest(
                **common, cards=[to_str(c) for c in action.cards], wild_as=wild)
        if isinstance(action, AddCards):
            return "AddToMeld", game_session_pb2.AddToMeldRequest(
                **common, meld=action.meld, cards=[to_str(c) for c in action.cards])
        assert isinstance(action, Discard)
        return "Discard", game_session_pb2.DiscardRequest(**common, card=to_str(action.card))

    async def act(self, action: Action, request_id: str | None = None) -> game_session_pb2.ActionResult:
        """Send `action`; the result once accepted, or ActionRefused with the server's message."""
        method, request = self.request_for(action, request_id)
        timing = self.timing
        if timing is not None:
            timing.pending[(self.table, request.expected_seq + 1)] = time.perf_counter()
        if self.play:
            try:
                result = await self.send(method, request)
            except ActionRefused:
                if timing is not None:
                    timing.pending.pop((self.table, request.expected_seq + 1), None)
                raise
        else:
            try:
                response = await self._unary(method, request)
            except grpc.aio.AioRpcError as error:
                if timing is not None:
                    timing.pending.pop((self.table, request.expected_seq + 1), None)
                current = trailer(error, CURRENT_SEQ_HEADER)
                raise ActionRefused(error.code(), error.details() or "", int(current) if current else None) from None
            result = response.result
        if self.keep_received:
            self.accepted.append((method, request, result))
        return result

    async def send(self, method: str, request: Any) -> game_session_pb2.ActionResult:
        """Send an action (`method`: a key of PLAY_FIELDS, `request` its request) on the Play
        stream; its result once the stream has delivered its change. Sent again on the next stream
        if this one drops first (the same request_id: applied once)."""
        if self._follower is None or self._follower.done():
            raise ConnectionError(f"the Play stream of {self.table} is not open")
        message = game_session_pb2.PlayRequest(**{PLAY_FIELDS[method]: request})
        pending = _PendingAction(message, asyncio.get_running_loop().create_future())
        self._pending[request.request_id] = pending
        timer: asyncio.TimerHandle | None = None
        try:  # from here on, a caller that goes away (cancelled) leaves nothing pending behind
            async with self._write_lock:
                call = self._play_call
                if call is not None and pending.sent_on is not call:
                    try:
                        await call.write(message)
                        pending.sent_on = call
                    except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as error:
                        self._write_failed(call, error)  # sent again on the resumed stream
            if self._follower.done():  # it ended meanwhile, and failed what was pending then
                self._fail_pending()
            # answered by the stream (`_answered`), failed when the stream ends for good
            # (`_fail_pending`), or timed out here: one future, no asyncio.wait per action
            timer = asyncio.get_running_loop().call_later(
                self.retry_seconds + 10, self._time_out, request.request_id, method)
            return await pending.answer
        finally:
            if timer is not None:
                timer.cancel()
            if self._pending.get(request.request_id) is pending:
                del self._pending[request.request_id]
            if not pending.answer.done():
                pending.answer.cancel()

    def _write_failed(self, call: Any, error: BaseException) -> None:
        """A write on the Play call failed: unless the server ended the call with a status of its
        own, the connection broke, and the call's status (made up by gRPC itself) means resume."""
        if not isinstance(error, grpc.aio.AioRpcError) or error.code() in TRANSPORT_FAILURES:
            self._broken_call = call

    def _time_out(self, request_id: str, method: str) -> None:
        pending = self._pending.pop(request_id, None)
        if pending is not None and not pending.answer.done():
            pending.answer.set_exception(TimeoutError(f"{method} on {self.table}: no answer on the Play stream"))

    def _fail_pending(self) -> None:
        """The stream has ended for good: the actions still waiting for an answer get none."""
        for request_id, pending in list(self._pending.items()):
            if pending.answer.done():
                continue
            del self._pending[request_id]
            if self.stream_error is not None:
                pending.answer.set_exception(self.stream_error)
            elif self.model.finished:  # the stream ended with the match, before this action's answer
                pending.answer.set_exception(ActionRefused(
                    grpc.StatusCode.FAILED_PRECONDITION, f"{self.table}: the match is over", self.model.seq))
            else:
                pending.answer.set_exception(ConnectionError(f"the Play stream of {self.table} ended"))

    async def hints(self) -> game_session_pb2.GetLegalMovesResponse:
        reply: game_session_pb2.GetLegalMovesResponse = await self._unary(
            "GetLegalMoves", game_session_pb2.GetLegalMovesRequest(table=self.table))
        return reply

    async def call(self, method: str, request: Any) -> Any:
        """Any other unary call about the table (chat, annulment, leave, export), with retries."""
        return await self._unary(method, request)


def reached(seq: int) -> Callable[[TableModel], bool]:
    """A condition: the model has applied event `seq` (or the match is over)."""
    return lambda model: model.seq >= seq or model.finished


async def play_seat(
    connection: TableConnection,
    bot: Bot,
    rules: Ruleset,
    pace: Callable[[], Any] | None = None,
    max_actions: int = 100_000,
) -> int:
    """Play the connection's seat with `bot` until the match ends; the number of actions sent.

    Decisions come from the seat's own view (the shadow state); when the server refuses one (the
    client's picture was incomplete, e.g. after resuming from a snapshot mid-turn), the server's
    legal-move hints decide instead. `pace`, when given, is awaited before each action.
    """
    sent = 0
    while sent < max_actions:
        await connection.wait_until(lambda m: m.finished or m.my_turn)
        model = connection.model
        if model.finished:
            return sent
        state = shadow_state(model, rules)
        seat = model.viewer_seat
        assert seat is not None
        action = bot.choose(state.view(seat), state.legal_actions())
        # not kept alive across the waits below: the shadow state is hundreds of objects, which
        # a client of many seats otherwise keeps for every seat, for its collector to scan
        del state
        if pace is not None:
            await pace()
        seq = model.seq
        try:
            result = await connection.act(action)
        except ActionRefused as refused:
            if refused.code != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            current = refused.current_seq or 0
            if current > seq:
                # The table moved on (a timer, a takeover): catch up, then decide again.
                await connection.wait_until(reached(current))
                continue
            hints = await connection.hints()
            legal = actions_from_hints(hints)
            if not legal or hints.seq != connection.model.seq:
                await connection.wait_until(reached(seq + 1))
                continue
            action = bot.choose(shadow_state(connection.model, rules).view(seat), legal)
            result = await connection.act(action)
        sent += 1
        await connection.wait_until(reached(result.seq))
    return sent
