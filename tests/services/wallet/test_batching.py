"""Concurrent calls sharing transactions, on SQLite and PostgreSQL: they do share them, each call
still gets its own answer (a refused one leaves nothing behind), and a transaction that fails as
a whole runs its calls again one by one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from sqlalchemy import func, select

from buraco.v1 import wallet_pb2
from services.common.errors import ServiceError
from services.wallet import models
from services.wallet.store import Store
from tests.services.wallet.conftest import Ledger

PLAYERS = [f"p{i}" for i in range(8)]


def hold(i: int, players: list[str], amount: int) -> wallet_pb2.HoldBetsRequest:
    return wallet_pb2.HoldBetsRequest(
        request_id=f"hold-{i}",
        match_id=f"m{i}",
        stakes=[wallet_pb2.Stake(player=f"players/{p}", amount_chips=amount) for p in players],
    )


async def count(ledger: Ledger, table: Any, *where: Any) -> int:
    async with ledger.db.engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table).where(*where))).scalar_one())


async def test_concurrent_calls_share_transactions_and_refusals_leave_nothing(
    ledger_factory: Callable[..., Ledger],
) -> None:
    ledger = ledger_factory()
    await ledger.open(*PLAYERS)
    # 40 holds at once on the same 8 players, 300 chips each: 1000 chips cover 3 per player, so
    # most are refused; the ones admitted depend on the order, never on a race.
    requests = [hold(i, [PLAYERS[i % 8], PLAYERS[(i + 1) % 8]], 300) for i in range(40)]
    results = await asyncio.gather(*(ledger.call("HoldBets", r) for r in requests), return_exceptions=True)
    tx = ledger.api.tx
    assert tx.batched_calls == 40 and tx.batches < 40, "concurrent calls should share transactions"
    held = [r for r in results if isinstance(r, wallet_pb2.HoldBetsResponse)]
    refused = [r for r in results if isinstance(r, ServiceError)]
    assert len(held) + len(refused) == 40 and held and refused
    assert all(r.code == grpc.StatusCode.FAILED_PRECONDITION and "cannot cover" in r.message for r in refused)
    for name in PLAYERS:
        account = await ledger.account(f"player-{name}")
        assert account.held_chips <= 1000 and account.held_chips % 300 == 0
    assert sum([(await ledger.account(f"player-{n}")).held_chips for n in PLAYERS]) == 600 * len(held)
    # A refused call left no claim (its retry runs again) and no escrow (no pot was opened).
    escrows = await count(ledger, models.accounts, models.accounts.c.kind == "escrow")
    keys = await count(ledger, models.idempotency_keys, models.idempotency_keys.c.method == "HoldBets")
    assert escrows == keys == len(held)
    # Every answer is the call's own, and a retry gets it back.
    for request, result in zip(requests, results, strict=True):
        if isinstance(result, wallet_pb2.HoldBetsResponse):
            assert {h.match_id for h in result.holds} == {request.match_id}
            assert await ledger.call("HoldBets", request) == result
    report = await ledger.audit()
    assert report.ok, report.problems


async def test_a_transaction_that_fails_whole_runs_its_calls_one_by_one(
    ledger_factory: Callable[..., Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = ledger_factory()
    await ledger.open(*PLAYERS)
    tx = ledger.api.tx
    shared = tx._shared
    failed: list[int] = []

    async def crash_once(store: Store, calls: list[Any]) -> Any:
        if len(calls) > 1 and not failed:
            failed.append(len(calls))
            await shared(store, calls)  # all of it done, then the transaction fails
            raise RuntimeError("a crash inside the shared transaction")
        return await shared(store, calls)

    monkeypatch.setattr(tx, "_shared", crash_once)
    # Two calls start at once (as many as transactions in flight), the others wait and go together.
    requests = [hold(i, [PLAYERS[i]], 10) for i in range(8)]
    results = await asyncio.gather(*(ledger.call("HoldBets", r) for r in requests))
    assert failed and failed[0] > 1  # a shared transaction did fail...
    assert [r.holds[0].match_id for r in results] == [f"m{i}" for i in range(8)]  # ...yet all were applied
    for name in PLAYERS:
        assert (await ledger.account(f"player-{name}")).held_chips == 10  # once each
    report = await ledger.audit()
    assert report.ok, report.problems
