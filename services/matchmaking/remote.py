"""`ports.Platform` over gRPC: the wallet, ranking and game-session stubs of `deps.clients`, called
with this service's own token (`services/matchmaking`), a deadline, and the error mapping of
`ports` (definitive answers raise `Refused`, transient ones `Unreachable`).

Game tables are owned by one game-session replica at a time. A call about a table that reaches
another replica ends with UNAVAILABLE and the owner's address (trailer `buraco-owner-address`,
and `NotOwnerDetails` in the rich status); `_at_owner` follows it to the owner (a channel per
address, with the same service token), waits `retry_after_ms` while nobody owns the table, and
gives up as `Unreachable` after `MAX_REDIRECTS` hops (the saga retries later).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import status_pb2

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc, wallet_pb2
from services.client.calls import classified
from services.client.channels import Clients, ServiceTokens, channel
from services.client.ratings import batch_ratings
from services.client.tables import TABLE_STATES
from services.common.auth import Minter
from services.common.errors import OWNER_ADDRESS_HEADER
from services.matchmaking.ports import Account, GameTable, Refused, SeatSpec, Unreachable

T = TypeVar("T")

#: Ownership redirects followed for one call before it counts as unreachable.
MAX_REDIRECTS = 4
#: The longest wait for a table whose owner is changing, per hop.
MAX_OWNERLESS_WAIT_SECONDS = 2.0


def game_table(table: game_session_pb2.Table, address: str = "") -> GameTable:
    return GameTable(
        table.name, table.owner_address or address, table.match_id, TABLE_STATES.get(table.state, "unknown")
    )


def redirect_of(error: grpc.aio.AioRpcError) -> tuple[str, float] | None:
    """(owner address, seconds to wait first) when `error` is a NotOwner redirect; the address is
    empty while no replica owns the table. None for any other error."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    address = ""
    wait = 0.0
    found = False
    trailers: Any = error.trailing_metadata() or ()
    for item in trailers:
        key, value = item[0], item[1]
        if key == OWNER_ADDRESS_HEADER and isinstance(value, str):
            address, found = value, True
        elif key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                details = common_pb2.NotOwnerDetails()
                if detail.Unpack(details):
                    found = True
                    address = address or details.owner_address
                    wait = details.retry_after_ms / 1000
    return (address, min(wait, MAX_OWNERLESS_WAIT_SECONDS)) if found else None


