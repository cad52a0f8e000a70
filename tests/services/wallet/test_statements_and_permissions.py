"""Who may do what, and the statement, on SQLite and PostgreSQL: only services and admins move
chips, players read only their own account and statement, and the statement pages newest first
with the balance after each transfer; every refused call changes nothing; the audit passes after
each test."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from buraco.v1 import wallet_pb2
from tests.services.wallet.conftest import Ledger, player, refused, stakes

pytestmark = pytest.mark.usefixtures("audited")

STATE = wallet_pb2.Transfer


async def test_only_services_and_admins_move_chips(ledger: Ledger) -> None:
    await ledger.open("alice")
    calls: list[tuple[str, Any]] = [
        ("HoldBets", wallet_pb2.HoldBetsRequest(request_id="r", match_id="m", stakes=stakes(alice=1))),
        ("Settle", wallet_pb2.SettleRequest(request_id="r", match_id="m")),
        ("Void", wallet_pb2.VoidRequest(request_id="r", match_id="m")),
        ("ExpireHolds", wallet_pb2.ExpireHoldsRequest(request_id="r")),
        (
            "Grant",
            wallet_pb2.GrantRequest(
                request_id="r", player="players/alice", amount_chips=1, kind=wallet_pb2.GrantRequest.KIND_PROMOTION
            ),
        ),
        ("CreateAccount", wallet_pb2.CreateAccountRequest(request_id="r", player="players/zoe")),
    ]
    for method, request in calls:
        await refused(ledger, grpc.StatusCode.PERMISSION_DENIED, method, request, player("alice"))


async def test_a_player_opens_their_own_account_once_and_no_one_elses(ledger: Ledger) -> None:
    """The gateway opens a new player's account with the player's own token (its key signs
    player tokens only)."""
    own = wallet_pb2.CreateAccountRequest(request_id="signup-zoe", player="players/zoe")
    opened = await ledger.call("CreateAccount", own, player("zoe"))
    assert opened.name == "accounts/player-zoe" and opened.balance_chips == 1000
    assert await ledger.call("CreateAccount", own, player("zoe")) == opened  # the same request again
    again = wallet_pb2.CreateAccountRequest(request_id="signup-zoe-2", player="players/zoe")
    await refused(ledger, grpc.StatusCode.ALREADY_EXISTS, "CreateAccount", again, player("zoe"))
    other = wallet_pb2.CreateAccountRequest(request_id="signup-yan", player="players/yan")
    await refused(ledger, grpc.StatusCode.PERMISSION_DENIED, "CreateAccount", other, player("zoe"))


async def test_players_read_only_their_own_account_and_statement(ledger: Ledger) -> None:
    await ledger.open("alice", "bob")
    mine = await ledger.call("GetAccount", wallet_pb2.GetAccountRequest(name="accounts/player-alice"), player("alice"))
    assert mine.balance_chips == 1000
    for name in ("accounts/player-bob", "accounts/house", "accounts/treasury", "accounts/match-m1"):
        await refused(
            ledger,
            grpc.StatusCode.PERMISSION_DENIED,
            "GetAccount",
            wallet_pb2.GetAccountRequest(name=name),
            player("alice"),
        )
        await refused(
            ledger,
            grpc.StatusCode.PERMISSION_DENIED,
            "ListTransfers",
            wallet_pb2.ListTransfersRequest(parent=name),
            player("alice"),
        )
    statement = await ledger.call(
        "ListTransfers", wallet_pb2.ListTransfersRequest(parent="accounts/player-alice"), player("alice")
    )
    assert [t.amount_chips for t in statement.transfers] == [1000]
    await refused(
        ledger, grpc.StatusCode.NOT_FOUND, "GetAccount", wallet_pb2.GetAccountRequest(name="accounts/player-carol")
    )
    for bad in ("", "players/alice", "accounts/", "accounts/bank", "accounts/player-Alice", "accounts/match-"):
        await refused(ledger, grpc.StatusCode.INVALID_ARGUMENT, "GetAccount", wallet_pb2.GetAccountRequest(name=bad))


async def test_the_statement_pages_newest_first_with_the_balance_after_each_transfer(ledger: Ledger) -> None:
    await ledger.open("a", "b")
    hold = await ledger.hold("h", "m1", {"a": 100, "b": 100})
    await ledger.settle("s", "m1", [("a", 0, "won"), ("b", 1, "lost")])
    await ledger.hold("h2", "m2", {"a": 50, "b": 50})
    seen: list[wallet_pb2.Transfer] = []
    token = ""
    while True:
        page = await ledger.call(
            "ListTransfers",
            wallet_pb2.ListTransfersRequest(parent="accounts/player-a", page_size=2, page_token=token),
            player("a"),
        )
        seen.extend(page.transfers)
        token = page.next_page_token
        if not token:
            break
    # newest first: hold 50 (pending), payout +160, posting of the hold 100, the hold, the grant.
    assert [(t.state, t.amount_chips, t.balance_after_chips) for t in seen] == [
        (STATE.STATE_PENDING, 50, 1060),
        (STATE.STATE_POSTED, 160, 1060),
        (STATE.STATE_POSTED, 100, 900),
        (STATE.STATE_PENDING, 100, 1000),
        (STATE.STATE_POSTED, 1000, 1000),
    ]
    assert seen[3].name == hold.holds[0].name and seen[3].resolved_by == seen[2].name
    assert seen[2].pending_transfer == hold.holds[0].name and seen[0].resolved_by == ""
    for bad in ("zzz", "eyJiZWZvcmUiOiAiMSJ9"):
        await refused(
            ledger,
            grpc.StatusCode.INVALID_ARGUMENT,
            "ListTransfers",
            wallet_pb2.ListTransfersRequest(parent="accounts/player-a", page_token=bad),
        )
    await refused(
        ledger,
        grpc.StatusCode.INVALID_ARGUMENT,
        "ListTransfers",
        wallet_pb2.ListTransfersRequest(parent="accounts/player-a", page_size=-1),
    )
