"""A replica's revision (the release it runs) and when it released its tables (a graceful stop):
a rolling update hands each stopped replica's tables to a replica of the new revision, so that
a table changes owner once per rollout.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("game_session_replicas") as batch:
        batch.add_column(sa.Column("revision", sa.String(length=64), nullable=False, server_default=""))
        batch.add_column(sa.Column("released_ms", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("game_session_replicas") as batch:
        batch.drop_column("released_ms")
        batch.drop_column("revision")
