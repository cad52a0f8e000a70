"""Small pieces: the error table, validation helpers, rate limits, the database helpers."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from sqlalchemy import text

from buraco.v1 import common_pb2, wallet_pb2
from services.common import validation as check
from services.common.db import Database
from services.common.errors import (
    INTERNAL_MESSAGE,
    AlreadyExistsError,
    ConflictError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    not_built,
    status_for,
)
from services.common.ratelimit import RateLimiter, StreamLimiter


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (NotFoundError("x"), grpc.StatusCode.NOT_FOUND),
        (InvalidArgumentError("f", "bad"), grpc.StatusCode.INVALID_ARGUMENT),
        (FailedPreconditionError("x"), grpc.StatusCode.FAILED_PRECONDITION),
        (ConflictError("x"), grpc.StatusCode.ABORTED),
        (AlreadyExistsError("x"), grpc.StatusCode.ALREADY_EXISTS),
        (PermissionDeniedError("x"), grpc.StatusCode.PERMISSION_DENIED),
        (ResourceExhaustedError("x"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (not_built("S/M", 4), grpc.StatusCode.UNIMPLEMENTED),
        (NotImplementedError(), grpc.StatusCode.UNIMPLEMENTED),
        (KeyError("secret"), grpc.StatusCode.INTERNAL),
    ],
)
def test_the_error_table(error: Exception, code: grpc.StatusCode) -> None:
    assert status_for(error)[0] == code


def test_internal_errors_say_nothing_of_the_cause() -> None:
    assert status_for(ValueError("password=hunter2"))[1] == INTERNAL_MESSAGE
    assert status_for(InvalidArgumentError("stakes[2].amount_chips", "must be positive"))[1] == (
        "stakes[2].amount_chips: must be positive"
    )


def test_validation_names_the_field() -> None:
    assert check.resource_id("tables/t-1", "table", "tables") == "t-1"
    assert check.player("players/alice", "player") == "alice"
    for bad in ("", "t1", "tables/", "tables/T1", "tables/a/b", "tickets/t1"):
        with pytest.raises(InvalidArgumentError, match=r"^table:"):
            check.resource_id(bad, "table", "tables")
    assert check.request_id("r-1") == "r-1"
    for bad_id in ("", "x" * 65, "tab\there", "é"):
        with pytest.raises(InvalidArgumentError, match=r"^request_id:"):
            check.request_id(bad_id)
    assert check.cards(["4h", "10S", "jk"], "cards") == ["4H", "10S", "JK"]
    with pytest.raises(InvalidArgumentError, match=r"^cards\[1\]:"):
        check.cards(["4H", "1S"], "cards")
    assert check.enum(2, "mode", common_pb2.TableMode.DESCRIPTOR) == 2
    with pytest.raises(InvalidArgumentError, match=r"^mode: required"):
        check.enum(0, "mode", common_pb2.TableMode.DESCRIPTOR)
    with pytest.raises(InvalidArgumentError, match=r"^mode: unknown"):
        check.enum(9, "mode", common_pb2.TableMode.DESCRIPTOR)
    with pytest.raises(InvalidArgumentError, match=r"^text:"):
        check.text("x" * 201, "text", max_length=200)
    with pytest.raises(InvalidArgumentError, match=r"^stakes: required"):
        check.message(wallet_pb2.HoldBetsRequest(), "hold_ttl", "stakes")


def test_pages() -> None:
    assert check.page_size(0, default=20, maximum=100) == 20
    assert check.page_size(500, default=20, maximum=100) == 100
    with pytest.raises(InvalidArgumentError, match=r"^page_size:"):
        check.page_size(-1, default=20, maximum=100)
    token = check.encode_page_token({"after": "t9", "n": 3})
    assert check.page_token(token) == {"after": "t9", "n": 3} and check.page_token("") == {}
    for bad in ("%%%", "bm90IGpzb24", check.encode_page_token({"a": 1})[:-2] + "!!", "W10"):
        with pytest.raises(InvalidArgumentError, match=r"^page_token:"):
            check.page_token(bad)


def test_token_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0], max_callers=2)
    for _ in range(3):
        limiter.take("a", rate=1.0, burst=3)
    with pytest.raises(ResourceExhaustedError):
        limiter.take("a", rate=1.0, burst=3)
    now[0] += 1.0
    limiter.take("a", rate=1.0, burst=3)  # one token came back
    limiter.take("b", rate=1.0, burst=3)
    limiter.take("c", rate=1.0, burst=3)  # forgets "a", the least recently seen
    limiter.take("a", rate=1.0, burst=3)


def test_stream_limiter() -> None:
    streams = StreamLimiter(2)
    streams.acquire("a")
    streams.acquire("a")
    with pytest.raises(ResourceExhaustedError):
        streams.acquire("a")
    streams.release("a")
    streams.acquire("a")
    assert streams.open("a") == 2 and streams.open("b") == 0


async def test_sqlite_database_file_foreign_keys_and_wal(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'nested' / 'x.db'}")
    try:
        async with db.transaction() as session:
            assert (await session.execute(text("PRAGMA foreign_keys"))).scalar_one() == 1
            assert (await session.execute(text("PRAGMA journal_mode"))).scalar_one() == "wal"
        assert (tmp_path / "nested" / "x.db").exists() and db.dialect == "sqlite"
    finally:
        await db.dispose()
