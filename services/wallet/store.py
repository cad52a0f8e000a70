"""The ledger's statements, one transaction at a time, on each database.

`core` decides; a `Store` runs the few statements a decision needs, inside the transaction that
`transactions` opened: claim request ids, lock accounts (and read the pots' live holds), and
finally write everything in one go (`write(Batch)`). The same ledger logic thus runs on both
databases, and each backend does its part the fastest way it can:

- `PgStore`: raw asyncpg (the hot path; SQLAlchemy's per-statement cost would be most of a call's time),
  arrays instead of IN lists, and `write` as a single statement (data-modifying CTEs) whose last
  step credits the house and the treasury, so their rows stay locked only until the commit.
  Claims, locks and writes take many calls at once (`claim_many`, `lock_many`, a merged `Batch`),
  which is how `transactions` runs concurrent calls in one shared transaction. Transfer ids come
  from the table's sequence in the claim's statement, so each reply (and its stored answer) is
  built before the write.
- `SqliteStore`: SQLAlchemy Core on aiosqlite, one statement per kind of change; transactions are
  serialised (BEGIN IMMEDIATE), so ids are simply the next after the largest.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg
from sqlalchemy import bindparam, case, delete, func, insert, select, tuple_, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from services.common.errors import ConflictError
from services.wallet import models

#: Claims of one request id racing another transaction's are asked again this many times at most.
CLAIM_ATTEMPTS = 5

accounts = models.accounts
transfers = models.transfers
live_holds = models.live_holds
grant_claims = models.grant_claims
idempotency_keys = models.idempotency_keys


def aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back; they were stored as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


#: The global lock order: escrows, players, the house, the treasury (then by id).
LOCK_RANK = {"escrow": 0, "player": 1, "house": 2, "treasury": 3}
#: The columns of a transfer row, in the order `Batch.transfers` dictionaries are written.
TRANSFER_COLUMNS = (
    "id",
    "phase",
    "pending_id",
    "debit_account",
    "credit_account",
    "amount",
    "reason",
    "match_id",
    "tournament",
    "requested_by",
    "on_behalf_of",
    "request_id",
    "note",
    "created_at",
    "expires_at",
)


@dataclass
class Locked:
    """A locked account row and the changes this transaction makes to it."""

    id: str
    kind: str
    balance: int
    held: int
    incoming: int
    pot_state: str | None
    d_balance: int = 0
    d_held: int = 0
    d_incoming: int = 0
    new_pot_state: str | None = None

    @property
    def available(self) -> int:
        return self.balance + self.d_balance - self.held - self.d_held

    @property
    def changed(self) -> bool:
        return bool(self.d_balance or self.d_held or self.d_incoming or self.new_pot_state)


@dataclass(frozen=True)
class Hold:
    """A live hold: `transfer_id` holds `amount` from `account` into `pot`."""

    transfer_id: int
    pot: str
    account: str
    amount: int
    expires_at: datetime | None = None
    match_id: str | None = None
    tournament: str | None = None


@dataclass(frozen=True)
class ClaimRequest:
    """A request id to claim; `reserve` transfer ids and the `escrow` to open come with it."""

    scope: str
    request_id: str
    method: str
    digest: str
    reserve: int = 0
    escrow: str | None = None


@dataclass(frozen=True)
class Claimed:
    """The outcome of a claim: ours to run (`stored` None, with the reserved ids and whether the
    escrow was opened), or the stored answer of an earlier call (method, request hash, response,
    expiry)."""

    stored: tuple[str, str, bytes, datetime] | None = None
    ids: tuple[int, ...] = ()
    escrow_created: bool = False


@dataclass
class Batch:
    """Everything one or more operations write, applied by `Store.write` in one go."""

    #: Transfer rows (dicts keyed by TRANSFER_COLUMNS), ids included.
    transfers: list[dict[str, Any]] = field(default_factory=list)
    add_holds: list[Hold] = field(default_factory=list)
    drop_holds: list[int] = field(default_factory=list)
    #: Locked accounts whose changes are written (unchanged ones are skipped; each once).
    accounts: list[Locked] = field(default_factory=list)
    #: Once-only grants given: (player, kind, period, transfer id).
    grant_claims: list[tuple[str, str, str, int]] = field(default_factory=list)
    #: Balance changes of the house and the treasury (not locked before: changed last).
    system: dict[str, int] = field(default_factory=dict)
    #: Stored answers of idempotent calls: (scope, request id, response bytes).
    answers: list[tuple[str, str, bytes]] = field(default_factory=list)
    #: Claims of calls that failed in a shared transaction, and the escrows they opened.
    forget_claims: list[tuple[str, str]] = field(default_factory=list)
    drop_escrows: list[str] = field(default_factory=list)
    #: When the accounts changed.
    now: datetime | None = None

    def merge(self, other: Batch) -> None:
        self.transfers += other.transfers
        self.add_holds += other.add_holds
        self.drop_holds += other.drop_holds
        self.accounts += other.accounts
        self.grant_claims += other.grant_claims
        for name, amount in other.system.items():
            self.system[name] = self.system.get(name, 0) + amount
        self.answers += other.answers
        self.forget_claims += other.forget_claims
        self.drop_escrows += other.drop_escrows
        if other.now is not None and (self.now is None or other.now > self.now):
            self.now = other.now

    def changed_accounts(self) -> list[Locked]:
        """The accounts to write, each once (calls of one transaction share their Locked rows)."""
        seen: dict[str, Locked] = {}
        for account in self.accounts:
            if account.changed:
                seen.setdefault(account.id, account)
        return list(seen.values())


class Store(abc.ABC):
    """The statements of one transaction (or of one call in a shared transaction)."""

    @abc.abstractmethod
    async def claim_many(self, requests: Sequence[ClaimRequest], now: datetime, expires_at: datetime) -> list[Claimed]:
        """Claims each (scope, request id), in key order; for the new ones, reserves their transfer
        ids and opens their escrows."""

    async def claim(self, request: ClaimRequest, now: datetime, expires_at: datetime) -> Claimed:
        (claimed,) = await self.claim_many([request], now, expires_at)
        return claimed

    @abc.abstractmethod
    async def reclaim(self, request: ClaimRequest, now: datetime, expires_at: datetime) -> None:
        """Replaces a stored answer past its retention by a fresh claim."""

    @abc.abstractmethod
    async def reserve_ids(self, count: int) -> list[int]:
        """`count` new transfer ids, increasing."""

    @abc.abstractmethod
    async def open_escrow(self, account_id: str, now: datetime) -> bool:
        """Opens a pot's escrow account; False when it existed."""

    @abc.abstractmethod
    async def open_player(self, account_id: str, player: str, now: datetime) -> bool:
        """Inserts a player account with a zero balance; False when it existed."""

    @abc.abstractmethod
    async def lock_many(
        self, ids: Sequence[str], pots: Sequence[str]
    ) -> tuple[dict[str, Locked], dict[str, list[Hold]]]:
        """Locks the existing accounts among `ids` (in the global lock order) and reads the live
        holds of `pots` (escrows among `ids`) as they are under those locks."""

    async def lock(self, ids: Sequence[str]) -> dict[str, Locked]:
        locked, _ = await self.lock_many(ids, [])
        return locked

    async def lock_pot(self, pot: str, players: Sequence[str]) -> tuple[dict[str, Locked], list[Hold]]:
        """Locks the pot's escrow and the `players`, and reads the pot's live holds."""
        locked, holds = await self.lock_many([pot, *players], [pot])
        return locked, holds.get(pot, [])

    @abc.abstractmethod
    async def live_holds(self, pot: str) -> list[Hold]:
        """The pot's live holds, in the order they were made."""

    @abc.abstractmethod
    async def due_holds(self, now: datetime, pot: str | None, limit: int) -> list[Hold]:
        """Up to `limit` live holds past their expiry (of one pot, or any), oldest first."""

    @abc.abstractmethod
    async def holds_by_id(self, ids: Sequence[int], now: datetime) -> list[Hold]:
        """Those of `ids` that are still live and past `now`, with their match or tournament."""

    @abc.abstractmethod
    async def has_grant_claim(self, player: str, kind: str, period: str) -> bool: ...

    @abc.abstractmethod
    async def account_exists(self, account_id: str) -> bool: ...

    @abc.abstractmethod
    async def purge_answers(self, now: datetime) -> int:
        """Deletes the stored answers past their retention; returns how many."""

    @abc.abstractmethod
    async def write(self, batch: Batch) -> None:
        """Writes the batch: transfers, live holds, accounts, claims and answers, then the house
        and the treasury (last)."""


