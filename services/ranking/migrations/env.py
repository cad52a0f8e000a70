"""Alembic environment of the ranking service (run by services.common.migrations)."""

from services.common.migrations import run_env
from services.ranking.models import metadata

run_env(metadata)
