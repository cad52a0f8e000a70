"""Fixtures of the tournament tests: the services it calls (`platform`, in-process fakes) and the
tournament service on each database (`service`). The helpers are in `support.py`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from buraco.v1 import game_session_pb2_grpc, ranking_pb2_grpc, wallet_pb2_grpc
from services.common.server import Server
from tests.conftest import DatabaseTarget
from tests.services.harness import dev_minter, make_config, running
from tests.services.tournament.fakes import FakeGameSessions, FakeRanking, FakeWallet, spec_for
from tests.services.tournament.support import Platform, TournamentService, tournament_service


@pytest.fixture
async def platform(tmp_path: Path) -> AsyncIterator[Platform]:
    minter = dev_minter(tmp_path / "dev-keys")
    # The fakes implement only what the tournament service calls (the rest stays abstract).
    wallet = FakeWallet()  # type: ignore[abstract]
    ranking = FakeRanking()  # type: ignore[abstract]
    tables = FakeGameSessions(minter)  # type: ignore[abstract]
    specs = [
        spec_for(
            "wallet",
            "buraco.v1.WalletService",
            lambda server: wallet_pb2_grpc.add_WalletServiceServicer_to_server(wallet, server),
        ),
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
        stack.push_async_callback(tables.close)
        yield Platform(
            {name: server.address for name, server in servers.items()},
            wallet,
            ranking,
            tables,
            tmp_path / "dev-keys",
            minter,
        )


@pytest.fixture
async def service(platform: Platform, db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[TournamentService]:
    async with tournament_service(platform, db_target, tmp_path) as running_service:
        yield running_service
