"""Alembic history of the wallet service."""
