"""The ledger's audit: recomputes everything the wallet stores from the transfers and compares.

`python -m services.wallet audit` runs it on the configured database and exits 1 when it finds
any difference (2 when it cannot run). It checks, on one snapshot:
- every account's stored balance equals the sum of its posted transfers (credits minus debits),
  its `held` the sum of its live holds out, its `incoming` the sum of its live holds in;
- the stored balances add up to zero over all accounts (the treasury is minus what was minted);
- no account but the treasury has a balance below zero or below what it holds;
- every hold is resolved at most once (the database's unique key) and by a row with the hold's
  own accounts and amount; the live-holds index lists exactly the holds not resolved;
- every escrow is empty of posted chips (pay-outs empty it in the transaction that fills it),
  and a settled or voided pot has no live hold.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, and_, exists, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from services.wallet import models
from services.wallet.records import POSTED_PHASES, TREASURY

accounts = models.accounts
transfers = models.transfers
live_holds = models.live_holds


@dataclass
class AuditReport:
    accounts: int = 0
    transfers: int = 0
    live_holds: int = 0
    #: Chips in circulation: what the treasury has minted, net.
    minted: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        verdict = "ok" if self.ok else f"{len(self.problems)} problem(s)"
        return (
            f"audit {verdict}: {self.accounts} accounts, {self.transfers} transfers, "
            f"{self.live_holds} live holds, {self.minted} chips in circulation"
        )


def _unresolved() -> ColumnElement[bool]:
    """Holds that no later transfer has posted, voided or expired."""
    resolution = aliased(transfers)
    return and_(transfers.c.phase == "pending", ~exists().where(resolution.c.pending_id == transfers.c.id))


async def audit(conn: AsyncConnection) -> AuditReport:
    """Runs every check on `conn` (open it on one snapshot: Transactions.read)."""
    report = AuditReport()
    stored = {row.id: row for row in (await conn.execute(select(accounts))).all()}
    report.accounts = len(stored)
    report.transfers = int((await conn.execute(select(func.count()).select_from(transfers))).scalar_one())

    posted: dict[str, int] = defaultdict(int)
    for side, sign in ((transfers.c.credit_account, 1), (transfers.c.debit_account, -1)):
        rows = await conn.execute(
            select(side, func.sum(transfers.c.amount)).where(transfers.c.phase.in_(POSTED_PHASES)).group_by(side)
        )
        for account_id, amount in rows:
            posted[account_id] += sign * int(amount)
    pending_out: dict[str, int] = defaultdict(int)
    pending_in: dict[str, int] = defaultdict(int)
    open_holds = (
        await conn.execute(
            select(transfers.c.id, transfers.c.debit_account, transfers.c.credit_account, transfers.c.amount).where(
                _unresolved()
            )
        )
    ).all()
    for open_hold in open_holds:
        pending_out[open_hold.debit_account] += open_hold.amount
        pending_in[open_hold.credit_account] += open_hold.amount

    for account_id, row in sorted(stored.items()):
        if row.balance != posted.get(account_id, 0):
            report.problems.append(
                f"accounts/{account_id}: stored balance {row.balance} != {posted.get(account_id, 0)} from its transfers"
            )
        if row.held != pending_out.get(account_id, 0):
            report.problems.append(
                f"accounts/{account_id}: stored held {row.held} != {pending_out.get(account_id, 0)} in live holds"
            )
        if row.incoming != pending_in.get(account_id, 0):
            report.problems.append(
                f"accounts/{account_id}: stored incoming {row.incoming}"
                f" != {pending_in.get(account_id, 0)} in live holds"
            )
        if row.kind != "treasury" and (row.balance < 0 or row.balance < row.held):
            report.problems.append(f"accounts/{account_id}: balance {row.balance} below zero or below held {row.held}")
        if row.kind == "escrow" and row.balance != 0:
            report.problems.append(f"accounts/{account_id}: an escrow keeps {row.balance} posted chips")
        if row.pot_state in ("settled", "voided") and row.incoming != 0:
            report.problems.append(f"accounts/{account_id}: {row.pot_state} pot with {row.incoming} chips still held")
    for account_id in sorted((posted.keys() | pending_out.keys() | pending_in.keys()) - stored.keys()):
        report.problems.append(f"accounts/{account_id}: has transfers but no account row")
    total = sum(row.balance for row in stored.values())
    if total != 0:
        report.problems.append(f"the balances add up to {total}, not 0")
    treasury = stored.get(TREASURY)
    report.minted = -treasury.balance if treasury is not None else 0

    hold = transfers.alias("hold")
    mismatched = (
        await conn.execute(
            select(transfers.c.id, transfers.c.pending_id)
            .join(hold, hold.c.id == transfers.c.pending_id)
            .where(
                or_(
                    hold.c.phase != "pending",
                    hold.c.debit_account != transfers.c.debit_account,
                    hold.c.credit_account != transfers.c.credit_account,
                    hold.c.amount != transfers.c.amount,
                )
            )
        )
    ).all()
    for row in mismatched:
        report.problems.append(f"transfers/{row.id} resolves transfers/{row.pending_id} but does not match it")
    index = {
        (row.transfer_id, row.account, row.pot, row.amount) for row in (await conn.execute(select(live_holds))).all()
    }
    report.live_holds = len(index)
    truth = {(row.id, row.debit_account, row.credit_account, row.amount) for row in open_holds}
    for entry in sorted(index - truth):
        report.problems.append(f"live hold transfers/{entry[0]} is not an unresolved hold")
    for entry in sorted(truth - index):
        report.problems.append(f"transfers/{entry[0]} is an unresolved hold missing from the live holds")
    orphans = (
        await conn.execute(
            select(func.count())
            .select_from(transfers)
            .where(and_(transfers.c.pending_id.is_not(None), ~exists().where(hold.c.id == transfers.c.pending_id)))
        )
    ).scalar_one()
    if orphans:
        report.problems.append(f"{orphans} resolution transfer(s) point at no hold")
    return report
