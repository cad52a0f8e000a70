"""Tickets, queue members, parties, sagas, recent opponents, lobby tables and invitations.

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
        "matchmaking_lobby_invitations",
        sa.Column("table_id", sa.String(length=63), nullable=False),
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.PrimaryKeyConstraint("table_id", "player", name=op.f("pk_matchmaking_lobby_invitations")),
    )
    with op.batch_alter_table("matchmaking_lobby_invitations", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_matchmaking_lobby_invitations_player"), ["player"], unique=False)

    op.create_table(
        "matchmaking_lobby_tables",
        sa.Column("id", sa.String(length=63), nullable=False),
        sa.Column("chief", sa.String(length=63), nullable=True),
        sa.Column("options", sa.LargeBinary(), nullable=False),
        sa.Column("preset", sa.String(length=40), nullable=False),
        sa.Column("seat_count", sa.SmallInteger(), nullable=False),
        sa.Column("mode", sa.SmallInteger(), nullable=False),
        sa.Column("bet_chips", sa.BigInteger(), nullable=False),
        sa.Column("private", sa.Boolean(), nullable=False),
        sa.Column("free_seats", sa.SmallInteger(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("seats", sa.JSON(), nullable=False),
        sa.Column("onlookers", sa.JSON(), nullable=False),
        sa.Column("saga_id", sa.String(length=63), nullable=True),
        sa.Column("game_table", sa.String(length=80), nullable=False),
        sa.Column("game_address", sa.String(length=255), nullable=False),
        sa.Column("match_id", sa.String(length=63), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_matchmaking_lobby_tables")),
    )
    with op.batch_alter_table("matchmaking_lobby_tables", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_matchmaking_lobby_tables_state"), ["state"], unique=False)

    op.create_table(
        "matchmaking_parties",
        sa.Column("id", sa.String(length=63), nullable=False),
        sa.Column("leader", sa.String(length=63), nullable=False),
        sa.Column("members", sa.JSON(), nullable=False),
        sa.Column("invited", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_matchmaking_parties")),
    )
    op.create_table(
        "matchmaking_party_members",
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("party_id", sa.String(length=63), nullable=False),
        sa.PrimaryKeyConstraint("player", name=op.f("pk_matchmaking_party_members")),
    )
    with op.batch_alter_table("matchmaking_party_members", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_matchmaking_party_members_party_id"), ["party_id"], unique=False)

    op.create_table(
        "matchmaking_queue_members",
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("ticket_id", sa.String(length=63), nullable=False),
        sa.PrimaryKeyConstraint("player", name=op.f("pk_matchmaking_queue_members")),
    )
    with op.batch_alter_table("matchmaking_queue_members", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_matchmaking_queue_members_ticket_id"), ["ticket_id"], unique=False)

    op.create_table(
        "matchmaking_recent",
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("others", sa.JSON(), nullable=False),
        sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("player", name=op.f("pk_matchmaking_recent")),
    )
    op.create_table(
        "matchmaking_sagas",
        sa.Column("id", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("lobby_table", sa.String(length=63), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("seats", sa.JSON(), nullable=False),
        sa.Column("tickets", sa.JSON(), nullable=False),
        sa.Column("options", sa.LargeBinary(), nullable=False),
        sa.Column("bet_chips", sa.BigInteger(), nullable=False),
        sa.Column("confirm_deadline", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("held", sa.Boolean(), nullable=False),
        sa.Column("table_requested", sa.Boolean(), nullable=False),
        sa.Column("game_table", sa.String(length=80), nullable=False),
        sa.Column("game_address", sa.String(length=255), nullable=False),
        sa.Column("culprits", sa.JSON(), nullable=False),
        sa.Column("failure_reason", sa.String(length=200), nullable=False),
        sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_matchmaking_sagas")),
    )
    with op.batch_alter_table("matchmaking_sagas", schema=None) as batch_op:
        batch_op.create_index("ix_matchmaking_sagas_state_next", ["state", "next_attempt_at"], unique=False)

    op.create_table(
        "matchmaking_tickets",
        sa.Column("id", sa.String(length=63), nullable=False),
        sa.Column("owner", sa.String(length=63), nullable=False),
        sa.Column("players", sa.JSON(), nullable=False),
        sa.Column("party", sa.String(length=63), nullable=True),
        sa.Column("preset", sa.String(length=40), nullable=False),
        sa.Column("seats", sa.SmallInteger(), nullable=False),
        sa.Column("length", sa.SmallInteger(), nullable=False),
        sa.Column("target_points", sa.Integer(), nullable=False),
        sa.Column("mode", sa.SmallInteger(), nullable=False),
        sa.Column("bet_chips", sa.BigInteger(), nullable=False),
        sa.Column("rating", sa.Float(precision=53), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("front", sa.Boolean(), nullable=False),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recent", sa.JSON(), nullable=False),
        sa.Column("saga_id", sa.String(length=63), nullable=True),
        sa.Column("confirmed", sa.JSON(), nullable=False),
        sa.Column("seat_of", sa.JSON(), nullable=False),
        sa.Column("confirm_deadline", sa.DateTime(timezone=True), nullable=True),
        sa.Column("game_table", sa.String(length=80), nullable=False),
        sa.Column("game_address", sa.String(length=255), nullable=False),
        sa.Column("failure_reason", sa.String(length=200), nullable=False),
        sa.Column("wait_seconds", sa.Float(precision=53), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("create_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("update_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_matchmaking_tickets")),
    )
    with op.batch_alter_table("matchmaking_tickets", schema=None) as batch_op:
        batch_op.create_index("ix_matchmaking_tickets_state_bucket", ["state", "preset", "seats"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("matchmaking_tickets", schema=None) as batch_op:
        batch_op.drop_index("ix_matchmaking_tickets_state_bucket")

    op.drop_table("matchmaking_tickets")
    with op.batch_alter_table("matchmaking_sagas", schema=None) as batch_op:
        batch_op.drop_index("ix_matchmaking_sagas_state_next")

    op.drop_table("matchmaking_sagas")
    op.drop_table("matchmaking_recent")
    with op.batch_alter_table("matchmaking_queue_members", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_matchmaking_queue_members_ticket_id"))

    op.drop_table("matchmaking_queue_members")
    with op.batch_alter_table("matchmaking_party_members", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_matchmaking_party_members_party_id"))

    op.drop_table("matchmaking_party_members")
    op.drop_table("matchmaking_parties")
    with op.batch_alter_table("matchmaking_lobby_tables", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_matchmaking_lobby_tables_state"))

    op.drop_table("matchmaking_lobby_tables")
    with op.batch_alter_table("matchmaking_lobby_invitations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_matchmaking_lobby_invitations_player"))

    op.drop_table("matchmaking_lobby_invitations")
