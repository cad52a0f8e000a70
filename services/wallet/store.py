"""The ledger's statements, one transaction at a time, on each database: the interface every
backend implements and the values it reads and writes.

`core` decides; a `Store` runs the few statements a decision needs, inside the transaction that
`transactions` opened: claim request ids, lock accounts (and read the pots' live holds), and
finally write everything in one go (`write(Batch)`). The same ledger logic thus runs on both
databases, and each backend does its part the fastest way it can:

    pg_store.py       `PgStore`: raw asyncpg (the hot path), each step one statement for many calls
    sqlite_store.py   `SqliteStore`: SQLAlchemy Core on aiosqlite, one statement per kind of change

Both lock accounts in one global order (`LOCK_RANK`) and change the house and the treasury last
(`Batch.system_changes`): on PostgreSQL that keeps wallet transactions from deadlocking each other,
and the hot rows of the house and the treasury locked only from the write to the commit.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


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
    #: A load-test run's erasure: its rows are deleted before anything else is written (an
    #: erasure always runs alone in its transaction).
    erasure: Erasure | None = None

    def merge(self, other: Batch) -> None:
        if self.erasure is not None or other.erasure is not None:
            raise AssertionError("an erasure never shares a transaction")
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

    def system_changes(self) -> list[tuple[str, int]]:
        """The house's and the treasury's balance changes, in the lock order, none that is zero."""
        return [(name, amount) for name, amount in sorted(self.system.items(), key=lambda i: LOCK_RANK[i[0]]) if amount]


@dataclass(frozen=True)
class ErasureScope:
    """What the transfers of a set of accounts (a load-test run's, `Store.erasure_scope`) touch,
    read under the accounts' locks."""

    #: The transfers with a leg on one of the accounts.
    transfers: int
    #: The other accounts on those transfers, the house and the treasury left out (sorted).
    outside: list[str]
    #: What those transfers added to the house's and the treasury's posted balances (credits
    #: minus debits), by account id.
    system: dict[str, int]
    #: The live holds out of or into the accounts.
    live_holds: int
    #: The players' once-only grant claims.
    grant_claims: int
    #: The house's and the treasury's stored balances (read, not locked: they change last).
    system_balances: dict[str, int]
    #: The largest id among those transfers.
    last_transfer: int | None


@dataclass(frozen=True, kw_only=True)
class Erasure:
    """A load-test run's erasure, as `Store.write` applies and records it: every transfer with a
    leg on the run's player accounts or escrows, their live holds, the `players`' grant claims,
    and those accounts themselves; then its `wallet_erasures` row. The house's and the treasury's
    balances change through the batch's `system` changes, last, as in every write."""

    run: str
    requested_by: str
    request_id: str
    at: datetime
    players: list[str]
    #: The players' accounts and the escrows, each sorted.
    accounts: list[str]
    escrows: list[str]
    #: The counts the answer gave: the write checks it deletes exactly these.
    transfers: int
    grant_claims: int
    #: What the erased transfers had added to the house's and the treasury's balances.
    house_chips: int
    treasury_chips: int
    last_transfer: int | None

    @property
    def erased_accounts(self) -> list[str]:
        return self.accounts + self.escrows

    def record(self) -> dict[str, Any]:
        """The `wallet_erasures` row, in the table's column order."""
        return {
            "run_id": self.run,
            "requested_by": self.requested_by,
            "request_id": self.request_id,
            "erased_at": self.at,
            "accounts": len(self.accounts),
            "escrows": len(self.escrows),
            "transfers": self.transfers,
            "grant_claims": self.grant_claims,
            "house_chips": self.house_chips,
            "treasury_chips": self.treasury_chips,
            "last_transfer_id": self.last_transfer,
        }

    def check_deleted(self, transfers: int, grant_claims: int, accounts: int) -> None:
        """The rows deleted are the rows counted under the same locks; anything else is a bug, and
        raising rolls the erasure back."""
        expected = (self.transfers, self.grant_claims, len(self.erased_accounts))
        if (transfers, grant_claims, accounts) != expected:
            raise AssertionError(
                f"erasure of run {self.run}: deleted {transfers} transfers, {grant_claims} grant claims and"
                f" {accounts} accounts, but counted {expected[0]}, {expected[1]} and {expected[2]}"
            )


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

    # -- a load-test run's erasure (core.Wallet.erase_run) -------------------------------------------

    @abc.abstractmethod
    async def run_players(self, like: str) -> list[str]:
        """The players whose account's player id matches the SQL LIKE pattern `like`, sorted."""

    @abc.abstractmethod
    async def pots_of(self, accounts: Sequence[str]) -> list[str]:
        """The escrows on the other side of a transfer of one of `accounts`, sorted."""

    @abc.abstractmethod
    async def lock_for_erasure(self, ids: Sequence[str]) -> dict[str, Locked]:
        """Locks the existing accounts among `ids` to delete them (FOR UPDATE), in the global lock
        order."""

    @abc.abstractmethod
    async def erasure_scope(self, accounts: Sequence[str], players: Sequence[str]) -> ErasureScope:
        """What the transfers of `accounts` touch, and the `players`' grant claims."""

    @abc.abstractmethod
    async def write(self, batch: Batch) -> None:
        """Writes the batch: an erasure's deletions first, then transfers, live holds, accounts,
        claims and answers, then the house and the treasury (last)."""


class DirectStore(Store):
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
