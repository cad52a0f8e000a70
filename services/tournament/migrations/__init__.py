"""Alembic history of the tournament service."""
