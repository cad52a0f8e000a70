"""Every service's migrations run up and down on SQLite and PostgreSQL, and match its models."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from services.common import migrations
from services.common.db import Database
from services.common.server import ServiceSpec
from services.game_session.service import SPEC as GAME_SESSION
from services.matchmaking.service import SPEC as MATCHMAKING
from services.ranking.service import SPEC as RANKING
from services.tournament.service import SPEC as TOURNAMENT
from services.wallet.service import SPEC as WALLET
from tests.conftest import DatabaseTarget

SPECS = [MATCHMAKING, GAME_SESSION, WALLET, RANKING, TOURNAMENT]


def _models(spec: ServiceSpec) -> object:
    import importlib

    return importlib.import_module(f"services.{spec.name}.models")


async def _tables(db: Database) -> set[str]:
    async with db.engine.connect() as connection:
        return set(await connection.run_sync(lambda c: inspect(c).get_table_names()))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
async def test_migrations_up_down_and_up_again(spec: ServiceSpec, database: Database) -> None:
    metadata = _models(spec).metadata  # type: ignore[attr-defined]
    own = set(metadata.tables)
    assert own and all(name.startswith(f"{spec.name}_") for name in own)

    await migrations.upgrade(spec.name, spec.migrations, database)
    assert await migrations.current(spec.name, spec.migrations, database) is not None
    assert own <= await _tables(database)

    def diff(connection: Connection) -> list[object]:
        opts = {"compare_type": True, "include_name": migrations.own_tables(metadata, spec.name)}
        return list(compare_metadata(MigrationContext.configure(connection, opts=opts), metadata))

    async with database.engine.connect() as connection:
        assert await connection.run_sync(diff) == [], "models.py and the migrations disagree"

    await migrations.downgrade(spec.name, spec.migrations, database, "base")
    assert await migrations.current(spec.name, spec.migrations, database) is None
    assert not own & await _tables(database)

    await migrations.upgrade(spec.name, spec.migrations, database)
    assert own <= await _tables(database)


async def test_services_share_a_database_without_mixing_histories(db_target: DatabaseTarget) -> None:
    database = db_target.database()
    try:
        for spec in SPECS:
            await migrations.upgrade(spec.name, spec.migrations, database)
        await migrations.downgrade(WALLET.name, WALLET.migrations, database, "base")
        assert await migrations.current(WALLET.name, WALLET.migrations, database) is None
        assert await migrations.current(RANKING.name, RANKING.migrations, database) is not None
        tables = await _tables(database)
        assert "wallet_idempotency_keys" not in tables and "ranking_idempotency_keys" in tables
    finally:
        await database.dispose()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
async def test_concurrent_migrations_of_one_service_are_serialised(spec: ServiceSpec, postgres_url: str) -> None:
    """Two replicas (or a release Job and a replica) migrating one PostgreSQL schema at once both
    succeed. (SQLite has one writer at a time by construction.)"""
    import asyncio
    import uuid

    schema = f"test_concurrent_{uuid.uuid4().hex[:12]}"
    first, second = Database(postgres_url, schema=schema), Database(postgres_url, schema=schema)
    try:
        await asyncio.gather(migrations.upgrade(spec.name, spec.migrations, first),
                             migrations.upgrade(spec.name, spec.migrations, second))
        assert await migrations.current(spec.name, spec.migrations, first) is not None
        metadata = _models(spec).metadata  # type: ignore[attr-defined]
        assert set(metadata.tables) <= await _tables(first)
    finally:
        async with first.engine.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await first.dispose()
        await second.dispose()


async def test_every_service_migrating_one_new_schema_at_once_succeeds(postgres_url: str) -> None:
    """`make run` against PostgreSQL, or a release whose services share a schema: every service's
    process migrates at start, all at the same moment, and the schema does not exist yet. (Real
    processes: alembic keeps its state in module globals, so one process migrates one at a time.)"""
    import asyncio
    import os
    import sys
    import uuid

    schema = f"test_shared_{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "BURACO_ENV": "local", "BURACO_DATABASE_URL": postgres_url, "BURACO_DATABASE_SCHEMA": schema}
    database = Database(postgres_url, schema=schema)
    try:
        processes = [
            await asyncio.create_subprocess_exec(
                sys.executable, "-m", f"services.{spec.name}", "migrate", env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            for spec in SPECS
        ]
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in processes)), 120)
        for spec, process, (output, _) in zip(SPECS, processes, outputs, strict=True):
            assert process.returncode == 0, f"{spec.name}: {output.decode()[-2000:]}"
            assert await migrations.current(spec.name, spec.migrations, database) == migrations.head(spec.migrations)
    finally:
        async with database.engine.begin() as connection:
            await connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        await database.dispose()


async def test_a_service_that_does_not_migrate_refuses_an_old_schema(database: Database) -> None:
    """Production (BURACO_MIGRATE_ON_START=false) refuses to serve until the migration Job ran, and
    serves at head or on a newer schema (a release being rolled out: migrations only expand)."""
    spec = WALLET
    with pytest.raises(migrations.SchemaNotReadyError, match="never migrated"):
        await migrations.check_at_head(spec.name, spec.migrations, database)

    await migrations.upgrade(spec.name, spec.migrations, database, "0001")
    head = migrations.head(spec.migrations)
    assert head is not None and head != "0001"
    with pytest.raises(migrations.SchemaNotReadyError, match=f"at 0001, the code needs {head}"):
        await migrations.check_at_head(spec.name, spec.migrations, database)

    await migrations.upgrade(spec.name, spec.migrations, database)
    await migrations.check_at_head(spec.name, spec.migrations, database)

    version_table = migrations.version_table(spec.name)
    qualified = f"{database.schema}.{version_table}" if database.schema else version_table
    async with database.engine.begin() as connection:
        await connection.execute(text(f"UPDATE {qualified} SET version_num = '9999'"))
    await migrations.check_at_head(spec.name, spec.migrations, database)
