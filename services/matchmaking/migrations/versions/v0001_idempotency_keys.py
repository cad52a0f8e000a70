"""Idempotency keys of the matchmaking service's mutating calls.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "matchmaking_idempotency_keys",
        sa.Column("scope", sa.String(length=200), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("method", sa.String(length=200), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("response", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "request_id", name=op.f("pk_matchmaking_idempotency_keys")),
    )
    op.create_index(
        op.f("ix_matchmaking_idempotency_keys_expires_at"),
        "matchmaking_idempotency_keys",
        ["expires_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_matchmaking_idempotency_keys_expires_at"), table_name="matchmaking_idempotency_keys")
    op.drop_table("matchmaking_idempotency_keys")
