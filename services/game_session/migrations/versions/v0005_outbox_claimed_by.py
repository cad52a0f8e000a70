"""Who claimed an outbox row: a row claimed by a replica that is gone (its heartbeat ran out, or a
new process serves its address) is delivered at once by another, not after the claim's 30 s.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("game_session_outbox") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(length=64), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("game_session_outbox") as batch:
        batch.drop_column("claimed_by")
