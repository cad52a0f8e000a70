"""The ledger's statements on SQLite (`store.Store` over one SQLAlchemy Core connection).

SQLAlchemy Core on aiosqlite, one statement per kind of change; transactions are serialised
(BEGIN IMMEDIATE), so ids are simply the next after the largest.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, case, delete, func, insert, or_, select, tuple_, union, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from services.wallet import models
from services.wallet.records import HOUSE, POSTED_PHASES, TREASURY
from services.wallet.store import Batch, Claimed, ClaimRequest, DirectStore, Erasure, ErasureScope, Hold, Locked, aware

accounts = models.accounts
transfers = models.transfers
live_holds = models.live_holds
grant_claims = models.grant_claims
idempotency_keys = models.idempotency_keys

#: The global lock order (`store.LOCK_RANK`) as an ORDER BY term.
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


def _one_of(column: Any, values: Sequence[str]) -> Any:
    """`column IN values` with one parameter however many values (a JSON array read by
    json_each): an erasure's thousands of accounts stay clear of SQLite's limit on parameters."""
    return column.in_(select(func.json_each(json.dumps(list(values))).table_valued("value").c.value))


def _transfers_of(ids: Sequence[str]) -> Any:
    """The transfers with a leg on one of `ids`."""
    return or_(_one_of(transfers.c.debit_account, ids), _one_of(transfers.c.credit_account, ids))


def _holds_of(ids: Sequence[str]) -> Any:
    """The live holds out of or into one of `ids`."""
    return or_(_one_of(live_holds.c.account, ids), _one_of(live_holds.c.pot, ids))


class SqliteStore(DirectStore):
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
            # Above every id ever given, erased transfers' included (models.erasures).
            largest = (
                await self.conn.execute(
                    select(
                        select(func.max(transfers.c.id)).scalar_subquery(),
                        select(func.max(models.erasures.c.last_transfer_id)).scalar_subquery(),
                    )
                )
            ).one()
            self._next_id = max(int(value or 0) for value in largest) + 1
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
        locked = await self._locked(accounts.c.id.in_(sorted(set(ids))))
        return locked, {pot: await self.live_holds(pot) for pot in pots if pot in locked}

    async def _locked(self, which: Any) -> dict[str, Locked]:
        """The accounts `which` selects, in the global lock order. The transaction holds SQLite's
        write lock from its start: reading the rows is locking them."""
        rows = await self.conn.execute(
            select(
                accounts.c.id,
                accounts.c.kind,
                accounts.c.balance,
                accounts.c.held,
                accounts.c.incoming,
                accounts.c.pot_state,
            )
            .where(which)
            .order_by(_KIND_RANK, accounts.c.id)
        )
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

    async def run_players(self, like: str) -> list[str]:
        rows = await self.conn.execute(
            select(accounts.c.player)
            .where(accounts.c.kind == "player", accounts.c.player.like(like))
            .order_by(accounts.c.player)
        )
        return [row.player for row in rows]

    async def pots_of(self, ids: Sequence[str]) -> list[str]:
        touched = union(
            select(transfers.c.credit_account).where(_one_of(transfers.c.debit_account, ids)),
            select(transfers.c.debit_account).where(_one_of(transfers.c.credit_account, ids)),
        )
        rows = await self.conn.execute(
            select(accounts.c.id).where(accounts.c.kind == "escrow", accounts.c.id.in_(touched)).order_by(accounts.c.id)
        )
        return [row.id for row in rows]

    async def lock_for_erasure(self, ids: Sequence[str]) -> dict[str, Locked]:
        return await self._locked(_one_of(accounts.c.id, ids))

    async def erasure_scope(self, ids: Sequence[str], players: Sequence[str]) -> ErasureScope:
        conn = self.conn
        columns = (transfers.c.debit_account, transfers.c.credit_account, transfers.c.amount)
        legs = (await conn.execute(select(transfers.c.id, transfers.c.phase, *columns).where(_transfers_of(ids)))).all()
        mine = set(ids) | {HOUSE, TREASURY}
        outside = {account for leg in legs for account in (leg.debit_account, leg.credit_account)} - mine
        system = {HOUSE: 0, TREASURY: 0}
        for leg in legs:
            if leg.phase in POSTED_PHASES:
                for account, sign in ((leg.credit_account, 1), (leg.debit_account, -1)):
                    if account in system:
                        system[account] += sign * leg.amount
        holds = (await conn.execute(select(func.count()).select_from(live_holds).where(_holds_of(ids)))).scalar_one()
        of_players = _one_of(grant_claims.c.player, players)
        claims = (await conn.execute(select(func.count()).select_from(grant_claims).where(of_players))).scalar_one()
        balances = await conn.execute(select(accounts.c.id, accounts.c.balance).where(accounts.c.id.in_(list(system))))
        return ErasureScope(
            transfers=len(legs),
            outside=sorted(outside),
            system=system,
            live_holds=int(holds),
            grant_claims=int(claims),
            system_balances={row.id: row.balance for row in balances},
            last_transfer=max((leg.id for leg in legs), default=None),
        )

    async def _erase(self, erasure: Erasure) -> None:
        """Deletes in the order of the foreign keys (SQLite checks them at the end of each statement:
        a hold and its resolution go together in one)."""
        conn, ids = self.conn, erasure.erased_accounts

        async def deleted(statement: Any) -> int:
            return int(getattr(await conn.execute(statement), "rowcount", 0) or 0)

        claims = await deleted(delete(grant_claims).where(_one_of(grant_claims.c.player, erasure.players)))
        await deleted(delete(live_holds).where(_holds_of(ids)))
        moved = await deleted(delete(transfers).where(_transfers_of(ids)))
        gone = await deleted(delete(accounts).where(_one_of(accounts.c.id, ids)))
        await conn.execute(insert(models.erasures).values(erasure.record()))
        erasure.check_deleted(moved, claims, gone)

    async def write(self, batch: Batch) -> None:
        conn, now = self.conn, batch.now
        if batch.erasure is not None:
            await self._erase(batch.erasure)
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
        for name, amount in batch.system_changes():
            await conn.execute(
                update(accounts)
                .where(accounts.c.id == name)
                .values(balance=accounts.c.balance + amount, updated_at=now)
            )
