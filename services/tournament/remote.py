"""`ports.Services` over gRPC: the wallet, ranking and game-session stubs of `deps.clients`, called
with this service's own token (`services/tournament`), a deadline, and the error mapping of
`ports` (definitive answers raise `Refused`, transient ones `Unreachable`).

Game tables are owned by one game-session replica at a time: the table calls go through
`services.client.tables.Tables`, which follows the owner redirects (a channel per owner address,
on `deps.clients`), waits while nobody owns the table, gives up as `Unreachable` after
`redirects.MAX_REDIRECTS` hops (the scheduler retries later), and answers a retried CreateTable
whose table exists (ALREADY_EXISTS) with that table when it carries the pairing's match id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from google.protobuf.duration_pb2 import Duration

from buraco.v1 import common_pb2, game_session_pb2, wallet_pb2
from services.client.calls import classified
from services.client.channels import Clients
from services.client.ratings import batch_ratings
from services.client.redirects import Owners
from services.client.tables import TABLE_STATES, Tables
from services.tournament.ports import (
    Payout,
    PrizeShare,
    TableSeat,
    TableState,
)

T = TypeVar("T")


def table_state(table: game_session_pb2.Table) -> TableState:
    seats = tuple(
        TableSeat(seat.participant.player.removeprefix("players/"), seat.connected)
        for seat in sorted(table.seats, key=lambda s: s.seat)
    )
    return TableState(table.name, TABLE_STATES.get(table.state, "unknown"), seats, tuple(table.match_scores))


class GrpcServices:
    def __init__(self, clients: Clients, timeout: float) -> None:
        self.clients = clients
        self.timeout = timeout
        self.tables = Tables(Owners(clients), timeout)

    async def _call(self, service: str, call: Callable[[], Awaitable[T]]) -> T:
        return await classified(service, call)

    # -- wallet -----------------------------------------------------------------------------------

    async def hold_buy_in(self, request_id: str, tournament: str, player: str, chips: int, ttl_seconds: int) -> None:
        request = wallet_pb2.HoldBetsRequest(
            request_id=request_id,
            tournament=f"tournaments/{tournament}",
            stakes=[wallet_pb2.Stake(player=f"players/{player}", amount_chips=chips)],
            hold_ttl=Duration(seconds=ttl_seconds),
        )
        await self._call("wallet", lambda: self.clients.wallet.HoldBets(request, timeout=self.timeout))

    async def release_buy_in(self, request_id: str, tournament: str, player: str, reason: str) -> None:
        request = wallet_pb2.VoidRequest(
            request_id=request_id, tournament=f"tournaments/{tournament}", players=[f"players/{player}"], reason=reason
        )
        await self._call("wallet", lambda: self.clients.wallet.Void(request, timeout=self.timeout))

    async def refund_all(self, request_id: str, tournament: str, reason: str) -> None:
        request = wallet_pb2.VoidRequest(request_id=request_id, tournament=f"tournaments/{tournament}", reason=reason)
        await self._call("wallet", lambda: self.clients.wallet.Void(request, timeout=self.timeout))

    async def pay_prizes(self, request_id: str, tournament: str, shares: Sequence[PrizeShare]) -> Payout:
        request = wallet_pb2.SettleRequest(
            request_id=request_id,
            tournament=f"tournaments/{tournament}",
            prizes=[wallet_pb2.Prize(player=f"players/{s.player}", place=s.place, share_bp=s.share_bp) for s in shares],
        )
        reply: wallet_pb2.SettleResponse = await self._call(
            "wallet", lambda: self.clients.wallet.Settle(request, timeout=self.timeout)
        )
        prizes: dict[str, int] = {}
        for transfer in reply.transfers:
            account = transfer.credit_account.removeprefix("accounts/")
            if transfer.reason == wallet_pb2.REASON_CODE_SETTLE and account.startswith("player-"):
                player = account.removeprefix("player-")
                prizes[player] = prizes.get(player, 0) + transfer.amount_chips
        return Payout(reply.pot_chips, reply.house_cut_chips, prizes)

    # -- ranking ----------------------------------------------------------------------------------

    async def ratings(self, players: Sequence[str], preset: str, seats: int) -> dict[str, float]:
        return await batch_ratings(self.clients.ranking, players, preset, seats, self.timeout)

    # -- game sessions ----------------------------------------------------------------------------

    async def create_table(
        self,
        request_id: str,
        table_id: str,
        match_id: str,
        options: bytes,
        seats: Sequence[str],
        tournament: str,
    ) -> TableState:
        request = game_session_pb2.CreateTableRequest(
            request_id=request_id,
            table_id=table_id,
            table=game_session_pb2.Table(
                match_id=match_id,
                options=common_pb2.TableOptions.FromString(options),
                seats=[
                    game_session_pb2.Seat(seat=i, participant=common_pb2.Participant(player=f"players/{player}"))
                    for i, player in enumerate(seats)
                ],
                tournament=f"tournaments/{tournament}",
            ),
        )
        return table_state(await self.tables.create(request))

    async def get_table(self, table: str) -> TableState:
        return table_state(await self.tables.get(table))

    async def cancel_table(self, request_id: str, table: str, reason: str) -> None:
        await self.tables.cancel(game_session_pb2.CancelTableRequest(name=table, request_id=request_id, reason=reason))
