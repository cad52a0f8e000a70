"""Persistence: one async SQLAlchemy engine per service, SQLite by default, PostgreSQL by URL.

    db = Database(config.database_url, schema=config.database_schema)
    async with db.write() as session:            # a write: committed when the block ends,
        await session.execute(update(...))       # rolled back on an error
    async with db.read() as session:             # reads on one snapshot, never waiting for a writer
        row = (await session.execute(select(...))).first()
    await db.dispose()

`write_connection()` and `read_connection()` are the same transactions as Core connections, for
hot paths that use no ORM session; `read_each()` and `write_each()` are Core connections for
one-statement reads and writes, each statement on its own (autocommit on PostgreSQL: one round
trip, no BEGIN and no end).

Writes (`Database.write`). SQLite has one writer: a write transaction takes the process's one
writer for its database file (an asyncio lock, so writers queue in the process rather than spin
in SQLite's busy handler) and starts with `BEGIN IMMEDIATE` (the file's write lock from its
first statement, so two writers never deadlock upgrading a read lock; another process on the same
file waits in the busy handler). On PostgreSQL a write is an ordinary transaction; at most
`connections` sessions of `write()` and `read()` run at once, so that a burst queues here
rather than timing out in the connection pool, and a pool time-out all the same is UNAVAILABLE
("busy, retry"), not INTERNAL. The queue is first come, first served, except for the tasks
marked `first_in_line()` (a service's own background loop, which finishes the work the calls
started): they go before every call waiting, so a burst of calls cannot hold that loop up.
A write inside another write of the same task would wait for itself on SQLite: it raises instead.

Reads (`Database.read`): a session on one consistent snapshot, for reads only, rolled back at the
end: REPEATABLE READ, READ ONLY on PostgreSQL (under the same cap); a deferred `BEGIN` on SQLite
(WAL gives the reader a snapshot; it never waits for the writer).

`Database.transaction()` is a plain transaction (deferred `BEGIN` on SQLite, no queue, no cap):
what the services not yet moved onto `write()`/`read()` use.

Raw asyncpg (PostgreSQL hot paths that skip SQLAlchemy): `asyncpg_pool(db, ...)` and
`asyncpg_connect(db, ...)` make a pool or a plain connection for a `Database`'s URL and schema
with the given server settings; `LazyPool` opens a pool at its first use.

Cancellation: a call cancelled in the middle of a transaction (its deadline passed) never keeps
SQLite's write lock: a connection rolls its transaction back when it is closed (`_RollbackOnClose`),
and the process's writer is released only after that.

Connections (PostgreSQL): a process holds at most `connection_budget()` connections: its engine's
pool (`connections`, BURACO_DATABASE_POOL_SIZE: no overflow) and the raw pools and connections
made on it (each registered with its size by `register_pool`); `open_connections()` counts what is
open now, exported as a metric (services.common.metrics). docs/operations.md gives the formula.
Every connection names the process in PostgreSQL (`application_name`, `pg_stat_activity`).

Each service owns its tables (prefixed with the service's name) and its Alembic history, so
several services may share one PostgreSQL database or schema without reading each other's data.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import sqlite3
import time
import uuid
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, nullcontext, suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sqlalchemy import MetaData, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import StaticPool
from sqlalchemy.util import greenlet_spawn

from services.common.config import ConfigError, normalise_database_url
from services.common.errors import UnavailableError

#: The engine's connections on PostgreSQL, per `Database` (BURACO_DATABASE_POOL_SIZE): its pool
#: holds at most this many (no overflow), and at most this many sessions of `write()` and `read()`
#: run at once, so a burst waits on that cap rather than in the pool (which times out).
CONNECTIONS = 10

#: A read's transaction on PostgreSQL: one snapshot, and no writes.
SNAPSHOT: dict[str, Any] = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}

BUSY_WRITE = "the service is too busy now; retry with the same request id"
BUSY_READ = "the service is too busy now; retry"

#: Constraint names that Alembic can find again (and SQLite batch migrations need).
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


#: Whether the running task's turns for a connection go before the calls' (`first_in_line`).
_FIRST_IN_LINE: contextvars.ContextVar[bool] = contextvars.ContextVar("first_in_line", default=False)


@contextmanager
def first_in_line() -> Iterator[None]:
    """Within this block, the running task (and the tasks it starts) waits for a connection ahead
    of every task not marked so (`_Turns`): for a service's background loop, whose work (matching
    the tickets waiting, starting their matches) must not queue behind a burst of new calls."""
    token = _FIRST_IN_LINE.set(True)
    try:
        yield
    finally:
        _FIRST_IN_LINE.reset(token)


class _Turns:
    """At most `size` holders at once, as an asyncio.Semaphore; the waiters are let in in their
    order of arrival, the tasks marked `first_in_line()` before the others. A freed turn is handed
    to the next waiter directly, so no task arriving later takes it first."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._first: deque[asyncio.Future[None]] = deque()
        self._others: deque[asyncio.Future[None]] = deque()

    async def __aenter__(self) -> None:
        if self._free > 0:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._first if _FIRST_IN_LINE.get() else self._others
        queue.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a turn as it was cancelled: pass it on
            else:
                with suppress(ValueError):  # (already taken off by a release)
                    queue.remove(waiter)
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._release()

    def _release(self) -> None:
        for queue in (self._first, self._others):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return
        self._free += 1


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


