"""Transfer planning: the rows an operation writes and what they do to the balances.

An operation of `core.Wallet` decides which transfers to make; a `TransferPlan` turns each into
its row and its effect on the accounts it changes, the double-entry rules of docs/wallet.md:
- a posted transfer (`single`, `post`) moves its amount from the debit account's posted balance to
  the credit account's;
- a hold (`pending`) adds it to the debit account's `held` and the credit account's `incoming`;
  its resolution (`post`, `void`, `expire`) takes it out of them again;
- an account's balances change only if the operation locked it (`store.Locked`), except the house
  and the treasury, whose changes the batch writes in its last statement (`Batch.system`); any
  other account changed without its lock is a bug, and the plan refuses it.
`finish` gives the rows their ids and makes the one `store.Batch` that writes them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from services.wallet.records import HOUSE, POSTED_PHASES, TREASURY, Caller, TransferRecord
from services.wallet.store import Batch, Locked, Store


class TransferPlan:
    """The transfer rows an operation will write, and the accounts they change."""

    def __init__(
        self, caller: Caller, request_id: str, now: datetime, locked: dict[str, Locked], note: str = ""
    ) -> None:
        self.caller = caller
        self.request_id = request_id
        self.now = now
        self.locked = locked
        self.note = note
        self.rows: list[dict[str, Any]] = []
        self.system: dict[str, int] = {}

    def add(
        self,
        phase: str,
        debit: str,
        credit: str,
        amount: int,
        reason: str,
        tags: dict[str, str | None],
        *,
        pending_id: int | None = None,
        expires_at: datetime | None = None,
    ) -> None:
        """A transfer row, and its effect on the balances: a posted transfer (single, post)
        moves `amount` between the posted balances; a hold moves it into held and incoming; a
        release (void, expire) and a posting take it out of them again."""
        self.rows.append(
            {
                "id": 0,
                "phase": phase,
                "pending_id": pending_id,
                "debit_account": debit,
                "credit_account": credit,
                "amount": amount,
                "reason": reason,
                "match_id": tags.get("match_id"),
                "tournament": tags.get("tournament"),
                "requested_by": self.caller.principal,
                "on_behalf_of": self.caller.acting_for,
                "request_id": self.request_id,
                "note": self.note,
                "created_at": self.now,
                "expires_at": expires_at,
            }
        )
        if phase in ("pending", "post", "void", "expire"):
            sign = 1 if phase == "pending" else -1
            self.locked[debit].d_held += sign * amount
            self.locked[credit].d_incoming += sign * amount
        if phase in POSTED_PHASES:
            self._post(debit, -amount)
            self._post(credit, amount)

    def _post(self, account_id: str, amount: int) -> None:
        if account_id in self.locked:
            self.locked[account_id].d_balance += amount
        elif account_id in (HOUSE, TREASURY):
            self.system[account_id] = self.system.get(account_id, 0) + amount
        else:
            raise AssertionError(f"{account_id} changed without its lock")

    async def finish(self, store: Store) -> tuple[list[TransferRecord], Batch]:
        """Gives the rows their ids and makes the batch that writes them."""
        ids = await store.reserve_ids(len(self.rows))
        for row, transfer_id in zip(self.rows, ids, strict=True):
            row["id"] = transfer_id
        records = [TransferRecord(**row) for row in self.rows]
        batch = Batch(now=self.now, transfers=self.rows, accounts=list(self.locked.values()), system=self.system)
        return records, batch
