"""A process never holds more PostgreSQL connections than its configured budget, under load; it
exports what it holds and its budget as metrics; and PostgreSQL sees its connections by name."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import grpc
import pytest

from buraco.v1 import wallet_pb2, wallet_pb2_grpc
from services.common.auth import Kind
from services.common.server import application_name
from services.wallet.service import WalletService
from services.wallet.settings import WalletSettings
from tests.services.harness import bearer, dev_minter, make_config, running

MAIN_POOL, WALLET_POOL = 2, 3


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


@pytest.fixture
async def schema(postgres_url: str) -> AsyncIterator[str]:
    name = f"budget_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(_dsn(postgres_url))
    try:
        await admin.execute(f'CREATE SCHEMA "{name}"')
        yield name
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        await admin.close()


async def test_the_wallet_stays_within_its_connection_budget_under_load(
    postgres_url: str, schema: str, tmp_path: Path
) -> None:
    spec = WalletService(settings=WalletSettings(asyncpg_pool_size=WALLET_POOL)).spec()
    config = make_config("wallet", tmp_path, database_url=postgres_url, database_schema=schema,
                         database_pool_size=MAIN_POOL, rate_limit_per_second=10_000.0, rate_limit_burst=10_000,
                         service_rate_limit_per_second=10_000.0)
    budget = MAIN_POOL + WALLET_POOL
    minter = dev_minter(tmp_path / "dev-keys")
    admin, service = bearer(minter.mint(Kind.ADMIN, "ops")), bearer(minter.mint(Kind.SERVICE, "matchmaking"))
    watcher = await asyncpg.connect(_dsn(postgres_url))
    name = application_name("wallet")
    assert name == f"buraco-wallet-{os.getpid()}"
    seen_by_postgres: list[int] = []
    seen_by_metric: list[tuple[float, float]] = []
    try:
        async with running(spec, config) as server, grpc.aio.insecure_channel(server.address) as channel:
            stub = wallet_pb2_grpc.WalletServiceStub(channel)
            registry = server.metrics.registry

            def metric(metric_name: str) -> float:
                return sum(registry.get_sample_value(metric_name, {"service": "wallet", "pool": pool}) or 0.0
                           for pool in ("engine", "wallet"))

            done = asyncio.Event()

            async def watch() -> None:
                while not done.is_set():
                    seen_by_postgres.append(int(await watcher.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name)))
                    seen_by_metric.append((metric("buraco_database_connections"),
                                           metric("buraco_database_connection_budget")))
                    await asyncio.sleep(0.002)  # sampling, not synchronisation: the load runs meanwhile

            async def player(number: int) -> None:
                who = f"p{number}"
                await stub.CreateAccount(wallet_pb2.CreateAccountRequest(request_id=f"open-{who}",
                                                                         player=f"players/{who}"), metadata=admin)
                for hand in range(3):
                    match = f"m{number}-{hand}"
                    stakes = [wallet_pb2.Stake(player=f"players/{who}", amount_chips=10)]
                    await stub.HoldBets(wallet_pb2.HoldBetsRequest(request_id=f"hold-{match}", match_id=match,
                                                                   stakes=stakes), metadata=service)
                    await stub.Void(wallet_pb2.VoidRequest(request_id=f"void-{match}", match_id=match),
                                    metadata=service)
                    await stub.GetAccount(wallet_pb2.GetAccountRequest(name=f"accounts/player-{who}"),
                                          metadata=admin)

            watching = asyncio.ensure_future(watch())
            await asyncio.gather(*(player(n) for n in range(60)))
            done.set()
            await watching
            balances = [(await stub.GetAccount(wallet_pb2.GetAccountRequest(name=f"accounts/player-p{n}"),
                                               metadata=admin)).balance_chips for n in range(60)]
    finally:
        await watcher.close()
    assert balances == [1000] * 60  # every hold voided: the load did its work
    assert seen_by_postgres and max(seen_by_postgres) <= budget, max(seen_by_postgres)
    assert max(seen_by_postgres) >= 2  # the load used more than one connection at once
    assert all(open_now <= budget for open_now, _ in seen_by_metric)
    assert {whole for _, whole in seen_by_metric} == {float(budget)}
    assert max(open_now for open_now, _ in seen_by_metric) >= 2
