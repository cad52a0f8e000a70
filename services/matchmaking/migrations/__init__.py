"""Alembic history of the matchmaking service."""
