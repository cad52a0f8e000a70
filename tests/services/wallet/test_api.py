"""The wallet served: over real gRPC (status codes, tokens, a match's cycle), the background
expiry sweep, its settings, and a real process fuzzed, after which the ledger's audit passes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from buraco.v1 import common_pb2, wallet_pb2, wallet_pb2_grpc
from services.client.channels import act_for
from services.common.auth import Kind, Minter
from services.common.config import ConfigError
from services.common.db import Database
from services.wallet import settings as wallet_settings
from services.wallet.service import WalletService, run_audit
from services.wallet.settings import WalletSettings
from tests.conftest import DatabaseTarget
from tests.services.harness import ROOT, bearer, dev_minter, make_config, running
from tests.services.service_checks import check_service_process
from tests.services.wallet.conftest import Clock, make_ledger, migrated

SERVICE = wallet_pb2.DESCRIPTOR.services_by_name["WalletService"]

@contextlib.asynccontextmanager
async def alice_and_bob(tmp_path: Path, db_target: DatabaseTarget) -> AsyncIterator[tuple[Any, Minter, Any]]:
    """A wallet served over gRPC with alice's and bob's accounts open: its stub, the dev minter,
    and matchmaking's token."""
    database_env = {"database_url": db_target.url, "database_schema": db_target.schema}
    config = make_config("wallet", tmp_path, **database_env)
    service = WalletService(settings=WalletSettings(expiry_sweep_interval=timedelta(0)))
    minter = dev_minter(config.dev_keys_dir)
    matchmaking = bearer(minter.mint(Kind.SERVICE, "matchmaking"))
    async with running(service.spec(), config) as server, grpc.aio.insecure_channel(server.address) as channel:
        stub = wallet_pb2_grpc.WalletServiceStub(channel)
        for name in ("alice", "bob"):
            await stub.CreateAccount(
                wallet_pb2.CreateAccountRequest(request_id=f"open-{name}", player=f"players/{name}"),
                metadata=bearer(minter.mint(Kind.ADMIN, "ops")),  # an admin opens accounts, no service
            )
        yield stub, minter, matchmaking


async def test_a_match_over_grpc_with_the_right_status_codes(tmp_path: Path, db_target: DatabaseTarget) -> None:
    async with alice_and_bob(tmp_path, db_target) as (stub, minter, matchmaking):
        game = bearer(minter.mint(Kind.SERVICE, "game-session"))
        alice = bearer(minter.mint(Kind.PLAYER, "alice"))
        stakes = [wallet_pb2.Stake(player=f"players/{p}", amount_chips=100) for p in ("alice", "bob")]
        hold = wallet_pb2.HoldBetsRequest(request_id="m1-hold", match_id="m1", stakes=stakes)
        held = await stub.HoldBets(hold, metadata=matchmaking)
        assert len(held.holds) == 2
        assert await stub.HoldBets(hold, metadata=matchmaking) == held  # a retry
        settle = wallet_pb2.SettleRequest(
            request_id="m1",
            match_id="m1",
            first_seat=1,
            outcomes=[
                common_pb2.PlayerOutcome(player="players/alice", seat=0, outcome=common_pb2.OUTCOME_WON),
                common_pb2.PlayerOutcome(player="players/bob", seat=1, outcome=common_pb2.OUTCOME_LOST),
            ],
        )
        settled = await stub.Settle(settle, metadata=game)
        assert (settled.pot_chips, settled.house_cut_chips) == (200, 40)
        mine = await stub.GetAccount(wallet_pb2.GetAccountRequest(name="accounts/player-alice"), metadata=alice)
        assert mine.balance_chips == 1060
        statement = await stub.ListTransfers(
            wallet_pb2.ListTransfersRequest(parent="accounts/player-alice", page_size=1), metadata=alice
        )
        assert statement.transfers[0].amount_chips == 160 and statement.next_page_token

        async def code(call: object) -> tuple[grpc.StatusCode, str]:
            try:
                await call  # type: ignore[misc]
            except grpc.aio.AioRpcError as error:
                return error.code(), error.details() or ""
            raise AssertionError("the call succeeded")

        broke = wallet_pb2.HoldBetsRequest(
            request_id="m2-hold", match_id="m2", stakes=[wallet_pb2.Stake(player="players/bob", amount_chips=901)]
        )
        assert await code(stub.HoldBets(broke, metadata=matchmaking)) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "stakes[0].player: players/bob cannot cover the stake of 901 chips (900 available)",
        )
        other_content = wallet_pb2.SettleRequest()
        other_content.CopyFrom(settle)
        other_content.first_seat = 0
        correction = wallet_pb2.AdminCorrectionRequest(
            request_id="c", account="accounts/house", amount_chips=1, note="n"
        )
        bob = wallet_pb2.GetAccountRequest(name="accounts/player-bob")
        cases: list[tuple[Callable[[], object], grpc.StatusCode]] = [
            (lambda: stub.Settle(settle, metadata=alice), grpc.StatusCode.PERMISSION_DENIED),
            (lambda: stub.GetAccount(bob, metadata=alice), grpc.StatusCode.PERMISSION_DENIED),
            (lambda: stub.GetAccount(bob), grpc.StatusCode.UNAUTHENTICATED),
            (lambda: stub.Settle(other_content, metadata=game), grpc.StatusCode.ALREADY_EXISTS),
            (
                lambda: stub.Void(wallet_pb2.VoidRequest(request_id="v", match_id="m1"), metadata=matchmaking),
                grpc.StatusCode.FAILED_PRECONDITION,
            ),
            (
                lambda: stub.Void(wallet_pb2.VoidRequest(request_id="v", match_id="m9"), metadata=matchmaking),
                grpc.StatusCode.NOT_FOUND,
            ),
            (
                lambda: stub.HoldBets(wallet_pb2.HoldBetsRequest(request_id="x"), metadata=matchmaking),
                grpc.StatusCode.INVALID_ARGUMENT,
            ),
            (
                lambda: stub.AdminCorrection(correction, metadata=matchmaking + act_for("alice")),
                grpc.StatusCode.PERMISSION_DENIED,
            ),
        ]
        for call, expected in cases:
            assert (await code(call()))[0] == expected
    db = Database(db_target.url, schema=db_target.schema)
    try:
        report = await run_audit(db)
    finally:
        await db.dispose()
    assert report.ok, report.problems