class _DirectStore(Store):
    """A store on one database transaction: ids reserved by its claims are handed out first."""

    def __init__(self) -> None:
        self._reserved: list[int] = []
        self._escrows: dict[str, bool] = {}

    async def claim(self, request: ClaimRequest, now: datetime, expires_at: datetime) -> Claimed:
        """Claims one key; its reserved ids and opened escrow serve this store's later calls."""
        (claimed,) = await self.claim_many([request], now, expires_at)
        self._reserved += claimed.ids
        if request.escrow is not None and claimed.stored is None:
            self._escrows[request.escrow] = claimed.escrow_created
        return claimed

    @abc.abstractmethod
    async def _new_ids(self, count: int) -> list[int]: ...

    @abc.abstractmethod
    async def _open_escrow(self, account_id: str, now: datetime) -> bool: ...

    async def reserve_ids(self, count: int) -> list[int]:
        if count <= 0:
            return []
        if len(self._reserved) < count:
            self._reserved += await self._new_ids(count - len(self._reserved))
        ids, self._reserved = self._reserved[:count], self._reserved[count:]
        return ids

    async def open_escrow(self, account_id: str, now: datetime) -> bool:
        if account_id in self._escrows:
            return self._escrows.pop(account_id)
        return await self._open_escrow(account_id, now)


