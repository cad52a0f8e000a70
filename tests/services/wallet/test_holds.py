"""Holds on SQLite and PostgreSQL: HoldBets all or none, one live hold per player and at most
four per pot, malformed requests refused naming the field, and holds expiring after their time;
every refused call changes nothing; the audit passes after each test."""

from __future__ import annotations

from datetime import timedelta

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from buraco.v1 import common_pb2, wallet_pb2
from tests.services.wallet.conftest import GAME, Ledger, refused, stakes

pytestmark = pytest.mark.usefixtures("audited")

STATE = wallet_pb2.Transfer


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
