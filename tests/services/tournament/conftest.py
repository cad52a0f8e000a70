"""Fixtures of the tournament tests: the services it calls (`platform`: the real wallet, or a fake
one for tests marked `fake_wallet`; fakes of ranking and game sessions) and the tournament service
on each database (`service`). The helpers are in `support.py`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from buraco.v1 import game_session_pb2_grpc, ranking_pb2_grpc, wallet_pb2_grpc
from services.common.server import Server
from services.wallet.service import WalletService
from services.wallet.settings import WalletSettings
from tests.conftest import DatabaseTarget
from tests.services.harness import dev_minter, make_config, running
from tests.services.tournament.fakes import FakeGameSessions, FakeRanking, FakeWallet, spec_for
from tests.services.tournament.support import (
    FakeLedger,
    Ledger,
    Platform,
    TournamentService,
    WalletLedger,
    tournament_service,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fake_wallet: the test injects faults into a fake wallet")


@pytest.fixture
async def platform(
    request: pytest.FixtureRequest, tmp_path: Path, db_target: DatabaseTarget
) -> AsyncIterator[Platform]:
    minter = dev_minter(tmp_path / "dev-keys")
    # The fakes implement only what the tournament service calls (the rest stays abstract).
    ranking = FakeRanking()  # type: ignore[abstract]
    tables = FakeGameSessions(minter)  # type: ignore[abstract]
    specs = [
        spec_for(
            "ranking",
            "buraco.v1.RankingService",
            lambda server: ranking_pb2_grpc.add_RankingServiceServicer_to_server(ranking, server),
        ),
        spec_for(
            "game_session",
            "buraco.v1.GameSessionService",
            lambda server: game_session_pb2_grpc.add_GameSessionServiceServicer_to_server(tables, server),
        ),
    ]
    async with contextlib.AsyncExitStack() as stack:
        servers: dict[str, Server] = {}
        for spec in specs:
            config = make_config(spec.name, tmp_path, migrate_on_start=False)
            servers[spec.name] = await stack.enter_async_context(running(spec, config))
        ledger: Ledger
        if request.node.get_closest_marker("fake_wallet"):
            wallet = FakeWallet()  # type: ignore[abstract]
            spec = spec_for(
                "wallet",
                "buraco.v1.WalletService",
                lambda server: wallet_pb2_grpc.add_WalletServiceServicer_to_server(wallet, server),
            )
            config = make_config("wallet", tmp_path, migrate_on_start=False)
            servers["wallet"] = await stack.enter_async_context(running(spec, config))
            ledger = FakeLedger(wallet)
        else:
            # The real wallet on the test's database (its own tables), without a starting grant or
            # the background expiry sweep.
            settings = WalletSettings(starting_grant_chips=0, expiry_sweep_interval=timedelta(0))
            config = make_config("wallet", tmp_path, database_url=db_target.url, database_schema=db_target.schema)
            servers["wallet"] = await stack.enter_async_context(
                running(WalletService(settings=settings).spec(), config)
            )
            channel = await stack.enter_async_context(grpc.aio.insecure_channel(servers["wallet"].address))
            db = db_target.database()
            stack.push_async_callback(db.dispose)
            ledger = WalletLedger(wallet_pb2_grpc.WalletServiceStub(channel), db, minter)
        stack.push_async_callback(tables.close)
        yield Platform(
            {name: server.address for name, server in servers.items()},
            ledger,
            ranking,
            tables,
            tmp_path / "dev-keys",
            minter,
        )


@pytest.fixture
async def service(platform: Platform, db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[TournamentService]:
    async with tournament_service(platform, db_target, tmp_path) as running_service:
        yield running_service
