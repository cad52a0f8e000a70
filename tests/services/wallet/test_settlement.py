"""Settlement and annulment on SQLite and PostgreSQL: a match's pot paid out less the house cut
(the odd chip to who acts first), what does not match the pot refused, voids with and without
penalties, and tournaments: buy-ins, unregistration, prizes by place (uneven ones too) and
refunds; every refused call changes nothing; the audit passes after each test."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from buraco.v1 import common_pb2, wallet_pb2
from tests.services.wallet.conftest import GAME, SERVICE, Ledger, refused, stakes

pytestmark = pytest.mark.usefixtures("audited")

STATE = wallet_pb2.Transfer


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
