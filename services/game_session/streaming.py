"""The game-session streams as gRPC sends them: `Subscribe` (an event at a time),
`SubscribeChanges` (whole changes per message) and `Play` (a seated player's changes, with the
moves they send on the same stream). docs/game-session.md ("Streams") gives the protocol.

Each stream registers on the table's actor, sends the opening (the snapshot or the replay) and
then whatever the actor puts on its inbox (`streams`), skipping any `seq` already sent. The
messages are written from each event's encoding, made once per viewer class (`wire`; the server
pipeline sends a handler's bytes as they are). A `Play` stream's moves are read by a task of its
own: each is a change posted to the table's actor, which answers it on the stream in its place
among the changes (`on_done`): an accepted move by naming its request in the update that carries
its change, a retry by a `PlayUpdate` naming it with no change, a refusal by a `PlayError`. Ending
the stream only stops the reading; a move already posted runs to its end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from buraco.v1 import game_session_pb2
from services.common import validation as check
from services.common.auth import current_identity
from services.common.errors import InvalidArgumentError, UnavailableError, status_for
from services.common.interceptor import UNDECODABLE, Refused
from services.common.metrics import Metrics
from services.game_session import access, requests, wire
from services.game_session.actor import Changed, Done, TableActor
from services.game_session.events import FINAL_TYPES
from services.game_session.log import Entry
from services.game_session.ownership import Ownership
from services.game_session.streams import Opening, PlayAnswer, StreamEnd, Subscriber

log = logging.getLogger("buraco.game_session")
#: A `Play` stream's moves posted to the table and not answered yet, at most: the stream reads no
#: further meanwhile (a client cannot queue work without bound behind a slow table).
MOVES_IN_FLIGHT = 16
SubscribeRequest = game_session_pb2.SubscribeRequest | game_session_pb2.SubscribeChangesRequest


class Streams:
    def __init__(self, tables: Ownership, metrics: Metrics | None) -> None:
        self.tables = tables
        self.metrics = metrics

    async def open(self, request: SubscribeRequest) -> tuple[TableActor, Subscriber, Opening]:
        """Registers the caller's stream on the table: the actor it follows, the subscriber and
        what comes first (the snapshot, or the replay after `after_seq`)."""
        identity = current_identity()
        check.require(request.after_seq >= 0, "after_seq", "must not be negative")
        actor = await self.tables.get(check.resource_id(request.table, "table", "tables"))
        viewer, player = access.viewer_of(actor.table, identity)
        return await self.tables.subscribe(actor, viewer, player, request.after_seq)

    async def events(self, request: game_session_pb2.SubscribeRequest) -> AsyncIterator[bytes]:
        """`Subscribe`: one `TableEvent` per message. One generator from the inbox to the wire
        (each layer costs every message a hop, so `changes` has a loop of its own)."""
        actor, sub, opening = await self.open(request)
        last = max(request.after_seq, opening.last_seq)
        try:
            for framed in opening.frames:
                yield wire.unframe(framed)
            if opening.final:
                return
            inbox, event_for = sub.inbox, actor.event_for
            while True:
                item = await inbox.get()
                if type(item) is not Entry:
                    if isinstance(item, StreamEnd):
                        raise item.error
                    continue  # a PlayAnswer is for Play streams
                if item.seq <= last:
                    continue
                last = item.seq
                yield wire.unframe(event_for(item, sub))
                if item.type in FINAL_TYPES:
                    return
        finally:
            actor.unsubscribe(sub)

    async def changes(
        self, request: game_session_pb2.SubscribeChangesRequest | None, requests_in: AsyncIterator[Any] | None
    ) -> AsyncIterator[bytes]:
        """`SubscribeChanges` (`request`), or `Play` (`requests_in`: a join, then moves): whole
        changes from the inbox to the wire; a `Play` stream's updates also name the caller's
        requests they answer."""
        play = requests_in is not None
        scope = ""
        seat = -1
        if requests_in is not None:
            request = await _join(requests_in)
            identity = current_identity()
            joined = await self.tables.get(check.resource_id(request.table, "table", "tables"))
            seat = access.seat_of(joined.table, identity)  # Play is for seated players
            scope = access.scope_of(identity)
        assert request is not None
        actor, sub, opening = await self.open(request)
        last = max(request.after_seq, opening.last_seq)
        reader: asyncio.Task[None] | None = None

        def message(frames: list[bytes], answered: list[str]) -> bytes:
            return wire.play_update(frames, answered) if play else wire.table_changes(frames)

        try:
            if opening.frames:
                yield message(opening.frames, [])
            if opening.final:
                return
            if requests_in is not None:
                reader = asyncio.get_running_loop().create_task(self._moves(requests_in, actor, seat, sub, scope))
            inbox, event_for = sub.inbox, actor.event_for
            while True:
                items = await inbox.get_all()  # one or more whole changes
                frames: list[bytes] = []
                answered: list[str] = []
                for item in items:
                    if type(item) is not Entry:
                        if frames:
                            yield message(frames, answered)
                            frames, answered = [], []
                        if isinstance(item, PlayAnswer):
                            yield item.message
                            continue
                        assert isinstance(item, StreamEnd)
                        raise item.error
                    if item.seq <= last:
                        continue
                    last = item.seq
                    frames.append(event_for(item, sub))
                    if play and item.request is not None and item.request[0] == scope:
                        answered.append(item.request[1])
                    if item.type in FINAL_TYPES:
                        yield message(frames, answered)
                        return
                if frames:
                    yield message(frames, answered)
        finally:
            if reader is not None:
                reader.cancel()
            actor.unsubscribe(sub)

    async def _moves(
        self, requests_in: AsyncIterator[Any], actor: TableActor, seat: int, sub: Subscriber, scope: str
    ) -> None:
        """A `Play` stream's moves, in order, each posted to the table's actor, which answers it
        on the stream (at most `MOVES_IN_FLIGHT` unanswered at a time). A broken protocol ends the
        stream."""
        inbox = sub.inbox
        unanswered = 0
        answered = asyncio.Event()

        def one_answered() -> None:
            nonlocal unanswered
            unanswered -= 1
            answered.set()

        try:
            async for message in requests_in:
                if isinstance(message, Refused):  # over the caller's rate limit
                    inbox.put(PlayAnswer(_play_error(_request_id(message.request), message.error)))
                    continue
                if message is UNDECODABLE:
                    raise InvalidArgumentError("request", "could not be decoded as a PlayRequest")
                kind = message.WhichOneof("body")
                if kind is None or kind == "join":
                    raise InvalidArgumentError("body", "an action is required (join comes first, once)")
                body = getattr(message, kind)
                method = requests.PLAY_ACTIONS[kind][0]
                done = self._answer(inbox, body.request_id, method, time.perf_counter(), one_answered)
                try:
                    if body.table != actor.name:
                        raise InvalidArgumentError(f"{kind}.table", f"must be the joined {actor.name}")
                    work, key = requests.move(method, body, seat, scope, self.tables.now_ms)
                except Exception as error:  # refused before it reached the table
                    unanswered += 1
                    done(None, error)
                    continue
                while unanswered >= MOVES_IN_FLIGHT:
                    answered.clear()
                    await answered.wait()
                unanswered += 1
                actor.post_change(work, key, done)
                # Nothing of this move stays referenced here while the stream waits for the next
                # one (seconds, at a player's pace): the actor frees it once answered, and the
                # collector's settle never finds it young and alive (each such survivor costs
                # every settle, then memory until frozen objects are freed).
                del message, body, done, work, key
        except asyncio.CancelledError:
            raise
        except Exception as error:
            inbox.put(StreamEnd(error))

    def _answer(self, inbox: Any, request_id: str, method: str, started: float, then: Callable[[], None]) -> Done:
        """What answers one `Play` move on its stream (run by the table's actor when the move is
        decided, so that the answer keeps its place among the changes), counts it as a call, then
        calls `then`."""
        metrics = self.metrics

        def done(result: Changed[Any] | None, error: BaseException | None) -> None:
            then()
            code = "OK"
            if error is None:
                if result is not None and result.replayed:  # its change was delivered already
                    inbox.put(PlayAnswer(wire.play_update([], [request_id])))
            elif isinstance(error, UnavailableError):  # the table moved, or the replica is stopping
                code = "UNAVAILABLE"
                inbox.put(StreamEnd(error))
            elif isinstance(error, Exception):
                status, details, _ = status_for(error)
                code = status.name
                log.info("play action refused", extra={"fields": {"action": method, "code": code, "details": details}})
                inbox.put(PlayAnswer(_play_error(request_id, error)))
            if metrics is not None:  # each move as a call of its own: latency and code by move
                metrics.observe(requests.PLAY_METRIC_NAMES[method], code, time.perf_counter() - started)

        return done


async def _join(requests_in: AsyncIterator[Any]) -> game_session_pb2.SubscribeChangesRequest:
    """A `Play` stream's first message, which must be its join."""
    try:
        first = await requests_in.__anext__()
    except StopAsyncIteration:
        raise InvalidArgumentError("join", "the stream ended before its join") from None
    if isinstance(first, Refused):
        raise first.error
    if first is UNDECODABLE:
        raise InvalidArgumentError("request", "could not be decoded as a PlayRequest")
    if first.WhichOneof("body") != "join":
        raise InvalidArgumentError("join", "the first message must be a join")
    join: game_session_pb2.SubscribeChangesRequest = first.join
    return join


def _request_id(request: Any) -> str:
    kind = request.WhichOneof("body") if isinstance(request, game_session_pb2.PlayRequest) else None
    body = getattr(request, kind) if kind is not None else None
    return str(getattr(body, "request_id", ""))


def _play_error(request_id: str, error: Exception) -> bytes:
    """A refused `Play` move, as the unary call's status would have said it (an encoded PlayUpdate)."""
    code, message, metadata = status_for(error)
    if code is grpc.StatusCode.INTERNAL:
        log.error("unexpected error", exc_info=error, extra={"fields": {"code": code.name}})
    current = next((int(value) for key, value in metadata if key == requests.CURRENT_SEQ_HEADER), 0)
    return game_session_pb2.PlayUpdate(error=game_session_pb2.PlayError(
        request_id=request_id, code=code.value[0], message=message, current_seq=current)).SerializeToString()

