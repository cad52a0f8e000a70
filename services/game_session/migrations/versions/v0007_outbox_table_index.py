"""Outbox rows by table: a load-test run's erasure (`erasure`) reads and deletes its tables' outbox
rows by table id, and delivered rows stay, so it must not read every row ever written.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(op.f("ix_game_session_outbox_table_id"), "game_session_outbox", ["table_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_game_session_outbox_table_id"), table_name="game_session_outbox")
