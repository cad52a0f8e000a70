"""Alembic environment of the matchmaking service (run by services.common.migrations)."""

from services.common.migrations import run_env
from services.matchmaking.models import metadata

run_env(metadata)
