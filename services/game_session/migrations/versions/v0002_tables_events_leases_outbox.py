"""Tables, seats, the event log, leases, the outbox and chat mutes.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "game_session_tables",
        sa.Column("id", sa.String(length=63), nullable=False),
        sa.Column("match_id", sa.String(length=200), nullable=False),
        sa.Column("description", sa.LargeBinary(), nullable=False),
        sa.Column("state", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("match_scores", sa.String(length=100), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_game_session_tables")),
        sa.UniqueConstraint("match_id", name=op.f("uq_game_session_tables_match_id")),
    )
    op.create_index("ix_game_session_tables_state_id", "game_session_tables", ["state", "id"], unique=False)
    op.create_table(
        "game_session_seats",
        sa.Column("table_id", sa.String(length=63), nullable=False),
        sa.Column("seat", sa.Integer(), nullable=False),
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.PrimaryKeyConstraint("table_id", "seat", name=op.f("pk_game_session_seats")),
    )
    op.create_index(op.f("ix_game_session_seats_player"), "game_session_seats", ["player"], unique=False)
    op.create_table(
        "game_session_events",
        sa.Column("table_id", sa.String(length=63), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("table_id", "seq", name=op.f("pk_game_session_events")),
    )
    op.create_table(
        "game_session_leases",
        sa.Column("table_id", sa.String(length=63), nullable=False),
        sa.Column("owner_address", sa.String(length=200), nullable=False),
        sa.Column("owner_id", sa.String(length=64), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("expires_ms", sa.BigInteger(), nullable=False),
        sa.Column("live", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("table_id", name=op.f("pk_game_session_leases")),
    )
    op.create_index(op.f("ix_game_session_leases_owner_id"), "game_session_leases", ["owner_id"], unique=False)
    op.create_index(op.f("ix_game_session_leases_expires_ms"), "game_session_leases", ["expires_ms"], unique=False)
    op.create_table(
        "game_session_outbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("table_id", sa.String(length=63), nullable=False),
        sa.Column("target", sa.String(length=64), nullable=False),
        sa.Column("request", sa.LargeBinary(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_error", sa.String(length=500), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_game_session_outbox")),
    )
    op.create_index(
        "ix_game_session_outbox_state_next", "game_session_outbox", ["state", "next_attempt_ms"], unique=False
    )
    op.create_table(
        "game_session_mutes",
        sa.Column("table_id", sa.String(length=63), nullable=False),
        sa.Column("viewer", sa.String(length=63), nullable=False),
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.PrimaryKeyConstraint("table_id", "viewer", "player", name=op.f("pk_game_session_mutes")),
    )


def downgrade() -> None:
    op.drop_table("game_session_mutes")
    op.drop_index("ix_game_session_outbox_state_next", table_name="game_session_outbox")
    op.drop_table("game_session_outbox")
    op.drop_index(op.f("ix_game_session_leases_expires_ms"), table_name="game_session_leases")
    op.drop_index(op.f("ix_game_session_leases_owner_id"), table_name="game_session_leases")
    op.drop_table("game_session_leases")
    op.drop_table("game_session_events")
    op.drop_index(op.f("ix_game_session_seats_player"), table_name="game_session_seats")
    op.drop_table("game_session_seats")
    op.drop_index("ix_game_session_tables_state_id", table_name="game_session_tables")
    op.drop_table("game_session_tables")