async def test_a_load_test_run_erased_over_grpc(tmp_path: Path, db_target: DatabaseTarget) -> None:
    """EraseLoadTestRun over the wire: admins only, the run's counts in the contract's order, its
    players gone (NOT_FOUND), the others served as before, a refusal as FAILED_PRECONDITION."""
    database_env = {"database_url": db_target.url, "database_schema": db_target.schema}
    config = make_config("wallet", tmp_path, **database_env)
    service = WalletService(settings=WalletSettings(expiry_sweep_interval=timedelta(0)))
    minter = dev_minter(config.dev_keys_dir)
    matchmaking = bearer(minter.mint(Kind.SERVICE, "matchmaking"))
    admin = bearer(minter.mint(Kind.ADMIN, "ops"))
    async with running(service.spec(), config) as server, grpc.aio.insecure_channel(server.address) as channel:
        stub = wallet_pb2_grpc.WalletServiceStub(channel)
        for name in ("lt9-0", "lt9-1", "lt9-2", "lt9-10-1", "alice"):
            await stub.CreateAccount(
                wallet_pb2.CreateAccountRequest(request_id=f"open-{name}", player=f"players/{name}"),
                metadata=admin,
            )
        for match, players in (("m1", ("lt9-0", "lt9-1")), ("m2", ("lt9-2", "alice"))):
            stakes = [wallet_pb2.Stake(player=f"players/{p}", amount_chips=10) for p in players]
            hold = wallet_pb2.HoldBetsRequest(request_id=f"h-{match}", match_id=match, stakes=stakes)
            await stub.HoldBets(hold, metadata=matchmaking)
        erase = common_pb2.EraseLoadTestRunRequest(request_id="e", run_id="lt9")

        async def refusal(call: Any) -> tuple[grpc.StatusCode, str]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call
            return caught.value.code(), caught.value.details() or ""

        denied = await refusal(stub.EraseLoadTestRun(erase, metadata=matchmaking))
        assert denied[0] == grpc.StatusCode.PERMISSION_DENIED
        code, details = await refusal(stub.EraseLoadTestRun(erase, metadata=admin))
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert details == (
            "run lt9 cannot be erased: 4 live hold(s) (stakes not settled, voided or expired yet);"
            " 2 pot(s) still open (accounts/match-m1, accounts/match-m2: settle or void them);"
            " 1 account(s) outside the run share its pots or transfers (accounts/player-alice)"
        )
        for match, request_id in (("m1", "v1"), ("m2", "v2")):
            await stub.Void(wallet_pb2.VoidRequest(request_id=request_id, match_id=match), metadata=matchmaking)
        code, details = await refusal(stub.EraseLoadTestRun(erase, metadata=admin))
        assert (code, details) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "run lt9 cannot be erased: 1 account(s) outside the run share its pots or transfers"
            " (accounts/player-alice)",
        )
        # Run lt9-10, whose player's id starts like lt9's, is erased alone.
        erase_other = common_pb2.EraseLoadTestRunRequest(request_id="e2", run_id="lt9-10")
        answer = await stub.EraseLoadTestRun(erase_other, metadata=admin)
        assert [(e.kind, e.count) for e in answer.erased] == [
            ("accounts", 1),
            ("escrows", 0),
            ("transfers", 1),
            ("grant_claims", 1),
        ]
        gone = wallet_pb2.GetAccountRequest(name="accounts/player-lt9-10-1")
        assert (await refusal(stub.GetAccount(gone, metadata=admin)))[0] == grpc.StatusCode.NOT_FOUND
        alice = await stub.GetAccount(wallet_pb2.GetAccountRequest(name="accounts/player-alice"), metadata=admin)
        assert alice.balance_chips == 1000
    db = Database(db_target.url, schema=db_target.schema)
    try:
        report = await run_audit(db)
    finally:
        await db.dispose()
    assert report.ok, report.problems


