"""The wallet's calls on SQLite and PostgreSQL: holds, settlement, annulment with penalties,
tournaments, expiry, grants, corrections, statements, idempotency and permissions; every refused
call changes nothing; the audit passes after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from buraco.v1 import common_pb2, wallet_pb2
from services.common.errors import ServiceError
from services.wallet.settings import WalletSettings
from tests.services.wallet.conftest import ADMIN, GAME, SERVICE, Ledger, player

STATE = wallet_pb2.Transfer


@pytest.fixture(autouse=True)
async def audited(ledger: Ledger) -> AsyncIterator[None]:
    """Every test ends with a clean audit of what it left behind."""
    yield
    report = await ledger.audit()
    assert report.ok, report.problems


async def refused(ledger: Ledger, code: grpc.StatusCode, method: str, request: Any, identity: Any = SERVICE) -> str:
    """Calls and expects `code`; proves the call changed no row. Returns the message."""
    before = await ledger.snapshot()
    with pytest.raises(ServiceError) as caught:
        await ledger.call(method, request, identity)
    assert caught.value.code == code, (caught.value.code, caught.value.message)
    assert await ledger.snapshot() == before
    return caught.value.message


def stakes(**amounts: int) -> list[wallet_pb2.Stake]:
    return [wallet_pb2.Stake(player=f"players/{p}", amount_chips=a) for p, a in amounts.items()]


# -- accounts and grants -------------------------------------------------------------------------


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
    acting = type(SERVICE)(SERVICE.kind, "matchmaking", acting_for="alice")
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
        "services/matchmaking",
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
        await refused(ledger, grpc.StatusCode.PERMISSION_DENIED, "AdminCorrection", correction("c0", 5), identity)
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


# -- holds --------------------------------------------------------------------------------------


async def test_hold_bets_holds_every_stake_as_a_pending_transfer(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c", "d")
    reply = await ledger.hold("h1", "m1", {"a": 100, "b": 100, "c": 100, "d": 100})
    assert [
        (t.debit_account, t.credit_account, t.amount_chips, t.state, t.reason, t.match_id) for t in reply.holds
    ] == [
        (f"accounts/player-{p}", "accounts/match-m1", 100, STATE.STATE_PENDING, wallet_pb2.REASON_CODE_BET, "m1")
        for p in "abcd"
    ]
    assert reply.expire_time.ToDatetime().replace(tzinfo=ledger.clock.now.tzinfo) == ledger.clock.now + timedelta(
        hours=6
    )
    alice = await ledger.account("player-a")
    assert (alice.balance_chips, alice.held_chips) == (1000, 100)
    pot = await ledger.account("match-m1")
    assert (pot.kind, pot.balance_chips, pot.incoming_chips, pot.pot_state) == (
        wallet_pb2.Account.KIND_ESCROW,
        0,
        400,
        wallet_pb2.Account.POT_STATE_OPEN,
    )


async def test_hold_bets_is_all_or_none_naming_who_cannot_cover(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c")
    await ledger.hold("h0", "m0", {"b": 950})
    request = wallet_pb2.HoldBetsRequest(request_id="h1", match_id="m1", stakes=stakes(a=100, b=100, c=100))
    message = await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "HoldBets", request)
    assert message.startswith("stakes[1].player: players/b cannot cover")
    assert "50 available" in message
    # No pot was opened either: a settlement finds nothing.
    nobody = wallet_pb2.HoldBetsRequest(request_id="h2", match_id="m2", stakes=stakes(a=1, zed=1))
    assert "players/zed has no account" in await refused(
        ledger, grpc.StatusCode.FAILED_PRECONDITION, "HoldBets", nobody
    )
    await refused(
        ledger, grpc.StatusCode.NOT_FOUND, "GetAccount", wallet_pb2.GetAccountRequest(name="accounts/match-m1")
    )


async def test_a_pot_takes_one_live_hold_per_player_and_at_most_four(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c", "d", "e")
    await ledger.hold("h1", "m1", {"a": 10, "b": 10})
    twice = wallet_pb2.HoldBetsRequest(request_id="h2", match_id="m1", stakes=stakes(c=10, a=10))
    assert "players/a already has a live hold" in await refused(
        ledger, grpc.StatusCode.FAILED_PRECONDITION, "HoldBets", twice
    )
    await ledger.hold("h3", "m1", {"c": 10, "d": 10})
    fifth = wallet_pb2.HoldBetsRequest(request_id="h4", match_id="m1", stakes=stakes(e=10))
    assert "exceed 4" in await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "HoldBets", fifth)


MALFORMED_HOLDS = [
    (wallet_pb2.HoldBetsRequest(match_id="m", stakes=stakes(a=1)), "request_id"),
    (wallet_pb2.HoldBetsRequest(request_id="r", stakes=stakes(a=1)), "match_id"),
    (wallet_pb2.HoldBetsRequest(request_id="r", match_id="M!", stakes=stakes(a=1)), "match_id"),
    (wallet_pb2.HoldBetsRequest(request_id="r", tournament="t1", stakes=stakes(a=1)), "tournament"),
    (wallet_pb2.HoldBetsRequest(request_id="r", match_id="m"), "stakes"),
    (wallet_pb2.HoldBetsRequest(request_id="r", match_id="m", stakes=stakes(a=1, b=1, c=1, d=1, e=1)), "stakes"),
    (wallet_pb2.HoldBetsRequest(request_id="r", match_id="m", stakes=stakes(a=0)), "stakes[0].amount_chips"),
    (wallet_pb2.HoldBetsRequest(request_id="r", match_id="m", stakes=stakes(a=-5)), "stakes[0].amount_chips"),
    (
        wallet_pb2.HoldBetsRequest(
            request_id="r", match_id="m", stakes=[wallet_pb2.Stake(player="players/a", amount_chips=10**16)]
        ),
        "stakes[0].amount_chips",
    ),
    (
        wallet_pb2.HoldBetsRequest(
            request_id="r",
            match_id="m",
            stakes=[
                wallet_pb2.Stake(player="players/a", amount_chips=1),
                wallet_pb2.Stake(player="players/a", amount_chips=1),
            ],
        ),
        "stakes[1].player",
    ),
    (
        wallet_pb2.HoldBetsRequest(
            request_id="r", match_id="m", stakes=[wallet_pb2.Stake(player="alice", amount_chips=1)]
        ),
        "stakes[0].player",
    ),
    (
        wallet_pb2.HoldBetsRequest(request_id="r", match_id="m", stakes=stakes(a=1), hold_ttl=Duration(seconds=-1)),
        "hold_ttl",
    ),
    (
        wallet_pb2.HoldBetsRequest(
            request_id="r", match_id="m", stakes=stakes(a=1), hold_ttl=Duration(seconds=31 * 86400)
        ),
        "hold_ttl",
    ),
]


async def test_malformed_holds_are_refused_naming_the_field(ledger: Ledger) -> None:
    await ledger.open("a")
    for request, field in MALFORMED_HOLDS:
        message = await refused(ledger, grpc.StatusCode.INVALID_ARGUMENT, "HoldBets", request)
        assert message.startswith(f"{field}:"), message


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


# -- settlement ---------------------------------------------------------------------------------


async def test_settle_pays_the_pair_less_the_house_cut_and_the_odd_chip_to_who_acts_first(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c", "d")
    await ledger.hold("h", "m1", {"a": 10, "b": 10, "c": 10, "d": 11})
    reply = await ledger.settle(
        "s", "m1", [("a", 0, "won"), ("b", 1, "lost"), ("c", 2, "won"), ("d", 3, "lost")], first_seat=1
    )
    # Pot 41, cut 8 (8.2 rounded down), 33 to the pair: seat 2 acts before seat 0 from seat 1.
    assert (reply.pot_chips, reply.house_cut_chips) == (41, 8)
    payouts = {t.credit_account: t.amount_chips for t in reply.transfers if t.reason == wallet_pb2.REASON_CODE_SETTLE}
    assert payouts == {"accounts/player-c": 17, "accounts/player-a": 16}
    posted = [t for t in reply.transfers if t.pending_transfer]
    assert len(posted) == 4 and all(t.state == STATE.STATE_POSTED for t in posted)
    cut = [t for t in reply.transfers if t.reason == wallet_pb2.REASON_CODE_HOUSE_CUT]
    assert [(t.debit_account, t.credit_account, t.amount_chips) for t in cut] == [
        ("accounts/match-m1", "accounts/house", 8)
    ]
    assert [await ledger.balance(f"player-{p}") for p in "abcd"] == [1006, 990, 1007, 989]
    assert await ledger.balance("house") == 8
    pot = await ledger.account("match-m1")
    assert (pot.balance_chips, pot.incoming_chips, pot.pot_state) == (0, 0, wallet_pb2.Account.POT_STATE_SETTLED)


async def test_a_two_player_match_and_an_abandoning_winner_side(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c", "d", "e", "f")
    await ledger.hold("h1", "duel", {"e": 7, "f": 7})
    reply = await ledger.settle("s1", "duel", [("e", 0, "lost"), ("f", 1, "won")], first_seat=0)
    assert (reply.pot_chips, reply.house_cut_chips) == (14, 2)
    assert await ledger.balance("player-f") == 1005
    # A partner who abandoned gets nothing even when the side wins; the other winner takes the net pot.
    await ledger.hold("h2", "m2", {"a": 25, "b": 25, "c": 25, "d": 25})
    await ledger.settle("s2", "m2", [("a", 0, "won"), ("b", 1, "lost"), ("c", 2, "abandoned"), ("d", 3, "lost")])
    assert [await ledger.balance(f"player-{p}") for p in "abcd"] == [1055, 975, 975, 975]


async def test_settle_refuses_what_does_not_match_the_pot(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c", "d")
    await ledger.hold("h", "m1", {"a": 10, "b": 10})
    outcome = common_pb2.PlayerOutcome

    def settle(request_id: str, outcomes: list[Any], first_seat: int | None = 0, **pot: str) -> Any:
        request = wallet_pb2.SettleRequest(request_id=request_id, outcomes=outcomes)
        if pot.get("tournament"):
            request.tournament = pot["tournament"]
        else:
            request.match_id = pot.get("match_id", "m1")
        if first_seat is not None:
            request.first_seat = first_seat
        return request

    a_won = outcome(player="players/a", seat=0, outcome=common_pb2.OUTCOME_WON)
    b_lost = outcome(player="players/b", seat=1, outcome=common_pb2.OUTCOME_LOST)
    c_lost = outcome(player="players/c", seat=1, outcome=common_pb2.OUTCOME_LOST)
    cases = [
        (grpc.StatusCode.NOT_FOUND, settle("x1", [a_won, b_lost], match_id="nope"), "match nope"),
        (
            grpc.StatusCode.FAILED_PRECONDITION,
            settle("x2", [a_won, c_lost]),
            "outcomes[1].player: players/c has no live stake",
        ),
        (grpc.StatusCode.INVALID_ARGUMENT, settle("x3", [a_won]), "outcomes:"),
        (grpc.StatusCode.INVALID_ARGUMENT, settle("x4", [a_won, b_lost], first_seat=None), "first_seat:"),
        (grpc.StatusCode.INVALID_ARGUMENT, settle("x5", [a_won, b_lost], first_seat=2), "first_seat:"),
        (
            grpc.StatusCode.INVALID_ARGUMENT,
            settle("x6", [a_won, outcome(player="players/b", seat=1, outcome=common_pb2.OUTCOME_WON)]),
            "outcomes: the winners must be on one side",
        ),
        (
            grpc.StatusCode.INVALID_ARGUMENT,
            settle("x7", [outcome(player="players/a", seat=0, outcome=common_pb2.OUTCOME_LOST), b_lost]),
            "outcomes: no winner",
        ),
        (
            grpc.StatusCode.INVALID_ARGUMENT,
            settle("x8", [a_won, outcome(player="players/b", seat=1, outcome=common_pb2.OUTCOME_VOID)]),
            "outcomes[1].outcome:",
        ),
        (
            grpc.StatusCode.INVALID_ARGUMENT,
            settle("x9", [a_won, outcome(player="players/b", seat=0, outcome=common_pb2.OUTCOME_LOST)]),
            "outcomes: the seats",
        ),
        (grpc.StatusCode.INVALID_ARGUMENT, settle("x10", [a_won, b_lost], tournament="tournaments/t"), "outcomes:"),
    ]
    for code, request, expected in cases:
        message = await refused(ledger, code, "Settle", request, GAME)
        assert expected in message, (expected, message)
    await ledger.settle("s", "m1", [("a", 0, "won"), ("b", 1, "lost")])
    assert "already settled" in await refused(
        ledger, grpc.StatusCode.FAILED_PRECONDITION, "Settle", settle("x11", [a_won, b_lost]), GAME
    )
    late = wallet_pb2.HoldBetsRequest(request_id="h9", match_id="m1", stakes=stakes(c=5))
    assert "already settled" in await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "HoldBets", late)
    # Outcomes must cover every stake.
    await ledger.hold("h2", "m2", {"a": 10, "b": 10, "c": 10, "d": 10})
    message = await refused(
        ledger,
        grpc.StatusCode.FAILED_PRECONDITION,
        "Settle",
        settle("x12", [a_won, b_lost], match_id="m2"),
        GAME,
    )
    assert "players/c has a stake in match m2 but no outcome" in message


# -- annulment ----------------------------------------------------------------------------------


async def test_void_returns_every_stake(ledger: Ledger) -> None:
    await ledger.open("a", "b")
    await ledger.hold("h", "m1", {"a": 30, "b": 30})
    reply = await ledger.call(
        "Void", wallet_pb2.VoidRequest(request_id="v", match_id="m1", reason="friendly annulment")
    )
    assert {(t.debit_account, t.state, t.reason, t.note) for t in reply.transfers} == {
        (f"accounts/player-{p}", STATE.STATE_VOIDED, wallet_pb2.REASON_CODE_REFUND, "friendly annulment") for p in "ab"
    }
    assert [await ledger.balance(f"player-{p}") for p in "ab"] == [1000, 1000]
    assert (await ledger.account("player-a")).held_chips == 0
    assert (await ledger.account("match-m1")).pot_state == wallet_pb2.Account.POT_STATE_VOIDED
    again = wallet_pb2.VoidRequest(request_id="v2", match_id="m1")
    assert "already voided" in await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "Void", again)


async def test_an_abandoners_stake_is_split_among_the_others_without_a_cut(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c", "d")
    await ledger.hold("h", "m1", {"a": 10, "b": 10, "c": 10, "d": 10})
    reply = await ledger.call(
        "Void", wallet_pb2.VoidRequest(request_id="v", match_id="m1", penalised_players=["players/b"])
    )
    penalties = [
        (t.debit_account, t.credit_account, t.amount_chips, t.state)
        for t in reply.transfers
        if t.reason == wallet_pb2.REASON_CODE_PENALTY
    ]
    # b's 10 chips are posted into the pot, then split 4/3/3: the odd chip to a, held first.
    assert penalties == [
        ("accounts/player-b", "accounts/match-m1", 10, STATE.STATE_POSTED),
        ("accounts/match-m1", "accounts/player-a", 4, STATE.STATE_POSTED),
        ("accounts/match-m1", "accounts/player-c", 3, STATE.STATE_POSTED),
        ("accounts/match-m1", "accounts/player-d", 3, STATE.STATE_POSTED),
    ]
    assert [await ledger.balance(f"player-{p}") for p in "abcd"] == [1004, 990, 1003, 1003]
    assert await ledger.balance("house") == 0


async def test_when_everyone_abandoned_the_penalties_go_to_the_house(ledger: Ledger) -> None:
    await ledger.open("a", "b")
    await ledger.hold("h", "m1", {"a": 10, "b": 12})
    await ledger.call(
        "Void", wallet_pb2.VoidRequest(request_id="v", match_id="m1", penalised_players=["players/a", "players/b"])
    )
    assert (await ledger.balance("player-a"), await ledger.balance("player-b"), await ledger.balance("house")) == (
        990,
        988,
        22,
    )


async def test_void_refuses_unknown_pots_and_players_without_stakes(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c")
    await ledger.hold("h", "m1", {"a": 10, "b": 10})
    await refused(ledger, grpc.StatusCode.NOT_FOUND, "Void", wallet_pb2.VoidRequest(request_id="v1", match_id="zz"))
    message = await refused(
        ledger,
        grpc.StatusCode.FAILED_PRECONDITION,
        "Void",
        wallet_pb2.VoidRequest(request_id="v2", match_id="m1", penalised_players=["players/c"]),
    )
    assert message.startswith("penalised_players[0]: players/c has no live stake")
    both = wallet_pb2.VoidRequest(
        request_id="v3", match_id="m1", penalised_players=["players/a"], players=["players/b"]
    )
    await refused(ledger, grpc.StatusCode.INVALID_ARGUMENT, "Void", both)


# -- tournaments --------------------------------------------------------------------------------


async def test_a_tournament_buy_ins_unregistration_and_prizes_by_place(ledger: Ledger) -> None:
    names = [f"p{i}" for i in range(7)]
    await ledger.open(*names)
    for i, name in enumerate(names):  # registrations over time, one call each
        await ledger.call(
            "HoldBets",
            wallet_pb2.HoldBetsRequest(
                request_id=f"buy-{i}",
                tournament="tournaments/spring",
                stakes=stakes(**{name: 100}),
                hold_ttl=Duration(seconds=7 * 86400),
            ),
            SERVICE,
        )
    # p6 unregisters: only their buy-in comes back, the pool stays open.
    back = await ledger.call(
        "Void", wallet_pb2.VoidRequest(request_id="unreg-6", tournament="tournaments/spring", players=["players/p6"])
    )
    assert [(t.debit_account, t.state) for t in back.transfers] == [("accounts/player-p6", STATE.STATE_VOIDED)]
    assert (await ledger.account("tournament-spring")).pot_state == wallet_pb2.Account.POT_STATE_OPEN
    prizes = [
        wallet_pb2.Prize(player="players/p0", place=1, share_bp=5000),
        wallet_pb2.Prize(player="players/p1", place=2, share_bp=3000),
        wallet_pb2.Prize(player="players/p2", place=3, share_bp=2000),
    ]
    reply = await ledger.call(
        "Settle", wallet_pb2.SettleRequest(request_id="final", tournament="tournaments/spring", prizes=prizes)
    )
    # Pool 600, cut 120, net 480: 240, 144, 96.
    assert (reply.pot_chips, reply.house_cut_chips) == (600, 120)
    assert [await ledger.balance(f"player-p{i}") for i in range(7)] == [1140, 1044, 996, 900, 900, 900, 1000]
    assert all(t.tournament == "tournaments/spring" for t in reply.transfers)


async def test_tournament_prizes_that_do_not_divide_evenly(ledger: Ledger) -> None:
    await ledger.open("x", "y", "z")
    await ledger.call(
        "HoldBets",
        wallet_pb2.HoldBetsRequest(request_id="b", tournament="tournaments/t", stakes=stakes(x=43, y=43, z=43)),
    )
    prizes = [
        wallet_pb2.Prize(player="players/z", place=2, share_bp=3333),
        wallet_pb2.Prize(player="players/x", place=1, share_bp=3334),
        wallet_pb2.Prize(player="players/y", place=3, share_bp=3333),
    ]
    reply = await ledger.call(
        "Settle", wallet_pb2.SettleRequest(request_id="s", tournament="tournaments/t", prizes=prizes)
    )
    # Pool 129, cut 25 (25.8 down), net 104: 34/34/34 rounded down, 2 chips left to places 1 and 2.
    assert reply.house_cut_chips == 25
    assert [await ledger.balance(f"player-{p}") for p in "xyz"] == [957 + 35, 957 + 34, 957 + 35]


async def test_a_cancelled_tournament_refunds_every_buy_in(ledger: Ledger) -> None:
    await ledger.open("x", "y")
    await ledger.call(
        "HoldBets", wallet_pb2.HoldBetsRequest(request_id="b", tournament="tournaments/t", stakes=stakes(x=5, y=5))
    )
    reply = await ledger.call(
        "Void", wallet_pb2.VoidRequest(request_id="c", tournament="tournaments/t", reason="too few entrants")
    )
    assert len(reply.transfers) == 2 and await ledger.balance("player-x") == 1000
    bad_prizes = wallet_pb2.SettleRequest(
        request_id="s",
        tournament="tournaments/t",
        prizes=[wallet_pb2.Prize(player="players/x", place=1, share_bp=9000)],
    )
    assert "10000" in await refused(ledger, grpc.StatusCode.INVALID_ARGUMENT, "Settle", bad_prizes)


# -- expiry -------------------------------------------------------------------------------------


async def test_holds_expire_after_their_time_and_a_late_settle_is_refused(ledger: Ledger) -> None:
    await ledger.open("a", "b", "c")
    await ledger.hold("h1", "m1", {"a": 10, "b": 10}, hold_ttl=Duration(seconds=60))
    await ledger.hold("h2", "m2", {"c": 10})
    early = await ledger.call("ExpireHolds", wallet_pb2.ExpireHoldsRequest(request_id="e0"))
    assert list(early.expired) == []
    ledger.clock.advance(seconds=61)
    reply = await ledger.call("ExpireHolds", wallet_pb2.ExpireHoldsRequest(request_id="e1"))
    assert [(t.debit_account, t.state, t.reason) for t in reply.expired] == [
        (f"accounts/player-{p}", STATE.STATE_EXPIRED, wallet_pb2.REASON_CODE_REFUND) for p in "ab"
    ]
    assert not reply.more
    assert (await ledger.account("player-a")).held_chips == 0
    assert (await ledger.account("player-c")).held_chips == 10
    message = await refused(
        ledger,
        grpc.StatusCode.FAILED_PRECONDITION,
        "Settle",
        wallet_pb2.SettleRequest(
            request_id="s",
            match_id="m1",
            first_seat=0,
            outcomes=[
                common_pb2.PlayerOutcome(player="players/a", seat=0, outcome=common_pb2.OUTCOME_WON),
                common_pb2.PlayerOutcome(player="players/b", seat=1, outcome=common_pb2.OUTCOME_LOST),
            ],
        ),
        GAME,
    )
    assert "no live stakes" in message
    ledger.clock.advance(hours=6)
    only = await ledger.call("ExpireHolds", wallet_pb2.ExpireHoldsRequest(request_id="e2", match_id="m2"))
    assert [t.debit_account for t in only.expired] == ["accounts/player-c"]
    await refused(
        ledger, grpc.StatusCode.NOT_FOUND, "ExpireHolds", wallet_pb2.ExpireHoldsRequest(request_id="e3", match_id="m9")
    )
    await refused(
        ledger,
        grpc.StatusCode.INVALID_ARGUMENT,
        "ExpireHolds",
        wallet_pb2.ExpireHoldsRequest(request_id="e4", match_id="m2", tournament="tournaments/t"),
    )


# -- statements ---------------------------------------------------------------------------------


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


# -- idempotency --------------------------------------------------------------------------------


async def test_a_retry_gets_the_original_answer_and_other_content_is_refused(ledger: Ledger) -> None:
    await ledger.open("a", "b")
    first = await ledger.hold("h", "m1", {"a": 10, "b": 10})
    ledger.clock.advance(minutes=5)
    assert await ledger.hold("h", "m1", {"a": 10, "b": 10}) == first
    assert (await ledger.account("player-a")).held_chips == 10
    other = wallet_pb2.HoldBetsRequest(request_id="h", match_id="m1", stakes=stakes(a=11, b=10))
    await refused(ledger, grpc.StatusCode.ALREADY_EXISTS, "HoldBets", other)
    settled = await ledger.settle("s", "m1", [("a", 0, "won"), ("b", 1, "lost")])
    assert await ledger.settle("s", "m1", [("a", 0, "won"), ("b", 1, "lost")]) == settled
    assert await ledger.balance("player-a") == 1006
    # The key is (caller, request id): another service's "h" is its own call.
    mine = await ledger.call(
        "HoldBets", wallet_pb2.HoldBetsRequest(request_id="h", match_id="m2", stakes=stakes(a=1)), GAME
    )
    assert mine.holds[0].match_id == "m2"


async def test_answers_are_kept_for_the_retention_then_forgotten(ledger_factory: Callable[..., Ledger]) -> None:
    ledger = ledger_factory(settings=WalletSettings(idempotency_retention=timedelta(days=2)))
    await ledger.open("a")
    grant = wallet_pb2.GrantRequest(
        request_id="g", player="players/a", amount_chips=5, kind=wallet_pb2.GrantRequest.KIND_PROMOTION
    )
    first = await ledger.call("Grant", grant)
    ledger.clock.advance(days=1)
    assert await ledger.call("Grant", grant) == first
    assert await ledger.balance("player-a") == 1005
    ledger.clock.advance(days=1, seconds=1)
    purged = await ledger.api.tx.purge_answers()
    assert purged == 2  # the account's opening and the grant
    second = await ledger.call("Grant", grant)
    assert second.name != first.name and await ledger.balance("player-a") == 1010