#: The session settings a transaction pooler passes on (PgBouncer tracks these, refuses the others).
POOLER_SETTINGS = frozenset({"application_name"})


def _pooler_statement_name() -> str:
    """A prepared statement's name unique to this process and call: behind a transaction pooler a
    client's statements land on server connections other clients use too."""
    return f"__buraco_{uuid.uuid4().hex}__"


def engine_for(url: str, *, schema: str | None = None, application_name: str | None = None,
               transaction_pooling: bool = False, **kwargs: Any) -> AsyncEngine:
    """An async engine: SQLite with foreign keys, WAL and a busy timeout; PostgreSQL with
    `search_path` set to `schema` when given, and `application_name`. `transaction_pooling` (a
    pooler in transaction mode in front of PostgreSQL): only `application_name` is sent, the role's
    own `search_path` names the schema, and no prepared statement is cached: each has a unique name
    and is used only within its transaction (SQLAlchemy runs every statement in one); the pooler's
    `DISCARD ALL` drops it when the transaction ends (docs/operations.md, "PgBouncer")."""
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
    server_settings: dict[str, str] = {}
    if schema and not transaction_pooling:
        server_settings["search_path"] = schema
    if application_name:
        server_settings["application_name"] = application_name
    connect_args: dict[str, Any] = {"server_settings": server_settings} if server_settings else {}
    if transaction_pooling:
        connect_args |= {"statement_cache_size": 0, "prepared_statement_cache_size": 0,
                         "prepared_statement_name_func": _pooler_statement_name}
    kwargs.setdefault("pool_use_lifo", True)
    engine = create_async_engine(url, connect_args=connect_args, **kwargs)
    _ping_when_idle(engine)
    return engine


#: A pooled connection idle this long is pinged before it is handed out (`_ping_when_idle`).
PING_AFTER_IDLE_SECONDS = 1.0


