"""Wallet writes cut short by their callers' deadlines, over gRPC: nothing holds the database
afterwards, and not a chip is lost or invented.

Many Grant and Void calls at once, each with a deadline of a random fraction of a lone write's
time, so that the server cancels them at every point of their transactions (waiting for the
writer, in a statement, between two, at the commit). Then: on SQLite the write lock is free (a
cancelled call that kept it made every later write wait in the busy handler), a plain write
succeeds at once, every cut call retried with its request id is answered (applied once, whether
or not the first attempt committed), and the balances and the ledger's audit come out exact.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy.engine import make_url

from buraco.v1 import wallet_pb2, wallet_pb2_grpc
from services.common.auth import Kind
from services.common.server import Server
from services.wallet.service import SPEC as WALLET
from services.wallet.service import run_audit
from services.wallet.settings import WalletSettings
from tests.conftest import DatabaseTarget
from tests.services.harness import bearer, dev_minter, make_config, running

PLAYERS = [f"p{i}" for i in range(8)]
ROUNDS = 4
#: Grants and voids sent at once in a round.
CONCURRENT = 40
STAKE = 10


def _in_flight(server: Server) -> float:
    """Calls the server is still handling (a cancelled one until its handler has ended)."""
    total = 0.0
    for metric in server.metrics.registry.collect():
        if metric.name == "buraco_rpc_in_flight":
            total += sum(sample.value for sample in metric.samples)
    return total


async def _until_idle(server: Server, timeout: float = 30.0) -> None:
    """Wait until every handler the cut calls started has ended (their cancellation handled)."""
    async with asyncio.timeout(timeout):
        while _in_flight(server) > 0:
            await asyncio.sleep(0.01)


def _write_lock_is_free(target: DatabaseTarget) -> bool:
    probe = sqlite3.connect(make_url(target.url).database or "", timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


@pytest.mark.parametrize("seed", [11, 12])
async def test_calls_cut_by_their_deadline_never_hold_the_database(
    db_target: DatabaseTarget, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    minter = dev_minter(tmp_path / "dev-keys")
    admin = bearer(minter.mint(Kind.ADMIN, "root"))
    service = bearer(minter.mint(Kind.SERVICE, "matchmaking"))
    config = make_config("wallet", tmp_path, database_url=db_target.url, database_schema=db_target.schema)
    start = WalletSettings().starting_grant_chips
    async with running(WALLET, config) as server, grpc.aio.insecure_channel(server.address) as channel:
        wallet: Any = wallet_pb2_grpc.WalletServiceStub(channel)
        for name in PLAYERS:
            await wallet.CreateAccount(
                wallet_pb2.CreateAccountRequest(request_id=f"open-{name}", player=f"players/{name}"),
                metadata=bearer(minter.mint(Kind.ADMIN, "ops")),  # an admin opens accounts, no service
            )
        loop = asyncio.get_running_loop()
        began = loop.time()
        await wallet.Grant(wallet_pb2.GrantRequest(
            request_id="lone", player="players/p0", amount_chips=1, kind=wallet_pb2.GrantRequest.KIND_PROMOTION,
        ), metadata=admin)
        lone = loop.time() - began
        granted = {name: 0 for name in PLAYERS}
        granted["p0"] = 1
        sent: list[tuple[str, Any, Any]] = []  # (method, request, metadata) of every cut call
        cut = 0
        for round_number in range(ROUNDS):
            # stakes held normally, then voided by calls that are cut short, among grants
            matches = [f"m{round_number}-{i}" for i in range(CONCURRENT // 4)]
            for match in matches:
                pair = rng.sample(PLAYERS, 2)
                await wallet.HoldBets(wallet_pb2.HoldBetsRequest(
                    request_id=f"hold-{match}", match_id=match,
                    stakes=[wallet_pb2.Stake(player=f"players/{p}", amount_chips=STAKE) for p in pair],
                ), metadata=service)
            calls: list[tuple[str, Any, Any]] = [
                ("Void", wallet_pb2.VoidRequest(request_id=f"void-{m}", match_id=m, reason="cut short"), service)
                for m in matches
            ]
            while len(calls) < CONCURRENT:
                name, amount = rng.choice(PLAYERS), rng.randint(1, 50)
                granted[name] += amount
                calls.append(("Grant", wallet_pb2.GrantRequest(
                    request_id=f"grant-{round_number}-{len(calls)}", player=f"players/{name}", amount_chips=amount,
                    kind=wallet_pb2.GrantRequest.KIND_PROMOTION,
                ), admin))
            rng.shuffle(calls)
            outcomes = await asyncio.gather(*(
                getattr(wallet, method)(request, metadata=metadata, timeout=rng.uniform(0.0, 1.5) * lone)
                for method, request, metadata in calls
            ), return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, grpc.aio.AioRpcError):
                    assert outcome.code() is grpc.StatusCode.DEADLINE_EXCEEDED, outcome
                    cut += 1
                else:
                    assert not isinstance(outcome, BaseException), outcome
            sent += calls
        assert cut >= CONCURRENT, f"only {cut} calls were cut short: the deadlines are too long"

        await _until_idle(server)
        if db_target.kind == "sqlite":
            assert _write_lock_is_free(db_target), "a cancelled call still holds SQLite's write lock"
        # a plain write goes through at once (a held lock kept it waiting 30 s and more)
        await wallet.Grant(wallet_pb2.GrantRequest(
            request_id="after", player="players/p1", amount_chips=1, kind=wallet_pb2.GrantRequest.KIND_PROMOTION,
        ), metadata=admin, timeout=10)
        granted["p1"] += 1

        # every call retried with its request id is answered: applied once, first time or now
        for method, request, metadata in sent:
            await getattr(wallet, method)(request, metadata=metadata, timeout=10)
        for name in PLAYERS:
            account = await wallet.GetAccount(
                wallet_pb2.GetAccountRequest(name=f"accounts/player-{name}"), metadata=service
            )
            assert account.balance_chips == start + granted[name], name
            assert account.held_chips == 0, name
        report = await run_audit(server.db)
        assert report.ok, report.problems
