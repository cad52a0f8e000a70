"""Fixtures of the wallet's tests: a migrated ledger on each database, a servicer called
directly (no network) as any identity, a clock the tests move, a snapshot of every table, a
refused call proved to change no row, and the audit a test asks for at its end (`audited`)."""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
import grpc
import pytest
from google.protobuf.message import Message
from sqlalchemy import select

from buraco.v1 import common_pb2, wallet_pb2
from services.client.channels import Clients
from services.common import migrations
from services.common.auth import Identity, Kind, reset_current_identity, set_current_identity
from services.common.config import Config
from services.common.db import Database
from services.common.errors import ServiceError
from services.common.server import Deps
from services.wallet import models
from services.wallet.api import WalletApi
from services.wallet.audit import AuditReport
from services.wallet.service import MIGRATIONS, run_audit
from services.wallet.settings import WalletSettings
from services.wallet.transactions import FaultHook, Transactions

R = TypeVar("R", bound=Message)

SERVICE = Identity(Kind.SERVICE, "matchmaking")
GAME = Identity(Kind.SERVICE, "game-session")
TOURNAMENT = Identity(Kind.SERVICE, "tournament")
ADMIN = Identity(Kind.ADMIN, "root")


def caller_of(method: str, request: Message) -> Identity:
    """Who makes `method` in the running system, the identity a test calls as unless it names
    one: tournaments hold, settle and void their own pots (services/tournament/remote.py);
    matchmaking holds and voids a match's stakes (services/matchmaking/remote.py); the game-session
    outbox settles matches (services/game_session/outbox.py); admins grant and open accounts (a
    player opens their own, at the gateway). Any other call: matchmaking (reads and ExpireHolds
    take any service)."""
    if method in ("HoldBets", "Settle", "Void") and request.WhichOneof("pot") == "tournament":
        return TOURNAMENT
    return {"Settle": GAME, "Grant": ADMIN, "CreateAccount": ADMIN}.get(method, SERVICE)


def player(name: str) -> Identity:
    return Identity(Kind.PLAYER, name)


