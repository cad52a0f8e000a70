"""The group-commit writer on both databases: fencing per table within one batch, and a bad write
failing only its own caller."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select

from services.common import migrations
from services.common.db import Database
from services.game_session import models, store
from services.game_session import writer as writer_module
from services.game_session.service import SPEC

OWNER = "replica-a"


async def _tables(db: Database, *epochs: tuple[str, int]) -> None:
    await migrations.upgrade(SPEC.name, SPEC.migrations, db)
    async with db.transaction() as session:
        for table_id, epoch in epochs:
            await session.execute(models.tables.insert().values(
                id=table_id, match_id=f"m-{table_id}", description=b"", state=1, seq=0, match_scores="[0,0]",
                created_ms=0, updated_ms=0))
            await session.execute(models.leases.insert().values(
                table_id=table_id, owner_address="a:1", owner_id=OWNER, epoch=epoch, live=1))


def _write(table_id: str, epoch: int, seqs: range, state: int = 2) -> writer_module.Write:
    rows = [(seq, f'{{"t":"x","n":{seq}}}') for seq in seqs]
    update = {"state": state, "seq": seqs[-1], "updated_ms": 1000 + seqs[-1], "match_scores": "[5,7]"}
    return writer_module.Write(table_id, epoch, OWNER, rows, table_update=update)


async def _logged(db: Database) -> dict[str, list[int]]:
    async with db.transaction() as session:
        rows = (await session.execute(
            select(models.events.c.table_id, models.events.c.seq).order_by(models.events.c.table_id,
                                                                            models.events.c.seq))).all()
    logged: dict[str, list[int]] = {}
    for row in rows:
        logged.setdefault(row.table_id, []).append(int(row.seq))
    return logged


async def _table_rows(db: Database) -> dict[str, tuple[int, int, str, int]]:
    async with db.transaction() as session:
        rows = (await session.execute(select(models.tables))).all()
    return {row.id: (row.state, row.seq, row.match_scores, row.updated_ms) for row in rows}


async def test_a_batch_writes_the_tables_whose_lease_holds_and_refuses_the_others(database: Database) -> None:
    # t2's lease was taken over (epoch 2) after this replica made its change under epoch 1
    await _tables(database, ("t1", 1), ("t2", 2), ("t3", 1))
    writer = writer_module.Writer(database)
    writer.start()
    ended = _write("t2", 1, range(1, 3), state=3)  # a match end, refused like any write of t2
    ended.finished = True
    ended.outbox = [("wallet.Settle", b"settle t2")]
    try:
        results = await asyncio.gather(
            writer.submit(_write("t1", 1, range(1, 4))),
            writer.submit(ended),
            writer.submit(_write("t3", 1, range(1, 2))),
            return_exceptions=True,
        )
    finally:
        await writer.stop()
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], writer_module.LeaseLostError) and str(results[1]) == "t2"
    assert await _logged(database) == {"t1": [1, 2, 3], "t3": [1]}
    assert await _table_rows(database) == {
        "t1": (2, 3, "[5,7]", 1003), "t2": (1, 0, "[0,0]", 0), "t3": (2, 1, "[5,7]", 1001)}
    assert writer.committed_batches >= 1
    async with database.transaction() as session:
        assert (await session.execute(select(models.outbox.c.id))).all() == []
    assert (await store.held(database, OWNER)).get("t2") == 2  # still live, under its new epoch


async def test_a_bad_write_fails_only_its_caller(database: Database) -> None:
    await _tables(database, ("t1", 1), ("t2", 1))
    writer = writer_module.Writer(database)
    writer.start()
    try:
        await writer.submit(_write("t1", 1, range(1, 3)))
        # t1 again at seq 2 (already logged): the batch fails as a whole, then write by write
        results = await asyncio.gather(
            writer.submit(_write("t1", 1, range(2, 4))),
            writer.submit(_write("t2", 1, range(1, 3))),
            return_exceptions=True,
        )
    finally:
        await writer.stop()
    assert isinstance(results[0], Exception) and not isinstance(results[0], writer_module.LeaseLostError)
    assert results[1] is None
    assert await _logged(database) == {"t1": [1, 2], "t2": [1, 2]}
    assert (await _table_rows(database))["t1"] == (2, 2, "[5,7]", 1002)


@pytest.mark.parametrize("workers", [1, 3])
async def test_every_write_of_many_tables_is_logged_once(database: Database, workers: int) -> None:
    await _tables(database, *((f"t{i}", 1) for i in range(12)))
    writer = writer_module.Writer(database, batch_max=5, workers=workers)
    writer.start()

    async def table(i: int) -> None:
        for seq in range(1, 9, 2):  # one change (two entries) at a time per table, as the table lock does
            await writer.submit(_write(f"t{i}", 1, range(seq, seq + 2)))

    try:
        await asyncio.gather(*(table(i) for i in range(12)))
    finally:
        await writer.stop()
    assert await _logged(database) == {f"t{i}": list(range(1, 9)) for i in range(12)}
    assert all(row == (2, 8, "[5,7]", 1008) for row in (await _table_rows(database)).values())


async def test_a_takeover_committed_while_a_batch_waits_for_its_lease_row_refuses_the_batch(
    database: Database,
) -> None:
    """PostgreSQL re-checks a locked lease row on its newest version: a batch that waited for a
    takeover's lock sees the new epoch and writes nothing for that table."""
    if database.dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time: no write waits on a row lock")
    import asyncpg
    from sqlalchemy.engine import make_url

    await _tables(database, ("t1", 1), ("t2", 1))
    url = make_url(database.url).set(drivername="postgresql").render_as_string(hide_password=False)
    other = await asyncpg.connect(url, server_settings={"search_path": database.schema or "public"})
    writer = writer_module.Writer(database)
    writer.start()
    try:
        takeover = other.transaction()
        await takeover.start()
        await other.execute("UPDATE game_session_leases SET epoch = 2, owner_id = 'replica-b' WHERE table_id = 't1'")
        pending = asyncio.ensure_future(asyncio.gather(
            writer.submit(_write("t1", 1, range(1, 3))), writer.submit(_write("t2", 1, range(1, 2))),
            return_exceptions=True))
        # the batch is blocked on t1's lease row until the takeover commits
        while not await other.fetchval(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype IN ('transactionid', 'tuple')"):
            await asyncio.sleep(0.01)
        assert not pending.done()
        await takeover.commit()
        results = await pending
    finally:
        await writer.stop()
        await other.close()
    assert isinstance(results[0], writer_module.LeaseLostError) and results[1] is None
    assert await _logged(database) == {"t2": [1]}
    assert (await _table_rows(database))["t1"] == (1, 0, "[0,0]", 0)


@pytest.mark.parametrize(("wait", "busy", "batches"), [(0.0, True, 2), (0.5, True, 1), (0.5, False, 2)])
async def test_under_load_a_write_arriving_within_the_batch_wait_joins_the_batch(
    database: Database, wait: float, busy: bool, batches: int
) -> None:
    """Under load (the last batch carried more than one write) the worker waits for more writes
    before it commits; a lone write at a quiet moment commits at once, and so does every write
    without a wait."""
    await _tables(database, ("t1", 1), ("t2", 1))
    writer = writer_module.Writer(database, batch_wait=wait)
    writer.last_batch = 2 if busy else 1
    writer.start()
    try:
        first = asyncio.ensure_future(writer.submit(_write("t1", 1, range(1, 3))))
        await asyncio.sleep(0)  # the first write is queued
        while not writer._queue.empty():
            await asyncio.sleep(0)  # until the worker has taken it (and is committing, or waiting)
        await asyncio.gather(first, writer.submit(_write("t2", 1, range(1, 2))))
    finally:
        await writer.stop()
    assert writer.committed_batches == batches
    assert await _logged(database) == {"t1": [1, 2], "t2": [1]}


async def test_the_lease_scan_reads_the_live_tables_only(database: Database) -> None:
    """A finished table's lease row stays (live 0); the scan of held leases leaves it out, so the
    scan does not grow with every match a replica ever played."""
    await _tables(database, ("t1", 1), ("t2", 3), ("t3", 1))
    writer = writer_module.Writer(database)
    writer.start()
    try:
        finished = _write("t3", 1, range(1, 3), state=3)
        finished.finished = True
        await writer.submit(finished)
    finally:
        await writer.stop()
    assert await store.held(database, OWNER) == {"t1": 1, "t2": 3}
    assert await store.held(database, "replica-b") == {}


async def test_a_failing_match_end_fails_alone_and_a_match_end_commits_its_outbox_and_lease(
        database: Database) -> None:
    """A match end (here: its entries clash with the log) that fails fails alone: the batch's other
    writes commit without it. One that ends well commits its entries, its outbox rows and its
    lease no longer live, in one transaction."""
    await _tables(database, ("t1", 1), ("t2", 1), ("t3", 1))
    writer = writer_module.Writer(database)
    writer.start()
    try:
        await writer.submit(_write("t3", 1, range(1, 3)))
        before = writer.committed_batches
        ended = _write("t3", 1, range(2, 4), state=3)  # seq 2 is logged already: this write fails
        ended.finished = True
        results = await asyncio.gather(
            writer.submit(_write("t1", 1, range(1, 3))),
            writer.submit(ended),
            writer.submit(_write("t2", 1, range(1, 2))),
            return_exceptions=True,
        )
        ok = _write("t3", 1, range(3, 5), state=3)
        ok.finished = True
        ok.outbox = [("wallet.Settle", b"settle t3"), ("ranking.RecordMatch", b"record t3")]
        await writer.submit(ok)
    finally:
        await writer.stop()
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], Exception) and not isinstance(results[1], writer_module.LeaseLostError)
    assert writer.committed_batches > before
    assert await _logged(database) == {"t1": [1, 2], "t2": [1], "t3": [1, 2, 3, 4]}
    assert await store.held(database, OWNER) == {"t1": 1, "t2": 1}  # t3's lease is no longer live
    async with database.transaction() as session:
        queued = (await session.execute(
            select(models.outbox.c.table_id, models.outbox.c.target, models.outbox.c.request,
                   models.outbox.c.state, models.outbox.c.attempts).order_by(models.outbox.c.id)
        )).all()
    assert [tuple(row) for row in queued] == [
        ("t3", "wallet.Settle", b"settle t3", "pending", 0), ("t3", "ranking.RecordMatch", b"record t3", "pending", 0)]
    assert (await _table_rows(database))["t3"][0] == 3  # the table row's state moved with it
