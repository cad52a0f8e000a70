"""Alembic history of the game-session service."""