class Clock:
    """The wallet's clock in tests: starts at a fixed moment, moves when told."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


async def migrated(db: Database) -> Database:
    await migrations.upgrade("wallet", MIGRATIONS, db)
    return db


@contextlib.asynccontextmanager
async def fresh_schema(postgres_url: str, **options: Any) -> AsyncIterator[Database]:
    """A ledger migrated into a new PostgreSQL schema of its own (dropped afterwards); `options`
    go to the `Database` (pool sizes)."""
    schema = f"test_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    db = Database(postgres_url, schema=schema, **options)
    try:
        yield await migrated(db)
    finally:
        await db.dispose()
        await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await admin.close()


def deps_for(db: Database) -> Deps:
    config = Config(service="wallet")
    return Deps(config, db, Clients(config, None), None, logging.getLogger("test.wallet"))


@dataclass
class Ledger:
    """The wallet's servicer on a test database, called as any identity."""

    db: Database
    api: WalletApi
    clock: Clock

    async def call(self, method: str, request: R, identity: Identity | None = None) -> Any:
        """`method` called as `identity` (default: `caller_of`)."""
        token = set_current_identity(identity or caller_of(method, request))
        try:
            return await getattr(self.api, method)(request, None)
        finally:
            reset_current_identity(token)

    async def close(self) -> None:
        await self.api.tx.close()

    async def audit(self) -> AuditReport:
        return await run_audit(self.db)

    async def snapshot(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every row of every wallet table (to prove a failed call changed nothing)."""
        tables = (
            models.accounts,
            models.transfers,
            models.live_holds,
            models.grant_claims,
            models.idempotency_keys,
            models.erasures,
        )
        async with self.db.engine.connect() as conn:
            return {
                table.name: sorted((tuple(row) for row in (await conn.execute(select(table))).all()), key=repr)
                for table in tables
            }

    # -- shorthands -------------------------------------------------------------------------------

    async def open(self, *names: str) -> None:
        for name in names:
            await self.call(
                "CreateAccount", wallet_pb2.CreateAccountRequest(request_id=f"open-{name}", player=f"players/{name}")
            )

    async def balance(self, name: str) -> int:
        account = await self.call("GetAccount", wallet_pb2.GetAccountRequest(name=f"accounts/{name}"))
        return int(account.balance_chips)

    async def account(self, name: str) -> wallet_pb2.Account:
        result: wallet_pb2.Account = await self.call(
            "GetAccount", wallet_pb2.GetAccountRequest(name=f"accounts/{name}")
        )
        return result

    async def hold(
        self, request_id: str, match: str, stakes: dict[str, int], **extra: Any
    ) -> wallet_pb2.HoldBetsResponse:
        result: wallet_pb2.HoldBetsResponse = await self.call(
            "HoldBets",
            wallet_pb2.HoldBetsRequest(
                request_id=request_id,
                match_id=match,
                stakes=[wallet_pb2.Stake(player=f"players/{p}", amount_chips=a) for p, a in stakes.items()],
                **extra,
            ),
        )
        return result

    async def settle(
        self, request_id: str, match: str, outcomes: list[tuple[str, int, str]], first_seat: int = 0
    ) -> wallet_pb2.SettleResponse:
        codes = {
            "won": common_pb2.OUTCOME_WON,
            "lost": common_pb2.OUTCOME_LOST,
            "abandoned": common_pb2.OUTCOME_ABANDONED,
        }
        result: wallet_pb2.SettleResponse = await self.call(
            "Settle",
            wallet_pb2.SettleRequest(
                request_id=request_id,
                match_id=match,
                first_seat=first_seat,
                outcomes=[
                    common_pb2.PlayerOutcome(player=f"players/{p}", seat=seat, outcome=codes[o])
                    for p, seat, o in outcomes
                ],
            ),
            GAME,
        )
        return result


async def refused(
    ledger: Ledger, code: grpc.StatusCode, method: str, request: Any, identity: Identity | None = None
) -> str:
    """Calls and expects `code`; proves the call changed no row. Returns the message."""
    before = await ledger.snapshot()
    with pytest.raises(ServiceError) as caught:
        await ledger.call(method, request, identity)
    assert caught.value.code == code, (caught.value.code, caught.value.message)
    assert await ledger.snapshot() == before
    return caught.value.message


def stakes(**amounts: int) -> list[wallet_pb2.Stake]:
    return [wallet_pb2.Stake(player=f"players/{p}", amount_chips=a) for p, a in amounts.items()]


def make_ledger(
    db: Database, settings: WalletSettings | None = None, clock: Clock | None = None, fault: FaultHook | None = None
) -> Ledger:
    clock = clock or Clock()
    settings = settings or WalletSettings()
    tx = Transactions(db, retention=settings.idempotency_retention, clock=clock, fault=fault)
    return Ledger(db, WalletApi(deps_for(db), settings, clock=clock, transactions=tx), clock)


@pytest.fixture
async def wallet_db(database: Database) -> AsyncIterator[Database]:
    yield await migrated(database)


@pytest.fixture
async def ledger_factory(wallet_db: Database) -> AsyncIterator[Callable[..., Ledger]]:
    made: list[Ledger] = []

    def build(**kwargs: Any) -> Ledger:
        made.append(make_ledger(wallet_db, **kwargs))
        return made[-1]

    yield build
    for ledger in made:
        await ledger.close()


@pytest.fixture
def ledger(ledger_factory: Callable[..., Ledger]) -> Ledger:
    return ledger_factory()


@pytest.fixture
async def audited(ledger: Ledger) -> AsyncIterator[None]:
    """Every test that uses it ends with a clean audit of what it left behind."""
    yield
    report = await ledger.audit()
    assert report.ok, report.problems
