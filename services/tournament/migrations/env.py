"""Alembic environment of the tournament service (run by services.common.migrations)."""

from services.common.migrations import run_env
from services.tournament.models import metadata

run_env(metadata)
