"""The record of every erasure of a load-test run (EraseLoadTestRun).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ERASURE_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "wallet_erasures",
        sa.Column("id", ERASURE_ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=40), nullable=False),
        sa.Column("requested_by", sa.String(length=200), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("erased_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("accounts", sa.Integer(), nullable=False),
        sa.Column("escrows", sa.Integer(), nullable=False),
        sa.Column("transfers", sa.Integer(), nullable=False),
        sa.Column("grant_claims", sa.Integer(), nullable=False),
        sa.Column("house_chips", sa.BigInteger(), nullable=False),
        sa.Column("treasury_chips", sa.BigInteger(), nullable=False),
        sa.Column("last_transfer_id", ERASURE_ID, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_wallet_erasures")),
    )
    op.create_index(op.f("ix_wallet_erasures_run_id"), "wallet_erasures", ["run_id"])
    # An erasure deletes transfers: the foreign key's check finds a claim by its transfer.
    op.create_index(op.f("ix_wallet_grant_claims_transfer_id"), "wallet_grant_claims", ["transfer_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_wallet_grant_claims_transfer_id"), table_name="wallet_grant_claims")
    op.drop_index(op.f("ix_wallet_erasures_run_id"), table_name="wallet_erasures")
    op.drop_table("wallet_erasures")
