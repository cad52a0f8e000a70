"""Matches, players (XP, levels, statistics), XP events, ratings and their history, leaderboards.

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
        "ranking_board_counts",
        sa.Column("board", sa.String(length=64), nullable=False),
        sa.Column("level", sa.SmallInteger(), nullable=False),
        sa.Column("key", sa.BigInteger(), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("board", "level", "key", "slot", name=op.f("pk_ranking_board_counts")),
    )
    op.create_table(
        "ranking_board_entries",
        sa.Column("board", sa.String(length=64), nullable=False),
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("order_score", sa.BigInteger(), nullable=False),
        sa.Column("achieved_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("board", "player", name=op.f("pk_ranking_board_entries")),
    )
    with op.batch_alter_table("ranking_board_entries", schema=None) as batch_op:
        batch_op.create_index(
            "ix_ranking_board_entries_order", ["board", "order_score", "achieved_us", "player"], unique=False
        )

    op.create_table(
        "ranking_matches",
        sa.Column("match_id", sa.String(length=63), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("preset", sa.String(length=40), nullable=False),
        sa.Column("players", sa.SmallInteger(), nullable=False),
        sa.Column("express", sa.Boolean(), nullable=False),
        sa.Column("competitive", sa.Boolean(), nullable=False),
        sa.Column("annulled", sa.Boolean(), nullable=False),
        sa.Column("shared_address", sa.Boolean(), nullable=False),
        sa.Column("rated", sa.Boolean(), nullable=False),
        sa.Column("end_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("result", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("match_id", name=op.f("pk_ranking_matches")),
    )
    op.create_table(
        "ranking_players",
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("xp", sa.BigInteger(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("matches", sa.BigInteger(), nullable=False),
        sa.Column("wins", sa.BigInteger(), nullable=False),
        sa.Column("losses", sa.BigInteger(), nullable=False),
        sa.Column("abandonments", sa.BigInteger(), nullable=False),
        sa.Column("canastras", sa.BigInteger(), nullable=False),
        sa.Column("score_sum", sa.BigInteger(), nullable=False),
        sa.Column("xp_events", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("player", name=op.f("pk_ranking_players")),
    )
    op.create_table(
        "ranking_rating_history",
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("preset", sa.String(length=40), nullable=False),
        sa.Column("players", sa.SmallInteger(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("match_id", sa.String(length=63), nullable=False),
        sa.Column("mu", sa.Float(precision=53), nullable=False),
        sa.Column("sigma", sa.Float(precision=53), nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("player", "preset", "players", "seq", name=op.f("pk_ranking_rating_history")),
    )
    op.create_table(
        "ranking_ratings",
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("preset", sa.String(length=40), nullable=False),
        sa.Column("players", sa.SmallInteger(), nullable=False),
        sa.Column("mu", sa.Float(precision=53), nullable=False),
        sa.Column("sigma", sa.Float(precision=53), nullable=False),
        sa.Column("matches", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("player", "preset", "players", name=op.f("pk_ranking_ratings")),
    )
    op.create_table(
        "ranking_xp_events",
        sa.Column("player", sa.String(length=63), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("match_id", sa.String(length=63), nullable=False),
        sa.Column("xp_gained", sa.BigInteger(), nullable=False),
        sa.Column("xp_total", sa.BigInteger(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("level_up", sa.Boolean(), nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("player", "seq", name=op.f("pk_ranking_xp_events")),
    )


def downgrade() -> None:
    op.drop_table("ranking_xp_events")
    op.drop_table("ranking_ratings")
    op.drop_table("ranking_rating_history")
    op.drop_table("ranking_players")
    op.drop_table("ranking_matches")
    with op.batch_alter_table("ranking_board_entries", schema=None) as batch_op:
        batch_op.drop_index("ix_ranking_board_entries_order")

    op.drop_table("ranking_board_entries")
    op.drop_table("ranking_board_counts")