async def test_the_background_sweep_expires_holds_past_their_time(tmp_path: Path) -> None:
    clock = Clock()
    config = make_config("wallet", tmp_path)
    service = WalletService(settings=WalletSettings(expiry_sweep_interval=timedelta(milliseconds=20)), clock=clock)
    async with running(service.spec(), config):
        assert service.api is not None and service.sweeper is not None
        ledger = make_ledger(service.api.deps.db, clock=clock)
        await ledger.open("a", "b")
        await ledger.hold("h", "m1", {"a": 10, "b": 10}, hold_ttl=Duration(seconds=30))
        sweeper = service.sweeper
        async with sweeper.passed:  # a full pass after the hold: nothing is due yet
            seen = sweeper.passes
            await sweeper.passed.wait_for(lambda: sweeper.passes >= seen + 2)
        assert (await ledger.account("player-a")).held_chips == 10
        clock.advance(seconds=31)
        async with sweeper.passed:
            seen = sweeper.passes
            await sweeper.passed.wait_for(lambda: sweeper.passes >= seen + 2)
        assert sweeper.expired == 2
        assert [(await ledger.account(f"player-{p}")).held_chips for p in "ab"] == [0, 0]
        assert (await ledger.audit()).ok
        await ledger.close()
    # Stopping the server ended the sweep.
    await asyncio.wait_for(asyncio.gather(*service._tasks), timeout=5)


def test_wallet_settings_have_defaults_and_fail_fast_naming_the_variable() -> None:
    assert wallet_settings.load({}) == WalletSettings()
    loaded = wallet_settings.load(
        {
            "BURACO_WALLET_STARTING_GRANT_CHIPS": "0",
            "BURACO_WALLET_DAILY_BONUS_CHIPS": "25",
            "BURACO_WALLET_HOLD_TTL_SECONDS": "60",
            "BURACO_WALLET_IDEMPOTENCY_RETENTION_DAYS": "7",
        }
    )
    assert (loaded.starting_grant_chips, loaded.daily_bonus_chips, loaded.hold_ttl, loaded.idempotency_retention) == (
        0,
        25,
        timedelta(seconds=60),
        timedelta(days=7),
    )
    for variable, value in [
        ("BURACO_WALLET_STARTING_GRANT_CHIPS", "-1"),
        ("BURACO_WALLET_DAILY_BONUS_CHIPS", "lots"),
        ("BURACO_WALLET_HOUSE_CUT_PERCENT", "101"),
        ("BURACO_WALLET_HOLD_TTL_SECONDS", "nan"),
        ("BURACO_WALLET_HOLD_TTL_SECONDS", "9999999"),  # above the maximum
        ("BURACO_WALLET_EXPIRY_SWEEP_SECONDS", "-5"),
        ("BURACO_WALLET_IDEMPOTENCY_RETENTION_DAYS", "0"),
    ]:
        with pytest.raises(ConfigError, match=variable):
            wallet_settings.load({variable: value})


def test_the_readme_documents_every_wallet_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [s.name for s in wallet_settings.SETTINGS if f"`{s.name}`" not in readme]
    assert not missing, f"README's wallet section lacks {missing}"


