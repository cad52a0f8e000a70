"""Alembic history of the ranking service."""
