"""Service-to-service channels: a `dns:///` address (a headless Service) balances calls round robin."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from buraco.v1 import wallet_pb2, wallet_pb2_grpc
from services.client.channels import Clients, balancing
from services.common.server import Deps
from services.wallet.service import SPEC as WALLET
from tests.services.harness import dev_minter, make_config, running


class Answering(wallet_pb2_grpc.WalletServiceServicer):
    async def GetAccount(self, request: wallet_pb2.GetAccountRequest, context: Any) -> wallet_pb2.Account:
        return wallet_pb2.Account(name=request.name)


def _register(server: grpc.aio.Server, deps: Deps) -> None:
    wallet_pb2_grpc.add_WalletServiceServicer_to_server(Answering(), server)  # type: ignore[abstract]


def test_only_dns_targets_are_balanced() -> None:
    assert balancing("dns:///wallet-headless:50053") == [("grpc.lb_policy_name", "round_robin")]
    assert balancing("localhost:50053") is None
    assert balancing("wallet:50053") is None


async def test_a_dns_address_reaches_the_service(tmp_path: Path) -> None:
    # localhost resolves to 127.0.0.1 and ::1 here; the server listens on the first only, and
    # round robin must still serve every call from the address that answers.
    async with running(replace(WALLET, register=_register), make_config("wallet", tmp_path)) as wallet:
        config = make_config(
            "matchmaking", tmp_path, addresses={"wallet": f"dns:///localhost:{wallet.port}"}
        )
        clients = Clients(config, dev_minter(tmp_path / "dev-keys"))
        try:
            for n in range(5):
                reply = await clients.wallet.GetAccount(
                    wallet_pb2.GetAccountRequest(name=f"accounts/player-p{n}"), timeout=10
                )
                assert reply.name == f"accounts/player-p{n}"
        finally:
            await clients.close()
