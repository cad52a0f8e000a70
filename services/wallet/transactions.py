"""How the wallet runs its transactions: writes with retries, snapshot reads, idempotent calls
whose request id is claimed first, and concurrent calls batched into shared transactions.

Writes (`Transactions.write`) hand the work a `store.Store` inside a transaction:
- PostgreSQL: a pool of raw asyncpg connections of the wallet's own (`services.common.db.LazyPool`;
  the hot path: reads and the migrations use the service's SQLAlchemy engine), READ COMMITTED.
  The ledger locks the account rows it changes in one global order (escrows, players, by id; the
  house and the treasury are changed last), so wallet transactions do not deadlock; should
  PostgreSQL still report a deadlock or a serialisation failure (40P01, 40001), the whole
  transaction runs again, a few times with jittered backoff, then the call fails with ABORTED
  ("retry with the same request id").
- SQLite: one writer at a time, `Database.write_connection()`: the process's one writer (queued in the
  process rather than spinning in SQLite's busy handler) and `BEGIN IMMEDIATE` (the write lock
  from the first statement, so two writers never deadlock upgrading a read lock).

Reads (`Transactions.read`, `Database.read_connection()`) see one snapshot: REPEATABLE READ, read only, on
PostgreSQL; a deferred `BEGIN` on SQLite (WAL gives the reader a snapshot).

Idempotent calls (`Transactions.idempotent`) claim their key (caller, request id) with an INSERT
before any other work, in the same transaction as the work and its stored answer:
- a concurrent duplicate blocks on the claimed key until the first commits, then reads its answer
  (it never runs the work against the first one's effects);
- same key + same content (method and request without its request id, hashed) -> the stored
  answer; other content -> ALREADY_EXISTS; an error rolls the claim back, so errors are not
  remembered and a retry runs again;
- answers are kept for the configured retention (the sweep deletes older ones; an older one
  found on a retry is replaced as if it had never been).

Batching (the hot calls: a match's HoldBets and Settle). As TigerBeetle does, calls that arrive
while others are being written wait and then go together, up to BATCH_SIZE per transaction and
BATCHES_IN_FLIGHT transactions at a time (an idle wallet runs a call at once, alone). A batch is
one transaction with one claim statement, one lock statement and one write for all its calls;
each call still makes its own decision, in turn, on the shared locked rows (so a later call sees
what an earlier one held or paid). Calls that share a pot or a request id never share a batch.
Transactions in flight at once never share an account either (the pots, and the players a call
names): a call whose rows a running batch holds waits in the queue for the next batch, and so do
the calls behind it on the same rows, so rows are taken in the calls' order and a batch never
waits inside PostgreSQL on another batch's rows (only on the house's, changed last). A call
refused by a rule (insufficient chips...) leaves nothing behind: its claim and the escrow
it opened are deleted by the batch's write. Anything else that fails a batch (a bug, a database
error other than a deadlock) fails it whole, and its calls then run again one by one, so the
failure stays with the call that caused it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import asyncpg
from google.protobuf.message import Message
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.common.db import Database, LazyPool
from services.common.errors import AlreadyExistsError, ServiceError
from services.common.idempotency import request_hash
from services.wallet.errors import TooMuchContentionError
from services.wallet.pg_store import PgStore
from services.wallet.sqlite_store import SqliteStore
from services.wallet.store import Batch, Claimed, ClaimRequest, ErasureScope, Hold, Locked, Store, aware

T = TypeVar("T")
R = TypeVar("R", bound=Message)

#: SQLSTATEs after which a PostgreSQL transaction is run again.
RETRY_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure
MAX_ATTEMPTS = 8
#: Connections of the wallet's PostgreSQL pool (per process; BURACO_WALLET_ASYNCPG_POOL_SIZE).
PG_POOL_SIZE = 10
#: The sessions of the wallet's own connections. Every statement of the store finds its rows by
#: key: one generic plan per connection serves all calls (custom plans re-planned the write each
#: time). A generic plan is made once per connection, from the statistics of that moment, and
#: kept: made while the tables are small (a new database, before autovacuum analysed them), it
#: would choose sequential scans and hash joins over whole tables, whose cost then grows with every
#: match. Every statement here has an index on what it looks for, so the wallet's own connections
#: rule sequential scans out (a table without a usable index would still be scanned: this only
#: raises their cost). The name shows in pg_stat_activity (and lets the benchmark find them).
PG_SESSION = {
    "application_name": "buraco-wallet",
    "plan_cache_mode": "force_generic_plan",
    "enable_seqscan": "off",
}
#: Calls per shared transaction, and shared transactions running at once.
BATCH_SIZE = 64
BATCHES_IN_FLIGHT = 2

Clock = Callable[[], datetime]
#: Test hook: called at named points of a write ("after_claim", "after_work", "before_commit");
#: raising there rolls the transaction back, as a crash would.
FaultHook = Callable[[str], None]
#: What an idempotent call does once its key is claimed: its reply and the batch to write.
Plan = Callable[[Store], Awaitable[tuple[R, Batch]]]

__all__ = ["Clock", "FaultHook", "Transactions", "aware", "utc_now"]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _transient(error: BaseException) -> bool:
    if isinstance(error, asyncpg.PostgresError):
        return getattr(error, "sqlstate", None) in RETRY_SQLSTATES
    if isinstance(error, DBAPIError):
        return "database is locked" in str(error.orig)
    return False


@dataclass
class _Call(Generic[R]):
    """One idempotent call: its key, what it does, and (batched) where its result goes."""

    claim: ClaimRequest
    response_type: type[R]
    plan: Plan[R]
    #: The pots it changes: calls sharing one never share a transaction.
    pots: frozenset[str] = frozenset()
    #: The rows it will lock (its pots and the players it names): no two transactions in flight
    #: share one. A hint for scheduling: the rows' locks still decide.
    rows: frozenset[str] = frozenset()
    future: asyncio.Future[R] | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.claim.scope, self.claim.request_id


@dataclass
class _Outcome(Generic[R]):
    """What one call of a shared transaction came to."""

    reply: R | None = None
    batch: Batch | None = None
    error: ServiceError | None = None


class Transactions:
    def __init__(
        self,
        db: Database,
        *,
        retention: timedelta,
        clock: Clock = utc_now,
        fault: FaultHook | None = None,
        batching: bool = True,
        pool_size: int = PG_POOL_SIZE,
    ) -> None:
        self.db = db
        self.dialect = db.dialect
        self.retention = retention
        self.clock = clock
        self.fault = fault
        self.batching = batching
        #: The wallet leaves no session state on its connections: released with a rollback only.
        self._pool = LazyPool(db, "wallet", max_size=pool_size, server_settings=PG_SESSION, stateless=True)
        self._queue: deque[_Call[Any]] = deque()
        self._in_flight = 0
        #: The rows of the shared transactions in flight (never shared between two of them).
        self._busy_rows: set[str] = set()
        self._batch_tasks: set[asyncio.Task[None]] = set()
        #: How many write transactions were run again after a transient failure (tests, logs),
        #: how many shared transactions ran and how many calls they carried.
        self.retries = 0
        self.batches = 0
        self.batched_calls = 0

    def _hit(self, point: str) -> None:
        if self.fault is not None:
            self.fault(point)

    async def _pg_pool(self) -> asyncpg.Pool:
        return await self._pool.get()

    async def close(self) -> None:
        """Closes the PostgreSQL pool (the SQLAlchemy engine is the service's to dispose)."""
        if self._batch_tasks:
            await asyncio.gather(*self._batch_tasks, return_exceptions=True)
        await self._pool.close()

    # -- transactions -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[Store]:
        if self.dialect == "postgresql":
            pool = await self._pg_pool()
            async with pool.acquire() as conn, conn.transaction():
                yield PgStore(conn)
                self._hit("before_commit")
            return
        async with self.db.write_connection() as connection:
            yield SqliteStore(connection)
            self._hit("before_commit")

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
        async with self.db.read_connection() as connection:
            return await work(connection)

    # -- idempotent calls -------------------------------------------------------------------------

    async def idempotent(
        self,
        *,
        scope: str,
        method: str,
        request: Message,
        response_type: type[R],
        plan: Plan[R],
        reserve: int = 0,
        escrow: str | None = None,
        batch_pots: Sequence[str] | None = None,
        batch_accounts: Sequence[str] = (),
    ) -> R:
        """Run `plan` once per (scope, request id) and write its batch with the answer (see the
        module's docstring). `reserve` and `escrow` let the claim's statement also reserve
        transfer ids and open an escrow. With `batch_pots` (the pots it changes) the call may
        share a transaction with others; `batch_accounts` (the other accounts it locks) keeps it
        out of a transaction running at the same time as one that locks them."""
        request_id = getattr(request, "request_id", "")
        if not request_id:
            raise ValueError("idempotent calls need a request_id (validate it first)")
        claim = ClaimRequest(scope, request_id, method, request_hash(method, request), reserve, escrow)
        call = _Call(claim, response_type, plan)
        if batch_pots is None or not self.batching:
            return await self._alone(call)
        call.pots = frozenset(batch_pots)
        call.rows = call.pots | frozenset(batch_accounts)
        call.future = asyncio.get_running_loop().create_future()
        self._queue.append(call)
        self._dispatch()
        return await call.future

    async def _attempt(self, store: Store, call: _Call[R]) -> _Outcome[R]:
        """Claim, then plan: the reply and what to write (nothing for a stored answer)."""
        now = self.clock()
        expires_at = now + self.retention
        claimed = await store.claim(call.claim, now, expires_at)
        if claimed.stored is not None:
            method, digest, response, stored_until = claimed.stored
            if aware(stored_until) <= now:  # past retention: forgotten, this call runs afresh
                await store.reclaim(call.claim, now, expires_at)
            elif method != call.claim.method or digest != call.claim.digest:
                raise AlreadyExistsError(
                    f"request_id {call.claim.request_id!r} was already used for a different request ({method})"
                )
            else:
                answer = call.response_type()
                answer.ParseFromString(response)
                return _Outcome(answer)
        self._hit("after_claim")
        reply, batch = await call.plan(store)
        self._hit("after_work")
        batch.answers.append((call.claim.scope, call.claim.request_id, reply.SerializeToString(deterministic=True)))
        return _Outcome(reply, batch)

    async def _alone(self, call: _Call[R]) -> R:
        async def work(store: Store) -> R:
            outcome = await self._attempt(store, call)
            if outcome.batch is not None:
                await store.write(outcome.batch)
            assert outcome.reply is not None
            return outcome.reply

        return await self.write(work)

    # -- batching ---------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        """Starts shared transactions for the queued calls while there is room."""
        while self._queue and self._in_flight < BATCHES_IN_FLIGHT:
            calls: list[_Call[Any]] = []
            keys: set[tuple[str, str]] = set()
            pots: set[str] = set()
            rows: set[str] = set()
            # Rows this batch may not take: those of the batches in flight, and those of the calls
            # left waiting (so a later call never overtakes an earlier one on a row).
            blocked = set(self._busy_rows)
            deferred: deque[_Call[Any]] = deque()
            while self._queue and len(calls) < BATCH_SIZE:
                call = self._queue.popleft()
                if call.key in keys or call.pots & pots or call.rows & blocked:
                    deferred.append(call)  # waits for the next batch, in its turn
                    blocked |= call.rows
                    continue
                calls.append(call)
                keys.add(call.key)
                pots |= call.pots
                rows |= call.rows
            self._queue.extendleft(reversed(deferred))
            if not calls:  # every queued call waits for a batch in flight; its end dispatches again
                return
            self._in_flight += 1
            self._busy_rows |= rows
            task = asyncio.ensure_future(self._run_batch(calls))
            self._batch_tasks.add(task)
            task.add_done_callback(functools.partial(self._batch_done, frozenset(rows)))

    def _batch_done(self, rows: frozenset[str], task: asyncio.Task[None]) -> None:
        self._batch_tasks.discard(task)
        self._in_flight -= 1
        self._busy_rows -= rows
        self._dispatch()

    async def _run_batch(self, calls: list[_Call[Any]]) -> None:
        try:
            outcomes = await self.write(lambda store: self._shared(store, calls))
        except BaseException as error:
            if len(calls) == 1 or not isinstance(error, Exception) or isinstance(error, ServiceError):
                for call in calls:
                    _settle_future(call, error=error)
                return
            # The batch failed as a whole: run each call alone, so the failure stays with its cause.
            for call in calls:
                try:
                    _settle_future(call, reply=await self._alone(call))
                except Exception as alone_error:
                    _settle_future(call, error=alone_error)
            return
        self.batches += 1
        self.batched_calls += len(calls)
        for call, outcome in zip(calls, outcomes, strict=True):
            if outcome.error is not None:
                _settle_future(call, error=outcome.error)
            else:
                _settle_future(call, reply=outcome.reply)

    async def _shared(self, store: Store, calls: list[_Call[Any]]) -> list[_Outcome[Any]]:
        """One transaction for `calls`: each runs as usual on a store that gathers the calls'
        claims and locks into single statements, then one write for all."""
        gather = _Gatherer(store, len(calls))
        views = [_CallStore(gather) for _ in calls]

        async def run(call: _Call[Any], view: _CallStore) -> _Outcome[Any]:
            try:
                return await self._attempt(view, call)
            except ServiceError as error:  # refused by a rule: this call only
                return _Outcome(error=error)
            finally:
                gather.finished()

        results = await asyncio.gather(*(run(c, v) for c, v in zip(calls, views, strict=True)), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        outcomes: list[_Outcome[Any]] = list(results)  # type: ignore[arg-type]
        merged = Batch(now=self.clock())
        for call, view, outcome in zip(calls, views, outcomes, strict=True):
            if outcome.batch is not None:
                merged.merge(outcome.batch)
            elif outcome.error is not None and view.owns_claim:
                merged.forget_claims.append(call.key)
                merged.drop_escrows += view.created_escrows
        await store.write(merged)
        return outcomes

    async def purge_answers(self) -> int:
        """Deletes the stored answers past their retention; returns how many."""
        now = self.clock()

        async def purge(store: Store) -> int:
            return await store.purge_answers(now)

        return await self.write(purge)


def _settle_future(call: _Call[Any], *, reply: Any = None, error: BaseException | None = None) -> None:
    future = call.future
    if future is None or future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(reply)


class _Gatherer:
    """Runs the store requests of a shared transaction's calls together: when every call still
    running is waiting on a request, the claims go out as one statement, the locks as one
    statement (in the global lock order, the calls sharing the locked rows), and anything else
    one by one in the calls' order."""

    def __init__(self, store: Store, calls: int) -> None:
        self.store = store
        self.running = calls
        self.pending: list[tuple[str, tuple[Any, ...], asyncio.Future[Any]]] = []
        self.locked: dict[str, Locked] = {}
        self._flushing = False
        self._flusher: asyncio.Future[None] | None = None

    def request(self, kind: str, *args: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending.append((kind, args, future))
        self._maybe_flush()
        return future

    def finished(self) -> None:
        self.running -= 1
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if self.pending and len(self.pending) >= self.running and not self._flushing:
            self._flushing = True
            self._flusher = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        pending, self.pending = self.pending, []
        try:
            await self._serve(pending)
        except BaseException as error:  # never leave a call waiting
            for _, _, future in pending:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(error, Exception):
                raise
        finally:
            self._flushing = False
            self._maybe_flush()

    async def _serve(self, pending: list[tuple[str, tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        claims = [(args, future) for kind, args, future in pending if kind == "claim"]
        if claims:
            await self._run(claims, self._claims)
        locks = [(args, future) for kind, args, future in pending if kind == "lock"]
        if locks:
            await self._run(locks, self._locks)
        for kind, args, future in pending:
            if kind not in ("claim", "lock"):
                try:
                    future.set_result(await getattr(self.store, kind)(*args))
                except Exception as error:
                    future.set_exception(error)

    @staticmethod
    async def _run(
        group: list[tuple[tuple[Any, ...], asyncio.Future[Any]]],
        runner: Callable[[list[tuple[Any, ...]]], Awaitable[list[Any]]],
    ) -> None:
        try:
            results = await runner([args for args, _ in group])
        except Exception as error:
            for _, future in group:
                future.set_exception(error)
            return
        for (_, future), result in zip(group, results, strict=True):
            future.set_result(result)

    async def _claims(self, requests: list[tuple[Any, ...]]) -> list[Claimed]:
        now = max(args[1] for args in requests)
        expires_at = max(args[2] for args in requests)
        return await self.store.claim_many([args[0] for args in requests], now, expires_at)

    async def _locks(self, requests: list[tuple[Any, ...]]) -> list[tuple[dict[str, Locked], dict[str, list[Hold]]]]:
        wanted = {account for ids, _ in requests for account in ids} - self.locked.keys()
        pots = [pot for _, call_pots in requests for pot in call_pots]
        fresh, holds = await self.store.lock_many(sorted(wanted), pots)
        self.locked.update(fresh)
        return [
            ({a: self.locked[a] for a in ids if a in self.locked}, {p: holds.get(p, []) for p in call_pots})
            for ids, call_pots in requests
        ]


class _CallStore(Store):
    """One call's view of a shared transaction: its requests go through the gatherer."""

    def __init__(self, gather: _Gatherer) -> None:
        self.gather = gather
        #: Whether the call's key row is its own (claimed or re-claimed), and the escrows it
        #: opened: a call refused later has them deleted by the shared write.
        self.owns_claim = False
        self.created_escrows: list[str] = []
        self._reserved: list[int] = []
        self._escrow: tuple[str, bool] | None = None

    async def claim_many(self, requests: Sequence[ClaimRequest], now: datetime, expires_at: datetime) -> list[Claimed]:
        (request,) = requests
        claimed: Claimed = await self.gather.request("claim", request, now, expires_at)
        if claimed.stored is None:
            self.owns_claim = True
            self._reserved = list(claimed.ids)
            if request.escrow is not None:
                self._escrow = (request.escrow, claimed.escrow_created)
        return [claimed]

    async def claim(self, request: ClaimRequest, now: datetime, expires_at: datetime) -> Claimed:
        (claimed,) = await self.claim_many([request], now, expires_at)
        return claimed

    async def reclaim(self, request: ClaimRequest, now: datetime, expires_at: datetime) -> None:
        await self.gather.request("reclaim", request, now, expires_at)
        self.owns_claim = True

    async def reserve_ids(self, count: int) -> list[int]:
        if len(self._reserved) < count:
            self._reserved += await self.gather.request("reserve_ids", count - len(self._reserved))
        ids, self._reserved = self._reserved[:count], self._reserved[count:]
        return ids

    async def open_escrow(self, account_id: str, now: datetime) -> bool:
        if self._escrow is not None and self._escrow[0] == account_id:
            created = self._escrow[1]
            self._escrow = None
        else:
            created = await self.gather.request("open_escrow", account_id, now)
        if created:
            self.created_escrows.append(account_id)
        return created

    async def open_player(self, account_id: str, player: str, now: datetime) -> bool:
        result: bool = await self.gather.request("open_player", account_id, player, now)
        return result

    async def lock_many(
        self, ids: Sequence[str], pots: Sequence[str]
    ) -> tuple[dict[str, Locked], dict[str, list[Hold]]]:
        result: tuple[dict[str, Locked], dict[str, list[Hold]]] = await self.gather.request(
            "lock", list(ids), list(pots)
        )
        return result

    async def live_holds(self, pot: str) -> list[Hold]:
        result: list[Hold] = await self.gather.request("live_holds", pot)
        return result

    async def due_holds(self, now: datetime, pot: str | None, limit: int) -> list[Hold]:
        result: list[Hold] = await self.gather.request("due_holds", now, pot, limit)
        return result

    async def holds_by_id(self, ids: Sequence[int], now: datetime) -> list[Hold]:
        result: list[Hold] = await self.gather.request("holds_by_id", list(ids), now)
        return result

    async def has_grant_claim(self, player: str, kind: str, period: str) -> bool:
        result: bool = await self.gather.request("has_grant_claim", player, kind, period)
        return result

    async def account_exists(self, account_id: str) -> bool:
        result: bool = await self.gather.request("account_exists", account_id)
        return result

    async def purge_answers(self, now: datetime) -> int:
        raise AssertionError("not in a shared transaction")

    # An erasure runs alone in its transaction, never in a shared one.

    async def run_players(self, like: str) -> list[str]:
        raise AssertionError("not in a shared transaction")

    async def pots_of(self, accounts: Sequence[str]) -> list[str]:
        raise AssertionError("not in a shared transaction")

    async def lock_for_erasure(self, ids: Sequence[str]) -> dict[str, Locked]:
        raise AssertionError("not in a shared transaction")

    async def erasure_scope(self, accounts: Sequence[str], players: Sequence[str]) -> ErasureScope:
        raise AssertionError("not in a shared transaction")

    async def write(self, batch: Batch) -> None:
        raise AssertionError("a shared transaction writes once, for all its calls")