def _ping_when_idle(engine: AsyncEngine) -> None:
    """Connections checked out after sitting idle in the pool for PING_AFTER_IDLE_SECONDS or more
    are pinged first, and replaced if the server has dropped them (a restart, an idle timeout of
    the server, a pooler or a firewall): the caller never gets a dead connection that a ping would
    have caught. A connection used within the last second is handed out as it is, which saves a
    busy service the ping's three round trips (BEGIN, a statement, ROLLBACK) on every checkout;
    should the server have gone in that second, the caller's statement fails and SQLAlchemy
    invalidates the whole pool at once (a disconnect error), so the next checkouts reconnect. The
    pool is last in, first out, so that under light load the same few connections stay warm and the
    others idle (and are pinged when next needed)."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _idle_since(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.pop("idle_since", None)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return  # new, or used just now
        try:
            dbapi_connection.ping()
        except Exception as error:
            # The pool discards this connection and checks out (or opens) another.
            raise DisconnectionError(f"a pooled connection failed its ping: {error}") from error


async def _sqlite_begin(connection: AsyncConnection, statement: str) -> None:
    """`statement` (`BEGIN` or `BEGIN IMMEDIATE`) on SQLite in one call to the connection's thread.

    Every driver call is a round trip to aiosqlite's thread, the main cost of a SQLite transaction
    here; `exec_driver_sql` makes three (open a cursor, run, close it). The driver's own `execute`
    makes one; its cursor holds no open statement once a BEGIN has run. The transaction it starts
    is the one SQLAlchemy commits or rolls back (the sqlite3 module asks SQLite whether one is open).
    """
    driver = (await connection.get_raw_connection()).driver_connection
    assert driver is not None  # a checked-out connection
    await driver.execute(statement)


class _Writer:
    """The process's one writer of a SQLite database (`async with writer:` holds it, queued in
    order): a lock, and the task holding it."""

    __slots__ = ("lock", "owner")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.owner: asyncio.Task[Any] | None = None

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if self.owner is not None and self.owner is task:
            raise RuntimeError("a write inside another write of the same task on one SQLite database waits for itself")
        await self.lock.acquire()
        self.owner = task

    async def __aexit__(self, *exc_info: object) -> None:
        self.owner = None
        self.lock.release()


#: The writers of this process, per event loop (an asyncio lock belongs to one loop) and per
#: database file (every `Database` of the process on one file shares its writer).
_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[object, _Writer]] = weakref.WeakKeyDictionary()


class Database:
    def __init__(
        self, url: str, *, schema: str | None = None, connections: int = CONNECTIONS,
        application_name: str | None = None, transaction_pooling: bool = False, **engine_options: Any
    ) -> None:
        self.url = normalise_database_url(url)
        self.schema = schema
        self.application_name = application_name
        postgresql = make_url(self.url).get_backend_name() == "postgresql"
        #: PostgreSQL behind a pooler in transaction mode (`engine_for`, `asyncpg_pool`)
        self.transaction_pooling = transaction_pooling and postgresql
        if postgresql:  # the pool's size is the engine's whole share of the budget
            engine_options = {"pool_size": connections, "max_overflow": 0, **engine_options}
        self.engine = engine_for(self.url, schema=schema, application_name=application_name,
                                 transaction_pooling=self.transaction_pooling, **engine_options)
        #: The process's connection pools on this database: name -> (open now, most it may open).
        self._pools: dict[str, tuple[Callable[[], int], int]] = {}
        if postgresql:
            pool = self.engine.pool
            self.register_pool("engine", lambda: pool.checkedin() + pool.checkedout(),  # type: ignore[attr-defined]
                               connections)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        #: At most this many sessions of write() and read() at once (PostgreSQL).
        self._connections = _Turns(connections)
        parsed = make_url(self.url)
        file = parsed.database or ""
        #: An in-memory SQLite database is one shared connection: its reads queue with the writes.
        self._memory = self.dialect == "sqlite" and file in ("", ":memory:")
        self._writer_key: object = id(self) if self._memory else str(Path(file).resolve())
        #: This database's writer on the loop it was last used on.
        self._writer: tuple[asyncio.AbstractEventLoop, _Writer] | None = None

    async def check_search_path(self) -> None:
        """Behind a transaction pooler the schema comes from the role's own `search_path`: refuse
        to serve (ConfigError) when the session's current schema is not this database's schema, or
        its tables would be sought, and made, in another."""
        if not self.transaction_pooling or not self.schema:
            return
        async with self.engine.connect() as connection:
            current = (await connection.execute(text("SELECT current_schema()"))).scalar()
            role = (await connection.execute(text("SELECT current_user"))).scalar()
        if current != self.schema:
            raise ConfigError(
                f"BURACO_DATABASE_TRANSACTION_POOLING: the sessions of role {role} start in schema {current!r}, "
                f"not {self.schema!r} (a transaction pooler passes no search_path on): run "
                f"ALTER ROLE {role} SET search_path = {self.schema}")

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.engine.dialect.name

    def register_pool(self, name: str, open_now: Callable[[], int], size: int) -> None:
        """A pool (or a set of connections) of `size` at most, made on this database (PostgreSQL)."""
        self._pools[name] = (open_now, size)

    def open_connections(self) -> dict[str, int]:
        """The connections open now (PostgreSQL), by pool."""
        return {name: open_now() for name, (open_now, _) in self._pools.items()}

    def connection_budget(self) -> dict[str, int]:
        """The most connections each pool may open; their sum is the process's budget."""
        return {name: size for name, (_, size) in self._pools.items()}

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """A session in a plain transaction: committed when the block ends, rolled back on an
        error (a deferred BEGIN on SQLite: see `write()` for the one writer)."""
        async with self.sessions.begin() as session:
            yield session

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A session in a write transaction, committed when the block ends, rolled back on an error:
        on SQLite the process's one writer and BEGIN IMMEDIATE; on PostgreSQL an ordinary
        transaction under the connection cap, a pool time-out UNAVAILABLE (the module's docstring)."""
        try:
            async with self._write_turn(), self.sessions.begin() as session:
                if self.dialect == "sqlite":
                    await _sqlite_begin(await session.connection(), "BEGIN IMMEDIATE")
                yield session
        except PoolTimeoutError:
            raise UnavailableError(BUSY_WRITE) from None

    @asynccontextmanager
    async def write_connection(self) -> AsyncIterator[AsyncConnection]:
        """The same write transaction as `write()`, as a Core connection: for hot paths that use no
        ORM session (a session costs a few hundred microseconds of CPU per transaction more)."""
        try:
            async with self._write_turn(), self.engine.connect() as connection:
                if self.dialect == "sqlite":
                    await _sqlite_begin(connection, "BEGIN IMMEDIATE")
                else:
                    await connection.begin()
                try:
                    yield connection
                except BaseException:
                    await connection.rollback()
                    raise
                await connection.commit()
        except PoolTimeoutError:
            raise UnavailableError(BUSY_WRITE) from None

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A session for reads only, on one snapshot, rolled back at the end; it never waits for the
        writer (REPEATABLE READ, READ ONLY on PostgreSQL, under the connection cap; a deferred BEGIN
        on SQLite)."""
        try:
            async with self._read_turn(), self.sessions() as session:
                if self.dialect == "sqlite":
                    await _sqlite_begin(await session.connection(), "BEGIN")
                else:
                    await session.connection(execution_options=SNAPSHOT)
                yield session  # closing the session rolls the snapshot back
        except PoolTimeoutError:
            raise UnavailableError(BUSY_READ) from None

    @asynccontextmanager
    async def read_connection(self) -> AsyncIterator[AsyncConnection]:
        """The same snapshot as `read()`, as a Core connection."""
        try:
            async with self._read_turn(), self.engine.connect() as connection:
                if self.dialect == "sqlite":
                    await _sqlite_begin(connection, "BEGIN")
                else:
                    await connection.execution_options(**SNAPSHOT)
                yield connection  # closing the connection rolls the snapshot back
        except PoolTimeoutError:
            raise UnavailableError(BUSY_READ) from None

    @asynccontextmanager
    async def read_each(self) -> AsyncIterator[AsyncConnection]:
        """A Core connection for reads that need no snapshot in common: each statement reads on a
        snapshot of its own. On PostgreSQL it runs in autocommit, so a read costs its statement's
        round trip alone (no BEGIN, no ROLLBACK): for the hot paths' one-statement reads. Under the
        same cap as `read()`; on SQLite the same as `read_connection()`."""
        inner = self.read_connection() if self.dialect == "sqlite" else self._autocommit(self._read_turn(), BUSY_READ)
        async with inner as connection:
            yield connection

    @asynccontextmanager
    async def write_each(self) -> AsyncIterator[AsyncConnection]:
        """A Core connection for one write statement, which commits on its own: in autocommit on
        PostgreSQL (the statement's round trip alone, no BEGIN or COMMIT; a statement is atomic by
        itself), `write_connection()` on SQLite (the process's one writer). Only for a single
        statement: on PostgreSQL two statements would commit separately."""
        inner = (self.write_connection() if self.dialect == "sqlite"
                 else self._autocommit(self._write_turn(), BUSY_WRITE))
        async with inner as connection:
            yield connection

    @asynccontextmanager
    async def _autocommit(self, turn: AbstractAsyncContextManager[object], busy: str) -> AsyncIterator[AsyncConnection]:
        """A Core connection in autocommit, once `turn` lets it (PostgreSQL); a pool time-out is
        UNAVAILABLE with `busy`."""
        try:
            async with turn, self.engine.connect() as connection:
                await connection.execution_options(isolation_level="AUTOCOMMIT")
                yield connection
        except PoolTimeoutError:
            raise UnavailableError(busy) from None

    @asynccontextmanager
    async def driver_connection(self) -> AsyncIterator[Any]:
        """PostgreSQL only: the driver's (asyncpg's) connection under one of the engine's pooled
        connections, under the same cap as `write()`, for the hottest statements run without
        SQLAlchemy's execution (`DriverStatement`). No transaction is open on it: each statement
        commits on its own, as on `write_each()`."""
        if self.dialect != "postgresql":
            raise RuntimeError("driver_connection() is PostgreSQL's")
        try:
            async with self._write_turn():
                # The pool's connection itself, without a SQLAlchemy Connection around it (its
                # construction and close cost more than the statement run on it).
                pooled = await self.engine.raw_connection()
                try:
                    # (a statement cancelled mid-way is cancelled on the server by asyncpg, which
                    # brings the connection back in step before its next use: tested)
                    yield pooled.driver_connection
                finally:
                    await greenlet_spawn(pooled.close)  # back to the pool (its reset: a rollback)
        except PoolTimeoutError:
            raise UnavailableError(BUSY_WRITE) from None

    def _write_turn(self) -> AbstractAsyncContextManager[object]:
        """What a write waits for: the process's one writer (SQLite), a connection (PostgreSQL)."""
        return self._sqlite_writer() if self.dialect == "sqlite" else self._connections

    def _read_turn(self) -> AbstractAsyncContextManager[object]:
        """What a read waits for: a connection (PostgreSQL); nothing on a SQLite file; the writer on
        an in-memory SQLite database (one shared connection: one transaction at a time)."""
        if self.dialect != "sqlite":
            return self._connections
        return self._sqlite_writer() if self._memory else nullcontext()

    def _sqlite_writer(self) -> _Writer:
        """The process's one writer of this database, on the running loop."""
        loop = asyncio.get_running_loop()
        known = self._writer
        if known is None or known[0] is not loop:
            writer = _writers.setdefault(loop, {}).setdefault(self._writer_key, _Writer())
            known = self._writer = (loop, writer)
        return known[1]

    async def dispose(self) -> None:
        await self.engine.dispose()


class DriverStatement:
    """A SQLAlchemy statement compiled once for PostgreSQL's driver (asyncpg), run on a
    `Database.driver_connection()`: the statement's SQL with positional parameters in the order
    `names`, the JSON ones serialised (the engine's connections decode JSON results and take JSON
    parameters as text), rows answered with attribute access. A constraint violation raises
    SQLAlchemy's IntegrityError, as the statement run through SQLAlchemy would. Expanding (IN)
    parameters are not supported: write `= ANY(...)` instead."""

    def __init__(self, statement: Any) -> None:
        from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
        from sqlalchemy.types import JSON

        compiled = statement.compile(dialect=asyncpg_dialect())  # type: ignore[no-untyped-call]
        self.sql: str = compiled.string
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())
        if any(bind.expanding for bind in compiled.binds.values()):
            raise ValueError("DriverStatement: an expanding (IN) parameter")
        self._json = frozenset(name for name, bind in compiled.binds.items() if isinstance(bind.type, JSON))
        #: the values the statement itself binds (its literals: `state == "searching"`)
        self._own = {name: bind.value for name, bind in compiled.binds.items() if bind.value is not None}

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        values = [params[name] if name in params else self._own[name] for name in self.names]
        return [json.dumps(value) if name in self._json else value
                for name, value in zip(self.names, values, strict=True)]

    async def fetch(self, driver: Any, params: Mapping[str, Any]) -> list[SimpleNamespace]:
        """The statement's rows, each with its columns as attributes."""
        import asyncpg

        try:
            records = await driver.fetch(self.sql, *self.args(params))
        except asyncpg.IntegrityConstraintViolationError as error:
            raise IntegrityError(self.sql, dict(params), error) from error
        return [SimpleNamespace(**dict(record.items())) for record in records]

    async def fetchrow(self, driver: Any, params: Mapping[str, Any]) -> SimpleNamespace | None:
        """The statement's first row, if any."""
        rows = await self.fetch(driver, params)
        return rows[0] if rows else None

    async def fetchval(self, driver: Any, params: Mapping[str, Any]) -> Any:
        """The first column of the statement's first row (None without a row)."""
        row = await self.fetchrow(driver, params)
        return None if row is None else next(iter(vars(row).values()))


