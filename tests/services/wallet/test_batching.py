"""Concurrent calls sharing transactions, on SQLite and PostgreSQL: they do share them, each call
still gets its own answer (a refused one leaves nothing behind), and a transaction that fails as
a whole runs its calls again one by one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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


async def test_transactions_in_flight_never_share_a_players_rows_and_keep_their_order(
    ledger_factory: Callable[..., Ledger], monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = ledger_factory()
    await ledger.open(*PLAYERS)
    tx = ledger.api.tx
    shared, run_batch = tx._shared, tx._run_batch
    players = {
        "hold-0": {"p0", "p1"},  # in flight first, held open until the others are queued
        "hold-1": {"p1", "p2"},  # shares p1 with it: waits for it
        "hold-2": {"p2", "p3"},  # shares p2 with hold-1 only: must not overtake it
        "hold-3": {"p4", "p5"},  # shares nothing: starts beside hold-0
    }
    started: list[set[str]] = []  # the request ids of each shared transaction, as it starts
    running: list[set[str]] = []  # the players of those in flight
    overlaps: list[set[str]] = []
    release = asyncio.Event()

    def watch(calls: list[Any]) -> Awaitable[None]:
        ids = {call.claim.request_id for call in calls}
        rows = set().union(*(players[i] for i in ids))
        overlaps.extend(rows & other for other in running if rows & other)
        started.append(ids)
        running.append(rows)

        async def run() -> None:
            try:
                await run_batch(calls)
            finally:
                running.remove(rows)

        return run()

    async def hold_open(store: Store, calls: list[Any]) -> Any:
        if any(call.claim.request_id == "hold-0" for call in calls):
            await release.wait()
        return await shared(store, calls)

    monkeypatch.setattr(tx, "_run_batch", watch)
    monkeypatch.setattr(tx, "_shared", hold_open)
    first = asyncio.ensure_future(ledger.call("HoldBets", hold(0, ["p0", "p1"], 10)))
    try:
        while not started:
            await asyncio.sleep(0)
        others = [
            asyncio.ensure_future(ledger.call("HoldBets", hold(i, sorted(players[f"hold-{i}"]), 10))) for i in (1, 2, 3)
        ]
        await asyncio.sleep(0.05)  # time enough for anything else to start
        assert started == [{"hold-0"}, {"hold-3"}]
    finally:
        release.set()
    results = await asyncio.gather(first, *others)
    assert started == [{"hold-0"}, {"hold-3"}, {"hold-1", "hold-2"}]
    assert not overlaps
    assert [r.holds[0].match_id for r in results] == ["m0", "m1", "m2", "m3"]
    assert (await ledger.account("player-p1")).held_chips == 20
    report = await ledger.audit()
    assert report.ok, report.problems
