"""Outbound calls: channels that carry a bearer token and the current request id.

Inside a service, `deps.clients.wallet` (and `.ranking`, `.game_session`, `.matchmaking`,
`.tournament`) is a stub on a shared channel to that service's configured address; every call
carries a fresh service token of this service and the `x-request-id` of the call being handled.
To act for a player, add `metadata=act_for("alice")` to the call. `deps.clients.game_session_at(address)`
reaches one game-session replica (a table's owner) the same way.

Outside a service (tests, the CLI), `channel(address, token=...)` gives the same behaviour with a
fixed token or a token function. `ChannelPool` spreads many table connections (a load test's or a
benchmark's seats) over a few channels per address.

TLS (services.common.tls): with BURACO_TLS_CA_FILE, every channel is TLS, verified against that
bundle; a channel to one game-session replica (a pod address) verifies the name of the
game-session address instead. When the files change, later calls go on new channels and the old
ones close once their calls end (`RETIRE_GRACE_SECONDS`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import grpc

from buraco.v1 import (
    game_session_pb2_grpc,
    matchmaking_pb2_grpc,
    ranking_pb2_grpc,
    tournament_pb2_grpc,
    wallet_pb2_grpc,
)
from services.common import logs
from services.common.auth import ACT_FOR_HEADER, Kind, Minter
from services.common.config import Config
from services.common.tls import ClientTls, host_of

#: How long a channel replaced after a certificate change keeps serving the calls it carries.
RETIRE_GRACE_SECONDS = 60.0


def act_for(player: str) -> tuple[tuple[str, str], ...]:
    """Metadata for a service or admin call made on behalf of `player` (an id, not a name)."""
    return ((ACT_FOR_HEADER, f"players/{player}"),)


if TYPE_CHECKING:
    _UnaryUnary = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
    _UnaryStream = grpc.aio.UnaryStreamClientInterceptor[Any, Any]
else:  # not generic at run time
    _UnaryUnary = grpc.aio.UnaryUnaryClientInterceptor
    _UnaryStream = grpc.aio.UnaryStreamClientInterceptor


class _Outbound(_UnaryUnary, _UnaryStream):
    def __init__(self, token: Callable[[], str | None]) -> None:
        self._token = token

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        token = self._token()
        if token is not None and "authorization" not in metadata:
            metadata["authorization"] = f"Bearer {token}"
        if logs.REQUEST_ID_HEADER not in metadata:
            metadata[logs.REQUEST_ID_HEADER] = logs.request_id_var.get() or logs.new_request_id()
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await continuation(self._details(client_call_details), request)


def channel(
    address: str,
    *,
    token: str | Callable[[], str | None] | None = None,
    options: list[tuple[str, Any]] | None = None,
    interceptors: Sequence[Any] = (),
    credentials: grpc.ChannelCredentials | None = None,
    server_name: str | None = None,
) -> grpc.aio.Channel:
    """A channel that authenticates every call; `interceptors` come after (services.common.tracing's,
    when tracing is on). With `credentials`, TLS (`server_name`: the name the server's certificate
    must carry, when not the host of `address`); without, plaintext."""
    source: Callable[[], str | None] = (lambda: token) if isinstance(token, str) or token is None else token
    chain: Any = [_Outbound(source), *interceptors]  # grpc-stubs leaves client interceptors untyped
    return open_channel(address, options, credentials, server_name, chain)


def open_channel(address: str, options: list[tuple[str, Any]] | None, credentials: grpc.ChannelCredentials | None,
                 server_name: str | None, interceptors: Any = None) -> grpc.aio.Channel:
    """A bare channel (no token): plaintext without `credentials`, else TLS verifying `server_name`
    when given (a replica dialled at its pod address carries its service's name), else the host of
    `address`."""
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
    if server_name is not None and server_name != host_of(address):
        options = [*(options or ()), ("grpc.ssl_target_name_override", server_name)]
    return grpc.aio.secure_channel(address, credentials, options=options, interceptors=interceptors)


def _retire(channels: Sequence[grpc.aio.Channel], tasks: set[asyncio.Task[None]]) -> None:
    """Close `channels` once their calls end (at most RETIRE_GRACE_SECONDS), in the background."""
    for old in channels:
        task = asyncio.get_running_loop().create_task(old.close(RETIRE_GRACE_SECONDS))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


def balancing(address: str) -> list[tuple[str, Any]] | None:
    """Channel options for `address`: a `dns:///name:port` target (a headless Service in
    Kubernetes) or a list of addresses (`ipv4:10.0.0.1:50052,10.0.0.2:50052`) spreads calls over
    every address (round robin); any other target keeps gRPC's default (one connection)."""
    return [("grpc.lb_policy_name", "round_robin")] if address.startswith(("dns:", "ipv4:", "ipv6:")) else None


class ChannelPool:
    """Channels shared by many table connections: up to `size` HTTP/2 connections per address,
    handed out round robin (one connection's flow control then never holds up every seat's
    stream). The channels carry no token: each connection sends its own with every call.

    With `tls`, the channels are TLS and verify `server_name` (the game-session address's host,
    since the addresses are replicas' pod addresses)."""

    def __init__(self, size: int = 8, *, tls: ClientTls | None = None, server_name: str | None = None) -> None:
        self.size = size
        self.tls = tls
        self.server_name = server_name
        self._channels: dict[str, list[grpc.aio.Channel]] = {}
        self._next = 0
        self._version = 0
        self._retiring: set[asyncio.Task[None]] = set()

    def get(self, address: str) -> grpc.aio.Channel:
        credentials = None
        if self.tls is not None:
            version, credentials = self.tls.current()
            if version != self._version:  # new certificates: new channels from now on
                self._version = version
                _retire([c for channels in self._channels.values() for c in channels], self._retiring)
                self._channels.clear()
        channels = self._channels.setdefault(address, [])
        if len(channels) < self.size:
            # a distinct option keeps grpc from sharing one subchannel between them
            options = [("grpc.channel_pool_index", len(channels)), *(balancing(address) or ())]
            channels.append(open_channel(address, options, credentials, self.server_name))
            return channels[-1]
        self._next += 1
        return channels[self._next % len(channels)]

    async def close(self) -> None:
        for channels in self._channels.values():
            for channel in channels:
                await channel.close(None)
        self._channels.clear()
        for task in list(self._retiring):
            task.cancel()


class ServiceTokens:
    """This service's own token, re-minted a minute before it expires."""

    def __init__(self, minter: Minter, service: str, ttl: float = 600.0) -> None:
        self._minter, self._service, self._ttl = minter, service, ttl
        self._token: str | None = None
        self._expires = 0.0

    def __call__(self) -> str:
        now = time.monotonic()
        if self._token is None or now > self._expires - 60:
            self._token = self._minter.mint(Kind.SERVICE, self._service.replace("_", "-"), ttl=self._ttl)
            self._expires = now + self._ttl
        return self._token


class Clients:
    """Lazy channels and stubs to the other services (one channel per service, at its configured
    address), and to single game-session replicas that own tables (one channel per address)."""

    def __init__(self, config: Config, minter: Minter | None, *, interceptors: Sequence[Any] = ()) -> None:
        self._config = config
        self._interceptors = tuple(interceptors)
        self._tokens: Callable[[], str | None] = (
            ServiceTokens(minter, config.service) if minter is not None else (lambda: None)
        )
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._replicas: dict[str, grpc.aio.Channel] = {}
        #: TLS for every channel (BURACO_TLS_CA_FILE); None: plaintext. Files that do not load stop
        #: the process at start (services.common.tls.TlsError).
        self.tls = ClientTls(config.tls) if config.tls.calls_tls else None
        self._version = 0
        self._retiring: set[asyncio.Task[None]] = set()

    def _credentials(self) -> grpc.ChannelCredentials | None:
        """The credentials for a new channel; after a certificate change, the open channels are
        retired (their calls finish) and later calls open new ones."""
        if self.tls is None:
            return None
        version, credentials = self.tls.current()
        if version != self._version:
            self._version = version
            _retire([*self._channels.values(), *self._replicas.values()], self._retiring)
            self._channels.clear()
            self._replicas.clear()
        return credentials

    def channel(self, service: str) -> grpc.aio.Channel:
        credentials = self._credentials()
        if service not in self._channels:
            address = self._config.addresses[service]
            self._channels[service] = channel(
                address, token=self._tokens, options=balancing(address), interceptors=self._interceptors,
                credentials=credentials,
            )
        return self._channels[service]

    def channel_at(self, address: str) -> grpc.aio.Channel:
        """A channel to the one replica at `address` (`host:port`, as a redirect names a table's
        owner), authenticated and traced as the service channels are; made once per address and
        kept for every later call there, closed with the others."""
        credentials = self._credentials()
        if address not in self._replicas:
            self._replicas[address] = channel(
                address, token=self._tokens, options=balancing(address), interceptors=self._interceptors,
                credentials=credentials, server_name=self.replica_server_name,
            )
        return self._replicas[address]

    @property
    def replica_server_name(self) -> str | None:
        """The name a game-session replica's certificate carries: its service address's host."""
        return host_of(self._config.addresses.get("game_session", ""))

    def table_channels(self, size: int) -> ChannelPool:
        """A pool of channels to game-session replicas, with this process's TLS."""
        return ChannelPool(size, tls=self.tls, server_name=self.replica_server_name)

    def game_session_at(self, address: str) -> game_session_pb2_grpc.GameSessionServiceAsyncStub:
        """The game-session stub for the replica at `address` (`services.client.redirects.Owners`
        follows redirects with it)."""
        return game_session_pb2_grpc.GameSessionServiceStub(self.channel_at(address))

    @property
    def matchmaking(self) -> matchmaking_pb2_grpc.MatchmakingServiceAsyncStub:
        return matchmaking_pb2_grpc.MatchmakingServiceStub(self.channel("matchmaking"))

    @property
    def game_session(self) -> game_session_pb2_grpc.GameSessionServiceAsyncStub:
        return game_session_pb2_grpc.GameSessionServiceStub(self.channel("game_session"))

    @property
    def wallet(self) -> wallet_pb2_grpc.WalletServiceAsyncStub:
        return wallet_pb2_grpc.WalletServiceStub(self.channel("wallet"))

    @property
    def ranking(self) -> ranking_pb2_grpc.RankingServiceAsyncStub:
        return ranking_pb2_grpc.RankingServiceStub(self.channel("ranking"))

    @property
    def tournament(self) -> tournament_pb2_grpc.TournamentServiceAsyncStub:
        return tournament_pb2_grpc.TournamentServiceStub(self.channel("tournament"))

    async def close(self) -> None:
        for open_channel in [*self._channels.values(), *self._replicas.values()]:
            await open_channel.close(None)
        self._channels.clear()
        self._replicas.clear()
        for task in list(self._retiring):
            task.cancel()
