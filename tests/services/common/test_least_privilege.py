"""Every service migrates and serves as a PostgreSQL role that owns its schema and holds no other
privilege (docs/operations.md, "Database"), and a migration behind a long transaction fails with a
clear message instead of hanging."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from buraco.v1 import (
    game_session_pb2,
    game_session_pb2_grpc,
    matchmaking_pb2,
    matchmaking_pb2_grpc,
    ranking_pb2,
    ranking_pb2_grpc,
    tournament_pb2,
    tournament_pb2_grpc,
    wallet_pb2,
    wallet_pb2_grpc,
)
from services.common import migrations
from services.common.auth import Kind
from services.common.db import Database
from services.common.server import ServiceSpec
from tests.services.harness import bearer, dev_minter, make_config, running


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


@dataclass(frozen=True)
class OwnRole:
    """A login role and the one schema it owns; it has no other privilege."""

    name: str
    schema: str
    url: str  # the server's URL with the role as its user


@pytest.fixture
async def own_role(postgres_url: str) -> AsyncIterator[OwnRole]:
    suffix = uuid.uuid4().hex[:10]
    role, schema = f"buraco_owner_{suffix}", f"owned_{suffix}"
    admin = await asyncpg.connect(_dsn(postgres_url))
    try:
        await admin.execute(f'CREATE ROLE "{role}" LOGIN')
        await admin.execute(f'CREATE SCHEMA "{schema}" AUTHORIZATION "{role}"')
        user_at = postgres_url.split("://", 1)[1].split("@", 1)[1]
        yield OwnRole(role, schema, f"postgresql+asyncpg://{role}@{user_at}")
    finally:
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.execute(f'DROP ROLE IF EXISTS "{role}"')
        await admin.close()


async def _privileges(role: OwnRole) -> tuple[bool, bool]:
    """Whether the role may create schemas in the database, and whether it owns its schema."""
    connection = await asyncpg.connect(_dsn(role.url))
    try:
        create = await connection.fetchval("SELECT has_database_privilege(current_user, current_database(), 'CREATE')")
        owner = await connection.fetchval(
            "SELECT pg_get_userbyid(nspowner) = current_user FROM pg_namespace WHERE nspname = $1", role.schema)
        return bool(create), bool(owner)
    finally:
        await connection.close()


Call = Callable[[grpc.aio.Channel, Any], Awaitable[Any]]


def _specs() -> dict[str, tuple[ServiceSpec, Path, Call]]:
    from services.game_session.service import SPEC as GAME_SESSION
    from services.matchmaking.service import SPEC as MATCHMAKING
    from services.ranking.service import SPEC as RANKING
    from services.tournament.service import SPEC as TOURNAMENT
    from services.wallet.service import SPEC as WALLET

    async def wallet(channel: grpc.aio.Channel, minter: Any) -> Any:
        stub = wallet_pb2_grpc.WalletServiceStub(channel)
        request = wallet_pb2.CreateAccountRequest(request_id="acct-alice", player="players/alice")
        return await stub.CreateAccount(request, metadata=bearer(minter.mint(Kind.ADMIN, "ops")))

    async def ranking(channel: grpc.aio.Channel, minter: Any) -> Any:
        stub = ranking_pb2_grpc.RankingServiceStub(channel)
        return await stub.GetPlayer(ranking_pb2.GetPlayerRequest(name="players/alice"),
                                    metadata=bearer(minter.mint(Kind.PLAYER, "alice")))

    async def matchmaking(channel: grpc.aio.Channel, minter: Any) -> Any:
        stub = matchmaking_pb2_grpc.MatchmakingServiceStub(channel)
        return await stub.ListLobbyTables(matchmaking_pb2.ListLobbyTablesRequest(),
                                          metadata=bearer(minter.mint(Kind.PLAYER, "alice")))

    async def tournament(channel: grpc.aio.Channel, minter: Any) -> Any:
        stub = tournament_pb2_grpc.TournamentServiceStub(channel)
        return await stub.ListTournaments(tournament_pb2.ListTournamentsRequest(),
                                          metadata=bearer(minter.mint(Kind.PLAYER, "alice")))

    async def game_session(channel: grpc.aio.Channel, minter: Any) -> Any:
        stub = game_session_pb2_grpc.GameSessionServiceStub(channel)
        return await stub.ListTables(game_session_pb2.ListTablesRequest(),
                                     metadata=bearer(minter.mint(Kind.SERVICE, "matchmaking")))

    return {
        "wallet": (WALLET, WALLET.migrations, wallet),
        "ranking": (RANKING, RANKING.migrations, ranking),
        "matchmaking": (MATCHMAKING, MATCHMAKING.migrations, matchmaking),
        "tournament": (TOURNAMENT, TOURNAMENT.migrations, tournament),
        "game_session": (GAME_SESSION, GAME_SESSION.migrations, game_session),
    }


@pytest.mark.parametrize("service", ["wallet", "ranking", "matchmaking", "tournament", "game_session"])
async def test_a_service_migrates_and_serves_as_the_owner_of_its_schema_alone(
    service: str, own_role: OwnRole, tmp_path: Path
) -> None:
    assert await _privileges(own_role) == (False, True)  # no CREATE on the database; owns its schema
    spec, scripts, call = _specs()[service]
    database = Database(own_role.url, schema=own_role.schema)
    try:
        await migrations.upgrade(spec.name, scripts, database)
        assert await migrations.current(spec.name, scripts, database) == migrations.head(scripts)
        await migrations.upgrade(spec.name, scripts, database)  # again: nothing to do, still allowed
    finally:
        await database.dispose()
    config = make_config(spec.name, tmp_path, database_url=own_role.url, database_schema=own_role.schema,
                         migrate_on_start=False)
    async with running(spec, config) as server, grpc.aio.insecure_channel(server.address) as channel:
        answer = await call(channel, dev_minter(tmp_path / "dev-keys"))
    assert answer.ByteSize() >= 0 and type(answer).DESCRIPTOR.full_name.startswith("buraco.v1.")


async def test_a_migration_behind_a_long_transaction_fails_fast_and_names_the_wait(
    own_role: OwnRole, postgres_url: str
) -> None:
    from services.ranking.service import SPEC

    database = Database(own_role.url, schema=own_role.schema)
    holder = await asyncpg.connect(_dsn(postgres_url))
    try:
        await migrations.upgrade(SPEC.name, SPEC.migrations, database)
        # a long transaction holds the version table (any table the migration touches would do)
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(
            f'LOCK TABLE "{own_role.schema}".{migrations.version_table(SPEC.name)} IN ACCESS EXCLUSIVE MODE')
        with pytest.raises(migrations.MigrationTimeoutError) as raised:
            await asyncio.wait_for(
                migrations.downgrade(SPEC.name, SPEC.migrations, database, "base",
                                     timeouts=migrations.Timeouts(lock_seconds=0.2)),
                timeout=30)
        assert "waited over 0.2 s for a lock" in str(raised.value)
        assert "BURACO_MIGRATION_LOCK_TIMEOUT_SECONDS" in str(raised.value)
        await transaction.rollback()
        # nothing was applied: still at head, and the version table is still there
        assert await migrations.current(SPEC.name, SPEC.migrations, database) == migrations.head(SPEC.migrations)
    finally:
        await holder.close()
        await database.dispose()
