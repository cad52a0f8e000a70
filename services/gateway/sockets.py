"""One WebSocket per player session: everything that streams, and the moves of a table.

The protocol (JSON text messages; docs/gateway.md has it in full, with examples):

    client                                               gateway
    {"type":"hello","token":T}                       ->  {"type":"ready","player":"players/alice","expiresIn":900}
    {"type":"subscribe","id":"t","stream":"table",
     "table":"tables/x","afterSeq":0,"play":true}    ->  {"type":"subscribed","id":"t"}
                                                         {"type":"changes","sub":"t","seq":12,"events":[...]}
    {"type":"act","id":"m1","sub":"t",
     "method":"Discard","request":{...}}             ->  {"type":"result","id":"m1","seq":13}
    {"type":"subscribe","id":"k","stream":"ticket",
     "request":{"name":"tickets/..."}}               ->  {"type":"update","sub":"k","message":{...}}
    {"type":"unsubscribe","id":"k"}                  ->  {"type":"unsubscribed","id":"k"}
    {"type":"token","token":T2}                      ->  {"type":"token","expiresIn":900}
    {"type":"ping"}                                  ->  {"type":"pong"}
                                                         {"type":"end","sub":"t","error":{...}}  (a stream ended)
                                                         {"type":"error","id":"m1","error":{...}}

What the gateway guarantees on a table subscription: each change's events once, in order, from
`afterSeq` on (a browser that reconnects sends the last seq it applied), across a game-session
replica stopping or dying and the table moving to another replica (the gateway resumes the
`Play` or `SubscribeChanges` stream at the new owner with the last seq it passed on, and sends
the moves in flight again with their request ids, which the table applies once). A table
subscription ends (`end`) when the match is over or for a status the browser must act on
(PERMISSION_DENIED, NOT_FOUND, OUT_OF_RANGE). The other streams (`ticket`, `lobby_table`, `lobby`,
`tournament`) send whole objects, so a dropped one is simply opened again.

The socket closes with a code and a reason the browser can act on: 4400 (a broken protocol: a
message that is not JSON, an unknown type), 4401 (no hello in time, a bad token, a token expired
without a refresh: sign in again), 4403 (an origin not allowed), 4429 (too many sockets for the
player), 1001 (the gateway is stopping: reconnect), 1008 (idle), 1009 (a message too big, by the
server under it), 1013 (the client reads too slowly: its messages backed up).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.message import Message
from prometheus_client import CollectorRegistry, Counter, Gauge
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from buraco.v1 import game_session_pb2
from services.client.connection import PLAY_FIELDS, ActionRefused, TableConnection
from services.client.model import StreamPosition
from services.common.auth import Identity, Kind
from services.gateway import methods
from services.gateway.edge import Limits
from services.gateway.errors import EdgeError, from_rpc, invalid
from services.gateway.methods import to_json
from services.gateway.signin import SignIn
from services.gateway.upstream import RETRIED, Upstream

log = logging.getLogger("buraco.gateway.sockets")

#: Messages waiting to be written to one socket at most; beyond, the client is too slow (1013).
MAX_OUTBOUND = 2000
#: The longest wait between two attempts to reopen a dropped watch stream.
MAX_RETRY_SECONDS = 2.0

CLOSE_PROTOCOL = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_ORIGIN = 4403
CLOSE_TOO_MANY = 4429
CLOSE_GOING_AWAY = 1001
CLOSE_IDLE = 1008
CLOSE_TOO_SLOW = 1013


class SocketMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.open = Gauge("buraco_gateway_sockets_open", "Open player sockets.", registry=registry)
        self.messages = Counter("buraco_gateway_socket_messages", "Socket messages, by direction.",
                                ["direction"], registry=registry)
        self.received = self.messages.labels("in")
        self.sent = self.messages.labels("out")
        self.closed = Counter("buraco_gateway_sockets_closed", "Sockets closed, by close code.", ["code"],
                              registry=registry)


class Closed(Exception):
    """The socket is to be closed with `code` and `reason`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


