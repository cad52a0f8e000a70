"""The audit finds every kind of difference; `python -m services.wallet audit` and `expire-holds`
on the configured database; the wallet's migrations both ways; the database's own refusal of an
overdraft. On SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

import pytest
from google.protobuf.duration_pb2 import Duration
from sqlalchemy import delete, insert, inspect, update
from sqlalchemy.exc import IntegrityError

from services.common import migrations
from services.common.db import Database
from services.wallet import models
from services.wallet.service import MIGRATIONS
from tests.conftest import DatabaseTarget
from tests.services.harness import ROOT
from tests.services.wallet.conftest import Ledger


async def some_activity(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c", "d")
    await ledger.hold("h1", "m1", {"a": 10, "b": 20, "c": 30, "d": 40})
    await ledger.settle("s1", "m1", [("a", 0, "won"), ("b", 1, "lost"), ("c", 2, "won"), ("d", 3, "lost")])
    await ledger.hold("h2", "m2", {"a": 5, "b": 5})


async def execute(db: Database, statement: object) -> None:
    async with db.engine.begin() as conn:
        await conn.execute(statement)  # type: ignore[call-overload]


async def test_a_consistent_ledger_passes(ledger: Ledger) -> None:
    await some_activity(ledger)
    report = await ledger.audit()
    assert report.ok, report.problems
    assert (report.accounts, report.live_holds, report.minted) == (8, 2, 4000)


@pytest.mark.parametrize(
    ("tamper", "found"),
    [
        ("balance", "accounts/player-a: stored balance 1031 != 1030 from its transfers"),
        ("held", "accounts/player-b: stored held 0 != 5 in live holds"),
        ("live_hold", "is an unresolved hold missing from the live holds"),
        ("transfer", "accounts/player-c: stored balance"),
        ("escrow", "accounts/match-m1: an escrow keeps 3 posted chips"),
    ],
)
async def test_the_audit_finds_each_kind_of_difference(ledger: Ledger, tamper: str, found: str) -> None:
    await some_activity(ledger)
    accounts, transfers = models.accounts, models.transfers
    if tamper == "balance":
        await execute(
            ledger.db, update(accounts).where(accounts.c.id == "player-a").values(balance=accounts.c.balance + 1)
        )
    elif tamper == "held":
        await execute(ledger.db, update(accounts).where(accounts.c.id == "player-b").values(held=0))
    elif tamper == "live_hold":
        await execute(ledger.db, delete(models.live_holds).where(models.live_holds.c.account == "player-a"))
    elif tamper == "transfer":  # a transfer written without its balance update
        row = {
            "phase": "single",
            "debit_account": "treasury",
            "credit_account": "player-c",
            "amount": 7,
            "reason": "grant",
            "requested_by": "admins/mallory",
            "created_at": ledger.clock.now,
        }
        await execute(ledger.db, insert(transfers).values(row))
    else:
        await execute(ledger.db, update(accounts).where(accounts.c.id == "match-m1").values(balance=3))
    report = await ledger.audit()
    assert not report.ok
    assert any(found in problem for problem in report.problems), report.problems
    if tamper == "escrow":
        assert "the balances add up to 3, not 0" in report.problems


async def test_the_database_refuses_an_overdraft_whatever_the_code_does(ledger: Ledger) -> None:
    await some_activity(ledger)
    accounts = models.accounts
    with pytest.raises(IntegrityError, match="no_overdraft"):
        await execute(ledger.db, update(accounts).where(accounts.c.id == "player-a").values(balance=-1))
    with pytest.raises(IntegrityError, match="no_overdraft"):  # below what it holds (5)
        await execute(ledger.db, update(accounts).where(accounts.c.id == "player-a").values(balance=4))
    with pytest.raises(IntegrityError):  # a hold resolved twice
        row = {
            "phase": "void",
            "debit_account": "player-a",
            "credit_account": "match-m1",
            "amount": 10,
            "reason": "refund",
            "requested_by": "services/x",
            "created_at": ledger.clock.now,
            "pending_id": 5,
        }
        await execute(ledger.db, insert(models.transfers).values(row))
    assert (await ledger.audit()).ok


def command(
    target: DatabaseTarget, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.wallet", *args],
        cwd=ROOT,
        env={**os.environ, **target.environment(), "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_the_audit_and_expire_holds_commands(ledger: Ledger, db_target: DatabaseTarget) -> None:
    await some_activity(ledger)
    # The test clock is in the past: a hold of one second is past its time for the command.
    await ledger.hold("h3", "m3", {"c": 1, "d": 1}, hold_ttl=Duration(seconds=1))
    ok = command(db_target, "audit")
    assert ok.returncode == 0, ok.stderr
    assert "audit ok: 9 accounts" in ok.stdout
    expired = command(db_target, "expire-holds")
    assert expired.returncode == 0, expired.stderr
    assert "expired 4 hold(s)" in expired.stdout  # m2's two holds (6 hours) are past too
    assert (await ledger.account("player-c")).held_chips == 0
    accounts = models.accounts
    await execute(ledger.db, update(accounts).where(accounts.c.id == "house").values(balance=accounts.c.balance - 1))
    bad = command(db_target, "audit")
    assert bad.returncode == 1
    assert "audit: accounts/house: stored balance" in bad.stdout
    assert "audit: the balances add up to -1, not 0" in bad.stdout


def test_the_audit_of_a_database_without_a_ledger_fails(db_target: DatabaseTarget) -> None:
    result = command(db_target, "audit")
    assert result.returncode == 2
    assert "cannot run" in result.stderr


async def test_migrations_up_down_and_up_again(database: Database) -> None:
    await migrations.upgrade("wallet", MIGRATIONS, database)
    assert await migrations.current("wallet", MIGRATIONS, database) == "0003"

    async def tables() -> set[str]:
        async with database.engine.connect() as conn:
            names = await conn.run_sync(lambda sync: inspect(sync).get_table_names())
        return {name for name in names if name.startswith("wallet_")}

    assert await tables() == {
        "wallet_accounts",
        "wallet_transfers",
        "wallet_live_holds",
        "wallet_grant_claims",
        "wallet_idempotency_keys",
        "wallet_erasures",
    }
    await migrations.downgrade("wallet", MIGRATIONS, database, "base")
    assert await tables() == set()
    await migrations.upgrade("wallet", MIGRATIONS, database)
    assert "wallet_accounts" in await tables()
