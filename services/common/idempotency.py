"""Idempotent mutating calls: request id + request hash -> the stored response.

Each service has its own table (`<service>_idempotency_keys`, made by `idempotency_table` in its
models.py and created by its first migration). Use it around the work of a mutating call:

    store = IdempotencyStore(models.idempotency_keys, retention=timedelta(hours=72))
    reply = await store.run(
        db, scope=identity.principal, method="HoldBets", request=request,
        response_type=wallet_pb2.HoldBetsResponse, work=lambda session: core.hold_bets(session, ...),
    )

- The key is (scope, request_id): the caller and its request id. The hash covers the method
  name and the request without its `request_id` (deterministic serialisation).
- A first call runs `work` and stores its answer in the same transaction, so the effect and the
  answer commit together or not at all.
- A retry with the same id and the same content gets the stored answer; `work` does not run.
- The same id with other content (or for another method) fails with ALREADY_EXISTS.
- Two concurrent first calls: one commits; the other's transaction fails on the key, is rolled
  back whole, and it returns the winner's answer.
- A call whose `work` raises stores nothing: a retry runs again (errors are not cached).
- Answers older than the retention are forgotten (`purge_expired` deletes them).
- Its transactions are opened by `writes` (default `Database.transaction`; `Database.write` for
  a service whose writes go through the process's one SQLite writer, see services.common.db).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.protobuf.message import Message
from sqlalchemy import Column, DateTime, LargeBinary, MetaData, String, Table, bindparam, delete, select
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from services.common.db import Database
from services.common.errors import AlreadyExistsError

R = TypeVar("R", bound=Message)


def idempotency_table(metadata: MetaData, service: str) -> Table:
    return Table(
        f"{service}_idempotency_keys",
        metadata,
        Column("scope", String(200), primary_key=True),
        Column("request_id", String(64), primary_key=True),
        Column("method", String(200), nullable=False),
        Column("request_hash", String(64), nullable=False),
        Column("response", LargeBinary, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("expires_at", DateTime(timezone=True), nullable=False, index=True),
    )


def request_hash(method: str, request: Message) -> str:
    """A digest of the call: its method and its request without the request_id (the key it is
    stored under), serialized deterministically. The request_id is cleared and put back in place
    (nothing runs in between) rather than a copy of the request made without it: this runs for
    every action of a game-session replica."""
    has_id = _HAS_REQUEST_ID.get(type(request))
    if has_id is None:
        has_id = _HAS_REQUEST_ID[type(request)] = "request_id" in request.DESCRIPTOR.fields_by_name
    request_id = getattr(request, "request_id", "") if has_id else ""
    if request_id:
        request.ClearField("request_id")
        try:
            data = request.SerializeToString(deterministic=True)
        finally:
            request.request_id = request_id  # type: ignore[attr-defined]
    else:
        data = request.SerializeToString(deterministic=True)
    return hashlib.sha256(method.encode() + b"\0" + data).hexdigest()


#: whether a message type has a request_id field, by type
_HAS_REQUEST_ID: dict[type, bool] = {}


def _aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back; they were stored as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class IdempotencyStore:
    def __init__(
        self,
        table: Table,
        *,
        retention: timedelta,
        clock: Callable[[], datetime] | None = None,
        writes: Callable[[Database], AbstractAsyncContextManager[AsyncSession]] = Database.transaction,
    ) -> None:
        self.table = table
        self.retention = retention
        self._clock = clock or (lambda: datetime.now(UTC))
        self._writes = writes
        # Built once: every idempotent call runs them, and building a statement costs more CPU
        # than running it.
        key = (table.c.scope == bindparam("scope")) & (table.c.request_id == bindparam("request_id"))
        self._lookup = select(table.c.method, table.c.request_hash, table.c.response, table.c.expires_at).where(key)
        self._forget = delete(table).where(key)
        self._insert = table.insert()

    async def lookup(self, session: Any, scope: str, request_id: str) -> Row[Any] | None:
        """The stored answer's row (method, request_hash, response, expires_at), expired or not."""
        result = await session.execute(self._lookup, {"scope": scope, "request_id": request_id})
        row: Row[Any] | None = result.first()
        return row

    def window(self) -> tuple[datetime, datetime]:
        """(now, when an answer stored now expires): for a service that stores a key itself, in a
        statement of its own (the game sessions' CreateTable on PostgreSQL)."""
        now = self._clock()
        return now, now + self.retention

    async def _stored(
        self,
        session: AsyncSession,
        scope: str,
        request_id: str,
        method: str,
        digest: str,
        response_type: type[R],
    ) -> R | None:
        row = await self.lookup(session, scope, request_id)
        if row is None:
            return None
        if _aware(row.expires_at) <= self._clock():
            await session.execute(self._forget, {"scope": scope, "request_id": request_id})
            return None
        if row.method != method or row.request_hash != digest:
            raise AlreadyExistsError(
                f"request_id {request_id!r} was already used for a different request ({row.method})"
            )
        response = response_type()
        response.ParseFromString(row.response)
        return response

    async def run(
        self,
        db: Database,
        *,
        scope: str,
        method: str,
        request: Message,
        response_type: type[R],
        work: Callable[[AsyncSession], Awaitable[R]],
    ) -> R:
        request_id = getattr(request, "request_id", "")
        if not request_id:
            raise ValueError("idempotent calls need a request_id (validate it first)")
        digest = request_hash(method, request)
        try:
            async with self._writes(db) as session:
                stored = await self._stored(session, scope, request_id, method, digest, response_type)
                if stored is not None:
                    return stored
                response = await work(session)
                now = self._clock()
                await session.execute(self._insert, {
                    "scope": scope, "request_id": request_id, "method": method, "request_hash": digest,
                    "response": response.SerializeToString(deterministic=True),
                    "created_at": now, "expires_at": now + self.retention,
                })
                return response
        except IntegrityError:
            # A concurrent call with the same key committed first: answer as it did.
            async with self._writes(db) as session:
                stored = await self._stored(session, scope, request_id, method, digest, response_type)
            if stored is None:
                raise
            return stored

    async def purge_expired(self, db: Database) -> int:
        async with self._writes(db) as session:
            result = await session.execute(delete(self.table).where(self.table.c.expires_at <= self._clock()))
        return int(getattr(result, "rowcount", 0) or 0)
