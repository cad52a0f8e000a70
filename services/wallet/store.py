"""The ledger's statements, one transaction at a time, on each database.

`core` decides; a `Store` runs the few statements a decision needs, inside the transaction that
`transactions` opened: claim the request id, lock accounts, read live holds, and finally write
everything in one go (`write(Batch)`). The same ledger logic thus runs on both databases, and
each backend does its part the fastest way it can:

- `PgStore`: raw asyncpg (the hot path; SQLAlchemy's per-statement cost was most of a call's time),
  arrays instead of IN lists, and `write` as a single statement (data-modifying CTEs) whose last
  step credits the house and the treasury, so their rows stay locked only until the commit.
  Transfer ids come from the table's sequence ahead of the write (`reserve_ids`), often in the
  same statement as the claim, so the reply (and the stored answer) is built before the write.
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
from sqlalchemy import bindparam, case, delete, func, insert, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from services.wallet import models

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
    match_id: str | None = None
    tournament: str | None = None


@dataclass(frozen=True)
class Claimed:
    """The outcome of claiming a request id: ours to run (`stored` None), or the stored answer of
    an earlier call (`method`, `request_hash`, `response`, `expires_at`)."""

    stored: tuple[str, str, bytes, datetime] | None = None


@dataclass
class Batch:
    """Everything one operation writes, applied by `Store.write` in one go."""

    now: datetime
    #: Transfer rows (dicts keyed by TRANSFER_COLUMNS), ids included.
    transfers: list[dict[str, Any]] = field(default_factory=list)
    add_holds: list[Hold] = field(default_factory=list)
    expires_at: datetime | None = None
    drop_holds: list[int] = field(default_factory=list)
    #: Locked accounts whose changes are written (unchanged ones are skipped).
    accounts: list[Locked] = field(default_factory=list)
    #: Once-only grants given: (player, kind, period, transfer id).
    grant_claims: list[tuple[str, str, str, int]] = field(default_factory=list)
    #: Balance changes of the house and the treasury (not locked before: changed last).
    system: dict[str, int] = field(default_factory=dict)
    #: The stored answer of an idempotent call: (scope, request id, response bytes).
    answer: tuple[str, str, bytes] | None = None


class Store(abc.ABC):
    """The statements of one transaction. `reserved` ids come from the claim, when asked."""

    def __init__(self) -> None:
        self._reserved: list[int] = []
        self._escrow_created: dict[str, bool] = {}

    @abc.abstractmethod
    async def claim(
        self,
        scope: str,
        request_id: str,
        method: str,
        digest: str,
        now: datetime,
        expires_at: datetime,
        *,
        reserve: int = 0,
        escrow: str | None = None,
    ) -> Claimed:
        """Claims (scope, request id); with `reserve`, also reserves that many transfer ids, and
        with `escrow`, opens that escrow account (both only when the claim is new)."""

    @abc.abstractmethod
    async def reclaim(
        self, scope: str, request_id: str, method: str, digest: str, now: datetime, expires_at: datetime
    ) -> None:
        """Replaces a stored answer past its retention by a fresh claim."""

    @abc.abstractmethod
    async def _new_ids(self, count: int) -> list[int]: ...

    async def reserve_ids(self, count: int) -> list[int]:
        """`count` new transfer ids, increasing."""
        if count <= 0:
            return []
        if len(self._reserved) < count:
            self._reserved += await self._new_ids(count - len(self._reserved))
        ids, self._reserved = self._reserved[:count], self._reserved[count:]
        return ids

    async def open_escrow(self, account_id: str, now: datetime) -> bool:
        """Opens a pot's escrow account; False when it existed."""
        if account_id in self._escrow_created:
            return self._escrow_created.pop(account_id)
        return await self._open_escrow(account_id, now)

    @abc.abstractmethod
    async def _open_escrow(self, account_id: str, now: datetime) -> bool: ...

    @abc.abstractmethod
    async def open_player(self, account_id: str, player: str, now: datetime) -> bool:
        """Inserts a player account with a zero balance; False when it existed."""

    @abc.abstractmethod
    async def lock(self, ids: Sequence[str]) -> dict[str, Locked]:
        """Locks the existing accounts among `ids` in the global lock order."""

    @abc.abstractmethod
    async def live_holds(self, pot: str) -> list[Hold]:
        """The pot's live holds, in the order they were made."""

    async def lock_pot(self, pot: str, players: Sequence[str]) -> tuple[dict[str, Locked], list[Hold]]:
        """Locks the pot's escrow and the `players` accounts (in the lock order), then reads the
        pot's live holds as they are under that lock."""
        locked = await self.lock([pot, *players])
        return locked, await self.live_holds(pot) if pot in locked else []

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
        """Writes the batch: transfers, live holds, accounts, claims, the answer, then the house
        and the treasury (last)."""


