"""The tournament service's state: tournaments, entrants and their players, rounds, pairings, matches.

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
        "tournament_tournaments",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("display_name", sa.String(length=100), nullable=False),
        sa.Column("table_options", sa.LargeBinary(), nullable=False),
        sa.Column("format", sa.String(length=20), nullable=False),
        sa.Column("swiss_rounds", sa.Integer(), nullable=False),
        sa.Column("buy_in", sa.BigInteger(), nullable=False),
        sa.Column("prizes", sa.JSON(), nullable=False),
        sa.Column("registration_open_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("registration_close_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("start_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("min_entrants", sa.Integer(), nullable=False),
        sa.Column("max_entrants", sa.Integer(), nullable=False),
        sa.Column("no_show_seconds", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("phase", sa.String(length=20), server_default="", nullable=False),
        sa.Column("chips_settled", sa.Boolean(), nullable=False),
        sa.Column("current_round", sa.Integer(), nullable=False),
        sa.Column("total_rounds", sa.Integer(), nullable=False),
        sa.Column("cancel_reason", sa.String(length=500), server_default="", nullable=False),
        sa.Column("pool_chips", sa.BigInteger(), nullable=False),
        sa.Column("house_cut_chips", sa.BigInteger(), nullable=False),
        sa.Column("prize_pool_chips", sa.BigInteger(), nullable=False),
        sa.Column("next_entrant", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_owner", sa.String(length=100), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_error", sa.String(length=500), server_default="", nullable=False),
        sa.Column("seeding_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tournament_tournaments")),
    )
    with op.batch_alter_table("tournament_tournaments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_tournament_tournaments_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_tournament_tournaments_due_at"), ["due_at"], unique=False)

    op.create_table(
        "tournament_entrants",
        sa.Column("tournament_id", sa.String(length=40), nullable=False),
        sa.Column("id", sa.String(length=20), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("rating", sa.Float(), nullable=True),
        sa.Column("place", sa.Integer(), nullable=True),
        sa.Column("prize_chips", sa.BigInteger(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tournament_id"],
            ["tournament_tournaments.id"],
            name=op.f("fk_tournament_entrants_tournament_id_tournament_tournaments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tournament_id", "id", name=op.f("pk_tournament_entrants")),
    )
    op.create_table(
        "tournament_matches",
        sa.Column("match_id", sa.String(length=63), nullable=False),
        sa.Column("tournament_id", sa.String(length=40), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tournament_id"],
            ["tournament_tournaments.id"],
            name=op.f("fk_tournament_matches_tournament_id_tournament_tournaments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("match_id", name=op.f("pk_tournament_matches")),
    )
    op.create_table(
        "tournament_pairings",
        sa.Column("tournament_id", sa.String(length=40), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("entrant_a", sa.String(length=20), nullable=False),
        sa.Column("entrant_b", sa.String(length=20), nullable=True),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("match_id", sa.String(length=63), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("table_name", sa.String(length=80), nullable=True),
        sa.Column("winner", sa.String(length=20), nullable=True),
        sa.Column("decided_by", sa.String(length=20), nullable=True),
        sa.Column("forfeit", sa.Boolean(), nullable=False),
        sa.Column("score_a", sa.BigInteger(), nullable=True),
        sa.Column("score_b", sa.BigInteger(), nullable=True),
        sa.Column("showed", sa.JSON(), nullable=False),
        sa.Column("no_shows", sa.JSON(), nullable=False),
        sa.Column("table_created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("no_show_deadline", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_check_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("finished_seen_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["tournament_id"],
            ["tournament_tournaments.id"],
            name=op.f("fk_tournament_pairings_tournament_id_tournament_tournaments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tournament_id", "round", "slot", name=op.f("pk_tournament_pairings")),
        sa.UniqueConstraint("match_id", name=op.f("uq_tournament_pairings_match_id")),
    )
    op.create_table(
        "tournament_rounds",
        sa.Column("tournament_id", sa.String(length=40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["tournament_id"],
            ["tournament_tournaments.id"],
            name=op.f("fk_tournament_rounds_tournament_id_tournament_tournaments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tournament_id", "number", name=op.f("pk_tournament_rounds")),
    )
    op.create_table(
        "tournament_entrant_players",
        sa.Column("tournament_id", sa.String(length=40), nullable=False),
        sa.Column("entrant_id", sa.String(length=20), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("hold_state", sa.String(length=20), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=True),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("op_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["tournament_id", "entrant_id"],
            ["tournament_entrants.tournament_id", "tournament_entrants.id"],
            name=op.f("fk_tournament_entrant_players_tournament_id_tournament_entrants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tournament_id", "entrant_id", "position", name=op.f("pk_tournament_entrant_players")),
    )
    with op.batch_alter_table("tournament_entrant_players", schema=None) as batch_op:
        batch_op.create_index("ix_tournament_entrant_players_player", ["tournament_id", "player"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tournament_entrant_players", schema=None) as batch_op:
        batch_op.drop_index("ix_tournament_entrant_players_player")

    op.drop_table("tournament_entrant_players")
    op.drop_table("tournament_rounds")
    op.drop_table("tournament_pairings")
    op.drop_table("tournament_matches")
    op.drop_table("tournament_entrants")
    with op.batch_alter_table("tournament_tournaments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_tournament_tournaments_due_at"))
        batch_op.drop_index(batch_op.f("ix_tournament_tournaments_created_at"))

    op.drop_table("tournament_tournaments")
