"""The service's database (`services.common.db.Database.write/read`, which the core, the lobby,
the sagas and the loop use): a connection-pool timeout is UNAVAILABLE (busy, retry), not INTERNAL;
writes queue one at a time on SQLite."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from services.common.db import Database
from services.common.errors import UnavailableError


async def test_a_pool_timeout_is_unavailable(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    try:
        with pytest.raises(UnavailableError, match="busy"):
            async with db.write():
                raise PoolTimeoutError("QueuePool limit reached")
        with pytest.raises(UnavailableError, match="busy"):
            async with db.read():
                raise PoolTimeoutError("QueuePool limit reached")
    finally:
        await db.dispose()


async def test_sqlite_writes_take_turns(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'x.db'}")
    inside = 0
    most = 0

    async def write(i: int) -> None:
        nonlocal inside, most
        async with db.write() as session:
            inside += 1
            most = max(most, inside)
            await session.execute(text("CREATE TABLE IF NOT EXISTS t (i INTEGER)"))
            await session.execute(text("INSERT INTO t VALUES (:i)"), {"i": i})
            inside -= 1

    try:
        await asyncio.gather(*(write(i) for i in range(20)))
        async with db.read() as session:
            assert (await session.execute(text("SELECT count(*) FROM t"))).scalar_one() == 20
        assert most == 1
    finally:
        await db.dispose()