# -- PostgreSQL ---------------------------------------------------------------------------------

_PG_RANK = "CASE kind WHEN 'escrow' THEN 0 WHEN 'player' THEN 1 WHEN 'house' THEN 2 ELSE 3 END"

_PG_CLAIM = """
WITH claim AS (
    INSERT INTO wallet_idempotency_keys (scope, request_id, method, request_hash, response, created_at, expires_at)
    VALUES ($1, $2, $3, $4, ''::bytea, $5, $6)
    ON CONFLICT DO NOTHING
    RETURNING 1
), escrow AS (
    INSERT INTO wallet_accounts (id, kind, pot_state, created_at, updated_at)
    SELECT $8::text, 'escrow', 'open', $5, $5 WHERE $8::text IS NOT NULL AND EXISTS (SELECT 1 FROM claim)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT
    EXISTS (SELECT 1 FROM claim) AS claimed,
    EXISTS (SELECT 1 FROM escrow) AS escrow_created,
    CASE WHEN EXISTS (SELECT 1 FROM claim)
        THEN array(SELECT nextval('wallet_transfers_id_seq') FROM generate_series(1, $7::int))
    END AS ids
"""

#: Locks like _PG_LOCK and also reads the pot's live holds. The holds come from the statement's
#: snapshot, taken before the lock was granted; they are current when no transaction changed the
#: escrow row since that snapshot (every change to a pot's holds rewrites its escrow row), which
#: comparing the row's xmin in the snapshot with the locked row's tells.
_PG_LOCK_POT = f"""
WITH locked AS (
    SELECT id, kind, balance, held, incoming, pot_state, xmin::text AS version FROM wallet_accounts
    WHERE id = ANY($1::text[]) ORDER BY {_PG_RANK}, id FOR NO KEY UPDATE
)
SELECT locked.*,
    (SELECT xmin::text FROM wallet_accounts WHERE id = $2) AS seen_version,
    (SELECT array_agg(transfer_id ORDER BY transfer_id) FROM wallet_live_holds WHERE pot = $2) AS hold_ids,
    (SELECT array_agg(account ORDER BY transfer_id) FROM wallet_live_holds WHERE pot = $2) AS hold_accounts,
    (SELECT array_agg(amount ORDER BY transfer_id) FROM wallet_live_holds WHERE pot = $2) AS hold_amounts
FROM locked
"""

_PG_STORED = """
SELECT method, request_hash, response, expires_at FROM wallet_idempotency_keys WHERE scope = $1 AND request_id = $2
"""

_PG_LOCK = f"""
SELECT id, kind, balance, held, incoming, pot_state FROM wallet_accounts
WHERE id = ANY($1::text[]) ORDER BY {_PG_RANK}, id FOR NO KEY UPDATE
"""

