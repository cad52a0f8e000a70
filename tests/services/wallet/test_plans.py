"""The plans of the hot statements on PostgreSQL: found by index, even on a new, never analysed
database (where the statistics say every table is tiny). The wallet's connections keep one generic
plan per statement for their lifetime; a plan made on small tables that scanned them whole got
slower with every match (services.wallet.transactions, `_pg_pool`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from services.common.db import Database
from services.wallet import pg_store
from services.wallet.transactions import Transactions
from tests.services.wallet.conftest import fresh_schema

#: The statements every batch runs, and how many parameters each takes.
HOT = {"claim": (pg_store._PG_CLAIM, 8), "lock": (pg_store._PG_LOCK, 2), "write": (pg_store._PG_WRITE, 39)}


@pytest.fixture
async def fresh(postgres_url: str) -> AsyncIterator[Database]:
    """A newly migrated schema: empty tables, no statistics."""
    async with fresh_schema(postgres_url) as db:
        yield db


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from nodes(child)


async def generic_plan(conn: asyncpg.Connection, name: str, sql: str, parameters: int) -> dict[str, Any]:
    """The plan the connection keeps for `sql` (plan_cache_mode is force_generic_plan)."""
    await conn.execute(f"PREPARE {name} AS {sql}")
    try:
        nulls = ", ".join(["NULL"] * parameters)
        explained = await conn.fetchval(f"EXPLAIN (FORMAT JSON) EXECUTE {name}({nulls})")
    finally:
        await conn.execute(f"DEALLOCATE {name}")
    plan: dict[str, Any] = json.loads(explained)[0]["Plan"]
    return plan


async def test_the_hot_statements_find_rows_by_index_on_a_new_database(fresh: Database) -> None:
    tx = Transactions(fresh, retention=timedelta(days=1))
    try:
        pool = await tx._pg_pool()
        async with pool.acquire() as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
            for name, (sql, parameters) in HOT.items():
                plan = await generic_plan(conn, f"hot_{name}", sql, parameters)
                scanned = sorted({node["Relation Name"] for node in nodes(plan) if node["Node Type"] == "Seq Scan"})
                assert not scanned, f"the {name} statement scans {scanned} whole"
    finally:
        await tx.close()
