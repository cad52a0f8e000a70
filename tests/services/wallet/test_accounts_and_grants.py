"""Accounts, grants and admin corrections on SQLite and PostgreSQL: the starting grant once, the
daily bonus once per player and UTC day, promotions recorded with who asked and for whom,
corrections that record who and why and never overdraw; every refused call changes nothing; the
audit passes after each test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import grpc
import pytest

from buraco.v1 import wallet_pb2
from services.wallet.settings import WalletSettings
from tests.services.wallet.conftest import ADMIN, SERVICE, Ledger, player, refused

pytestmark = pytest.mark.usefixtures("audited")

STATE = wallet_pb2.Transfer


async def test_a_new_account_gets_the_starting_grant_once(ledger: Ledger) -> None:
    account = await ledger.call(
        "CreateAccount", wallet_pb2.CreateAccountRequest(request_id="r1", player="players/alice")
    )
    assert (account.name, account.kind, account.balance_chips, account.player) == (
        "accounts/player-alice",
        wallet_pb2.Account.KIND_PLAYER,
        1000,
        "players/alice",
    )
    message = await refused(
        ledger,
        grpc.StatusCode.ALREADY_EXISTS,
        "CreateAccount",
        wallet_pb2.CreateAccountRequest(request_id="r2", player="players/alice"),
    )
    assert "accounts/player-alice" in message
    message = await refused(
        ledger,
        grpc.StatusCode.FAILED_PRECONDITION,
        "Grant",
        wallet_pb2.GrantRequest(
            request_id="g1", player="players/alice", amount_chips=500, kind=wallet_pb2.GrantRequest.KIND_STARTING
        ),
    )
    assert "starting grant" in message
    assert await ledger.balance("player-alice") == 1000
    assert await ledger.balance("treasury") == -1000


async def test_no_starting_grant_when_configured_to_zero(ledger_factory: Callable[..., Ledger]) -> None:
    ledger = ledger_factory(settings=WalletSettings(starting_grant_chips=0))
    await ledger.open("bob")
    assert await ledger.balance("player-bob") == 0
    grant = await ledger.call(
        "Grant",
        wallet_pb2.GrantRequest(
            request_id="g", player="players/bob", amount_chips=70, kind=wallet_pb2.GrantRequest.KIND_STARTING
        ),
    )
    assert (grant.amount_chips, grant.reason, grant.credit_account) == (
        70,
        wallet_pb2.REASON_CODE_GRANT,
        "accounts/player-bob",
    )
    assert await ledger.balance("player-bob") == 70


async def test_the_daily_bonus_once_per_player_and_utc_day(ledger_factory: Callable[..., Ledger]) -> None:
    ledger = ledger_factory(settings=WalletSettings(daily_bonus_chips=50))
    await ledger.open("alice")
    bonus = wallet_pb2.GrantRequest.KIND_DAILY_BONUS

    def request(request_id: str, amount: int = 0) -> wallet_pb2.GrantRequest:
        return wallet_pb2.GrantRequest(request_id=request_id, player="players/alice", amount_chips=amount, kind=bonus)

    first = await ledger.call("Grant", request("d1"))
    assert first.amount_chips == 50
    assert "daily bonus" in await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "Grant", request("d2"))
    assert "amount_chips" in await refused(ledger, grpc.StatusCode.INVALID_ARGUMENT, "Grant", request("d3", 40))
    ledger.clock.advance(days=1)
    assert (await ledger.call("Grant", request("d4", 50))).amount_chips == 50
    assert await ledger.balance("player-alice") == 1100


async def test_no_daily_bonus_unless_configured(ledger: Ledger) -> None:
    await ledger.open("alice")
    message = await refused(
        ledger,
        grpc.StatusCode.FAILED_PRECONDITION,
        "Grant",
        wallet_pb2.GrantRequest(request_id="d", player="players/alice", kind=wallet_pb2.GrantRequest.KIND_DAILY_BONUS),
    )
    assert "BURACO_WALLET_DAILY_BONUS_CHIPS" in message


async def test_promotions_are_recorded_with_who_asked_and_for_whom(ledger: Ledger) -> None:
    await ledger.open("alice")
    acting = replace(ADMIN, acting_for="alice")
    grant = await ledger.call(
        "Grant",
        wallet_pb2.GrantRequest(
            request_id="p1",
            player="players/alice",
            amount_chips=25,
            kind=wallet_pb2.GrantRequest.KIND_PROMOTION,
            note="spring promotion",
        ),
        acting,
    )
    assert (grant.requested_by, grant.on_behalf_of, grant.note, grant.request_id) == (
        "admins/root",
        "players/alice",
        "spring promotion",
        "p1",
    )
    assert grant.debit_account == "accounts/treasury" and grant.state == STATE.STATE_POSTED


async def test_a_grant_needs_an_open_account(ledger: Ledger) -> None:
    await refused(
        ledger,
        grpc.StatusCode.NOT_FOUND,
        "Grant",
        wallet_pb2.GrantRequest(
            request_id="g", player="players/nobody", amount_chips=5, kind=wallet_pb2.GrantRequest.KIND_PROMOTION
        ),
    )


async def test_admin_corrections_record_who_and_why_and_never_overdraw(ledger: Ledger) -> None:
    await ledger.open("alice")

    def correction(request_id: str, amount: int, account: str = "accounts/player-alice") -> Any:
        return wallet_pb2.AdminCorrectionRequest(
            request_id=request_id, account=account, amount_chips=amount, note="ticket 42: double payout"
        )

    for identity in (SERVICE, player("alice")):
        message = await refused(ledger, grpc.StatusCode.PERMISSION_DENIED, "AdminCorrection", correction("c0", 5),
                                identity)
        assert message == f"{identity.principal} may not call WalletService.AdminCorrection: only admins may"
    done = await ledger.call("AdminCorrection", correction("c1", -300), ADMIN)
    assert (done.requested_by, done.note, done.reason, done.debit_account, done.credit_account) == (
        "admins/root",
        "ticket 42: double payout",
        wallet_pb2.REASON_CODE_CORRECTION,
        "accounts/player-alice",
        "accounts/treasury",
    )
    assert await ledger.balance("player-alice") == 700
    message = await refused(
        ledger, grpc.StatusCode.FAILED_PRECONDITION, "AdminCorrection", correction("c2", -701), ADMIN
    )
    assert "700 chips available" in message
    await ledger.call("AdminCorrection", correction("c3", 50, "accounts/house"), ADMIN)
    assert await ledger.balance("house") == 50
    await refused(
        ledger, grpc.StatusCode.INVALID_ARGUMENT, "AdminCorrection", correction("c4", 5, "accounts/treasury"), ADMIN
    )
    await refused(ledger, grpc.StatusCode.INVALID_ARGUMENT, "AdminCorrection", correction("c5", 0), ADMIN)
    await ledger.hold("h", "m1", {"alice": 10})
    await refused(
        ledger, grpc.StatusCode.FAILED_PRECONDITION, "AdminCorrection", correction("c6", 5, "accounts/match-m1"), ADMIN
    )
    note_missing = wallet_pb2.AdminCorrectionRequest(request_id="c7", account="accounts/player-alice", amount_chips=5)
    assert "note" in await refused(ledger, grpc.StatusCode.INVALID_ARGUMENT, "AdminCorrection", note_missing, ADMIN)
