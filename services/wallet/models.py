"""The wallet service's tables. Every table name starts with `wallet_`; the
Alembic history in `migrations/` creates them (`python -m services.wallet revision --autogenerate`
writes a migration from changes here).

The ledger (docs/wallet.md):
- `wallet_transfers`: every movement of chips, immutable (never updated; deleted only by the
  erasure of a load-test run, with every account they touch, `wallet_erasures`). A hold is a
  `pending` row; exactly one later row (`post`, `void` or `expire`) resolves it, enforced by the
  unique `pending_id`.
- `wallet_accounts`: one row per account with its stored balances, updated in the same
  transaction as the transfer rows that change them. The CHECK `no_overdraft` makes the database
  refuse any balance below what is held (so below zero) for every account but the treasury, the
  only one that goes negative (it mints the chips in circulation).
- `wallet_live_holds`: the holds not resolved yet (an index over `pending` rows, kept in step in
  the same transactions): one per player and pot, found by pot and by expiry time.
- `wallet_grant_claims`: the once-only grants (a player's starting grant, a day's bonus).
- `wallet_erasures`: one row per erasure of a load-test run (`EraseLoadTestRun`), the one case
  where transfers are deleted: who erased which run, when, how many rows, and what the erased
  transfers had moved into the house and the treasury (so their balance changes are explained).
"""

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    UniqueConstraint,
)

from services.common.db import new_metadata
from services.common.idempotency import idempotency_table

metadata = new_metadata()

#: Answers of mutating calls by (caller, request id); see services.wallet.transactions.
idempotency_keys = idempotency_table(metadata, "wallet")

#: A 64-bit id, autoincrementing (SQLite needs INTEGER for its rowid alias).
TransferId = BigInteger().with_variant(Integer(), "sqlite")

ACCOUNT_ID = 80  # "tournament-" + a 63-character id

accounts = Table(
    "wallet_accounts",
    metadata,
    Column("id", String(ACCOUNT_ID), primary_key=True),
    Column("kind", String(10), nullable=False),
    Column("player", String(63), nullable=True, unique=True),
    #: Posted balance: credits minus debits of the account's posted transfers.
    Column("balance", BigInteger, nullable=False, server_default="0"),
    #: Live holds out of the account (pending debits).
    Column("held", BigInteger, nullable=False, server_default="0"),
    #: Live holds into the account (pending credits: an escrow's stakes).
    Column("incoming", BigInteger, nullable=False, server_default="0"),
    #: Escrows only: open, settled or voided.
    Column("pot_state", String(10), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    CheckConstraint("kind IN ('player', 'house', 'treasury', 'escrow')", name="kind"),
    CheckConstraint("kind = 'treasury' OR balance >= held", name="no_overdraft"),
    CheckConstraint("held >= 0 AND incoming >= 0", name="pending_not_negative"),
    CheckConstraint(
        "(kind = 'escrow') = (pot_state IS NOT NULL)"
        " AND (pot_state IS NULL OR pot_state IN ('open', 'settled', 'voided'))",
        name="pot_state",
    ),
    CheckConstraint("(kind = 'player') = (player IS NOT NULL)", name="player"),
)

transfers = Table(
    "wallet_transfers",
    metadata,
    Column("id", TransferId, primary_key=True, autoincrement=True),
    #: single (posted at once), pending (a hold), post / void / expire (resolve `pending_id`).
    Column("phase", String(8), nullable=False),
    Column("pending_id", TransferId, ForeignKey("wallet_transfers.id"), nullable=True, unique=True),
    Column("debit_account", String(ACCOUNT_ID), ForeignKey("wallet_accounts.id"), nullable=False),
    Column("credit_account", String(ACCOUNT_ID), ForeignKey("wallet_accounts.id"), nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("reason", String(12), nullable=False),
    Column("match_id", String(63), nullable=True),
    Column("tournament", String(63), nullable=True),
    #: `services/...` or `admins/...` (or `services/wallet` for the expiry sweep).
    Column("requested_by", String(200), nullable=False),
    #: The player the caller acted for (`buraco-act-for`), if any.
    Column("on_behalf_of", String(63), nullable=True),
    Column("request_id", String(64), nullable=False, server_default=""),
    Column("note", String(500), nullable=False, server_default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    #: Holds only: when the expiry sweep may expire it.
    Column("expires_at", DateTime(timezone=True), nullable=True),
    CheckConstraint("amount > 0", name="amount_positive"),
    CheckConstraint("debit_account <> credit_account", name="two_accounts"),
    CheckConstraint(
        "(phase IN ('single', 'pending') AND pending_id IS NULL)"
        " OR (phase IN ('post', 'void', 'expire') AND pending_id IS NOT NULL)",
        name="phase",
    ),
    CheckConstraint("(phase = 'pending') = (expires_at IS NOT NULL)", name="expiry"),
    CheckConstraint(
        "reason IN ('grant', 'bet', 'settle', 'house_cut', 'refund', 'penalty', 'correction')", name="reason"
    ),
    Index("ix_wallet_transfers_debit_account_id", "debit_account", "id"),
    Index("ix_wallet_transfers_credit_account_id", "credit_account", "id"),
)

live_holds = Table(
    "wallet_live_holds",
    metadata,
    Column("transfer_id", TransferId, ForeignKey("wallet_transfers.id"), primary_key=True),
    #: The escrow held into.
    Column("pot", String(ACCOUNT_ID), ForeignKey("wallet_accounts.id"), nullable=False),
    #: The player account held from.
    Column("account", String(ACCOUNT_ID), ForeignKey("wallet_accounts.id"), nullable=False),
    Column("amount", BigInteger, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False, index=True),
    UniqueConstraint("pot", "account", name="uq_wallet_live_holds_pot_account"),
)

grant_claims = Table(
    "wallet_grant_claims",
    metadata,
    Column("player", String(63), primary_key=True),
    #: starting or daily_bonus.
    Column("kind", String(12), primary_key=True),
    #: "" for the starting grant; the UTC day (YYYY-MM-DD) of a daily bonus.
    Column("period", String(10), primary_key=True),
    #: Indexed: deleting a transfer (an erasure) checks that no claim refers to it.
    Column("transfer_id", TransferId, ForeignKey("wallet_transfers.id"), nullable=False, index=True),
)

erasures = Table(
    "wallet_erasures",
    metadata,
    Column("id", TransferId, primary_key=True, autoincrement=True),
    Column("run_id", String(40), nullable=False, index=True),
    #: The admin who asked (`admins/...`) and the call's request id.
    Column("requested_by", String(200), nullable=False),
    Column("request_id", String(64), nullable=False),
    Column("erased_at", DateTime(timezone=True), nullable=False),
    Column("accounts", Integer, nullable=False),
    Column("escrows", Integer, nullable=False),
    Column("transfers", Integer, nullable=False),
    Column("grant_claims", Integer, nullable=False),
    #: What the erased transfers had added to the house's and the treasury's balances (credits
    #: minus debits), taken off them by the erasure: the house's is its cuts from the run's pots,
    #: the treasury's is minus what it had minted for the run's players. Together they are minus
    #: the chips the erased accounts still held.
    Column("house_chips", BigInteger, nullable=False),
    Column("treasury_chips", BigInteger, nullable=False),
    #: The largest id among the erased transfers: new transfers on SQLite take ids above it too, so
    #: a transfer id (in a stored answer, say) never names two transfers.
    Column("last_transfer_id", TransferId, nullable=True),
)