# -- PostgreSQL ---------------------------------------------------------------------------------

_PG_RANK = "CASE kind WHEN 'escrow' THEN 0 WHEN 'player' THEN 1 WHEN 'house' THEN 2 ELSE 3 END"

#: Claims many request ids in key order (two transactions claiming the same keys wait for each
#: other in one order: no deadlock), opens the escrows and reserves the ids of the new ones.
_PG_CLAIM = """
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[])
        WITH ORDINALITY AS u(scope, request_id, method, request_hash, reserve, escrow, n)
), claim AS (
    INSERT INTO wallet_idempotency_keys (scope, request_id, method, request_hash, response, created_at, expires_at)
    SELECT scope, request_id, method, request_hash, ''::bytea, $7, $8 FROM input ORDER BY scope, request_id
    ON CONFLICT DO NOTHING
    RETURNING scope, request_id
), escrow AS (
    INSERT INTO wallet_accounts (id, kind, pot_state, created_at, updated_at)
    SELECT i.escrow, 'escrow', 'open', $7, $7 FROM input i JOIN claim c USING (scope, request_id)
    WHERE i.escrow IS NOT NULL ORDER BY i.escrow
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT i.n, c.request_id IS NOT NULL AS claimed, e.id IS NOT NULL AS escrow_created,
    CASE WHEN c.request_id IS NOT NULL
        THEN array(SELECT nextval('wallet_transfers_id_seq') FROM generate_series(1, i.reserve))
    END AS ids,
    k.method, k.request_hash, k.response, k.expires_at
FROM input i
LEFT JOIN claim c USING (scope, request_id)
LEFT JOIN escrow e ON e.id = i.escrow
LEFT JOIN wallet_idempotency_keys k ON c.request_id IS NULL AND k.scope = i.scope AND k.request_id = i.request_id
ORDER BY i.n
"""

