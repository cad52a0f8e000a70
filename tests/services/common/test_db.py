"""A transaction cancelled at any point (a call whose deadline passed) never holds SQLite's write
lock: it rolls back whole, and the next write of any connection proceeds at once.

Every service writes on SQLite through `services.common.db` (ORM sessions from
`Database.transaction()`, or raw connections with `BEGIN IMMEDIATE` as the wallet's), so the
test drives both styles, many transactions at once, each given a deadline of a random fraction of
a lone write's time, as a call's deadline would (during a statement, between two, at the commit,
or before it began: many wait for the write lock).
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from services.common.db import Database

ROWS_PER_TRANSACTION = 4
#: Transactions started together in one round, rounds per seed.
CONCURRENT = 24
ROUNDS = 15


async def _orm_write(db: Database, batch: int) -> None:
    async with db.transaction() as session:
        for row in range(ROWS_PER_TRANSACTION):
            inserted = await session.execute(
                text("INSERT INTO scratch (batch, row) VALUES (:b, :r) RETURNING row"), {"b": batch, "r": row}
            )
            assert inserted.first() == (row,)


async def _raw_write(db: Database, batch: int) -> None:
    async with db.engine.connect() as connection:
        await connection.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            for row in range(ROWS_PER_TRANSACTION):
                inserted = await connection.execute(
                    text("INSERT INTO scratch (batch, row) VALUES (:b, :r) RETURNING row"), {"b": batch, "r": row}
                )
                assert inserted.first() == (row,)
        except BaseException:
            await connection.rollback()
            raise
        await connection.commit()


def _write_lock_is_free(path: Path) -> bool:
    """Whether another connection can take the write lock without waiting (busy timeout 0)."""
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("style", ["orm", "raw"])
async def test_cancelled_transactions_roll_back_and_free_the_write_lock(
    tmp_path: Path, seed: int, style: str
) -> None:
    path = tmp_path / "cancel.db"
    db = Database(f"sqlite+aiosqlite:///{path}")
    write: Callable[[Database, int], Awaitable[None]] = _orm_write if style == "orm" else _raw_write
    rng = random.Random(seed)
    try:
        async with db.transaction() as session:
            await session.execute(text("CREATE TABLE scratch (batch INTEGER NOT NULL, row INTEGER NOT NULL)"))
        loop = asyncio.get_running_loop()
        started = loop.time()
        await write(db, 1)
        lone = loop.time() - started
        cancelled, completed, batch = 0, 1, 1
        for _ in range(ROUNDS):
            tasks: list[asyncio.Task[None]] = []
            for _ in range(CONCURRENT):
                batch += 1
                task = asyncio.ensure_future(write(db, batch))
                tasks.append(task)
                loop.call_later(rng.uniform(0, 3 * lone), task.cancel)
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for result in results:
                if isinstance(result, asyncio.CancelledError):
                    cancelled += 1
                else:
                    assert result is None, f"a write failed otherwise than by its cancellation: {result!r}"
                    completed += 1
            assert _write_lock_is_free(path), "a cancelled transaction still holds the write lock"
        assert cancelled > CONCURRENT and completed > 0, (cancelled, completed)

        # a plain write proceeds (a held lock would keep it in the busy handler for 30 s)
        await asyncio.wait_for(write(db, 0), timeout=10)
        async with db.transaction() as session:
            rows = (await session.execute(text("SELECT batch, count(*) FROM scratch GROUP BY batch"))).all()
        # each transaction committed whole or not at all
        assert {count for _, count in rows} == {ROWS_PER_TRANSACTION}
        # (a transaction cancelled during its COMMIT may have committed all the same)
        assert completed + 1 <= len(rows) <= batch + 1
    finally:
        await db.dispose()