@dataclass
class Subscription:
    """One stream a socket follows."""

    id: str
    stream: str
    task: asyncio.Task[None] | None = None
    connection: TableConnection | None = None
    #: the table's seq passed on last (a table subscription)
    seq: int = 0
    closing: bool = False
    acts: set[asyncio.Task[None]] = field(default_factory=set)


class SocketSession:
    """One player's socket, from its hello to its close."""

    def __init__(self, websocket: WebSocket, *, client_ip: str, sign_in: SignIn, upstream: Upstream,
                 limits: Limits, metrics: SocketMetrics, hello_seconds: float, idle_seconds: float,
                 streams_per_socket: int, clock: Callable[[], float] = time.time) -> None:
        self.ws = websocket
        self.client_ip = client_ip
        self.sign_in = sign_in
        self.upstream = upstream
        self.limits = limits
        self.metrics = metrics
        self.hello_seconds = hello_seconds
        self.idle_seconds = idle_seconds
        self.streams_per_socket = streams_per_socket
        self.clock = clock
        self.identity: Identity | None = None
        self.subscriptions: dict[str, Subscription] = {}
        self._outbound: asyncio.Queue[str | Closed] = asyncio.Queue(MAX_OUTBOUND)
        self._expiry: asyncio.TimerHandle | None = None
        self._closed: Closed | None = None
        self._done = asyncio.Event()
        #: a token for this socket's streams upstream, valid until the session ends: the socket
        #: itself enforces the browser's token (closing when it expires unrefreshed), and a long
        #: stream must not end because an internal token did
        self._stream_token = ""
        self._session_end = 0.0

    @property
    def player(self) -> str:
        assert self.identity is not None
        return self.identity.name

    # -- sending --------------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        """Queue a message for the client; a client too slow to read closes (1013)."""
        if self._closed is not None:
            return
        try:
            self._outbound.put_nowait(json.dumps(message, separators=(",", ":")))
        except asyncio.QueueFull:
            self.close(CLOSE_TOO_SLOW, "the client reads too slowly: messages backed up")

    def close(self, code: int, reason: str) -> None:
        """Close the socket after what is queued (idempotent: the first reason wins)."""
        if self._closed is not None:
            return
        self._closed = Closed(code, reason)
        with contextlib.suppress(asyncio.QueueFull):
            self._outbound.put_nowait(self._closed)
        self._done.set()

    def error(self, message_id: str | None, error: EdgeError) -> None:
        self.send({"type": "error", "id": message_id, "error": error.body()})

    async def _write(self) -> None:
        while True:
            item = await self._outbound.get()
            if isinstance(item, Closed):
                return
            await self.ws.send_text(item)
            self.metrics.sent.inc()

    # -- the session ----------------------------------------------------------------------------
    async def run(self) -> None:
        await self.ws.accept()
        self.metrics.open.inc()
        writer = asyncio.get_running_loop().create_task(self._write())
        reader = asyncio.get_running_loop().create_task(self._read())
        counted = False
        try:
            done = asyncio.get_running_loop().create_task(self._done.wait())
            await asyncio.wait({reader, writer, done}, return_when=asyncio.FIRST_COMPLETED)
            done.cancel()
            counted = self.identity is not None
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                error = reader.exception()
                if not isinstance(error, WebSocketDisconnect):
                    log.warning("socket reader failed", exc_info=error)
                    self.close(1011, "internal error")
            if self._closed is not None and not writer.done():
                # let what is queued before the close go out (bounded: a stuck client is cut)
                with contextlib.suppress(TimeoutError, Exception):
                    await asyncio.wait_for(asyncio.shield(writer), 2.0)
        finally:
            reader.cancel()
            writer.cancel()
            await self._stop_subscriptions()
            if self._expiry is not None:
                self._expiry.cancel()
            if counted:
                self.limits.close_socket(self.player)
            self.metrics.open.dec()
            closed = self._closed or Closed(1000, "")
            self.metrics.closed.labels(str(closed.code)).inc()
            if self.ws.application_state == WebSocketState.CONNECTED:
                with contextlib.suppress(Exception):
                    await self.ws.close(closed.code, closed.reason)

    async def _receive(self, timeout: float | None) -> dict[str, Any]:
        try:
            text = await asyncio.wait_for(self.ws.receive_text(), timeout)
        except TimeoutError:
            raise
        except KeyError:  # a binary frame: starlette reads it as no text
            raise Closed(CLOSE_PROTOCOL, "messages are JSON text") from None
        self.metrics.received.inc()
        try:
            message = json.loads(text)
        except ValueError:
            raise Closed(CLOSE_PROTOCOL, "a message is not JSON") from None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise Closed(CLOSE_PROTOCOL, "a message is a JSON object with a `type`")
        return message

    async def _read(self) -> None:
        try:
            try:
                hello = await self._receive(self.hello_seconds)
            except TimeoutError:
                raise Closed(CLOSE_UNAUTHENTICATED, "no hello: send {\"type\":\"hello\",\"token\":...} first") from None
            if hello["type"] != "hello":
                raise Closed(CLOSE_UNAUTHENTICATED, "the first message is the hello, with the token")
            self._authenticate(hello.get("token"))
            try:
                self.limits.open_socket(self.player)
            except EdgeError as error:
                self.identity = None
                raise Closed(CLOSE_TOO_MANY, error.message) from None
            self.send({"type": "ready", "player": f"players/{self.player}", "expiresIn": self._expires_in()})
            while True:
                idle = None if self.subscriptions else self.idle_seconds
                try:
                    message = await self._receive(idle)
                except TimeoutError:
                    raise Closed(CLOSE_IDLE, f"idle for {self.idle_seconds:g} s with nothing subscribed") from None
                self._dispatch(message)
        except Closed as closed:
            self.close(closed.code, closed.reason)

    def _authenticate(self, token: Any) -> None:
        if not isinstance(token, str) or not token:
            raise Closed(CLOSE_UNAUTHENTICATED, "hello: `token` required")
        try:
            identity = self.sign_in.identify(token)
        except EdgeError as error:
            raise Closed(CLOSE_UNAUTHENTICATED, error.message) from None
        if self.identity is not None and identity.name != self.identity.name:
            raise Closed(CLOSE_UNAUTHENTICATED, "a refreshed token must be the same player's")
        self.identity = identity
        self._session_end = self.sign_in.session_end(token)
        if self._expiry is not None:
            self._expiry.cancel()
        loop = asyncio.get_running_loop()
        self._expiry = loop.call_at(loop.time() + self._expires_in(), self.close, CLOSE_UNAUTHENTICATED,
                                    "the token expired: refresh it before it ends, or sign in again")

    def _expires_in(self) -> int:
        assert self.identity is not None
        return max(0, int(self.identity.expires_at - self.clock()))

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        message_id = message.get("id")
        if message_id is not None and not isinstance(message_id, str | int):
            raise Closed(CLOSE_PROTOCOL, "`id` is a string or a number")
        mid = None if message_id is None else str(message_id)
        if kind == "ping":
            self.send({"type": "pong", "id": message_id})
            return
        try:
            self.limits.by_player(self.player)
            if kind == "token":
                self._authenticate(message.get("token"))
                self.send({"type": "token", "id": message_id, "expiresIn": self._expires_in()})
            elif kind == "subscribe":
                self._subscribe(mid, message)
            elif kind == "unsubscribe":
                self._unsubscribe(mid)
            elif kind == "act":
                self._act(mid, message)
            else:
                raise Closed(CLOSE_PROTOCOL, f"unknown message type {kind!r}")
        except EdgeError as error:
            self.error(mid, error)

    # -- subscriptions --------------------------------------------------------------------------
    def _stream_metadata_token(self) -> str:
        if not self._stream_token:
            assert self.identity is not None
            ttl = max(60.0, self._session_end - self.clock())
            self._stream_token = self.sign_in.minter.mint(Kind.PLAYER, self.player, ttl=ttl,
                                                           client_ip=self.client_ip or None)
        return self._stream_token

    def _subscribe(self, sub_id: str | None, message: dict[str, Any]) -> None:
        if not sub_id:
            raise invalid("subscribe: `id` required (it names the subscription)")
        if sub_id in self.subscriptions:
            raise EdgeError(grpc.StatusCode.ALREADY_EXISTS, f"subscription {sub_id!r} is open already")
        if len(self.subscriptions) >= self.streams_per_socket:
            raise EdgeError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"at most {self.streams_per_socket} subscriptions per socket")
        stream = message.get("stream")
        if stream == "table":
            subscription = self._subscribe_table(sub_id, message)
        elif isinstance(stream, str) and stream in methods.WATCHES:
            subscription = self._subscribe_watch(sub_id, stream, message)
        else:
            raise invalid(f"stream: one of table, {', '.join(methods.WATCHES)}")
        self.subscriptions[sub_id] = subscription
        self.send({"type": "subscribed", "id": sub_id})

    def _subscribe_table(self, sub_id: str, message: dict[str, Any]) -> Subscription:
        table = message.get("table")
        if not isinstance(table, str) or not table.startswith("tables/"):
            raise invalid("table: the table's resource name, `tables/{id}`")
        after = message.get("afterSeq", 0)
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            raise invalid("afterSeq: the last seq applied (a whole number, 0 for the whole table)")
        play = bool(message.get("play", False))
        position = StreamPosition(table)
        position.seq = after
        connection = TableConnection(
            self.upstream.addresses["game_session"], self._stream_metadata_token(), table,
            channels=self.upstream.table_channels, by_change=True, play=play, model=position,
        )
        connection.retry_seconds = 60.0
        connection.retry_delay_max = MAX_RETRY_SECONDS
        subscription = Subscription(sub_id, "table", connection=connection, seq=after)

        def changed(events: list[game_session_pb2.TableEvent]) -> None:
            subscription.seq = events[-1].seq or subscription.seq
            self.send({"type": "changes", "sub": sub_id, "seq": connection.model.seq,
                       "events": [to_json(event) for event in events]})

        connection.on_change = changed
        subscription.task = asyncio.get_running_loop().create_task(self._follow_table(subscription))
        return subscription

    async def _follow_table(self, subscription: Subscription) -> None:
        connection = subscription.connection
        assert connection is not None
        error: EdgeError | None = None
        try:
            await connection.start(wait=False)
            follower = connection.follower
            assert follower is not None
            await follower
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError as failure:
            error = from_rpc(failure, "game_session", "")
        except Exception as failure:  # a stream that could not go on (retries exhausted)
            log.info("table stream ended", extra={"fields": {"table": connection.table, "error": str(failure)}})
            error = EdgeError(grpc.StatusCode.UNAVAILABLE, "the table's stream could not be resumed; subscribe again")
        self._ended(subscription, error, finished=connection.model.finished)

    def _ended(self, subscription: Subscription, error: EdgeError | None, finished: bool = False) -> None:
        if subscription.closing:
            return
        self.subscriptions.pop(subscription.id, None)
        message: dict[str, Any] = {"type": "end", "sub": subscription.id}
        if finished:
            message["finished"] = True
        if error is not None:
            message["error"] = error.body()
        self.send(message)

    def _subscribe_watch(self, sub_id: str, stream: str, message: dict[str, Any]) -> Subscription:
        method = methods.watch(stream)
        body = message.get("request", {})
        if not isinstance(body, dict):
            raise invalid("request: a JSON object, the stream's request")
        try:
            request = method.request()
            json_format.ParseDict(body, request, ignore_unknown_fields=False)
        except json_format.ParseError as error:
            raise invalid(f"request: {error}") from None
        subscription = Subscription(sub_id, stream)
        subscription.task = asyncio.get_running_loop().create_task(self._follow_watch(subscription, method, request))
        return subscription

    async def _follow_watch(self, subscription: Subscription, method: methods.Method, request: Message) -> None:
        channel = self.upstream.clients.channel(method.service)
        call = channel.unary_stream(method.path, request_serializer=method.request.SerializeToString,
                                    response_deserializer=method.response.FromString)
        delay = 0.05
        while True:
            metadata = (("authorization", f"Bearer {self._stream_metadata_token()}"),)
            try:
                async for update in call(request, metadata=metadata):
                    self.send({"type": "update", "sub": subscription.id, "message": to_json(update)})
                    delay = 0.05
                self._ended(subscription, None)
                return
            except grpc.aio.AioRpcError as failure:
                if failure.code() not in RETRIED:
                    self._ended(subscription, from_rpc(failure, method.service, ""))
                    return
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_SECONDS)

    def _unsubscribe(self, sub_id: str | None) -> None:
        subscription = self.subscriptions.pop(sub_id or "", None)
        if subscription is None:
            raise EdgeError(grpc.StatusCode.NOT_FOUND, f"no open subscription {sub_id!r}")
        asyncio.get_running_loop().create_task(self._stop(subscription))
        self.send({"type": "unsubscribed", "id": sub_id})

    async def _stop(self, subscription: Subscription) -> None:
        subscription.closing = True
        for act in list(subscription.acts):
            act.cancel()
        if subscription.task is not None:
            subscription.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await subscription.task
        if subscription.connection is not None:
            await subscription.connection.close()

    async def _stop_subscriptions(self) -> None:
        subscriptions, self.subscriptions = list(self.subscriptions.values()), {}
        await asyncio.gather(*(self._stop(s) for s in subscriptions), return_exceptions=True)

    # -- moves ----------------------------------------------------------------------------------
    def _act(self, message_id: str | None, message: dict[str, Any]) -> None:
        if not message_id:
            raise invalid("act: `id` required (the result answers it)")
        subscription = self.subscriptions.get(str(message.get("sub", "")))
        if subscription is None or subscription.connection is None:
            raise invalid("sub: the id of an open table subscription")
        connection = subscription.connection
        if not connection.play:
            raise EdgeError(grpc.StatusCode.FAILED_PRECONDITION,
                            "sub: a table subscribed with \"play\": true (a seated player's)")
        method = message.get("method")
        if not isinstance(method, str) or method not in PLAY_FIELDS:
            raise invalid(f"method: one of {', '.join(PLAY_FIELDS)}")
        body = message.get("request", {})
        if not isinstance(body, dict):
            raise invalid("request: a JSON object, the move's request")
        request_type = game_session_pb2.PlayRequest.DESCRIPTOR.fields_by_name[PLAY_FIELDS[method]].message_type
        assert request_type is not None
        request: Any = message_factory.GetMessageClass(request_type)()
        try:
            json_format.ParseDict(body, request, ignore_unknown_fields=False)
        except json_format.ParseError as error:
            raise invalid(f"request: {error}") from None
        if not request.table:
            request.table = connection.table
        if not request.request_id:  # a browser retrying a move sends its own, to be applied once
            request.request_id = uuid.uuid4().hex
        task = asyncio.get_running_loop().create_task(self._send_move(message_id, connection, method, request))
        subscription.acts.add(task)
        task.add_done_callback(subscription.acts.discard)

    async def _send_move(self, message_id: str, connection: TableConnection, method: str, request: Message) -> None:
        try:
            result = await connection.send(method, request)
        except ActionRefused as refused:
            details = [{"currentSeq": refused.current_seq}] if refused.current_seq is not None else []
            self.error(message_id, EdgeError(refused.code, refused.message, details))
            return
        except grpc.aio.AioRpcError as failure:
            self.error(message_id, from_rpc(failure, "game_session", ""))
            return
        except (ConnectionError, TimeoutError) as failure:
            self.error(message_id, EdgeError(grpc.StatusCode.UNAVAILABLE, str(failure)))
            return
        self.send({"type": "result", "id": message_id, "seq": result.seq,
                   "requestId": getattr(request, "request_id", "")})
