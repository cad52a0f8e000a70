"""How the wallet service is served: its gRPC service, servicer, migrations, the background
expiry sweep, and its commands.

    python -m services.wallet                 # serve (see services.common.server)
    python -m services.wallet migrate|downgrade|revision ...
    python -m services.wallet audit           # check the ledger; exit 1 on any difference
    python -m services.wallet expire-holds    # expire every hold past its time now
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from buraco.v1 import wallet_pb2, wallet_pb2_grpc
from services.common import config as config_module
from services.common import logs
from services.common.config import ConfigError
from services.common.db import Database
from services.common.server import Deps, ServiceSpec
from services.common.server import main as common_main
from services.wallet import audit as audit_module
from services.wallet import core, records
from services.wallet.api import WalletApi
from services.wallet.settings import WalletSettings
from services.wallet.settings import load as load_settings
from services.wallet.store import Store
from services.wallet.transactions import Clock, Transactions, utc_now

MIGRATIONS = Path(__file__).parent / "migrations"
log = logging.getLogger("buraco.wallet")


class Sweeper:
    """Expires holds past their time and forgets answers past their retention, every interval."""

    def __init__(self, tx: Transactions, wallet: core.Wallet, interval: float) -> None:
        self.tx = tx
        self.wallet = wallet
        self.interval = interval
        #: Completed passes and holds expired so far; `passed` is notified after each pass.
        self.passes = 0
        self.expired = 0
        self.passed = asyncio.Condition()

    async def sweep(self) -> int:
        """One pass: every hold past its time, in batches; returns how many expired."""
        caller = records.Caller(core.SWEEPER)
        count = 0
        while True:

            async def expire(store: Store) -> records.ExpireResult:
                result, batch = await self.wallet.expire_holds(store, caller, "", None)
                await store.write(batch)
                return result

            result = await self.tx.write(expire)
            count += len(result.expired)
            if not result.more:
                break
        await self.tx.purge_answers()
        if count:
            log.info("holds expired", extra={"fields": {"count": count}})
        return count

    async def run(self, stopped: asyncio.Event) -> None:
        while not stopped.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), self.interval)
            if stopped.is_set():
                break
            try:
                self.expired += await self.sweep()
            except Exception:  # a failed pass (database away) must not end the sweeping
                log.exception("expiry sweep failed")
            async with self.passed:
                self.passes += 1
                self.passed.notify_all()


@dataclass
class WalletService:
    """The wallet as served. `settings` None: read from the environment when the server starts."""

    settings: WalletSettings | None = None
    clock: Clock = utc_now
    api: WalletApi | None = field(default=None, init=False)
    sweeper: Sweeper | None = field(default=None, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    def register(self, server: grpc.aio.Server, deps: Deps) -> None:
        settings = self.settings if self.settings is not None else load_settings()
        self.api = WalletApi(deps, settings, clock=self.clock)
        wallet_pb2_grpc.add_WalletServiceServicer_to_server(self.api, server)
        api = self.api
        stopped = asyncio.Event()

        async def watch() -> None:
            await server.wait_for_termination()
            stopped.set()
            await api.tx.close()

        tasks = [watch()]
        interval = settings.expiry_sweep_interval.total_seconds()
        if interval > 0:
            self.sweeper = Sweeper(api.tx, api.wallet, interval)
            tasks.append(self.sweeper.run(stopped))
        for coroutine in tasks:
            task = asyncio.ensure_future(coroutine)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def spec(self) -> ServiceSpec:
        return ServiceSpec(
            name="wallet",
            grpc_services=(wallet_pb2.DESCRIPTOR.services_by_name["WalletService"].full_name,),
            register=self.register,
            migrations=MIGRATIONS,
        )


SPEC = WalletService().spec()


async def run_audit(db: Database) -> audit_module.AuditReport:
    tx = Transactions(db, retention=WalletSettings().idempotency_retention)
    return await tx.read(audit_module.audit)


async def _audit_command(db: Database) -> int:
    try:
        report = await run_audit(db)
    finally:
        await db.dispose()
    for problem in report.problems:
        print(f"audit: {problem}")
    print(report.summary())
    return 0 if report.ok else 1


async def _expire_command(db: Database, settings: WalletSettings) -> int:
    try:
        tx = Transactions(db, retention=settings.idempotency_retention)
        count = await Sweeper(tx, core.Wallet(settings), 0).sweep()
    finally:
        await db.dispose()
    print(f"expired {count} hold(s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("audit", "expire-holds"):
        if args and args[0] in ("-h", "--help"):
            print(__doc__)
        return common_main(SPEC, args)
    if len(args) > 1:
        print(f"usage: python -m services.wallet {args[0]}", file=sys.stderr)
        return 2
    try:
        config = config_module.load("wallet")
        settings = load_settings()
    except ConfigError as error:
        print(f"configuration error: {error}", file=sys.stderr)
        return 2
    logs.configure("wallet", config.log_level)
    db = Database(config.database_url, schema=config.database_schema,
                  transaction_pooling=config.database_transaction_pooling)
    try:
        if args[0] == "audit":
            return asyncio.run(_audit_command(db))
        return asyncio.run(_expire_command(db, settings))
    except Exception as error:  # no database, not migrated: say so, exit 2
        print(f"wallet {args[0]}: cannot run: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
