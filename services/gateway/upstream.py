"""The gateway's calls to the services, on behalf of one player at a time.

- Every call carries a player token the gateway mints for the player and the address the player
  is calling from (`PlayerTokens`), so the services see the client's address as the gateway saw it
  (the same-address rule of ranking), never an address a browser claims.
- Game-session calls go to the table's owner: `services.client.redirects.Owners` follows the
  redirects (one channel per owner), and falls back to the entry address when a named owner is
  gone. The browser never sees a redirect.
- A call that is safe to repeat (`methods.Method.retry_safe`) is retried while its deadline lasts
  when the service does not answer or is stopping (UNAVAILABLE, DEADLINE_EXCEEDED of one attempt,
  ABORTED, and CANCELLED: a replica that stops cancels the calls it was serving, and a table's
  owner found gone has its channel closed under them; the gateway's own cancellation, a browser
  gone, ends its task instead), with the same request, so with the same `request_id`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from buraco.v1 import wallet_pb2
from services.client.calls import Unreachable
from services.client.channels import Clients
from services.client.redirects import Owners
from services.common.auth import Kind, Minter
from services.common.config import Config
from services.gateway.methods import Method

#: Statuses after which a retry-safe call is tried again (while its deadline lasts).
RETRIED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED, grpc.StatusCode.DEADLINE_EXCEEDED,
                     grpc.StatusCode.CANCELLED})
#: The gateway's own identity, for the one call it makes as a service: opening a new player's
#: wallet account at sign-in.
#: Cached player tokens kept at most (the least recently minted go first).
MAX_CACHED_TOKENS = 100_000


class PlayerTokens:
    """Tokens for (player, client address), minted on first use and again a minute before they end."""

    def __init__(self, minter: Minter, ttl: float, clock: Callable[[], float] = time.time) -> None:
        self._minter = minter
        self._ttl = ttl
        self._clock = clock
        self._tokens: dict[tuple[str, str], tuple[str, float]] = {}

    def __call__(self, player: str, client_ip: str) -> str:
        key = (player, client_ip)
        now = self._clock()
        cached = self._tokens.get(key)
        if cached is not None and cached[1] - now > 60:
            return cached[0]
        token = self._minter.mint(Kind.PLAYER, player, ttl=self._ttl, client_ip=client_ip or None)
        self._tokens.pop(key, None)
        self._tokens[key] = (token, now + self._ttl)
        if len(self._tokens) > MAX_CACHED_TOKENS:
            del self._tokens[next(iter(self._tokens))]
        return token


class Upstream:
    """Channels to the services and the calls made on them for players."""

    def __init__(self, config: Config, minter: Minter, *, token_seconds: float, call_seconds: float,
                 interceptors: Sequence[Any] = ()) -> None:
        self.addresses = dict(config.addresses)
        # The channels carry no token of their own: each call carries its player's.
        self.clients = Clients(config, None, interceptors=interceptors)
        self.owners = Owners(self.clients)
        self.tokens = PlayerTokens(minter, token_seconds)
        self.call_seconds = call_seconds
        #: Channels of the table streams (`TableConnection`s), a few per game-session replica.
        self.table_channels = self.clients.table_channels(4)
        self._callables: dict[tuple[int, str], Any] = {}

    def metadata(self, player: str, client_ip: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.tokens(player, client_ip)}"),)

    def _callable(self, channel: grpc.aio.Channel, method: Method) -> Any:
        key = (id(channel), method.path)
        found = self._callables.get(key)
        if found is None:
            found = self._callables[key] = channel.unary_unary(
                method.path,
                request_serializer=method.request.SerializeToString,
                response_deserializer=method.response.FromString,
            )
        return found

    async def call(self, method: Method, request: Message, *, player: str, client_ip: str) -> Message:
        """The service's answer to `request`, for `player`; the call's last failure
        (grpc.aio.AioRpcError, or `Unreachable` when no owner of a table could be found)."""
        deadline = time.monotonic() + self.call_seconds
        retry = method.retry_safe(request)
        delay = 0.05
        while True:
            metadata = self.metadata(player, client_ip)
            timeout = max(0.05, deadline - time.monotonic())
            try:
                if method.service == "game_session":
                    result: Message = await self.owners.call_on(
                        functools.partial(self._call_on, method, request, metadata, timeout))
                else:
                    channel = self.clients.channel(method.service)
                    result = await self._callable(channel, method)(request, metadata=metadata, timeout=timeout)
                return result
            except grpc.aio.AioRpcError as error:
                if not retry or error.code() not in RETRIED or time.monotonic() + delay >= deadline:
                    raise
            except Unreachable:
                if not retry or time.monotonic() + delay >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _call_on(self, method: Method, request: Message, metadata: tuple[tuple[str, str], ...],
                       timeout: float, channel: grpc.aio.Channel) -> Message:
        answer: Message = await self._callable(channel, method)(request, metadata=metadata, timeout=timeout)
        return answer

    async def open_account(self, player: str) -> None:
        """Open `player`'s wallet account (with its starting grant) unless it is open already."""
        request = wallet_pb2.CreateAccountRequest(request_id=f"gateway-signup-{player}", player=f"players/{player}")
        # with the player's own token: the gateway's key signs player tokens only
        metadata = (("authorization", f"Bearer {self.tokens(player, '')}"),)
        try:
            await self.clients.wallet.CreateAccount(request, metadata=metadata, timeout=self.call_seconds)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise

    async def close(self) -> None:
        await self.table_channels.close()
        await self.clients.close()

