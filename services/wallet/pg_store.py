"""The ledger's statements on PostgreSQL (`store.Store` over one asyncpg connection).

Raw asyncpg (the hot path; SQLAlchemy's per-statement cost would be most of a call's time),
arrays instead of IN lists, and `write` as a single statement (data-modifying CTEs) whose last
step credits the house and the treasury, so their rows stay locked only until the commit.
Claims, locks and writes take many calls at once (`claim_many`, `lock_many`, a merged `Batch`),
which is how `transactions` runs concurrent calls in one shared transaction. Transfer ids come
from the table's sequence in the claim's statement, so each reply (and its stored answer) is
built before the write.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import asyncpg

from services.common.errors import ConflictError
from services.wallet.records import HOUSE, TREASURY
from services.wallet.store import (
    TRANSFER_COLUMNS,
    Batch,
    Claimed,
    ClaimRequest,
    DirectStore,
    Erasure,
    ErasureScope,
    Hold,
    Locked,
)

#: Claims of one request id racing another transaction's are asked again this many times at most.
CLAIM_ATTEMPTS = 5

#: The global lock order (`store.LOCK_RANK`) in SQL.
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


#: A load-test run's erasure (`store.Erasure`): the players' accounts and escrows in $1, the
#: players in $2. What the run's accounts touch is read under their locks (`_PG_ERASURE_SCOPE`),
#: then deleted in one statement: PostgreSQL checks the foreign keys (a resolution's
#: `pending_id`, a claim's transfer, a transfer's accounts) at the end of the statement, when
#: the referencing and the referenced rows are gone together.
_PG_RUN_PLAYERS = "SELECT player FROM wallet_accounts WHERE kind = 'player' AND player LIKE $1 ORDER BY player"
_PG_POTS_OF = """
SELECT id FROM wallet_accounts WHERE kind = 'escrow' AND id IN (
    SELECT credit_account FROM wallet_transfers WHERE debit_account = ANY($1::text[])
    UNION SELECT debit_account FROM wallet_transfers WHERE credit_account = ANY($1::text[])
) ORDER BY id
"""
_PG_LOCK_FOR_ERASURE = f"""
SELECT id, kind, balance, held, incoming, pot_state FROM wallet_accounts
WHERE id = ANY($1::text[]) ORDER BY {_PG_RANK}, id FOR UPDATE
"""
_PG_ERASURE_SCOPE = """
WITH legs AS (
    SELECT id, phase, debit_account, credit_account, amount FROM wallet_transfers WHERE debit_account = ANY($1::text[])
    UNION
    SELECT id, phase, debit_account, credit_account, amount FROM wallet_transfers WHERE credit_account = ANY($1::text[])
), others AS (
    SELECT debit_account AS id FROM legs UNION SELECT credit_account FROM legs
)
SELECT
    (SELECT count(*) FROM legs) AS transfers,
    (SELECT max(id) FROM legs) AS last_transfer,
    (SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM others EXCEPT SELECT unnest($1::text[])) o
        WHERE id NOT IN ('house', 'treasury')) AS outside,
    (SELECT coalesce(sum(CASE WHEN credit_account = 'house' THEN amount ELSE -amount END), 0) FROM legs
        WHERE phase IN ('single', 'post') AND 'house' IN (debit_account, credit_account)) AS house,
    (SELECT coalesce(sum(CASE WHEN credit_account = 'treasury' THEN amount ELSE -amount END), 0) FROM legs
        WHERE phase IN ('single', 'post') AND 'treasury' IN (debit_account, credit_account)) AS treasury,
    (SELECT count(*) FROM wallet_live_holds WHERE account = ANY($1::text[]) OR pot = ANY($1::text[])) AS live_holds,
    (SELECT count(*) FROM wallet_grant_claims WHERE player = ANY($2::text[])) AS grant_claims,
    (SELECT balance FROM wallet_accounts WHERE id = 'house') AS house_balance,
    (SELECT balance FROM wallet_accounts WHERE id = 'treasury') AS treasury_balance
"""
_PG_ERASE = """
WITH claims AS (
    DELETE FROM wallet_grant_claims WHERE player = ANY($2::text[]) RETURNING 1
), holds AS (
    DELETE FROM wallet_live_holds WHERE account = ANY($1::text[]) OR pot = ANY($1::text[]) RETURNING 1
), moved AS (
    DELETE FROM wallet_transfers WHERE debit_account = ANY($1::text[]) OR credit_account = ANY($1::text[])
    RETURNING 1
), gone AS (
    DELETE FROM wallet_accounts WHERE id = ANY($1::text[]) RETURNING 1
), recorded AS (
    INSERT INTO wallet_erasures (run_id, requested_by, request_id, erased_at, accounts, escrows, transfers,
                                 grant_claims, house_chips, treasury_chips, last_transfer_id)
    VALUES ($3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
    RETURNING 1
)
SELECT (SELECT count(*) FROM moved) AS transfers, (SELECT count(*) FROM claims) AS grant_claims,
    (SELECT count(*) FROM gone) AS accounts, (SELECT count(*) FROM holds) AS holds,
    (SELECT count(*) FROM recorded) AS recorded
"""


def _column(rows: Sequence[dict[str, Any]], name: str) -> list[Any]:
    return [row[name] for row in rows]


class PgStore(DirectStore):
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

    async def run_players(self, like: str) -> list[str]:
        return [row["player"] for row in await self.conn.fetch(_PG_RUN_PLAYERS, like)]

    async def pots_of(self, accounts: Sequence[str]) -> list[str]:
        return [row["id"] for row in await self.conn.fetch(_PG_POTS_OF, list(accounts))]

    async def lock_for_erasure(self, ids: Sequence[str]) -> dict[str, Locked]:
        rows = await self.conn.fetch(_PG_LOCK_FOR_ERASURE, list(set(ids)))
        return {
            row["id"]: Locked(row["id"], row["kind"], row["balance"], row["held"], row["incoming"], row["pot_state"])
            for row in rows
        }

    async def erasure_scope(self, accounts: Sequence[str], players: Sequence[str]) -> ErasureScope:
        row = await self.conn.fetchrow(_PG_ERASURE_SCOPE, list(accounts), list(players))
        assert row is not None
        return ErasureScope(
            transfers=row["transfers"],
            outside=list(row["outside"] or ()),
            system={HOUSE: row["house"], TREASURY: row["treasury"]},
            live_holds=row["live_holds"],
            grant_claims=row["grant_claims"],
            system_balances={HOUSE: row["house_balance"], TREASURY: row["treasury_balance"]},
            last_transfer=row["last_transfer"],
        )

    async def _erase(self, erasure: Erasure) -> None:
        row = await self.conn.fetchrow(
            _PG_ERASE, erasure.erased_accounts, erasure.players, *erasure.record().values()
        )
        assert row is not None
        erasure.check_deleted(row["transfers"], row["grant_claims"], row["accounts"])

    async def write(self, batch: Batch) -> None:
        if batch.erasure is not None:
            await self._erase(batch.erasure)
        rows, holds, changed = batch.transfers, batch.add_holds, batch.changed_accounts()
        system = batch.system_changes()
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
