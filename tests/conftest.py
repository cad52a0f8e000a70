"""Fixtures shared by the whole suite.

Databases: `db_target` runs a test once on SQLite (a file in the test's tmp folder) and once on
PostgreSQL (database `test` at 127.0.0.1:5432, or BURACO_TEST_POSTGRES_URL), in a schema of its
own that is dropped afterwards, so test runs never collide. The PostgreSQL runs are skipped when
no server answers, except with CI=true, where they fail instead.
"""

from __future__ import annotations

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)
# ruff: noqa: E402  (the imports below come after that call on purpose)

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from services.common.db import Database

POSTGRES_URL = os.environ.get("BURACO_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")


@dataclass(frozen=True)
class DatabaseTarget:
    kind: str  # "sqlite" or "postgresql"
    url: str
    schema: str | None = None

    def database(self) -> Database:
        return Database(self.url, schema=self.schema)

    def environment(self) -> dict[str, str]:
        """The settings that point a service process at this database."""
        env = {"BURACO_DATABASE_URL": self.url}
        if self.schema:
            env["BURACO_DATABASE_SCHEMA"] = self.schema
        return env


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def _execute(url: str, statement: str) -> None:
    connection = await asyncpg.connect(_dsn(url), timeout=5)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@pytest.fixture(scope="session")
def postgres_url() -> str:
    try:
        asyncio.run(_execute(POSTGRES_URL, "SELECT 1"))
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        message = f"PostgreSQL not reachable at {POSTGRES_URL}: {error}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return POSTGRES_URL


@pytest.fixture(params=["sqlite", "postgresql"])
def db_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DatabaseTarget]:
    """Each persistence test runs on both databases."""
    if request.param == "sqlite":
        yield DatabaseTarget("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'test.db'}")
        return
    url: str = request.getfixturevalue("postgres_url")
    schema = f"test_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    asyncio.run(_execute(url, f'CREATE SCHEMA "{schema}"'))
    try:
        yield DatabaseTarget("postgresql", url, schema)
    finally:
        asyncio.run(_execute(url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


@pytest.fixture
async def database(db_target: DatabaseTarget) -> AsyncIterator[Database]:
    """A Database on each target, disposed after the test."""
    db = db_target.database()
    try:
        yield db
    finally:
        await db.dispose()
