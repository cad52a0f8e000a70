"""Alembic environment of the wallet service (run by services.common.migrations)."""

from services.common.migrations import run_env
from services.wallet.models import metadata

run_env(metadata)