#: Locks the accounts and reads the given pots' live holds. The holds come from the statement's
#: snapshot, taken before the locks were granted; they are current when no transaction changed
#: the escrow row since that snapshot (every change to a pot's holds rewrites its escrow row),
#: which comparing the row's xmin in the snapshot with the locked row's tells. A pot that changed
#: meanwhile has its holds read again (`live_holds`), under the lock.
_PG_LOCK = f"""
WITH locked AS (
    SELECT id, kind, balance, held, incoming, pot_state, xmin::text AS version FROM wallet_accounts
    WHERE id = ANY($1::text[]) ORDER BY {_PG_RANK}, id FOR NO KEY UPDATE
)
SELECT locked.*,
    CASE WHEN locked.id = ANY($2::text[]) THEN
        (SELECT xmin::text FROM wallet_accounts a WHERE a.id = locked.id) END AS seen_version,
    CASE WHEN locked.id = ANY($2::text[]) THEN
        (SELECT array_agg(h.transfer_id ORDER BY h.transfer_id) FROM wallet_live_holds h WHERE h.pot = locked.id)
    END AS hold_ids,
    CASE WHEN locked.id = ANY($2::text[]) THEN
        (SELECT array_agg(h.account ORDER BY h.transfer_id) FROM wallet_live_holds h WHERE h.pot = locked.id)
    END AS hold_accounts,
    CASE WHEN locked.id = ANY($2::text[]) THEN
        (SELECT array_agg(h.amount ORDER BY h.transfer_id) FROM wallet_live_holds h WHERE h.pot = locked.id)
    END AS hold_amounts
FROM locked
"""

_PG_WRITE = """
WITH new_transfers AS (
    INSERT INTO wallet_transfers (id, phase, pending_id, debit_account, credit_account, amount, reason, match_id,
                                  tournament, requested_by, on_behalf_of, request_id, note, created_at, expires_at)
    SELECT * FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], $8::text[],
                         $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
                         $15::timestamptz[], $16::timestamptz[])
    RETURNING 1
), added_holds AS (
    INSERT INTO wallet_live_holds (transfer_id, pot, account, amount, expires_at)
    SELECT * FROM unnest($17::bigint[], $18::text[], $19::text[], $20::bigint[], $21::timestamptz[])
    RETURNING 1
), dropped_holds AS (
    DELETE FROM wallet_live_holds WHERE transfer_id = ANY($22::bigint[]) RETURNING 1
), changed AS (
    UPDATE wallet_accounts AS a
    SET balance = a.balance + u.d_balance, held = a.held + u.d_held, incoming = a.incoming + u.d_incoming,
        pot_state = coalesce(u.pot_state, a.pot_state), updated_at = $1
    FROM unnest($23::text[], $24::bigint[], $25::bigint[], $26::bigint[], $27::text[])
        AS u(id, d_balance, d_held, d_incoming, pot_state)
    WHERE a.id = u.id
    RETURNING 1
), claims AS (
    INSERT INTO wallet_grant_claims (player, kind, period, transfer_id)
    SELECT * FROM unnest($28::text[], $29::text[], $30::text[], $31::bigint[])
    RETURNING 1
), answers AS (
    UPDATE wallet_idempotency_keys AS k SET response = u.response
    FROM unnest($32::text[], $33::text[], $34::bytea[]) AS u(scope, request_id, response)
    WHERE k.scope = u.scope AND k.request_id = u.request_id
    RETURNING 1
), forgotten AS (
    DELETE FROM wallet_idempotency_keys AS k USING unnest($35::text[], $36::text[]) AS u(scope, request_id)
    WHERE k.scope = u.scope AND k.request_id = u.request_id
    RETURNING 1
), dropped_escrows AS (
    DELETE FROM wallet_accounts WHERE id = ANY($37::text[]) AND kind = 'escrow' RETURNING 1
)
UPDATE wallet_accounts AS a SET balance = a.balance + u.amount, updated_at = $1
FROM unnest($38::text[], $39::bigint[]) AS u(id, amount)
WHERE a.id = u.id
"""


def _column(rows: Sequence[dict[str, Any]], name: str) -> list[Any]:
    return [row[name] for row in rows]


def _system(batch: Batch) -> list[tuple[str, int]]:
    return [(name, amount) for name, amount in sorted(batch.system.items(), key=lambda i: LOCK_RANK[i[0]]) if amount]


