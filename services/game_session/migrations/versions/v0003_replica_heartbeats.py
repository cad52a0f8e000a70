"""Replica heartbeats: a lease lasts as long as its owner's heartbeat (one row per replica), so
renewing no longer touches (and locks) every lease row.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "game_session_replicas",
        sa.Column("owner_id", sa.String(length=64), nullable=False),
        sa.Column("address", sa.String(length=200), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("owner_id", name=op.f("pk_game_session_replicas")),
    )
    with op.batch_alter_table("game_session_leases") as batch:
        batch.drop_index("ix_game_session_leases_expires_ms")
        batch.drop_column("expires_ms")


def downgrade() -> None:
    with op.batch_alter_table("game_session_leases") as batch:
        batch.add_column(sa.Column("expires_ms", sa.BigInteger(), nullable=False, server_default="0"))
        batch.create_index("ix_game_session_leases_expires_ms", ["expires_ms"], unique=False)
    op.drop_table("game_session_replicas")