def asyncpg_target(db: Database, server_settings: Mapping[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """asyncpg's address (DSN) for `db`'s URL, and the session settings: `server_settings` with
    `search_path` set to `db`'s schema (when it has one)."""
    dsn = make_url(db.url).set(drivername="postgresql").render_as_string(hide_password=False)
    settings = dict(server_settings or {})
    if db.schema:
        settings["search_path"] = db.schema
    if db.application_name:
        settings.setdefault("application_name", db.application_name)
    if db.transaction_pooling:  # the pooler passes these on only; the role's own settings apply
        settings = {name: value for name, value in settings.items() if name in POOLER_SETTINGS}
    return dsn, settings


async def _rollback_only(connection: Any) -> None:
    """What a connection of a `stateless` pool needs when it goes back: an open transaction left by
    an interrupted call rolled back."""
    if connection.is_in_transaction():
        await connection.execute("ROLLBACK")


async def asyncpg_pool(
    db: Database,
    *,
    min_size: int = 1,
    max_size: int = 10,
    server_settings: Mapping[str, str] | None = None,
    stateless: bool = False,
) -> Any:
    """An asyncpg pool (`asyncpg.Pool`) on `db`'s PostgreSQL database and schema, its connections'
    sessions set with `server_settings`. `stateless`: its users leave no session state behind (no
    SET, LISTEN, advisory lock or open cursor), so a connection going back to the pool only has an
    open transaction rolled back, rather than asyncpg's full reset (a round trip on every release)."""
    import asyncpg  # only PostgreSQL's hot paths need it

    dsn, settings = asyncpg_target(db, server_settings)
    options: dict[str, Any] = {"reset": _rollback_only} if stateless else {}
    if db.transaction_pooling:  # unnamed statements only, each prepared where it runs
        options["statement_cache_size"] = 0
    return await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, server_settings=settings, **options)


async def asyncpg_connect(db: Database, *, server_settings: Mapping[str, str] | None = None) -> Any:
    """A plain asyncpg connection (`asyncpg.Connection`) to `db`'s PostgreSQL database and schema,
    its session set with `server_settings`."""
    import asyncpg

    dsn, settings = asyncpg_target(db, server_settings)
    options: dict[str, Any] = {"statement_cache_size": 0} if db.transaction_pooling else {}
    return await asyncpg.connect(dsn, server_settings=settings, **options)


class LazyPool:
    """An asyncpg pool made by `asyncpg_pool(db, max_size=..., **options)` at its first use
    (`await get()`: concurrent first users share one), closed by `close()` (a later `get()` opens
    a new one); registered on `db` as `name`, `max_size` connections at most."""

    def __init__(self, db: Database, name: str, *, max_size: int, **options: Any) -> None:
        self.db = db
        self.options = {"max_size": max_size, "min_size": min(1, max_size), **options}
        self._pool: Any = None
        self._opening = asyncio.Lock()
        db.register_pool(name, lambda: 0 if self._pool is None else int(self._pool.get_size()), max_size)

    async def get(self) -> Any:
        if self._pool is None:
            async with self._opening:
                if self._pool is None:
                    self._pool = await asyncpg_pool(self.db, **self.options)
        return self._pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
