"""`GrpcPlatform`'s reads of accounts: concurrent tickets' players read together with
BatchGetAccounts, and one GetAccount per player from a wallet that does not serve it yet."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from buraco.v1 import wallet_pb2
from services.matchmaking.ports import Account, Refused
from services.matchmaking.remote import GrpcPlatform
from tests.services.client.conftest import Failed


class Wallet:
    """A wallet stub knowing alice (100 chips, 30 held) and bob (50); `batch`: whether it serves
    BatchGetAccounts; calls wait for `release`."""

    def __init__(self, batch: bool = True, count_off: bool = False) -> None:
        self.batch = batch
        self.count_off = count_off
        self.calls: list[tuple[str, list[str]]] = []
        self.release = asyncio.Event()
        self.accounts = {"accounts/player-alice": (100, 30), "accounts/player-bob": (50, 0)}

    def _account(self, name: str) -> wallet_pb2.Account:
        balance, held = self.accounts[name]
        return wallet_pb2.Account(name=name, balance_chips=balance, held_chips=held)

    async def BatchGetAccounts(self, request: wallet_pb2.BatchGetAccountsRequest, timeout: float) -> Any:
        self.calls.append(("batch", list(request.names)))
        await self.release.wait()
        if not self.batch:
            raise Failed(grpc.StatusCode.UNIMPLEMENTED)
        found = [self._account(n) for n in request.names if n in self.accounts]
        missing = [n for n in request.names if n not in self.accounts]
        return wallet_pb2.BatchGetAccountsResponse(accounts=found, missing=missing[1:] if self.count_off else missing)

    async def GetAccount(self, request: wallet_pb2.GetAccountRequest, timeout: float) -> Any:
        self.calls.append(("one", [request.name]))
        if request.name not in self.accounts:
            raise Failed(grpc.StatusCode.NOT_FOUND)
        return self._account(request.name)


class Clients:
    def __init__(self, wallet: Wallet) -> None:
        self.wallet = wallet


async def _eligibility(wallet: Wallet) -> list[Account | None]:
    platform = GrpcPlatform(Clients(wallet), 5)  # type: ignore[arg-type]
    asked = [asyncio.create_task(platform.account(p)) for p in ("alice", "bob", "nobody")]
    for _ in range(5):
        await asyncio.sleep(0)
    wallet.release.set()
    return list(await asyncio.gather(*asked))


async def test_concurrent_players_accounts_are_read_in_one_call() -> None:
    wallet = Wallet()
    assert await _eligibility(wallet) == [Account("alice", 70), Account("bob", 50), None]
    assert wallet.calls == [("batch", ["accounts/player-alice", "accounts/player-bob", "accounts/player-nobody"])]


async def test_a_wallet_without_batch_get_accounts_is_asked_one_account_at_a_time() -> None:
    wallet = Wallet(batch=False)
    assert await _eligibility(wallet) == [Account("alice", 70), Account("bob", 50), None]
    assert [kind for kind, _ in wallet.calls] == ["batch", "one", "one", "one"]


async def test_an_answer_that_does_not_account_for_every_player_is_refused() -> None:
    with pytest.raises(Refused, match="INVALID_RESPONSE"):
        await _eligibility(Wallet(count_off=True))
