"""Retried calls on SQLite and PostgreSQL: a retry gets the original answer, other content under
the same request id is refused, and answers are kept for the retention, then forgotten; the
audit passes after each test."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import grpc
import pytest

from buraco.v1 import wallet_pb2
from services.wallet.settings import WalletSettings
from tests.services.wallet.conftest import TOURNAMENT, Ledger, refused, stakes

pytestmark = pytest.mark.usefixtures("audited")


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
        "HoldBets", wallet_pb2.HoldBetsRequest(request_id="h", tournament="tournaments/t2", stakes=stakes(a=1)),
        TOURNAMENT,
    )
    assert mine.holds[0].tournament == "tournaments/t2"


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