class GrpcPlatform:
    def __init__(self, clients: Clients, minter: Minter | None, service: str, timeout: float) -> None:
        self.clients = clients
        self.timeout = timeout
        self._tokens = ServiceTokens(minter, service) if minter is not None else None
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def _call(self, service: str, call: Callable[[], Awaitable[T]]) -> T:
        return await classified(service, call)

    # -- wallet -----------------------------------------------------------------------------------

    async def account(self, player: str) -> Account | None:
        request = wallet_pb2.GetAccountRequest(name=f"accounts/player-{player}")
        try:
            reply: wallet_pb2.Account = await self._call(
                "wallet", lambda: self.clients.wallet.GetAccount(request, timeout=self.timeout)
            )
        except Refused as refused:
            if refused.code == "NOT_FOUND":
                return None
            raise
        return Account(player, reply.balance_chips - reply.held_chips)

    async def hold_bets(
        self, request_id: str, match_id: str, stakes: Sequence[tuple[str, int]], ttl_seconds: int
    ) -> None:
        request = wallet_pb2.HoldBetsRequest(
            request_id=request_id,
            match_id=match_id,
            stakes=[wallet_pb2.Stake(player=f"players/{player}", amount_chips=chips) for player, chips in stakes],
            hold_ttl=Duration(seconds=ttl_seconds),
        )
        await self._call("wallet", lambda: self.clients.wallet.HoldBets(request, timeout=self.timeout))

    async def void_pot(self, request_id: str, match_id: str, reason: str) -> None:
        request = wallet_pb2.VoidRequest(request_id=request_id, match_id=match_id, reason=reason[:500])
        try:
            await self._call("wallet", lambda: self.clients.wallet.Void(request, timeout=self.timeout))
        except Refused as refused:
            # No pot (no hold was ever taken), or one already voided: nothing is held.
            if refused.code == "NOT_FOUND" or (refused.code == "FAILED_PRECONDITION" and "voided" in refused.message):
                return
            raise

    # -- ranking ----------------------------------------------------------------------------------

    async def ratings(self, players: Sequence[str], preset: str, seats: int) -> dict[str, float]:
        return await batch_ratings(self.clients.ranking, players, preset, seats, self.timeout)

    # -- game sessions ----------------------------------------------------------------------------

    def _stub_at(self, address: str) -> game_session_pb2_grpc.GameSessionServiceAsyncStub:
        if not address:
            return self.clients.game_session
        if address not in self._channels:
            self._channels[address] = channel(address, token=self._tokens)
        return game_session_pb2_grpc.GameSessionServiceStub(self._channels[address])

    async def _at_owner(
        self,
        address: str,
        call: Callable[[game_session_pb2_grpc.GameSessionServiceAsyncStub], Awaitable[T]],
    ) -> T:
        """Calls the replica at `address` (empty: the configured game-session address) and
        follows NotOwner redirects to the table's owner."""
        for _ in range(MAX_REDIRECTS + 1):
            stub = self._stub_at(address)
            try:
                return await call(stub)
            except grpc.aio.AioRpcError as error:
                redirect = redirect_of(error)
                if redirect is None:
                    raise
                owner, wait = redirect
                if wait > 0:
                    await asyncio.sleep(wait)
                address = owner  # empty (no owner now): ask the configured address again
        raise Unreachable("game_session", "UNAVAILABLE", f"no owner found after {MAX_REDIRECTS} redirects")

    async def create_table(
        self,
        request_id: str,
        table_id: str,
        match_id: str,
        options: bytes,
        seats: Sequence[SeatSpec],
        lobby_table: str | None,
    ) -> GameTable:
        participants = [
            common_pb2.Participant(player=f"players/{seat.player}")
            if seat.player is not None
            else common_pb2.Participant(bot=seat.bot)  # type: ignore[arg-type]
            for seat in seats
        ]
        request = game_session_pb2.CreateTableRequest(
            request_id=request_id,
            table_id=table_id,
            table=game_session_pb2.Table(
                match_id=match_id,
                options=common_pb2.TableOptions.FromString(options),
                seats=[game_session_pb2.Seat(seat=i, participant=p) for i, p in enumerate(participants)],
                lobby_table=f"lobbyTables/{lobby_table}" if lobby_table else "",
            ),
        )
        try:
            reply: game_session_pb2.Table = await self._call(
                "game_session", lambda: self.clients.game_session.CreateTable(request, timeout=self.timeout)
            )
        except Refused as refused:
            if refused.code != "ALREADY_EXISTS":
                raise
            # Made by an earlier attempt whose answer was lost: ours if it carries this match id.
            existing = await self.get_table(f"tables/{table_id}")
            if existing.match_id != match_id:
                raise
            return existing
        return game_table(reply)

    async def get_table(self, table: str) -> GameTable:
        request = game_session_pb2.GetTableRequest(name=table)
        address = ""

        async def call(stub: game_session_pb2_grpc.GameSessionServiceAsyncStub) -> game_session_pb2.Table:
            reply: game_session_pb2.Table = await stub.GetTable(request, timeout=self.timeout)
            return reply

        reply = await self._call("game_session", lambda: self._at_owner(address, call))
        return game_table(reply)

    async def cancel_table(self, request_id: str, table: str, reason: str, address: str = "") -> None:
        request = game_session_pb2.CancelTableRequest(name=table, request_id=request_id, reason=reason[:500])

        async def call(stub: game_session_pb2_grpc.GameSessionServiceAsyncStub) -> game_session_pb2.Table:
            reply: game_session_pb2.Table = await stub.CancelTable(request, timeout=self.timeout)
            return reply

        try:
            await self._call("game_session", lambda: self._at_owner(address, call))
        except Refused as refused:
            if refused.code == "NOT_FOUND":
                return  # never created: nothing to cancel
            raise

    async def close(self) -> None:
        for open_channel in self._channels.values():
            await open_channel.close(None)
        self._channels.clear()