_PG_WRITE = """
WITH new_transfers AS (
    INSERT INTO wallet_transfers (id, phase, pending_id, debit_account, credit_account, amount, reason, match_id,
                                  tournament, requested_by, on_behalf_of, request_id, note, created_at, expires_at)
    SELECT u.id, u.phase, u.pending_id, u.debit_account, u.credit_account, u.amount, u.reason, u.match_id,
           u.tournament, u.requested_by, u.on_behalf_of, u.request_id, u.note, $1, u.expires_at
    FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::bigint[], $8::text[],
                $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::timestamptz[])
        AS u(id, phase, pending_id, debit_account, credit_account, amount, reason, match_id, tournament, requested_by,
             on_behalf_of, request_id, note, expires_at)
    RETURNING 1
), added_holds AS (
    INSERT INTO wallet_live_holds (transfer_id, pot, account, amount, expires_at)
    SELECT u.*, $16
    FROM unnest($17::bigint[], $18::text[], $19::text[], $20::bigint[]) AS u(transfer_id, pot, account, amount)
    RETURNING 1
), dropped_holds AS (
    DELETE FROM wallet_live_holds WHERE transfer_id = ANY($21::bigint[]) RETURNING 1
), changed AS (
    UPDATE wallet_accounts AS a
    SET balance = a.balance + u.d_balance, held = a.held + u.d_held, incoming = a.incoming + u.d_incoming,
        pot_state = coalesce(u.pot_state, a.pot_state), updated_at = $1
    FROM unnest($22::text[], $23::bigint[], $24::bigint[], $25::bigint[], $26::text[])
        AS u(id, d_balance, d_held, d_incoming, pot_state)
    WHERE a.id = u.id
    RETURNING 1
), claims AS (
    INSERT INTO wallet_grant_claims (player, kind, period, transfer_id)
    SELECT * FROM unnest($27::text[], $28::text[], $29::text[], $30::bigint[])
    RETURNING 1
), answer AS (
    UPDATE wallet_idempotency_keys SET response = $31 WHERE scope = $32 AND request_id = $33 RETURNING 1
)
UPDATE wallet_accounts AS a SET balance = a.balance + u.amount, updated_at = $1
FROM unnest($34::text[], $35::bigint[]) AS u(id, amount)
WHERE a.id = u.id
"""


def _column(rows: Sequence[dict[str, Any]], name: str) -> list[Any]:
    return [row[name] for row in rows]


