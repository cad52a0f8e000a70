"""Game-session ownership redirects: reading one, and following them to a table's owner.

A game table is owned by one game-session replica at a time. A call about a table that reaches
another replica ends with UNAVAILABLE, the trailer `buraco-owner-address: host:port` (absent while
no replica owns the table, during a takeover) and a `google.rpc.Status` in `grpc-status-details-bin`
carrying `buraco.v1.NotOwnerDetails {resource, owner_address, epoch, retry_after_ms}`
(docs/contracts.md, "Table ownership and redirects").

`redirect_of(error)` reads a redirect from either of the two (the trailer's address wins when both
name one); any other failure is not a redirect. `Owners` makes a game-session call at the table's
owner: it asks the entry address (the configured game-session address, a load balancer in
production), or a replica named before, and follows redirects, each owner reached on one channel
kept for the next call there (`Clients.game_session_at`). A named owner that does not answer (it
died) sends the call back to the entry address, which reaches whoever takes the table over. The
calls it follows must be safe to repeat: reads, or mutations carrying a request id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from buraco.v1 import common_pb2, game_session_pb2_grpc
from services.client.calls import Unreachable, trailer
from services.client.channels import Clients
from services.common.errors import OWNER_ADDRESS_HEADER

T = TypeVar("T")

#: The trailer holding the rich status (a serialised google.rpc.Status).
STATUS_DETAILS_HEADER = "grpc-status-details-bin"
#: Redirects followed for one call (a fall-back to the entry address counts as one) before it
#: counts as unreachable; the caller retries it later.
MAX_REDIRECTS = 4
#: The longest wait, per hop, for a table whose owner is changing (the replica's `retry_after_ms`
#: is honoured up to this).
MAX_OWNERLESS_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class Redirect:
    """Where a table's owner is, as a replica that does not own it answered."""

    #: `host:port` of the owner; empty while no replica owns the table.
    owner_address: str
    #: Seconds the replica asked to wait before asking again (0: at once).
    retry_after: float = 0.0
    #: The resource the call was about (`tables/{table}`), and the owner's fencing epoch, when the
    #: status details carry them.
    resource: str = ""
    epoch: int = 0


def not_owner_details(error: grpc.aio.AioRpcError) -> common_pb2.NotOwnerDetails | None:
    """The `NotOwnerDetails` in a failed call's rich status; None when there is none (or the status
    cannot be read: a malformed detail is no redirect, never an exception)."""
    metadata: Any = error.trailing_metadata()
    for item in metadata or ():
        if item[0] != STATUS_DETAILS_HEADER or not isinstance(item[1], bytes):
            continue
        try:
            status = status_pb2.Status.FromString(item[1])
            for detail in status.details:
                details = common_pb2.NotOwnerDetails()
                if detail.Unpack(details):
                    return details
        except DecodeError:
            return None
    return None


def redirect_of(error: grpc.aio.AioRpcError) -> Redirect | None:
    """The redirect `error` is (UNAVAILABLE with the owner trailer, or `NotOwnerDetails`, or both);
    None for any other failure, including an UNAVAILABLE that names no owner in either way (a
    replica stopping, or one that cannot be reached)."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    address = trailer(error, OWNER_ADDRESS_HEADER)
    details = not_owner_details(error)
    if details is None:
        return Redirect(address) if address is not None else None
    return Redirect(
        address or details.owner_address,
        details.retry_after_ms / 1000,
        details.resource,
        details.epoch,
    )


class Owners:
    """Game-session calls made at the owner of the table they are about, over `clients`' channels
    (this service's token, the request id, the tracing interceptors)."""

    def __init__(
        self,
        clients: Clients,
        *,
        max_redirects: int = MAX_REDIRECTS,
        max_wait: float = MAX_OWNERLESS_WAIT_SECONDS,
    ) -> None:
        self.clients = clients
        self.max_redirects = max_redirects
        self.max_wait = max_wait
        #: Redirects followed so far, fall-backs to the entry address included.
        self.redirects = 0

    def stub(self, address: str = "") -> game_session_pb2_grpc.GameSessionServiceAsyncStub:
        """The stub for the replica at `address`; empty: the entry address."""
        return self.clients.game_session_at(address) if address else self.clients.game_session

    def channel(self, address: str = "") -> grpc.aio.Channel:
        """The channel to the replica at `address`; empty: the entry address."""
        return self.clients.channel_at(address) if address else self.clients.channel("game_session")

    async def call(
        self, call: Callable[[game_session_pb2_grpc.GameSessionServiceAsyncStub], Awaitable[T]], address: str = ""
    ) -> T:
        """`call(stub)` at the replica at `address` (empty: the entry address), then at each owner
        a redirect names (`follow`)."""
        return await self.follow(lambda at: call(self.stub(at)), address)

    async def call_on(self, call: Callable[[grpc.aio.Channel], Awaitable[T]], address: str = "") -> T:
        """`call(channel)`, as `call` does with a stub: for a caller that makes its own
        multi-callables (the gateway's calls by method path)."""
        return await self.follow(lambda at: call(self.channel(at)), address)

    async def follow(self, call: Callable[[str], Awaitable[T]], address: str = "") -> T:
        """`call(address)` at `address` (empty: the entry address), then at each owner
        a redirect names. A redirect that names no owner yet is followed, after its
        `retry_after` (at most `max_wait`), at the entry address; so is a named owner that does
        not answer (UNAVAILABLE and no redirect). Any other failure is raised as it is; more than
        `max_redirects` hops raise `Unreachable`."""
        hops = 0
        while True:
            try:
                return await call(address)
            except grpc.aio.AioRpcError as error:
                redirect = redirect_of(error)
                if redirect is None:
                    if not address or error.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    next_address = ""  # the owner named earlier is gone: whoever took over is behind the entry
                else:
                    wait = min(redirect.retry_after, self.max_wait)
                    if wait > 0:
                        await asyncio.sleep(wait)
                    next_address = redirect.owner_address
            hops += 1
            if hops > self.max_redirects:
                raise Unreachable(
                    "game_session", "UNAVAILABLE", f"no owner found after {self.max_redirects} redirects"
                )
            self.redirects += 1
            address = next_address
