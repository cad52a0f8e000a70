"""The ledger: accounts (with the house and the treasury), transfers, live holds, grant claims.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TRANSFER_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    accounts = op.create_table(
        "wallet_accounts",
        sa.Column("id", sa.String(length=80), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("player", sa.String(length=63), nullable=True),
        sa.Column("balance", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("held", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("incoming", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("pot_state", sa.String(length=10), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "(kind = 'escrow') = (pot_state IS NOT NULL) AND (pot_state IS NULL OR pot_state IN ('open', 'settled', 'voided'))",
            name=op.f("ck_wallet_accounts_pot_state"),
        ),
        sa.CheckConstraint("(kind = 'player') = (player IS NOT NULL)", name=op.f("ck_wallet_accounts_player")),
        sa.CheckConstraint("kind = 'treasury' OR balance >= held", name=op.f("ck_wallet_accounts_no_overdraft")),
        sa.CheckConstraint("kind IN ('player', 'house', 'treasury', 'escrow')", name=op.f("ck_wallet_accounts_kind")),
        sa.CheckConstraint("held >= 0 AND incoming >= 0", name=op.f("ck_wallet_accounts_pending_not_negative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wallet_accounts")),
        sa.UniqueConstraint("player", name=op.f("uq_wallet_accounts_player")),
    )
    op.create_table(
        "wallet_transfers",
        sa.Column("id", TRANSFER_ID, autoincrement=True, nullable=False),
        sa.Column("phase", sa.String(length=8), nullable=False),
        sa.Column("pending_id", TRANSFER_ID, nullable=True),
        sa.Column("debit_account", sa.String(length=80), nullable=False),
        sa.Column("credit_account", sa.String(length=80), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.String(length=12), nullable=False),
        sa.Column("match_id", sa.String(length=63), nullable=True),
        sa.Column("tournament", sa.String(length=63), nullable=True),
        sa.Column("requested_by", sa.String(length=200), nullable=False),
        sa.Column("on_behalf_of", sa.String(length=63), nullable=True),
        sa.Column("request_id", sa.String(length=64), server_default="", nullable=False),
        sa.Column("note", sa.String(length=500), server_default="", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("(phase = 'pending') = (expires_at IS NOT NULL)", name=op.f("ck_wallet_transfers_expiry")),
        sa.CheckConstraint(
            "(phase IN ('single', 'pending') AND pending_id IS NULL) OR (phase IN ('post', 'void', 'expire') AND pending_id IS NOT NULL)",
            name=op.f("ck_wallet_transfers_phase"),
        ),
        sa.CheckConstraint(
            "reason IN ('grant', 'bet', 'settle', 'house_cut', 'refund', 'penalty', 'correction')",
            name=op.f("ck_wallet_transfers_reason"),
        ),
        sa.CheckConstraint("amount > 0", name=op.f("ck_wallet_transfers_amount_positive")),
        sa.CheckConstraint("debit_account <> credit_account", name=op.f("ck_wallet_transfers_two_accounts")),
        sa.ForeignKeyConstraint(
            ["credit_account"], ["wallet_accounts.id"], name=op.f("fk_wallet_transfers_credit_account_wallet_accounts")
        ),
        sa.ForeignKeyConstraint(
            ["debit_account"], ["wallet_accounts.id"], name=op.f("fk_wallet_transfers_debit_account_wallet_accounts")
        ),
        sa.ForeignKeyConstraint(
            ["pending_id"], ["wallet_transfers.id"], name=op.f("fk_wallet_transfers_pending_id_wallet_transfers")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wallet_transfers")),
        sa.UniqueConstraint("pending_id", name=op.f("uq_wallet_transfers_pending_id")),
    )
    op.create_index("ix_wallet_transfers_credit_account_id", "wallet_transfers", ["credit_account", "id"])
    op.create_index("ix_wallet_transfers_debit_account_id", "wallet_transfers", ["debit_account", "id"])
    op.create_table(
        "wallet_grant_claims",
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=12), nullable=False),
        sa.Column("period", sa.String(length=10), nullable=False),
        sa.Column("transfer_id", TRANSFER_ID, nullable=False),
        sa.ForeignKeyConstraint(
            ["transfer_id"], ["wallet_transfers.id"], name=op.f("fk_wallet_grant_claims_transfer_id_wallet_transfers")
        ),
        sa.PrimaryKeyConstraint("player", "kind", "period", name=op.f("pk_wallet_grant_claims")),
    )
    op.create_table(
        "wallet_live_holds",
        sa.Column("transfer_id", TRANSFER_ID, nullable=False),
        sa.Column("pot", sa.String(length=80), nullable=False),
        sa.Column("account", sa.String(length=80), nullable=False),
        sa.Column("amount", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["account"], ["wallet_accounts.id"], name=op.f("fk_wallet_live_holds_account_wallet_accounts")
        ),
        sa.ForeignKeyConstraint(["pot"], ["wallet_accounts.id"], name=op.f("fk_wallet_live_holds_pot_wallet_accounts")),
        sa.ForeignKeyConstraint(
            ["transfer_id"], ["wallet_transfers.id"], name=op.f("fk_wallet_live_holds_transfer_id_wallet_transfers")
        ),
        sa.PrimaryKeyConstraint("transfer_id", name=op.f("pk_wallet_live_holds")),
        sa.UniqueConstraint("pot", "account", name="uq_wallet_live_holds_pot_account"),
    )
    op.create_index(op.f("ix_wallet_live_holds_expires_at"), "wallet_live_holds", ["expires_at"])
    # The two system accounts exist from the start: the house (cuts) and the treasury (mints).
    now = datetime.now(UTC)
    op.bulk_insert(
        accounts,
        [
            {
                "id": "house",
                "kind": "house",
                "balance": 0,
                "held": 0,
                "incoming": 0,
                "created_at": now,
                "updated_at": now,
            },
            {
                "id": "treasury",
                "kind": "treasury",
                "balance": 0,
                "held": 0,
                "incoming": 0,
                "created_at": now,
                "updated_at": now,
            },
        ],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_wallet_live_holds_expires_at"), table_name="wallet_live_holds")
    op.drop_table("wallet_live_holds")
    op.drop_table("wallet_grant_claims")
    op.drop_index("ix_wallet_transfers_debit_account_id", table_name="wallet_transfers")
    op.drop_index("ix_wallet_transfers_credit_account_id", table_name="wallet_transfers")
    op.drop_table("wallet_transfers")
    op.drop_table("wallet_accounts")