class PgStore(Store):
    #: How many pots' holds had to be read again after waiting for their lock (tests).
    stale_reads = 0

    def __init__(self, conn: asyncpg.Connection) -> None:
        super().__init__()
        self.conn = conn

    async def claim(
        self,
        scope: str,
        request_id: str,
        method: str,
        digest: str,
        now: datetime,
        expires_at: datetime,
        *,
        reserve: int = 0,
        escrow: str | None = None,
    ) -> Claimed:
        row = await self.conn.fetchrow(_PG_CLAIM, scope, request_id, method, digest, now, expires_at, reserve, escrow)
        assert row is not None
        if row["claimed"]:
            self._reserved = list(row["ids"] or [])
            if escrow is not None:
                self._escrow_created[escrow] = bool(row["escrow_created"])
            return Claimed()
        stored = await self.conn.fetchrow(_PG_STORED, scope, request_id)
        assert stored is not None
        return Claimed((stored["method"], stored["request_hash"], bytes(stored["response"]), stored["expires_at"]))

    async def reclaim(
        self, scope: str, request_id: str, method: str, digest: str, now: datetime, expires_at: datetime
    ) -> None:
        await self.conn.execute(
            "UPDATE wallet_idempotency_keys SET method = $3, request_hash = $4, response = ''::bytea,"
            " created_at = $5, expires_at = $6 WHERE scope = $1 AND request_id = $2",
            scope,
            request_id,
            method,
            digest,
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

    async def lock(self, ids: Sequence[str]) -> dict[str, Locked]:
        if not ids:
            return {}
        rows = await self.conn.fetch(_PG_LOCK, list(set(ids)))
        return {
            row["id"]: Locked(row["id"], row["kind"], row["balance"], row["held"], row["incoming"], row["pot_state"])
            for row in rows
        }

    async def lock_pot(self, pot: str, players: Sequence[str]) -> tuple[dict[str, Locked], list[Hold]]:
        rows = await self.conn.fetch(_PG_LOCK_POT, list({pot, *players}), pot)
        locked = {
            row["id"]: Locked(row["id"], row["kind"], row["balance"], row["held"], row["incoming"], row["pot_state"])
            for row in rows
        }
        escrow = next((row for row in rows if row["id"] == pot), None)
        if escrow is None:
            return locked, []
        if escrow["version"] != escrow["seen_version"]:  # changed while we waited: read again
            PgStore.stale_reads += 1
            return locked, await self.live_holds(pot)
        ids, owners, amounts = escrow["hold_ids"] or [], escrow["hold_accounts"] or [], escrow["hold_amounts"] or []
        return locked, [Hold(i, pot, a, m) for i, a, m in zip(ids, owners, amounts, strict=True)]

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
            Hold(row["transfer_id"], row["pot"], row["account"], row["amount"], row["match_id"], row["tournament"])
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
        rows = batch.transfers
        changed = [a for a in batch.accounts if a.changed]
        scope, request_id, response = batch.answer if batch.answer is not None else (None, None, b"")
        system = sorted(batch.system.items(), key=lambda item: LOCK_RANK[item[0]])
        await self.conn.execute(
            _PG_WRITE,
            batch.now,
            *(_column(rows, name) for name in TRANSFER_COLUMNS if name != "created_at"),
            batch.expires_at,
            [h.transfer_id for h in batch.add_holds],
            [h.pot for h in batch.add_holds],
            [h.account for h in batch.add_holds],
            [h.amount for h in batch.add_holds],
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
            response,
            scope,
            request_id,
            [name for name, amount in system if amount],
            [amount for _, amount in system if amount],
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


class SqliteStore(Store):
    """The SQLite statements; the transaction holds SQLite's write lock from its start."""

    def __init__(self, conn: AsyncConnection) -> None:
        super().__init__()
        self.conn = conn
        self._next_id: int | None = None

    async def claim(
        self,
        scope: str,
        request_id: str,
        method: str,
        digest: str,
        now: datetime,
        expires_at: datetime,
        *,
        reserve: int = 0,
        escrow: str | None = None,
    ) -> Claimed:
        statement = (
            sqlite.insert(idempotency_keys)
            .values(
                scope=scope,
                request_id=request_id,
                method=method,
                request_hash=digest,
                response=b"",
                created_at=now,
                expires_at=expires_at,
            )
            .on_conflict_do_nothing()
            .returning(idempotency_keys.c.request_id)
        )
        if (await self.conn.execute(statement)).first() is not None:
            return Claimed()
        row = (
            await self.conn.execute(
                select(
                    idempotency_keys.c.method,
                    idempotency_keys.c.request_hash,
                    idempotency_keys.c.response,
                    idempotency_keys.c.expires_at,
                ).where(idempotency_keys.c.scope == scope, idempotency_keys.c.request_id == request_id)
            )
        ).one()
        return Claimed((row.method, row.request_hash, row.response, aware(row.expires_at)))

    async def reclaim(
        self, scope: str, request_id: str, method: str, digest: str, now: datetime, expires_at: datetime
    ) -> None:
        await self.conn.execute(
            update(idempotency_keys)
            .where(idempotency_keys.c.scope == scope, idempotency_keys.c.request_id == request_id)
            .values(method=method, request_hash=digest, response=b"", created_at=now, expires_at=expires_at)
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

    async def lock(self, ids: Sequence[str]) -> dict[str, Locked]:
        if not ids:
            return {}
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
        return {row.id: Locked(row.id, row.kind, row.balance, row.held, row.incoming, row.pot_state) for row in rows}

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
        return [Hold(row.transfer_id, row.pot, row.account, row.amount, row.match_id, row.tournament) for row in rows]

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
            await conn.execute(insert(transfers), [{**row, "created_at": now} for row in batch.transfers])
        if batch.add_holds:
            await conn.execute(
                insert(live_holds),
                [
                    {
                        "transfer_id": h.transfer_id,
                        "pot": h.pot,
                        "account": h.account,
                        "amount": h.amount,
                        "expires_at": batch.expires_at,
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
            for a in batch.accounts
            if a.changed
        ]
        if changed:
            await conn.execute(_UPDATE_ACCOUNT, changed)
        if batch.grant_claims:
            await conn.execute(
                insert(grant_claims),
                [{"player": p, "kind": k, "period": d, "transfer_id": t} for p, k, d, t in batch.grant_claims],
            )
        if batch.answer is not None:
            scope, request_id, response = batch.answer
            await conn.execute(
                update(idempotency_keys)
                .where(idempotency_keys.c.scope == scope, idempotency_keys.c.request_id == request_id)
                .values(response=response)
            )
        for name, amount in sorted(batch.system.items(), key=lambda item: LOCK_RANK[item[0]]):
            if amount:
                await conn.execute(
                    update(accounts)
                    .where(accounts.c.id == name)
                    .values(balance=accounts.c.balance + amount, updated_at=now)
                )
