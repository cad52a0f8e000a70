"""The idempotency store on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from buraco.v1 import wallet_pb2
from services.common.db import Database
from services.common.errors import AlreadyExistsError, FailedPreconditionError
from services.common.idempotency import IdempotencyStore, idempotency_table, request_hash

metadata = MetaData()
keys = idempotency_table(metadata, "probe")
effects = Table(
    "probe_effects", metadata, Column("id", Integer, primary_key=True), Column("note", String(50))
)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def db(database: Database) -> AsyncIterator[Database]:
    async with database.engine.begin() as connection:
        await connection.run_sync(metadata.create_all)
    yield database


def grant(request_id: str, amount: int = 100, player: str = "players/alice") -> wallet_pb2.GrantRequest:
    return wallet_pb2.GrantRequest(
        request_id=request_id, player=player, amount_chips=amount, kind=wallet_pb2.GrantRequest.KIND_STARTING
    )


class Work:
    def __init__(self, fail: bool = False) -> None:
        self.runs = 0
        self.fail = fail

    async def __call__(self, session: AsyncSession) -> wallet_pb2.Transfer:
        self.runs += 1
        await session.execute(effects.insert().values(note=f"run {self.runs}"))
        if self.fail:
            raise FailedPreconditionError("insufficient chips")
        return wallet_pb2.Transfer(name=f"transfers/{self.runs}", amount_chips=100)


async def call(
    store: IdempotencyStore,
    db: Database,
    request: wallet_pb2.GrantRequest,
    work: Work,
    scope: str = "s",
    method: str = "Grant",
) -> wallet_pb2.Transfer:
    return await store.run(
        db, scope=scope, method=method, request=request, response_type=wallet_pb2.Transfer, work=work
    )


async def count_effects(db: Database) -> int:
    async with db.transaction() as session:
        return int((await session.execute(select(func.count()).select_from(effects))).scalar_one())


async def test_a_retry_gets_the_first_answer_and_does_not_run_again(db: Database) -> None:
    store = IdempotencyStore(keys, retention=timedelta(days=3))
    work = Work()
    first = await call(store, db, grant("r1"), work)
    again = await call(store, db, grant("r1"), work)
    assert first == again and first.name == "transfers/1"
    assert work.runs == 1 and await count_effects(db) == 1


async def test_the_same_id_with_other_content_is_already_exists(db: Database) -> None:
    store = IdempotencyStore(keys, retention=timedelta(days=3))
    work = Work()
    await store.run(
        db, scope="s", method="Grant", request=grant("r1"), response_type=wallet_pb2.Transfer, work=work
    )
    with pytest.raises(AlreadyExistsError):
        await store.run(
            db,
            scope="s",
            method="Grant",
            request=grant("r1", amount=999),
            response_type=wallet_pb2.Transfer,
            work=work,
        )
    with pytest.raises(AlreadyExistsError):  # the same id for another method
        await store.run(
            db,
            scope="s",
            method="AdminCorrection",
            request=grant("r1"),
            response_type=wallet_pb2.Transfer,
            work=work,
        )
    # another caller's ids are its own
    await store.run(
        db, scope="t", method="Grant", request=grant("r1", 5), response_type=wallet_pb2.Transfer, work=work
    )
    assert work.runs == 2


async def test_a_failed_call_stores_nothing_and_applies_nothing(db: Database) -> None:
    store = IdempotencyStore(keys, retention=timedelta(days=3))
    with pytest.raises(FailedPreconditionError):
        await store.run(
            db,
            scope="s",
            method="Grant",
            request=grant("r1"),
            response_type=wallet_pb2.Transfer,
            work=Work(fail=True),
        )
    assert await count_effects(db) == 0
    ok = await store.run(
        db, scope="s", method="Grant", request=grant("r1"), response_type=wallet_pb2.Transfer, work=Work()
    )
    assert ok.name == "transfers/1" and await count_effects(db) == 1


async def test_answers_expire_after_the_retention(db: Database) -> None:
    clock = Clock()
    store = IdempotencyStore(keys, retention=timedelta(hours=1), clock=clock)
    work = Work()
    await call(store, db, grant("r1"), work)
    clock.now += timedelta(minutes=59)
    await call(store, db, grant("r1"), work)
    assert work.runs == 1
    clock.now += timedelta(minutes=2)
    await call(store, db, grant("r1"), work)
    assert work.runs == 2
    clock.now += timedelta(hours=2)
    assert await store.purge_expired(db) == 1


async def test_concurrent_first_calls_apply_once(db: Database) -> None:
    store = IdempotencyStore(keys, retention=timedelta(days=3))
    answers = await asyncio.gather(
        *(
            store.run(
                db,
                scope="s",
                method="Grant",
                request=grant("same"),
                response_type=wallet_pb2.Transfer,
                work=Work(),
            )
            for _ in range(8)
        )
    )
    assert len({a.SerializeToString() for a in answers}) == 1
    assert await count_effects(db) == 1


def test_the_hash_ignores_the_request_id_only() -> None:
    assert request_hash("Grant", grant("a")) == request_hash("Grant", grant("b"))
    assert request_hash("Grant", grant("a")) != request_hash("Grant", grant("a", amount=1))
    assert request_hash("Grant", grant("a")) != request_hash("Other", grant("a"))


def test_the_hash_leaves_the_request_as_it_was_and_keeps_its_stored_values() -> None:
    """Digests are stored (game-session logs, idempotency rows) and compared after a restart or an
    upgrade: the value is the SHA-256 of the method, a zero byte and the request serialized
    deterministically without its request_id, as it always was."""
    request = grant("a", amount=7)
    before = request.SerializeToString()
    copy = type(request)()
    copy.CopyFrom(request)
    copy.ClearField("request_id")
    expected = hashlib.sha256(b"Grant\0" + copy.SerializeToString(deterministic=True)).hexdigest()
    assert request_hash("Grant", request) == expected
    assert request.SerializeToString() == before and request.request_id == "a"
