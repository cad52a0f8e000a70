"""Who may move chips, over gRPC: each method that moves chips admits the services that call it
(matchmaking and tournaments hold; the game-session service and tournaments settle; all three
void; any service expires holds) and admins; only admins grant; only admins and the player
themselves open an account (it comes with the starting grant); every other caller gets
PERMISSION_DENIED naming itself, the method and who may, and changes nothing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

from buraco.v1 import common_pb2, wallet_pb2, wallet_pb2_grpc
from services.common.auth import Kind
from services.wallet.service import WalletService
from services.wallet.settings import WalletSettings
from tests.conftest import DatabaseTarget
from tests.services.callers import denied, outcome
from tests.services.harness import bearer, dev_minter, make_config, running

#: Each method's callers, as `denied` names them, and which of the test's identities it admits.
WHO = {
    "HoldBets": ("services/matchmaking, services/tournament or admins", {"matchmaking", "tournament", "admin"}),
    "Settle": ("services/game-session, services/tournament or admins", {"game-session", "tournament", "admin"}),
    "Void": (
        "services/game-session, services/matchmaking, services/tournament or admins",
        {"game-session", "matchmaking", "tournament", "admin"},
    ),
    "ExpireHolds": ("any service or admins", {"matchmaking", "game-session", "tournament", "ranking", "admin"}),
    "Grant": ("admins", {"admin"}),
    "CreateAccount": ("admins", {"admin", "alice"}),  # a player opens their own (checked once read)
}
PRINCIPALS = {
    "matchmaking": "services/matchmaking",
    "game-session": "services/game-session",
    "tournament": "services/tournament",
    "ranking": "services/ranking",
    "admin": "admins/ops",
    "alice": "players/alice",
}


async def test_each_method_that_moves_chips_admits_only_its_callers(
    tmp_path: Path, db_target: DatabaseTarget
) -> None:
    config = make_config("wallet", tmp_path, database_url=db_target.url, database_schema=db_target.schema)
    service = WalletService(settings=WalletSettings(expiry_sweep_interval=timedelta(0)))
    minter = dev_minter(config.dev_keys_dir)
    services = ("matchmaking", "game-session", "tournament", "ranking")
    tokens = {name: bearer(minter.mint(Kind.SERVICE, name)) for name in services}
    tokens["admin"] = bearer(minter.mint(Kind.ADMIN, "ops"))
    tokens["alice"] = bearer(minter.mint(Kind.PLAYER, "alice"))
    async with running(service.spec(), config) as server, grpc.aio.insecure_channel(server.address) as channel:
        stub = wallet_pb2_grpc.WalletServiceStub(channel)
        methods: dict[str, tuple[Callable[..., Awaitable[Any]], Callable[[], Message]]] = {
            "HoldBets": (stub.HoldBets, wallet_pb2.HoldBetsRequest),
            "Settle": (stub.Settle, wallet_pb2.SettleRequest),
            "Void": (stub.Void, wallet_pb2.VoidRequest),
            "ExpireHolds": (stub.ExpireHolds, wallet_pb2.ExpireHoldsRequest),
            "Grant": (stub.Grant, wallet_pb2.GrantRequest),
            "CreateAccount": (stub.CreateAccount, wallet_pb2.CreateAccountRequest),
        }
        # Authorization comes before the request is read: an empty request is INVALID_ARGUMENT
        # (its request_id) for a caller the method admits, PERMISSION_DENIED for any other.
        for method, (call, request_type) in methods.items():
            who, admitted = WHO[method]
            for name, token in tokens.items():
                got = await outcome(call(request_type(), metadata=token))
                if name in admitted:
                    assert got[0] == grpc.StatusCode.INVALID_ARGUMENT and got[1].startswith("request_id:"), (
                        method, name, got)
                else:
                    assert got == denied(PRINCIPALS[name], f"WalletService.{method}", who), (method, name)

        # The real callers succeed; a refused caller's call changes nothing.
        for name in ("alice", "bob"):
            await stub.CreateAccount(
                wallet_pb2.CreateAccountRequest(request_id=f"open-{name}", player=f"players/{name}"),
                metadata=tokens["admin"],
            )
        # a service may not open an account (it would mint the starting grant for any name it chose)
        mallory = wallet_pb2.CreateAccountRequest(request_id="open-mallory", player="players/mallory")
        assert await outcome(stub.CreateAccount(mallory, metadata=tokens["matchmaking"])) == denied(
            "services/matchmaking", "WalletService.CreateAccount", "admins")
        missing = await outcome(stub.GetAccount(wallet_pb2.GetAccountRequest(name="accounts/player-mallory"),
                                                metadata=tokens["admin"]))
        assert missing[0] == grpc.StatusCode.NOT_FOUND
        stakes = [wallet_pb2.Stake(player=f"players/{p}", amount_chips=100) for p in ("alice", "bob")]
        await stub.HoldBets(
            wallet_pb2.HoldBetsRequest(request_id="m1-hold", match_id="m1", stakes=stakes),
            metadata=tokens["matchmaking"],
        )
        settle = wallet_pb2.SettleRequest(
            request_id="m1-settle",
            match_id="m1",
            first_seat=0,
            outcomes=[
                common_pb2.PlayerOutcome(player="players/alice", seat=0, outcome=common_pb2.OUTCOME_WON),
                common_pb2.PlayerOutcome(player="players/bob", seat=1, outcome=common_pb2.OUTCOME_LOST),
            ],
        )
        assert (await outcome(stub.Settle(settle, metadata=tokens["matchmaking"])))[0] == (
            grpc.StatusCode.PERMISSION_DENIED)
        alice = wallet_pb2.GetAccountRequest(name="accounts/player-alice")
        held = await stub.GetAccount(alice, metadata=tokens["alice"])
        assert (held.balance_chips, held.held_chips) == (1000, 100)
        settled = await stub.Settle(settle, metadata=tokens["game-session"])
        assert settled.pot_chips == 200
        assert (await stub.GetAccount(alice, metadata=tokens["alice"])).held_chips == 0

        buy_in = wallet_pb2.HoldBetsRequest(
            request_id="t1-alice", tournament="tournaments/t1",
            stakes=[wallet_pb2.Stake(player="players/alice", amount_chips=50)],
        )
        assert (await stub.HoldBets(buy_in, metadata=tokens["tournament"])).holds[0].tournament == "tournaments/t1"
        refund = wallet_pb2.VoidRequest(request_id="t1-refund", tournament="tournaments/t1", reason="cancelled")
        assert (await outcome(stub.Void(refund, metadata=tokens["ranking"])))[0] == grpc.StatusCode.PERMISSION_DENIED
        assert (await stub.GetAccount(alice, metadata=tokens["alice"])).held_chips == 50
        assert len((await stub.Void(refund, metadata=tokens["tournament"])).transfers) == 1
        assert (await stub.GetAccount(alice, metadata=tokens["alice"])).held_chips == 0

        grant = wallet_pb2.GrantRequest(
            request_id="promo-1", player="players/bob", amount_chips=25, kind=wallet_pb2.GrantRequest.KIND_PROMOTION
        )
        assert (await outcome(stub.Grant(grant, metadata=tokens["matchmaking"])))[0] == (
            grpc.StatusCode.PERMISSION_DENIED)
        bob = wallet_pb2.GetAccountRequest(name="accounts/player-bob")
        before = (await stub.GetAccount(bob, metadata=tokens["admin"])).balance_chips
        granted = await stub.Grant(grant, metadata=tokens["admin"])
        assert granted.requested_by == "admins/ops"
        assert (await stub.GetAccount(bob, metadata=tokens["admin"])).balance_chips == before + 25