def test_a_bad_wallet_setting_stops_the_service_before_it_binds(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "services.wallet"],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "BURACO_PORT": "0",
            "BURACO_HEALTH_PORT": "0",
            "BURACO_METRICS_ENABLED": "false",
            "BURACO_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'w.db'}",
            "BURACO_DEV_KEYS_DIR": str(tmp_path / "keys"),
            "BURACO_WALLET_HOUSE_CUT_PERCENT": "twenty",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "BURACO_WALLET_HOUSE_CUT_PERCENT='twenty'" in result.stderr
    assert "listening" not in result.stdout


def test_the_process_keeps_what_it_loaded_at_start_out_of_the_collector() -> None:
    """`python -m services.wallet` freezes its start-up objects (gc.freeze): full collections
    over them paused every call in flight (docs/wallet.md, Benchmark)."""
    script = (
        "import gc, runpy, sys\n"
        "sys.argv = ['wallet', '--help']\n"
        "try:\n"
        "    runpy.run_module('services.wallet', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('frozen', gc.get_freeze_count())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    frozen = int(result.stdout.rsplit("frozen ", 1)[1])
    assert frozen > 10_000, result.stdout  # the modules, protobuf descriptors, gRPC, SQLAlchemy...


@pytest.mark.slow
def test_the_process_serves_survives_fuzzing_and_stops_on_sigterm(tmp_path: Path) -> None:
    # A ledger with accounts (the fuzzer's players alice and bob), a tournament's buy-ins
    # (`tournaments/t1` is among its names) and a match, for the fuzzed calls to act on.
    database = f"sqlite+aiosqlite:///{tmp_path / 'wallet.db'}"

    async def seed() -> None:
        db = await migrated(Database(database))
        ledger = make_ledger(db)
        await ledger.open("alice", "bob", "carol")
        for i, name in enumerate(("alice", "bob")):
            await ledger.call(
                "HoldBets",
                wallet_pb2.HoldBetsRequest(
                    request_id=f"buy-{i}",
                    tournament="tournaments/t1",
                    stakes=[wallet_pb2.Stake(player=f"players/{name}", amount_chips=50)],
                ),
            )
        await ledger.hold("h", "m1", {"alice": 10, "carol": 10})
        await ledger.close()
        await db.dispose()

    asyncio.run(seed())

    def the_ledger_still_adds_up() -> None:
        async def check() -> None:
            db = Database(database)
            try:
                report = await run_audit(db)
            finally:
                await db.dispose()
            assert report.ok, report.problems
            assert report.accounts >= 7 and report.minted >= 3000

        asyncio.run(check())

    check_service_process("wallet", SERVICE, tmp_path, invariant=the_ledger_still_adds_up)


async def test_batch_get_accounts_answers_those_found_in_order_and_names_the_missing(
    tmp_path: Path, db_target: DatabaseTarget
) -> None:
    async with alice_and_bob(tmp_path, db_target) as (stub, minter, matchmaking):
        names = ["accounts/player-bob", "accounts/player-nobody", "accounts/house", "accounts/player-alice"]
        got = await stub.BatchGetAccounts(wallet_pb2.BatchGetAccountsRequest(names=names), metadata=matchmaking)
        assert [a.name for a in got.accounts] == ["accounts/player-bob", "accounts/house", "accounts/player-alice"]
        assert list(got.missing) == ["accounts/player-nobody"]
        alone = await stub.GetAccount(wallet_pb2.GetAccountRequest(name="accounts/player-alice"), metadata=matchmaking)
        assert got.accounts[2] == alone

        async def refused(request: wallet_pb2.BatchGetAccountsRequest, metadata: Any) -> tuple[Any, str]:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.BatchGetAccounts(request, metadata=metadata)
            return raised.value.code(), raised.value.details() or ""

        ok = wallet_pb2.BatchGetAccountsRequest(names=["accounts/player-alice"])
        for who in (bearer(minter.mint(Kind.PLAYER, "alice")), bearer(minter.mint(Kind.SERVICE, "ranking"))):
            assert (await refused(ok, who))[0] == grpc.StatusCode.PERMISSION_DENIED
        for names, message in (
            ([], "names: at least one account"),
            (["accounts/player-alice"] * 2, "names: an account is listed twice"),
            (["players/alice"], "names[0]: must be a resource name"),
            ([f"accounts/player-p{i}" for i in range(1001)], "names: at most 1000 accounts"),
        ):
            code, details = await refused(wallet_pb2.BatchGetAccountsRequest(names=names), matchmaking)
            assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(message), details
