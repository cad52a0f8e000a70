"""`ports.Platform` over gRPC: the wallet, ranking and game-session stubs of `deps.clients`, called
with this service's own token (`services/matchmaking`), a deadline, and the error mapping of
`ports` (definitive answers raise `Refused`, transient ones `Unreachable`).

Game tables are owned by one game-session replica at a time: the table calls go through
`services.client.tables.Tables`, which follows the owner redirects (a channel per owner address,
on `deps.clients`), waits while nobody owns the table, gives up as `Unreachable` after
`redirects.MAX_REDIRECTS` hops (the saga retries later), and answers a retried CreateTable whose
table exists (ALREADY_EXISTS) with that table when it carries the saga's match id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from google.protobuf.duration_pb2 import Duration

from buraco.v1 import common_pb2, game_session_pb2, wallet_pb2
from services.client.calls import classified
from services.client.channels import Clients
from services.client.coalesce import Coalesced
from services.client.ratings import CoalescedRatings
from services.client.redirects import Owners
from services.client.tables import TABLE_STATES, Tables
from services.matchmaking.ports import Account, GameTable, Refused, SeatSpec

T = TypeVar("T")

#: Accounts per BatchGetAccounts call (the wallet's most).
ACCOUNTS_BATCH = 1000


def game_table(table: game_session_pb2.Table, address: str = "") -> GameTable:
    return GameTable(
        table.name, table.owner_address or address, table.match_id, TABLE_STATES.get(table.state, "unknown")
    )


class GrpcPlatform:
    def __init__(self, clients: Clients, timeout: float) -> None:
        self.clients = clients
        self.timeout = timeout
        self.tables = Tables(Owners(clients), timeout)
        #: Concurrent tickets' ratings read together (a burst of CreateTicket calls).
        self._ratings = CoalescedRatings(lambda: clients.ranking, timeout)
        #: Concurrent tickets' players' accounts read together (their eligibility for a bet).
        self._accounts: Coalesced[None, str, Account | None] = Coalesced(self._read_accounts, "account-reads")

    async def _call(self, service: str, call: Callable[[], Awaitable[T]]) -> T:
        return await classified(service, call)

    # -- wallet -----------------------------------------------------------------------------------

    async def account(self, player: str) -> Account | None:
        return (await self._accounts.get(None, [player]))[player]

    async def _read_accounts(self, _: None, players: list[str]) -> dict[str, Account | None]:
        """The players' accounts (None: no account), `ACCOUNTS_BATCH` per BatchGetAccounts call; one
        GetAccount per player from a wallet that does not serve BatchGetAccounts yet (a rolling
        upgrade)."""
        found: dict[str, Account | None] = {}
        for start in range(0, len(players), ACCOUNTS_BATCH):
            batch = players[start : start + ACCOUNTS_BATCH]
            request = wallet_pb2.BatchGetAccountsRequest(names=[f"accounts/player-{p}" for p in batch])

            async def call(r: wallet_pb2.BatchGetAccountsRequest = request) -> wallet_pb2.BatchGetAccountsResponse:
                reply: wallet_pb2.BatchGetAccountsResponse = await self.clients.wallet.BatchGetAccounts(
                    r, timeout=self.timeout)
                return reply

            try:
                reply = await self._call("wallet", call)
            except Refused as refused:
                if refused.code != "UNIMPLEMENTED":
                    raise
                accounts = await asyncio.gather(*(self._get_account(p) for p in batch))
                found.update(zip(batch, accounts, strict=True))
                continue
            if len(reply.accounts) + len(reply.missing) != len(batch):
                raise Refused("wallet", "INVALID_RESPONSE",
                              f"{len(reply.accounts)} accounts and {len(reply.missing)} missing for {len(batch)} asked")
            by_name = {account.name: account for account in reply.accounts}
            for player in batch:
                account = by_name.get(f"accounts/player-{player}")
                found[player] = None if account is None else Account(player, account.balance_chips - account.held_chips)
        return found

    async def _get_account(self, player: str) -> Account | None:
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
        return await self._ratings.ratings(players, preset, seats)

    # -- game sessions ----------------------------------------------------------------------------

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
        return game_table(await self.tables.create(request))

    async def get_table(self, table: str) -> GameTable:
        return game_table(await self.tables.get(table))

    async def cancel_table(self, request_id: str, table: str, reason: str, address: str = "") -> None:
        request = game_session_pb2.CancelTableRequest(name=table, request_id=request_id, reason=reason[:500])
        try:
            await self.tables.cancel(request, address)
        except Refused as refused:
            if refused.code == "NOT_FOUND":
                return  # never created: nothing to cancel
            raise

    async def close(self) -> None:
        """Nothing of its own to close: the channels, owners' included, are `deps.clients`', which
        the server closes when it stops."""
