"""The server pipeline every call of every service goes through, in one interceptor.

For each call, in order:
1. request id: the caller's `x-request-id` (or a new one) goes into the log context and back in
   the trailing metadata;
2. shutdown: while the server drains, new calls get UNAVAILABLE;
3. authentication: the bearer token is verified (UNAUTHENTICATED otherwise) and the identity is
   made available to the handler (`services.common.auth.current_identity()`);
4. limits: the caller's rate limit (RESOURCE_EXHAUSTED) and, for streams, the caller's
   open-stream cap; on a bidirectional stream each message the caller sends spends a token of the
   same rate limit, and one over it reaches the handler as `Refused` (the handler answers it
   without ending the stream); a message that comes after the caller's token expired ends the
   stream with UNAUTHENTICATED;
5. the handler; a request that could not be decoded gets INVALID_ARGUMENT without reaching it;
6. errors: domain errors become their status through `errors.status_for`; anything else is
   INTERNAL with a fixed message and the traceback in the log;
7. metrics and the access log (DEBUG for OK calls; INFO for failures and for calls a service or
   admin made on behalf of a player, so acting-for is always recorded).

Health checks and reflection skip the pipeline: probes carry no token.

On shutdown, `end_streams()` ends every open server stream with UNAVAILABLE ("resume"), which
clients answer by reconnecting (to another replica) with their last sequence number.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from services.common import logs
from services.common.auth import Identity, Kind, Verifier, current_identity_or_none, set_current_identity
from services.common.errors import (
    InvalidArgumentError,
    Metadata,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    status_for,
)
from services.common.metrics import Metrics
from services.common.ratelimit import RateLimiter, StreamLimiter

EXEMPT_PREFIXES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)
SHUTDOWN_MESSAGE = "server shutting down; reconnect and resume"

log = logging.getLogger("buraco.rpc")


class _Undecodable:
    """Stands for a request whose bytes were not a valid message."""


UNDECODABLE = _Undecodable()


@dataclass(frozen=True)
class Refused:
    """A message of a bidirectional stream that the pipeline refused (over the rate limit)."""

    request: Any
    error: Exception


def _passthrough(serialize: Callable[[Any], bytes] | None) -> Callable[[Any], bytes] | None:
    """The method's response serializer, except that a handler's bytes go out as they are: a
    handler may send a message it encoded itself (the game-session streams write their messages
    from events encoded once, `services.game_session.wire`)."""
    if serialize is None:
        return None

    def run(message: Any) -> bytes:
        return message if type(message) is bytes else serialize(message)

    return run


def _safe_deserializer(
    deserialize: Callable[[bytes], Any] | None,
) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None

    def run(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception:
            return UNDECODABLE

    return run


@dataclass(frozen=True)
class Limits:
    rate_per_second: float = 20.0
    burst: int = 40
    service_rate_per_second: float = 2000.0
    max_streams_per_caller: int = 8


class Pipeline(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(
        self, *, service: str, verifier: Verifier, metrics: Metrics, limits: Limits = Limits()
    ) -> None:
        self.service = service
        self.verifier = verifier
        self.metrics = metrics
        self.limits = limits
        self.rate_limiter = RateLimiter()
        self.stream_limiter = StreamLimiter(limits.max_streams_per_caller)
        self.draining = False
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}  # type: ignore[type-arg]
        self._stream_tasks: set[asyncio.Task[Any]] = set()
        self._ending: set[asyncio.Task[Any]] = set()
        self._waiting: set[asyncio.Task[Any]] = set()

    # -- wiring ---------------------------------------------------------------------------------

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],  # type: ignore[type-arg]
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:  # type: ignore[type-arg]
        method: str = handler_call_details.method
        cached = self._handlers.get(method)
        if cached is not None:
            return cached
        handler = await continuation(handler_call_details)
        if handler is None or method.startswith(EXEMPT_PREFIXES):
            return handler
        if handler.unary_unary is not None:
            wrapped = grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=_safe_deserializer(handler.request_deserializer),
                response_serializer=_passthrough(handler.response_serializer),
            )
        elif handler.unary_stream is not None:
            wrapped = grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream),
                request_deserializer=_safe_deserializer(handler.request_deserializer),
                response_serializer=_passthrough(handler.response_serializer),
            )
        elif handler.stream_stream is not None:
            wrapped = grpc.stream_stream_rpc_method_handler(
                self._stream(method, handler.stream_stream, bidirectional=True),
                request_deserializer=_safe_deserializer(handler.request_deserializer),
                response_serializer=_passthrough(handler.response_serializer),
            )
        else:  # client streams alone: the contracts have none
            return handler
        self._handlers[method] = wrapped
        return wrapped

    # -- the steps ------------------------------------------------------------------------------

    def _rate(self, identity: Identity) -> tuple[float, int]:
        if identity.kind is Kind.SERVICE:
            return self.limits.service_rate_per_second, int(self.limits.service_rate_per_second) + 1
        return self.limits.rate_per_second, self.limits.burst

    def _begin(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> Identity:
        metadata = context.invocation_metadata() or ()
        request_id = None
        for key, value in metadata:
            if key == logs.REQUEST_ID_HEADER and isinstance(value, str) and logs.valid_request_id(value):
                request_id = value
                break
        request_id = request_id or logs.new_request_id()
        logs.request_id_var.set(request_id)
        logs.method_var.set(method)
        context.set_trailing_metadata(((logs.REQUEST_ID_HEADER, request_id),))
        if self.draining:
            raise UnavailableError(SHUTDOWN_MESSAGE)
        identity = self.verifier.authenticate(metadata)
        logs.caller_var.set(identity.principal)
        rate, burst = self._rate(identity)
        self.rate_limiter.take(identity.principal, rate, burst)
        set_current_identity(identity)
        return identity

    async def _fail(self, context: grpc.aio.ServicerContext[Any, Any], error: Exception) -> None:
        """Log `error` and end the call with its status (raises grpc's AbortError)."""
        code, message, metadata = status_for(error)
        if code is grpc.StatusCode.INTERNAL:
            log.error("unexpected error", exc_info=error, extra={"fields": {"code": code.name}})
        request_id = logs.request_id_var.get() or ""
        trailing: Metadata = (*metadata, (logs.REQUEST_ID_HEADER, request_id))
        await context.abort(code, message, trailing_metadata=trailing)

    def _finish(self, method: str, code: str, started: float, message: str = "") -> None:
        elapsed = time.perf_counter() - started
        self.metrics.observe(method, code, elapsed)
        identity = current_identity_or_none()
        acting_for = identity.acting_for if identity is not None else None
        level = logging.DEBUG if code == "OK" and acting_for is None else logging.INFO
        if log.isEnabledFor(level):
            fields: dict[str, Any] = {"code": code, "duration_ms": round(elapsed * 1000, 3)}
            if acting_for is not None:
                fields["acting_for"] = f"players/{acting_for}"
            if message:
                fields["details"] = message
            log.log(level, "call", extra={"fields": fields})

    # -- unary calls ----------------------------------------------------------------------------

    def _unary(self, method: str, inner: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        in_flight = self.metrics.in_flight.labels(self.service, method)

        async def behaviour(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            code, message = "OK", ""
            in_flight.inc()
            try:
                self._begin(method, context)
                if request is UNDECODABLE:
                    raise InvalidArgumentError("request", "could not be decoded as the method's message")
                result = inner(request, context)
                if inspect.isawaitable(result):
                    result = await result
                code = _code_name(context)
                return result
            except grpc.aio.AbortError:
                code = _code_name(context)
                raise
            except asyncio.CancelledError:
                code = "CANCELLED"
                raise
            except Exception as error:
                code_, message, _ = status_for(error)
                code = code_.name
                await self._fail(context, error)
            finally:
                in_flight.dec()
                self._finish(method, code, started, message)

        return behaviour

    # -- streams --------------------------------------------------------------------------------

    def _metered(self, requests: AsyncIterator[Any], identity: Identity) -> AsyncIterator[Any]:
        """A bidirectional stream's requests, each spending a token of the caller's rate limit; once
        the caller's token has expired, the stream ends (UNAUTHENTICATED: reconnect with a new one)."""
        rate, burst = self._rate(identity)
        take, principal, expired = self.rate_limiter.take, identity.principal, self.verifier.expired

        async def each() -> AsyncIterator[Any]:
            async for request in requests:
                if expired(identity):
                    raise UnauthenticatedError("token expired; reconnect with a fresh token")
                try:
                    take(principal, rate, burst)
                except ResourceExhaustedError as error:
                    yield Refused(request, error)
                    continue
                yield request

        return each()

    def _stream(self, method: str, inner: Callable[..., Any], bidirectional: bool = False) -> \
            Callable[..., AsyncIterator[Any]]:
        """Server streams, and bidirectional ones (`request` is then the requests' iterator)."""
        streams_open = self.metrics.streams.labels(self.service)

        async def behaviour(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            started = time.perf_counter()
            code, message = "OK", ""
            key: str | None = None
            iterator: Any = None
            task = asyncio.current_task()
            assert task is not None  # grpc.aio runs every call in a task of its own
            try:
                identity = self._begin(method, context)
                self.stream_limiter.acquire(identity.principal)
                key = identity.principal
                streams_open.inc()
                self._stream_tasks.add(task)
                if bidirectional:
                    request = self._metered(request, identity)
                elif request is UNDECODABLE:
                    raise InvalidArgumentError("request", "could not be decoded as the method's message")
                result = inner(request, context)
                if hasattr(result, "__aiter__"):
                    iterator = result.__aiter__()
                    while True:
                        if task in self._ending:
                            raise UnavailableError(SHUTDOWN_MESSAGE)
                        # Only a stream waiting for its next item is cancelled by end_streams();
                        # one whose message is being sent sees _ending when it comes back here.
                        self._waiting.add(task)
                        try:
                            item = await iterator.__anext__()
                        except StopAsyncIteration:
                            break
                        finally:
                            self._waiting.discard(task)
                        yield item
                else:
                    for item in result:
                        yield item
                code = _code_name(context)
            except grpc.aio.AbortError:
                code = _code_name(context)
                raise
            except asyncio.CancelledError:
                if task not in self._ending:
                    code = "CANCELLED"
                    raise
                task.uncancel()
                code, message = "UNAVAILABLE", SHUTDOWN_MESSAGE
                await self._fail(context, UnavailableError(SHUTDOWN_MESSAGE))
            except Exception as error:
                code_, message, _ = status_for(error)
                code = code_.name
                await self._fail(context, error)
            finally:
                if iterator is not None and hasattr(iterator, "aclose"):
                    with contextlib.suppress(Exception):
                        await iterator.aclose()
                if key is not None:
                    self.stream_limiter.release(key)
                    streams_open.dec()
                self._stream_tasks.discard(task)
                self._ending.discard(task)
                self._finish(method, code, started, message)

        return behaviour

    def end_streams(self) -> int:
        """End every open server stream with UNAVAILABLE; returns how many there were."""
        tasks = list(self._stream_tasks)
        for task in tasks:
            self._ending.add(task)
            if task in self._waiting:
                task.cancel()
        return len(tasks)


def _code_name(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    try:
        code: Any = context.code()
    except Exception:
        return "UNKNOWN"
    if code is None:
        return "OK"
    if isinstance(code, grpc.StatusCode):
        return code.name
    # grpc.aio reports the code set by abort() as the cygrpc integer.
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status.name
    return "UNKNOWN"
