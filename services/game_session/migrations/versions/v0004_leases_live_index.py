"""Live leases by owner: the lease scans (`held`, `expired_live`) read live leases only, and a
finished table's lease row stays (live 0), so they must not read every table ever played.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        op.f("ix_game_session_leases_live_owner_id"), "game_session_leases", ["live", "owner_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_game_session_leases_live_owner_id"), table_name="game_session_leases")