class PgStore(_DirectStore):
    #: How many pots' holds had to be read again after waiting for their lock (tests).
    stale_reads = 0

    def __init__(self, conn: asyncpg.Connection) -> None:
        super().__init__()
        self.conn = conn

    async def claim_many(self, requests: Sequence[ClaimRequest], now: datetime, expires_at: datetime) -> list[Claimed]:
        results: list[Claimed | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        for _ in range(CLAIM_ATTEMPTS):
            asked = [requests[i] for i in pending]
            rows = await self.conn.fetch(
                _PG_CLAIM,
                [r.scope for r in asked],
                [r.request_id for r in asked],
                [r.method for r in asked],
                [r.digest for r in asked],
                [r.reserve for r in asked],
                [r.escrow for r in asked],
                now,
                expires_at,
            )
            again = []
            for index, row in zip(pending, rows, strict=True):
                if row["claimed"]:
                    results[index] = Claimed(None, tuple(row["ids"] or ()), bool(row["escrow_created"]))
                elif row["response"] is None:
                    # The key was inserted (or removed) by a transaction that committed after this
                    # statement's snapshot: ON CONFLICT saw the row, the join could not. A new
                    # statement (READ COMMITTED: a new snapshot) sees where it stands.
                    again.append(index)
                else:
                    stored = (row["method"], row["request_hash"], bytes(row["response"]), row["expires_at"])
                    results[index] = Claimed(stored)
            pending = again
            if not pending:
                return [claimed for claimed in results if claimed is not None]
        raise ConflictError("a concurrent request with the same request_id is being written; retry")

    async def reclaim(self, request: ClaimRequest, now: datetime, expires_at: datetime) -> None:
        await self.conn.execute(
            "UPDATE wallet_idempotency_keys SET method = $3, request_hash = $4, response = ''::bytea,"
            " created_at = $5, expires_at = $6 WHERE scope = $1 AND request_id = $2",
            request.scope,
            request.request_id,
            request.method,
            request.digest,
            now,
            expires_at,
        )

    async def _new_ids(self, count: int) -> list[int]:
        row = await self.conn.fetchval(
            "SELECT array(SELECT nextval('wallet_transfers_id_seq') FROM generate_series(1, $1::int))", count
        )
        return list(row)

    async def _open_escrow(self, account_id: str, now: datetime) -> bool:
        created = await self.conn.fetchval(
            "INSERT INTO wallet_accounts (id, kind, pot_state, created_at, updated_at)"
            " VALUES ($1, 'escrow', 'open', $2, $2) ON CONFLICT DO NOTHING RETURNING 1",
            account_id,
            now,
        )
        return created is not None

    async def open_player(self, account_id: str, player: str, now: datetime) -> bool:
        created = await self.conn.fetchval(
            "INSERT INTO wallet_accounts (id, kind, player, created_at, updated_at) VALUES ($1, 'player', $2, $3, $3)"
            " ON CONFLICT DO NOTHING RETURNING 1",
            account_id,
            player,
            now,
        )
        return created is not None

    async def lock_many(
        self, ids: Sequence[str], pots: Sequence[str]
    ) -> tuple[dict[str, Locked], dict[str, list[Hold]]]:
        if not ids:
            return {}, {}
        rows = await self.conn.fetch(_PG_LOCK, list(set(ids)), list(pots))
        locked: dict[str, Locked] = {}
        holds: dict[str, list[Hold]] = {}
        for row in rows:
            account = row["id"]
            locked[account] = Locked(
                account, row["kind"], row["balance"], row["held"], row["incoming"], row["pot_state"]
            )
            if account not in pots:
                continue
            if row["version"] != row["seen_version"]:  # changed while we waited: read again
                PgStore.stale_reads += 1
                holds[account] = await self.live_holds(account)
                continue
            found = zip(row["hold_ids"] or (), row["hold_accounts"] or (), row["hold_amounts"] or (), strict=True)
            holds[account] = [Hold(i, account, owner, amount) for i, owner, amount in found]
        return locked, holds

    async def live_holds(self, pot: str) -> list[Hold]:
        rows = await self.conn.fetch(
            "SELECT transfer_id, account, amount FROM wallet_live_holds WHERE pot = $1 ORDER BY transfer_id", pot
        )
        return [Hold(row["transfer_id"], pot, row["account"], row["amount"]) for row in rows]

    async def due_holds(self, now: datetime, pot: str | None, limit: int) -> list[Hold]:
        rows = await self.conn.fetch(
            "SELECT transfer_id, pot, account, amount FROM wallet_live_holds"
            " WHERE expires_at <= $1 AND ($2::text IS NULL OR pot = $2) ORDER BY expires_at, transfer_id LIMIT $3",
            now,
            pot,
            limit,
        )
        return [Hold(row["transfer_id"], row["pot"], row["account"], row["amount"]) for row in rows]

    async def holds_by_id(self, ids: Sequence[int], now: datetime) -> list[Hold]:
        rows = await self.conn.fetch(
            "SELECT h.transfer_id, h.pot, h.account, h.amount, t.match_id, t.tournament"
            " FROM wallet_live_holds h JOIN wallet_transfers t ON t.id = h.transfer_id"
            " WHERE h.transfer_id = ANY($1::bigint[]) AND h.expires_at <= $2 ORDER BY h.transfer_id",
            list(ids),
            now,
        )
        return [
            Hold(
                row["transfer_id"], row["pot"], row["account"], row["amount"], None, row["match_id"], row["tournament"]
            )
            for row in rows
        ]

    async def has_grant_claim(self, player: str, kind: str, period: str) -> bool:
        found = await self.conn.fetchval(
            "SELECT 1 FROM wallet_grant_claims WHERE player = $1 AND kind = $2 AND period = $3", player, kind, period
        )
        return found is not None

    async def account_exists(self, account_id: str) -> bool:
        return await self.conn.fetchval("SELECT 1 FROM wallet_accounts WHERE id = $1", account_id) is not None

    async def purge_answers(self, now: datetime) -> int:
        status = await self.conn.execute("DELETE FROM wallet_idempotency_keys WHERE expires_at <= $1", now)
        return int(status.rsplit(" ", 1)[-1])

    async def write(self, batch: Batch) -> None:
        rows, holds, changed, system = batch.transfers, batch.add_holds, batch.changed_accounts(), _system(batch)
        await self.conn.execute(
            _PG_WRITE,
            batch.now,
            *(_column(rows, name) for name in TRANSFER_COLUMNS),
            [h.transfer_id for h in holds],
            [h.pot for h in holds],
            [h.account for h in holds],
            [h.amount for h in holds],
            [h.expires_at for h in holds],
            batch.drop_holds,
            [a.id for a in changed],
            [a.d_balance for a in changed],
            [a.d_held for a in changed],
            [a.d_incoming for a in changed],
            [a.new_pot_state for a in changed],
            [c[0] for c in batch.grant_claims],
            [c[1] for c in batch.grant_claims],
            [c[2] for c in batch.grant_claims],
            [c[3] for c in batch.grant_claims],
            [a[0] for a in batch.answers],
            [a[1] for a in batch.answers],
            [a[2] for a in batch.answers],
            [c[0] for c in batch.forget_claims],
            [c[1] for c in batch.forget_claims],
            batch.drop_escrows,
            [name for name, _ in system],
            [amount for _, amount in system],
        )


# -- SQLite -------------------------------------------------------------------------------------

_KIND_RANK = case(
    (accounts.c.kind == "escrow", 0), (accounts.c.kind == "player", 1), (accounts.c.kind == "house", 2), else_=3
)
_UPDATE_ACCOUNT = (
    update(accounts)
    .where(accounts.c.id == bindparam("b_id"))
    .values(
        balance=accounts.c.balance + bindparam("b_balance"),
        held=accounts.c.held + bindparam("b_held"),
        incoming=accounts.c.incoming + bindparam("b_incoming"),
        pot_state=func.coalesce(bindparam("b_pot_state"), accounts.c.pot_state),
        updated_at=bindparam("b_now"),
    )
)


class SqliteStore(_DirectStore):
    """The SQLite statements; the transaction holds SQLite's write lock from its start."""

    def __init__(self, conn: AsyncConnection) -> None:
        super().__init__()
        self.conn = conn
        self._next_id: int | None = None

    async def claim_many(self, requests: Sequence[ClaimRequest], now: datetime, expires_at: datetime) -> list[Claimed]:
        results = []
        for request in requests:
            statement = (
                sqlite.insert(idempotency_keys)
                .values(
                    scope=request.scope,
                    request_id=request.request_id,
                    method=request.method,
                    request_hash=request.digest,
                    response=b"",
                    created_at=now,
                    expires_at=expires_at,
                )
                .on_conflict_do_nothing()
                .returning(idempotency_keys.c.request_id)
            )
            if (await self.conn.execute(statement)).first() is not None:
                ids = tuple(await self._new_ids(request.reserve)) if request.reserve else ()
                created = await self._open_escrow(request.escrow, now) if request.escrow is not None else False
                claimed = Claimed(None, ids, created)
            else:
                row = (
                    await self.conn.execute(
                        select(
                            idempotency_keys.c.method,
                            idempotency_keys.c.request_hash,
                            idempotency_keys.c.response,
                            idempotency_keys.c.expires_at,
                        ).where(
                            idempotency_keys.c.scope == request.scope,
                            idempotency_keys.c.request_id == request.request_id,
                        )
                    )
                ).one()
                claimed = Claimed((row.method, row.request_hash, row.response, aware(row.expires_at)))
            results.append(claimed)
        return results

    async def reclaim(self, request: ClaimRequest, now: datetime, expires_at: datetime) -> None:
        await self.conn.execute(
            update(idempotency_keys)
            .where(idempotency_keys.c.scope == request.scope, idempotency_keys.c.request_id == request.request_id)
            .values(
                method=request.method, request_hash=request.digest, response=b"", created_at=now, expires_at=expires_at
            )
        )

    async def _new_ids(self, count: int) -> list[int]:
        if self._next_id is None:
            largest = (await self.conn.execute(select(func.max(transfers.c.id)))).scalar_one()
            self._next_id = int(largest or 0) + 1
        first, self._next_id = self._next_id, self._next_id + count
        return list(range(first, first + count))

    async def _open_escrow(self, account_id: str, now: datetime) -> bool:
        statement = (
            sqlite.insert(accounts)
            .values(id=account_id, kind="escrow", pot_state="open", created_at=now, updated_at=now)
            .on_conflict_do_nothing()
            .returning(accounts.c.id)
        )
        return (await self.conn.execute(statement)).first() is not None

    async def open_player(self, account_id: str, player: str, now: datetime) -> bool:
        statement = (
            sqlite.insert(accounts)
            .values(id=account_id, kind="player", player=player, created_at=now, updated_at=now)
            .on_conflict_do_nothing()
            .returning(accounts.c.id)
        )
        return (await self.conn.execute(statement)).first() is not None

    async def lock_many(
        self, ids: Sequence[str], pots: Sequence[str]
    ) -> tuple[dict[str, Locked], dict[str, list[Hold]]]:
        if not ids:
            return {}, {}
        rows = (
            await self.conn.execute(
                select(
                    accounts.c.id,
                    accounts.c.kind,
                    accounts.c.balance,
                    accounts.c.held,
                    accounts.c.incoming,
                    accounts.c.pot_state,
                )
                .where(accounts.c.id.in_(sorted(set(ids))))
                .order_by(_KIND_RANK, accounts.c.id)
            )
        ).all()
        locked = {row.id: Locked(row.id, row.kind, row.balance, row.held, row.incoming, row.pot_state) for row in rows}
        return locked, {pot: await self.live_holds(pot) for pot in pots if pot in locked}

    async def live_holds(self, pot: str) -> list[Hold]:
        rows = (
            await self.conn.execute(
                select(live_holds.c.transfer_id, live_holds.c.account, live_holds.c.amount)
                .where(live_holds.c.pot == pot)
                .order_by(live_holds.c.transfer_id)
            )
        ).all()
        return [Hold(row.transfer_id, pot, row.account, row.amount) for row in rows]

    async def due_holds(self, now: datetime, pot: str | None, limit: int) -> list[Hold]:
        statement = select(live_holds.c.transfer_id, live_holds.c.pot, live_holds.c.account, live_holds.c.amount).where(
            live_holds.c.expires_at <= now
        )
        if pot is not None:
            statement = statement.where(live_holds.c.pot == pot)
        rows = (
            await self.conn.execute(statement.order_by(live_holds.c.expires_at, live_holds.c.transfer_id).limit(limit))
        ).all()
        return [Hold(row.transfer_id, row.pot, row.account, row.amount) for row in rows]

    async def holds_by_id(self, ids: Sequence[int], now: datetime) -> list[Hold]:
        rows = (
            await self.conn.execute(
                select(
                    live_holds.c.transfer_id,
                    live_holds.c.pot,
                    live_holds.c.account,
                    live_holds.c.amount,
                    transfers.c.match_id,
                    transfers.c.tournament,
                )
                .join(transfers, transfers.c.id == live_holds.c.transfer_id)
                .where(live_holds.c.transfer_id.in_(list(ids)), live_holds.c.expires_at <= now)
                .order_by(live_holds.c.transfer_id)
            )
        ).all()
        return [
            Hold(row.transfer_id, row.pot, row.account, row.amount, None, row.match_id, row.tournament) for row in rows
        ]

    async def has_grant_claim(self, player: str, kind: str, period: str) -> bool:
        found = await self.conn.execute(
            select(grant_claims.c.player).where(
                grant_claims.c.player == player, grant_claims.c.kind == kind, grant_claims.c.period == period
            )
        )
        return found.first() is not None

    async def account_exists(self, account_id: str) -> bool:
        return (await self.conn.execute(select(accounts.c.id).where(accounts.c.id == account_id))).first() is not None

    async def purge_answers(self, now: datetime) -> int:
        result = await self.conn.execute(delete(idempotency_keys).where(idempotency_keys.c.expires_at <= now))
        return int(getattr(result, "rowcount", 0) or 0)

    async def write(self, batch: Batch) -> None:
        conn, now = self.conn, batch.now
        if batch.transfers:
            await conn.execute(insert(transfers), batch.transfers)
        if batch.add_holds:
            await conn.execute(
                insert(live_holds),
                [
                    {
                        "transfer_id": h.transfer_id,
                        "pot": h.pot,
                        "account": h.account,
                        "amount": h.amount,
                        "expires_at": h.expires_at,
                    }
                    for h in batch.add_holds
                ],
            )
        if batch.drop_holds:
            await conn.execute(delete(live_holds).where(live_holds.c.transfer_id.in_(batch.drop_holds)))
        changed = [
            {
                "b_id": a.id,
                "b_balance": a.d_balance,
                "b_held": a.d_held,
                "b_incoming": a.d_incoming,
                "b_pot_state": a.new_pot_state,
                "b_now": now,
            }
            for a in batch.changed_accounts()
        ]
        if changed:
            await conn.execute(_UPDATE_ACCOUNT, changed)
        if batch.grant_claims:
            await conn.execute(
                insert(grant_claims),
                [{"player": p, "kind": k, "period": d, "transfer_id": t} for p, k, d, t in batch.grant_claims],
            )
        for scope, request_id, response in batch.answers:
            await conn.execute(
                update(idempotency_keys)
                .where(idempotency_keys.c.scope == scope, idempotency_keys.c.request_id == request_id)
                .values(response=response)
            )
        if batch.forget_claims:
            key = tuple_(idempotency_keys.c.scope, idempotency_keys.c.request_id)
            await conn.execute(delete(idempotency_keys).where(key.in_(batch.forget_claims)))
        if batch.drop_escrows:
            await conn.execute(
                delete(accounts).where(accounts.c.id.in_(batch.drop_escrows), accounts.c.kind == "escrow")
            )
        for name, amount in _system(batch):
            await conn.execute(
                update(accounts)
                .where(accounts.c.id == name)
                .values(balance=accounts.c.balance + amount, updated_at=now)
            )
