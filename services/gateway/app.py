"""The gateway's HTTP application: the JSON API, the socket, the web table, health.

    POST /v1/sign-in                 {"name": "alice"} (dev) or {"idToken": "..."} (oidc) -> a session
    POST /v1/session:refresh         Authorization: Bearer <token> -> a new token, same session
    GET  /v1/config                  how players sign in here (dev or oidc: issuer, client id)
    POST /{package}.{Service}/{Method}   a player's unary call, JSON in and out (`methods`)
    GET  /v1/socket                  the WebSocket (`sockets`)
    GET  /healthz, /readyz           liveness; readiness (503 while stopping)
    GET  /                           the web table (static files), when BURACO_GATEWAY_WEB

Starlette (an ASGI toolkit) under uvicorn serves it: routing, WebSockets, CORS and static files
are theirs, well kept and fast, and nothing of HTTP is written by hand here. Every answer carries
`X-Request-Id` (the caller's, when it sends a valid one), which also follows the call to the
services; every failure is the JSON error body of `errors`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket

from services.client.calls import Unreachable
from services.common import logs
from services.common.metrics import Metrics
from services.gateway import methods
from services.gateway.edge import Limits, client_address, origin_allowed, own_origin
from services.gateway.errors import EdgeError, from_rpc, invalid, unauthenticated
from services.gateway.settings import GatewaySettings
from services.gateway.signin import SignIn
from services.gateway.sockets import CLOSE_ORIGIN, CLOSE_TOO_MANY, SocketMetrics, SocketSession
from services.gateway.upstream import Upstream

log = logging.getLogger("buraco.gateway")

WEB_ROOT = Path(__file__).parent / "web"
JSON_TYPES = ("application/json", "application/connect+json")


class Gateway:
    """What the routes work with: settings, sign-in, the services, limits, metrics."""

    def __init__(self, settings: GatewaySettings, sign_in: SignIn, upstream: Upstream, metrics: Metrics,
                 tracer: Any = None) -> None:
        self.settings = settings
        #: OpenTelemetry's tracer (None: tracing off): a server span per request, the parent of
        #: the calls it makes to the services
        self.tracer = tracer
        self.sign_in = sign_in
        self.upstream = upstream
        self.metrics = metrics
        self.socket_metrics = SocketMetrics(metrics.registry)
        self.limits = Limits(settings)
        self.sessions: set[SocketSession] = set()
        self.draining = False

    # -- helpers --------------------------------------------------------------------------------
    def client_ip(self, request: Request | WebSocket) -> str:
        peer = request.client.host if request.client is not None else ""
        return client_address(peer, request.headers.get("x-forwarded-for"), self.settings.trusted_proxies)

    async def body(self, request: Request) -> bytes:
        """The request's body, refused (413) beyond BURACO_GATEWAY_MAX_BODY_BYTES, as it arrives."""
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
        return b"".join(chunks)

    def identify(self, request: Request) -> str:
        """The player a request's bearer token names."""
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthenticated("`Authorization: Bearer <token>` required: sign in first (POST /v1/sign-in)")
        return self.sign_in.identify(token.strip()).name

    # -- routes ---------------------------------------------------------------------------------
    async def sign_in_route(self, request: Request) -> Response:
        body = _json_object(await self.body(request))
        try:
            session = await self.sign_in.sign_in(body, self.client_ip(request))
        except grpc.aio.AioRpcError as error:  # opening the new player's wallet account
            raise from_rpc(error, "wallet", logs.request_id_var.get() or "") from None
        return JSONResponse(session.to_json(time.time()))

    async def refresh_route(self, request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthenticated("`Authorization: Bearer <token>` required: the token to refresh")
        session = self.sign_in.refresh(token.strip(), self.client_ip(request))
        return JSONResponse(session.to_json(time.time()))

    async def config_route(self, request: Request) -> Response:
        settings = self.settings
        answer: dict[str, Any] = {"signIn": settings.sign_in}
        if settings.sign_in == "oidc":
            answer |= {"issuer": settings.oidc_issuer, "clientId": settings.oidc_audience}
        return JSONResponse(answer)

    async def call_route(self, request: Request) -> Response:
        path = f"/{request.path_params['service']}/{request.path_params['method']}"
        method = methods.METHODS.get(path)
        if method is None:
            raise EdgeError(grpc.StatusCode.UNIMPLEMENTED, f"{path}: not a call players make through the gateway")
        content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
        if content_type not in JSON_TYPES:
            raise EdgeError(grpc.StatusCode.INVALID_ARGUMENT, "Content-Type: application/json")
        player = self.identify(request)
        self.limits.by_player(player)
        try:
            message = method.parse(await self.body(request))
        except (json_format.ParseError, ValueError) as error:  # ValueError: not UTF-8
            raise invalid(f"{method.request.DESCRIPTOR.name}: {error}") from None
        try:
            answer = await self.upstream.call(method, message, player=player, client_ip=self.client_ip(request))
        except grpc.aio.AioRpcError as error:
            raise from_rpc(error, method.service, logs.request_id_var.get() or "") from None
        except Unreachable:
            raise EdgeError(grpc.StatusCode.UNAVAILABLE, "the table's owner cannot be reached; retry",
                            retry_after_ms=1000) from None
        return JSONResponse(methods.to_json(answer))

    async def socket_route(self, websocket: WebSocket) -> None:
        origin = websocket.headers.get("origin")
        if not origin_allowed(origin, own_origin(websocket.headers, websocket.url.scheme),
                              self.settings.allowed_origins):
            await websocket.close(CLOSE_ORIGIN, "this origin may not open the socket")
            return
        client_ip = self.client_ip(websocket)
        try:
            self.limits.by_address(client_ip)
        except EdgeError as error:
            await websocket.close(CLOSE_TOO_MANY, error.message)
            return
        if self.draining:
            await websocket.close(1001, "the gateway is stopping: reconnect")
            return
        session = SocketSession(
            websocket, client_ip=client_ip, sign_in=self.sign_in, upstream=self.upstream, limits=self.limits,
            metrics=self.socket_metrics, hello_seconds=self.settings.hello_seconds,
            idle_seconds=self.settings.idle_seconds, streams_per_socket=self.settings.streams_per_socket,
        )
        self.sessions.add(session)
        try:
            await session.run()
        finally:
            self.sessions.discard(session)

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        if self.draining:
            return JSONResponse({"status": "stopping"}, status_code=503)
        return JSONResponse({"status": "ready"})

    def stop_sessions(self) -> None:
        """Stopping: refuse new sockets and close the open ones (1001: reconnect, to another replica)."""
        self.draining = True
        for session in list(self.sessions):
            session.close(1001, "the gateway is stopping: reconnect")

    # -- the pipeline every HTTP request goes through ---------------------------------------------
    async def around(self, request: Request, handler: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.perf_counter()
        given = request.headers.get(logs.REQUEST_ID_HEADER, "")
        request_id = given if logs.valid_request_id(given) else logs.new_request_id()
        token = logs.request_id_var.set(request_id)
        route = request.url.path if request.url.path in _KNOWN_PATHS or request.url.path in methods.METHODS else "other"
        code = grpc.StatusCode.OK
        span = (self.tracer.start_as_current_span(f"HTTP {request.method} {route}")
                if self.tracer is not None else contextlib.nullcontext())
        try:
            with span:
                self.limits.by_address(self.client_ip(request))
                response = await handler(request)
        except EdgeError as error:
            code = error.code
            response = _error_response(error)
        except Exception:
            log.exception("request failed", extra={"fields": {"path": request.url.path}})
            code = grpc.StatusCode.INTERNAL
            response = _error_response(EdgeError(code, f"internal error (request id {request_id})"))
        finally:
            logs.request_id_var.reset(token)
        response.headers["x-request-id"] = request_id
        self.metrics.observe(route, code.name, time.perf_counter() - started)
        if code is not grpc.StatusCode.OK:
            log.info("request refused", extra={"fields": {"path": request.url.path, "code": code.name,
                                                          "request_id": request_id}})
        return response


_KNOWN_PATHS = frozenset({"/v1/sign-in", "/v1/session:refresh", "/v1/config", "/healthz", "/readyz"})


def _too_large(limit: int) -> EdgeError:
    return EdgeError(grpc.StatusCode.INVALID_ARGUMENT, f"the request body is larger than {limit} bytes", http=413)


def _error_response(error: EdgeError) -> Response:
    return JSONResponse(error.body(), status_code=error.http_status, headers=error.headers())


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body or b"{}")
    except ValueError:
        raise invalid("the body is not JSON") from None
    if not isinstance(value, dict):
        raise invalid("the body is a JSON object")
    return value


def build_app(gateway: Gateway) -> Starlette:
    """The ASGI application of `gateway`."""

    def wrap(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await gateway.around(request, handler)

        return endpoint

    routes: list[Any] = [
        Route("/v1/sign-in", wrap(gateway.sign_in_route), methods=["POST"]),
        Route("/v1/session:refresh", wrap(gateway.refresh_route), methods=["POST"]),
        Route("/v1/config", wrap(gateway.config_route), methods=["GET"]),
        Route("/healthz", gateway.healthz, methods=["GET"]),
        Route("/readyz", gateway.readyz, methods=["GET"]),
        WebSocketRoute("/v1/socket", gateway.socket_route),
        Route("/{service:str}/{method:str}", wrap(gateway.call_route), methods=["POST"]),
    ]
    if gateway.settings.web:
        index = WEB_ROOT / "index.html"

        async def page(request: Request) -> Response:
            return FileResponse(index, headers={"cache-control": "no-cache"})

        routes += [Route("/", page, methods=["GET"]), Mount("/web", StaticFiles(directory=WEB_ROOT), name="web")]
    origins = list(gateway.settings.allowed_origins)
    middleware = [Middleware(
        CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST"],
        allow_headers=["authorization", "content-type", "x-request-id"], expose_headers=["x-request-id", "retry-after"],
        max_age=600,
    )] if origins else []
    return Starlette(routes=routes, middleware=middleware)
