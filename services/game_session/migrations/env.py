"""Alembic environment of the game-session service (run by services.common.migrations)."""

from services.common.migrations import run_env
from services.game_session.models import metadata

run_env(metadata)
