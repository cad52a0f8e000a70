"""How the wallet runs its transactions: writes with retries, snapshot reads, and idempotent
calls whose request id is claimed first.

Writes (`Transactions.write`) hand the work a `store.Store` inside a transaction:
- PostgreSQL: a pool of raw asyncpg connections of the wallet's own (the hot path; reads and the
  migrations use the service's SQLAlchemy engine), READ COMMITTED. The ledger locks the account
  rows it changes in one fixed order (escrows, players, then the house and the treasury last), so
  wallet transactions do not deadlock; should PostgreSQL still report a deadlock or a
  serialisation failure (40P01, 40001), the whole transaction runs again, a few times with
  jittered backoff, then the call fails with ABORTED ("retry with the same request id").
- SQLite: one writer at a time. Write transactions start with `BEGIN IMMEDIATE` (the write lock
  from the first statement, so two writers never deadlock upgrading a read lock), and in this
  process they queue on an asyncio lock rather than spinning in SQLite's busy handler.

Reads (`Transactions.read`) see one snapshot: REPEATABLE READ, read only, on PostgreSQL; a
deferred `BEGIN` on SQLite (WAL gives the reader a snapshot).

Idempotent calls (`Transactions.idempotent`) claim their key (caller, request id) with an INSERT
before any other work, in the same transaction as the work and its stored answer:
- a concurrent duplicate blocks on the claimed key until the first commits, then reads its answer
  (it never runs the work against the first one's effects);
- same key + same content (method and request without its request id, hashed) -> the stored
  answer; other content -> ALREADY_EXISTS; an error rolls the claim back with everything else, so
  errors are not remembered and a retry runs again;
- answers are kept for the configured retention (the sweep deletes older ones; an older one
  found on a retry is replaced as if it had never been).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import asyncpg
from google.protobuf.message import Message
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.common.db import Database
from services.common.errors import AlreadyExistsError
from services.common.idempotency import request_hash
from services.wallet.errors import TooMuchContentionError
from services.wallet.store import Batch, PgStore, SqliteStore, Store, aware

T = TypeVar("T")
R = TypeVar("R", bound=Message)

#: SQLSTATEs after which a PostgreSQL transaction is run again.
RETRY_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
MAX_ATTEMPTS = 8
#: Connections of the wallet's PostgreSQL pool (per process).
PG_POOL_SIZE = 20

Clock = Callable[[], datetime]
#: Test hook: called at named points of a write ("after_claim", "after_work", "before_commit");
#: raising there rolls the transaction back, as a crash would.
FaultHook = Callable[[str], None]

__all__ = ["Clock", "FaultHook", "Transactions", "aware", "utc_now"]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _transient(error: BaseException) -> bool:
    if isinstance(error, asyncpg.PostgresError):
        return getattr(error, "sqlstate", None) in RETRY_SQLSTATES
    if isinstance(error, DBAPIError):
        return "database is locked" in str(error.orig)
    return False


class Transactions:
    def __init__(
        self,
        db: Database,
        *,
        retention: timedelta,
        clock: Clock = utc_now,
        fault: FaultHook | None = None,
    ) -> None:
        self.db = db
        self.dialect = db.dialect
        self.retention = retention
        self.clock = clock
        self.fault = fault
        self._sqlite_writer = asyncio.Lock()
        self._pool: asyncpg.Pool | None = None
        self._pool_opening = asyncio.Lock()
        #: How many write transactions were run again after a transient failure (tests, logs).
        self.retries = 0

    def _hit(self, point: str) -> None:
        if self.fault is not None:
            self.fault(point)

    async def _pg_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            async with self._pool_opening:
                if self._pool is None:
                    dsn = make_url(self.db.url).set(drivername="postgresql").render_as_string(hide_password=False)
                    # The name shows in pg_stat_activity (and lets the benchmark find its backends).
                    # Every statement of the store finds its rows by key: one generic plan per
                    # connection serves all calls (custom plans re-planned the write each time).
                    settings = {"application_name": "buraco-wallet", "plan_cache_mode": "force_generic_plan"}
                    if self.db.schema:
                        settings["search_path"] = self.db.schema
                    self._pool = await asyncpg.create_pool(
                        dsn, min_size=1, max_size=PG_POOL_SIZE, server_settings=settings
                    )
        return self._pool

    async def close(self) -> None:
        """Closes the PostgreSQL pool (the SQLAlchemy engine is the service's to dispose)."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Store]:
        if self.dialect == "postgresql":
            pool = await self._pg_pool()
            async with pool.acquire() as conn, conn.transaction():
                yield PgStore(conn)
                self._hit("before_commit")
            return
        async with self._sqlite_writer, self.db.engine.connect() as sqlite_conn:
            await sqlite_conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield SqliteStore(sqlite_conn)
                self._hit("before_commit")
            except BaseException:
                await sqlite_conn.rollback()
                raise
            await sqlite_conn.commit()

    async def write(self, work: Callable[[Store], Awaitable[T]]) -> T:
        """Run `work` in a write transaction, again from the start after a deadlock."""
        for attempt in range(MAX_ATTEMPTS):
            try:
                async with self._transaction() as store:
                    return await work(store)
            except (asyncpg.PostgresError, DBAPIError) as error:
                if not _transient(error):
                    raise
                self.retries += 1
                if attempt + 1 == MAX_ATTEMPTS:
                    raise TooMuchContentionError(
                        "the ledger is too busy for this call now; retry it with the same request id"
                    ) from error
                await asyncio.sleep(random.uniform(0, 0.002 * 2**attempt))
        raise AssertionError("unreachable")

    async def read(self, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """Run `work` on one consistent snapshot (SQLAlchemy Core)."""
        async with self.db.engine.connect() as conn:
            if self.dialect == "postgresql":
                conn = await conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
                async with conn.begin():
                    return await work(conn)
            await conn.exec_driver_sql("BEGIN")
            try:
                return await work(conn)
            finally:
                await conn.rollback()

    async def idempotent(
        self,
        *,
        scope: str,
        method: str,
        request: Message,
        response_type: type[R],
        plan: Callable[[Store], Awaitable[tuple[R, Batch]]],
        reserve: int = 0,
        escrow: str | None = None,
    ) -> R:
        """Run `plan` once per (scope, request id) and write its batch with the answer (see the
        module's docstring). `reserve` and `escrow` let the claim's statement also reserve
        transfer ids and open an escrow, saving round trips."""
        request_id = getattr(request, "request_id", "")
        if not request_id:
            raise ValueError("idempotent calls need a request_id (validate it first)")
        digest = request_hash(method, request)

        async def attempt(store: Store) -> R:
            now = self.clock()
            expires_at = now + self.retention
            claimed = await store.claim(
                scope, request_id, method, digest, now, expires_at, reserve=reserve, escrow=escrow
            )
            if claimed.stored is not None:
                stored_method, stored_hash, response, stored_until = claimed.stored
                if aware(stored_until) <= now:  # past retention: forgotten, this call runs afresh
                    await store.reclaim(scope, request_id, method, digest, now, expires_at)
                elif stored_method != method or stored_hash != digest:
                    raise AlreadyExistsError(
                        f"request_id {request_id!r} was already used for a different request ({stored_method})"
                    )
                else:
                    answer = response_type()
                    answer.ParseFromString(response)
                    return answer
            self._hit("after_claim")
            reply, batch = await plan(store)
            self._hit("after_work")
            batch.answer = (scope, request_id, reply.SerializeToString(deterministic=True))
            await store.write(batch)
            return reply

        return await self.write(attempt)

    async def purge_answers(self) -> int:
        """Deletes the stored answers past their retention; returns how many."""
        now = self.clock()

        async def purge(store: Store) -> int:
            return await store.purge_answers(now)

        return await self.write(purge)
