"""A transaction cancelled at any point (a call whose deadline passed) never holds SQLite's write
lock: it rolls back whole, and the next write of any connection proceeds at once.

Every service writes on SQLite through `services.common.db` (ORM sessions from
`Database.write()` or `Database.transaction()`, or raw connections with `BEGIN IMMEDIATE`), so
the test drives each style, many transactions at once, each given a deadline of a random fraction of
a lone write's time, as a call's deadline would (during a statement, between two, at the commit,
or before it began: many wait for the write lock).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import JSON, Column, MetaData, String, Table, bindparam, event, insert, select, text
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection
from sqlalchemy.exc import DBAPIError, IntegrityError

from services.common.db import Database, DriverStatement, LazyPool, asyncpg_connect, asyncpg_pool, first_in_line
from tests.conftest import DatabaseTarget

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


async def _one_writer(db: Database, batch: int) -> None:
    """`Database.write()`: the process's one writer, then BEGIN IMMEDIATE."""
    async with db.write() as session:
        for row in range(ROWS_PER_TRANSACTION):
            inserted = await session.execute(
                text("INSERT INTO scratch (batch, row) VALUES (:b, :r) RETURNING row"), {"b": batch, "r": row}
            )
            assert inserted.first() == (row,)


async def _one_writer_core(db: Database, batch: int) -> None:
    """`Database.write_connection()`: the same, on a Core connection."""
    async with db.write_connection() as connection:
        for row in range(ROWS_PER_TRANSACTION):
            inserted = await connection.execute(
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
@pytest.mark.parametrize("style", ["orm", "raw", "write", "write_connection"])
async def test_cancelled_transactions_roll_back_and_free_the_write_lock(
    tmp_path: Path, seed: int, style: str
) -> None:
    path = tmp_path / "cancel.db"
    db = Database(f"sqlite+aiosqlite:///{path}")
    write: Callable[[Database, int], Awaitable[None]] = {
        "orm": _orm_write, "raw": _raw_write, "write": _one_writer, "write_connection": _one_writer_core}[style]
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
            assert await _write_lock_freed(path), "a cancelled transaction still holds the write lock"
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


async def _write_lock_freed(path: Path, within: float = 5.0) -> bool:
    """Whether the write lock is free, or frees itself within `within` seconds: a task cancelled
    mid-statement ends at once while its connection's thread finishes that statement and the
    rollback after it (a moment, longer on a loaded machine); a transaction left open by a
    cancellation would hold the lock for good."""
    deadline = asyncio.get_running_loop().time() + within
    while not _write_lock_is_free(path):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


# -- the one writer, snapshots, the connection cap, asyncpg ------------------------------------


async def _scratch(db: Database) -> None:
    async with db.write() as session:
        await session.execute(text("CREATE TABLE scratch (batch INTEGER NOT NULL, row INTEGER NOT NULL)"))


def _no_busy_wait(dbapi_connection: Any, _record: Any) -> None:
    """SQLite's busy handler off: a write that found the file locked would fail at once."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=0")
    cursor.close()


async def test_sqlite_writes_take_the_processs_one_writer_across_databases_on_one_file(tmp_path: Path) -> None:
    """Two `Database`s of one process on one file share its writer: the writes take turns, none
    waits in SQLite's busy handler (busy timeout 0 would fail it at once)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'one.db'}"
    first, second = Database(url), Database(url)
    for db in (first, second):
        event.listen(db.engine.sync_engine, "connect", _no_busy_wait)
    inside = most = 0

    async def write(db: Database, batch: int) -> None:
        nonlocal inside, most
        async with db.write() if batch % 3 else db.write_connection() as writer:
            inside += 1
            most = max(most, inside)
            await writer.execute(text("INSERT INTO scratch VALUES (:b, 0)"), {"b": batch})
            await asyncio.sleep(0.001)
            inside -= 1

    try:
        await _scratch(first)
        await asyncio.gather(*(write(first if i % 2 else second, i) for i in range(40)))
        assert most == 1
        async with second.read() as session:
            assert (await session.execute(text("SELECT count(*) FROM scratch"))).scalar_one() == 40
    finally:
        await first.dispose()
        await second.dispose()


async def test_a_sqlite_write_holds_the_file_from_its_start_and_reads_never_wait(tmp_path: Path) -> None:
    path = tmp_path / "immediate.db"
    db = Database(f"sqlite+aiosqlite:///{path}")
    try:
        await _scratch(db)
        async with db.write():
            # BEGIN IMMEDIATE: the file's write lock before any statement of the block
            assert not _write_lock_is_free(path)
            async with asyncio.timeout(5), db.read() as session:  # WAL: a reader does not wait
                assert (await session.execute(text("SELECT count(*) FROM scratch"))).scalar_one() == 0
        assert _write_lock_is_free(path)
    finally:
        await db.dispose()


async def test_a_write_inside_a_write_of_the_same_task_raises_rather_than_waiting_for_itself(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'nested.db'}")
    try:
        async with db.write():
            with pytest.raises(RuntimeError, match="waits for itself"):
                async with db.write():
                    pass
        async with db.write():  # the writer was let go
            pass
    finally:
        await db.dispose()


async def test_an_in_memory_database_queues_its_reads_with_its_writes() -> None:
    """One shared connection: a read never opens a transaction inside a write's."""
    db = Database("sqlite+aiosqlite:///:memory:")
    try:
        await _scratch(db)

        async def write(batch: int) -> None:
            async with db.write() as session:
                await session.execute(text("INSERT INTO scratch VALUES (:b, 0)"), {"b": batch})
                await asyncio.sleep(0)

        async def read() -> int:
            async with db.read() as session:
                count: int = (await session.execute(text("SELECT count(*) FROM scratch"))).scalar_one()
                return count

        results = await asyncio.gather(*(write(i) if i % 2 else read() for i in range(20)))
        assert all(isinstance(r, int) or r is None for r in results)
        assert await read() == 10
    finally:
        await db.dispose()


@pytest.mark.parametrize("face", ["session", "connection"])
async def test_a_read_sees_one_snapshot_and_writes_nothing(database: Database, face: str) -> None:
    await _scratch(database)
    read = database.read if face == "session" else database.read_connection
    write = database.write if face == "session" else database.write_connection
    async with read() as reader:
        before = (await reader.execute(text("SELECT count(*) FROM scratch"))).scalar_one()
        async with write() as writer:  # another transaction commits meanwhile
            await writer.execute(text("INSERT INTO scratch VALUES (1, 1)"))
        again = (await reader.execute(text("SELECT count(*) FROM scratch"))).scalar_one()
        assert (before, again) == (0, 0)
    async with read() as reader:
        assert (await reader.execute(text("SELECT count(*) FROM scratch"))).scalar_one() == 1
    if database.dialect == "postgresql":
        with pytest.raises(DBAPIError, match="read-only"):
            async with read() as reader:
                await reader.execute(text("INSERT INTO scratch VALUES (2, 2)"))


@pytest.mark.parametrize("face", ["session", "connection"])
async def test_writes_commit_whole_or_roll_back(database: Database, face: str) -> None:
    await _scratch(database)
    write = database.write if face == "session" else database.write_connection
    with pytest.raises(ZeroDivisionError):
        async with write() as writer:
            await writer.execute(text("INSERT INTO scratch VALUES (1, 1)"))
            _ = 1 / 0
    async with write() as writer:
        await writer.execute(text("INSERT INTO scratch VALUES (2, 2)"))
    async with database.read() as session:
        assert (await session.execute(text("SELECT batch FROM scratch"))).scalars().all() == [2]


async def test_postgresql_sessions_are_capped_and_a_burst_queues(postgres_url: str) -> None:
    db = Database(postgres_url, connections=3)
    inside = most = 0

    async def use(i: int) -> None:
        nonlocal inside, most
        faces = (db.write, db.read, db.write_connection, db.read_connection)
        async with faces[i % 4]() as user:
            inside += 1
            most = max(most, inside)
            await user.execute(text("SELECT pg_sleep(0.02)"))
            inside -= 1

    try:
        await asyncio.gather(*(use(i) for i in range(30)))  # more than the pool's 15
        assert most == 3
    finally:
        await db.dispose()


async def test_tasks_first_in_line_take_the_next_connections_before_the_calls_waiting(postgres_url: str) -> None:
    db = Database(postgres_url, connections=2)
    order: list[str] = []
    release = asyncio.Event()

    async def use(name: str, marked: bool = False) -> None:
        with first_in_line() if marked else contextlib.nullcontext():
            async with db.read_each() as connection:
                order.append(name)
                await connection.execute(text("SELECT 1"))
                if name.startswith("holder"):
                    await release.wait()

    async def waiting(count: int) -> None:
        # every task started so far waits for a connection (the loop runs each until it waits)
        for _ in range(50):
            await asyncio.sleep(0)
        assert len(order) == count

    try:
        holders = [asyncio.create_task(use(f"holder{i}")) for i in range(2)]
        while len(order) < 2:  # both connections held
            await asyncio.sleep(0.01)
        calls = [asyncio.create_task(use(f"call{i}")) for i in range(3)]
        gone = asyncio.create_task(use("cancelled-marked", marked=True))
        loops = [asyncio.create_task(use(f"loop{i}", marked=True)) for i in range(2)]
        await waiting(2)
        gone.cancel()  # a waiter cancelled leaves its place and takes no turn
        release.set()
        await asyncio.gather(*holders, *calls, *loops)
        assert gone.cancelled()
        # (the two holders open their connections at once: either may be first)
        assert sorted(order[:2]) == ["holder0", "holder1"]
        assert order[2:] == ["loop0", "loop1", "call0", "call1", "call2"]
        # every turn came back: the cap's two connections are both free again
        async with db.read_each(), db.read_each():
            pass
    finally:
        await db.dispose()


async def test_a_task_handed_a_connection_as_it_is_cancelled_passes_the_turn_on(postgres_url: str) -> None:
    db = Database(postgres_url, connections=1)
    entered: list[str] = []
    try:
        holder = db.read_each()
        await holder.__aenter__()
        first = asyncio.create_task(_enter(db, entered, "first"))
        second = asyncio.create_task(_enter(db, entered, "second"))
        for _ in range(20):
            await asyncio.sleep(0)
        await holder.__aexit__(None, None, None)  # hands the turn to the first waiter...
        first.cancel()  # ...which is cancelled before it runs again
        await asyncio.wait_for(second, 10)
        assert first.cancelled() and entered == ["second"]
    finally:
        await db.dispose()


async def _enter(db: Database, entered: list[str], name: str) -> None:
    async with db.read_each():
        entered.append(name)


@pytest.mark.parametrize("db_target", ["postgresql"], indirect=True)
async def test_asyncpg_pools_and_connections_use_the_schema_and_the_settings(db_target: DatabaseTarget) -> None:
    db = db_target.database()
    settings = {"application_name": "buraco-test", "enable_seqscan": "off"}
    pool = await asyncpg_pool(db, max_size=2, server_settings=settings, stateless=True)
    connection = await asyncpg_connect(db, server_settings=settings)
    lazy = LazyPool(db, "test", max_size=1)
    try:
        async with pool.acquire() as pooled:
            for conn in (connection, pooled):
                assert await conn.fetchval("SHOW search_path") == db_target.schema
                assert await conn.fetchval("SHOW application_name") == "buraco-test"
                assert await conn.fetchval("SHOW enable_seqscan") == "off"
        held = await pool.acquire()
        await held.execute("BEGIN")
        await pool.release(held)  # stateless: a transaction left open is rolled back on release
        async with pool.acquire() as again:
            assert not again.is_in_transaction()
        first, second = await asyncio.gather(lazy.get(), lazy.get())
        assert first is second  # one pool for concurrent first users
        assert await first.fetchval("SHOW search_path") == db_target.schema
    finally:
        await connection.close()
        await pool.close()
        await lazy.close()
        await db.dispose()


async def _backend_pid(db: Database) -> int:
    async with db.read_connection() as connection:
        return int((await connection.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def _terminate(postgres_url: str, pid: int) -> None:
    """Ends backend `pid` from another connection and waits until it is gone."""
    killer = Database(postgres_url, connections=1)
    try:
        async with killer.engine.connect() as connection:
            await connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            for _ in range(500):
                gone = (await connection.execute(
                    text("SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid})).scalar_one()
                await connection.rollback()
                if gone:
                    return
                await asyncio.sleep(0.01)
        raise AssertionError(f"backend {pid} was not terminated")
    finally:
        await killer.dispose()


async def test_a_connection_idle_in_the_pool_is_pinged_and_replaced_when_the_server_dropped_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(postgres_url, connections=1)
    pings: list[int] = []
    try:
        first = await _backend_pid(db)
        ping: Any = AsyncAdapt_asyncpg_connection.ping

        def counted(self: Any) -> None:
            pings.append(1)
            ping(self)

        monkeypatch.setattr(AsyncAdapt_asyncpg_connection, "ping", counted)
        # used just now: handed out without a ping
        monkeypatch.setattr("services.common.db.PING_AFTER_IDLE_SECONDS", 3600.0)
        assert await _backend_pid(db) == first
        assert pings == []
        # idle past the limit (0 s here) and dropped by the server meanwhile: pinged, replaced
        monkeypatch.setattr("services.common.db.PING_AFTER_IDLE_SECONDS", 0.0)
        await _terminate(postgres_url, first)
        second = await _backend_pid(db)
        assert second != first
        assert len(pings) == 1
        async with db.write_connection() as connection:  # and writes work on it
            assert (await connection.execute(text("SELECT pg_backend_pid()"))).scalar_one() == second
        # used just now and dropped: the call fails, and the pool reconnects for the next one
        monkeypatch.setattr("services.common.db.PING_AFTER_IDLE_SECONDS", 3600.0)
        pinged = len(pings)
        await _terminate(postgres_url, second)
        with pytest.raises(DBAPIError):
            await _backend_pid(db)
        assert await _backend_pid(db) not in (first, second)
        assert len(pings) == pinged
    finally:
        await db.dispose()


async def test_read_each_reads_committed_rows_each_statement_on_its_own(database: Database) -> None:
    await _scratch(database)
    async with database.write_connection() as writer:
        await writer.execute(text("INSERT INTO scratch VALUES (1, 1)"))
    async with database.read_each() as reader:
        assert (await reader.execute(text("SELECT count(*) FROM scratch"))).scalar_one() == 1
        if database.dialect == "postgresql":  # autocommit: no transaction spans two statements
            first = (await reader.execute(text("SELECT now()"))).scalar_one()
            await reader.execute(text("SELECT pg_sleep(0.01)"))
            assert (await reader.execute(text("SELECT now()"))).scalar_one() > first
    async with database.read_connection() as reader:  # the pool's connection is back in transactions
        if database.dialect == "postgresql":
            first = (await reader.execute(text("SELECT now()"))).scalar_one()
            await reader.execute(text("SELECT pg_sleep(0.01)"))
            assert (await reader.execute(text("SELECT now()"))).scalar_one() == first


async def test_write_each_commits_its_statement(database: Database) -> None:
    await _scratch(database)
    async with database.write_each() as writer:
        await writer.execute(text("INSERT INTO scratch VALUES (1, 1)"))
        if database.dialect == "postgresql":  # committed by itself, before the block ends
            async with database.read_connection() as reader:
                assert (await reader.execute(text("SELECT count(*) FROM scratch"))).scalar_one() == 1
    with pytest.raises(DBAPIError):
        async with database.write_each() as writer:
            await writer.execute(text("INSERT INTO scratch VALUES (2, NULL)"))  # NOT NULL: nothing written
    async with database.read_connection() as reader:
        assert (await reader.execute(text("SELECT batch FROM scratch"))).scalars().all() == [1]


@pytest.mark.parametrize("db_target", ["postgresql"], indirect=True)
async def test_a_driver_statement_runs_as_sqlalchemy_would(database: Database) -> None:
    metadata = MetaData()
    things = Table("things", metadata, Column("id", String(10), primary_key=True), Column("kind", String(10)),
                   Column("tags", JSON))
    async with database.write_connection() as connection:
        await connection.run_sync(metadata.create_all)
    add = DriverStatement(insert(things).values(id=bindparam("id"), kind="plain", tags=bindparam("tags"))
                          .returning(things.c.id, things.c.kind, things.c.tags))
    async with database.driver_connection() as driver:
        row = await add.fetchrow(driver, {"id": "a", "tags": ["x", {"y": 1}]})
        assert row is not None and (row.id, row.kind, row.tags) == ("a", "plain", ["x", {"y": 1}])
        with pytest.raises(IntegrityError):  # the key, as SQLAlchemy reports it
            await add.fetch(driver, {"id": "a", "tags": []})
    async with database.read_connection() as reader:  # committed on its own, and read back alike
        assert (await reader.execute(select(things.c.tags))).scalar_one() == ["x", {"y": 1}]
    with pytest.raises(ValueError, match="expanding"):
        DriverStatement(select(things).where(things.c.id.in_(bindparam("ids", expanding=True))))


@pytest.mark.parametrize("db_target", ["postgresql"], indirect=True)
async def test_a_driver_connection_cancelled_mid_statement_is_not_handed_out_again(database: Database) -> None:
    db = Database(database.url, schema=database.schema, connections=1)
    try:
        async def slow() -> None:
            async with db.driver_connection() as driver:
                await driver.fetch("SELECT pg_sleep(5)")

        task = asyncio.create_task(slow())
        for _ in range(500):  # until the statement is under way on the server
            async with database.read_connection() as reader:
                busy = (await reader.execute(text(
                    "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(5)' AND state = 'active'"
                ))).scalar_one()
            if busy:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with db.driver_connection() as driver:  # the pool's one slot: a working connection
            assert await driver.fetchval("SELECT 41 + 1") == 42
        async with db.driver_connection() as driver:  # a server-reported error keeps it
            pid = await driver.fetchval("SELECT pg_backend_pid()")
            with pytest.raises(Exception, match="division by zero"):
                await driver.fetch("SELECT 1 / 0")
        async with db.driver_connection() as driver:
            assert await driver.fetchval("SELECT pg_backend_pid()") == pid
    finally:
        await db.dispose()
