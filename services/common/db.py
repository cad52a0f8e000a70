"""Persistence: one async SQLAlchemy engine per service, SQLite by default, PostgreSQL by URL.

    db = Database(config.database_url, schema=config.database_schema)
    async with db.transaction() as session:      # commits on success, rolls back on error
        session.add(...)
    await db.dispose()

Each service owns its tables (prefixed with the service's name) and its Alembic history, so
several services may share one PostgreSQL database or schema without reading each other's data.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import MetaData, event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import StaticPool

from services.common.config import normalise_database_url

#: Constraint names that Alembic can find again (and SQLite batch migrations need).
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def new_metadata() -> MetaData:
    """The MetaData a service's models.py should use."""
    return MetaData(naming_convention=NAMING_CONVENTION)


class _RollbackOnClose(sqlite3.Connection):
    """A SQLite connection that rolls its open transaction back when it is closed.

    A call cancelled in the middle of a statement (its deadline passed) makes SQLAlchemy
    invalidate the connection and close it without a rollback. If a cursor of the cancelled
    statement is still referenced (its traceback keeps it), SQLite's close only marks the
    connection a zombie, and the zombie keeps the transaction and its write lock until the garbage
    collector frees the cursor: every later write of the process, and of any other process on the
    file, then waits in the busy handler. Rolling back first releases the lock at the close."""

    def close(self) -> None:
        try:
            if self.in_transaction:
                self.rollback()
        finally:
            super().close()


def engine_for(url: str, *, schema: str | None = None, **kwargs: Any) -> AsyncEngine:
    """An async engine: SQLite with foreign keys, WAL and a busy timeout; PostgreSQL with
    `search_path` set to `schema` when given."""
    url = normalise_database_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        memory = database in ("", ":memory:")
        if not memory:
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        if memory:  # one shared connection, or every session would see a new empty database
            kwargs.setdefault("poolclass", StaticPool)
        engine = create_async_engine(url, connect_args={"timeout": 30, "factory": _RollbackOnClose}, **kwargs)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            if not memory:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    connect_args: dict[str, Any] = {}
    if schema:
        connect_args["server_settings"] = {"search_path": schema}
    kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine(url, connect_args=connect_args, **kwargs)


class Database:
    def __init__(self, url: str, *, schema: str | None = None, **engine_options: Any) -> None:
        self.url = normalise_database_url(url)
        self.schema = schema
        self.engine = engine_for(self.url, schema=schema, **engine_options)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.engine.dialect.name

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A session in a transaction: committed when the block ends, rolled back on an error."""
        async with self.sessions.begin() as session:
            yield session

    async def dispose(self) -> None:
        await self.engine.dispose()
