"""EraseLoadTestRun on SQLite and PostgreSQL: a run's players, the pots only they staked in, every
transfer of those and the players' grant claims go, as if the run had never been; the house and
the treasury lose exactly what the run had moved into them, so the audit still passes; the
erasure is recorded (wallet_erasures) and logged; players of other runs sharing the prefix and
ordinary players are untouched; refusals (a live hold, an open pot, a pot shared with someone
outside the run, a house that would go below zero) change nothing; dry runs count and write
nothing; admins only; idempotent by request id."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from sqlalchemy import func, select

from buraco.v1 import common_pb2, wallet_pb2
from services.wallet import models
from tests.services.wallet.conftest import ADMIN, GAME, SERVICE, Ledger, player, refused

pytestmark = pytest.mark.usefixtures("audited")

KINDS = ["accounts", "escrows", "transfers", "grant_claims"]
RUN = ["lt1-0", "lt1-1", "lt1-2", "lt1-3"]
#: Players outside run lt1: two of other runs whose ids share its prefix, two ordinary ones.
OTHERS = ["lt1-5-3", "lt10-1", "alice", "bob"]


def request(run: str, request_id: str = "erase-1", dry_run: bool = False) -> common_pb2.EraseLoadTestRunRequest:
    return common_pb2.EraseLoadTestRunRequest(request_id=request_id, run_id=run, dry_run=dry_run)


async def erase(ledger: Ledger, run: str, request_id: str = "erase-1", dry_run: bool = False) -> dict[str, int]:
    answer: common_pb2.EraseLoadTestRunResponse = await ledger.call(
        "EraseLoadTestRun", request(run, request_id, dry_run), ADMIN
    )
    assert (answer.run_id, answer.dry_run) == (run, dry_run)
    assert [e.kind for e in answer.erased] == KINDS
    return {e.kind: e.count for e in answer.erased}


async def void(ledger: Ledger, request_id: str, match: str, penalised: tuple[str, ...] = ()) -> None:
    await ledger.call(
        "Void",
        wallet_pb2.VoidRequest(
            request_id=request_id, match_id=match, penalised_players=[f"players/{p}" for p in penalised]
        ),
    )


async def run_lt1(ledger: Ledger) -> None:
    """Run lt1's activity, beside the other players'. What it writes: 4 accounts with their 4
    starting grants (and claims); match m1 (4 holds, 4 postings, 2 payouts, the house's cut of 8);
    match m2 voided (2 holds, 2 releases); match m3 voided with a penalty (2 holds, a posting, a
    release, the penalty's share); a promotion of 25 and a correction of -50: 3 escrows, 26
    transfers. The house gets 8 from it; the treasury minted 4,025 for it and took 50 back."""
    await ledger.open(*RUN, *OTHERS)
    await ledger.hold("h-m1", "m1", {p: 10 for p in RUN})
    await ledger.settle("s-m1", "m1", [(p, seat, "won" if seat % 2 == 0 else "lost") for seat, p in enumerate(RUN)])
    await ledger.hold("h-m2", "m2", {"lt1-0": 5, "lt1-1": 5})
    await void(ledger, "v-m2", "m2")
    await ledger.hold("h-m3", "m3", {"lt1-2": 20, "lt1-3": 20})
    await void(ledger, "v-m3", "m3", penalised=("lt1-2",))
    await ledger.call(
        "Grant",
        wallet_pb2.GrantRequest(
            request_id="promo", player="players/lt1-1", amount_chips=25, kind=wallet_pb2.GrantRequest.KIND_PROMOTION
        ),
    )
    await ledger.call(
        "AdminCorrection",
        wallet_pb2.AdminCorrectionRequest(
            request_id="fix", account="accounts/player-lt1-0", amount_chips=-50, note="bonus paid twice"
        ),
        ADMIN,
    )
    # The others play among themselves: alice and bob (house cut 20 of 100), the other runs.
    await ledger.hold("h-m5", "m5", {"alice": 50, "bob": 50})
    await ledger.settle("s-m5", "m5", [("alice", 0, "won"), ("bob", 1, "lost")])
    await ledger.hold("h-m6", "m6", {"lt1-5-3": 30, "lt10-1": 30})
    await ledger.settle("s-m6", "m6", [("lt1-5-3", 0, "lost"), ("lt10-1", 1, "won")])


async def accounts_of(ledger: Ledger, names: list[str]) -> dict[str, wallet_pb2.Account]:
    return {name: await ledger.account(name) for name in names}


async def rows(ledger: Ledger, table: Any) -> list[Any]:
    async with ledger.db.engine.connect() as conn:
        return list((await conn.execute(select(table))).all())


async def test_a_run_is_erased_as_if_it_never_happened(ledger: Ledger, caplog: pytest.LogCaptureFixture) -> None:
    await run_lt1(ledger)
    others = [f"player-{p}" for p in OTHERS] + ["match-m5", "match-m6"]
    before = await accounts_of(ledger, others)
    house, treasury = await ledger.balance("house"), await ledger.balance("treasury")
    assert (house, treasury) == (8 + 20 + 12, -8025 + 50)
    statement = wallet_pb2.ListTransfersRequest(parent="accounts/player-alice")
    alice_statement = await ledger.call("ListTransfers", statement)

    with caplog.at_level(logging.INFO, logger="buraco.wallet"):
        counts = await erase(ledger, "lt1")
    assert counts == {"accounts": 4, "escrows": 3, "transfers": 26, "grant_claims": 4}

    # The run is gone: its accounts, its pots, their transfers and claims.
    for name in [f"player-{p}" for p in RUN] + ["match-m1", "match-m2", "match-m3"]:
        missing = wallet_pb2.GetAccountRequest(name=f"accounts/{name}")
        await refused(ledger, grpc.StatusCode.NOT_FOUND, "GetAccount", missing)
    async with ledger.db.engine.connect() as conn:
        transfers = models.transfers
        mentioning = select(func.count()).where(
            transfers.c.debit_account.like("%lt1-_") | transfers.c.credit_account.like("%lt1-_")
        )
        assert (await conn.execute(mentioning)).scalar_one() == 0
        claimed = select(models.grant_claims.c.player).order_by(models.grant_claims.c.player)
        assert [row.player for row in (await conn.execute(claimed)).all()] == sorted(OTHERS)
    # Everyone else is as they were, and the house and the treasury lost exactly the run's share.
    assert await accounts_of(ledger, others) == before
    assert await ledger.call("ListTransfers", statement) == alice_statement
    assert await ledger.balance("house") == house - 8
    assert await ledger.balance("treasury") == treasury + 4025 - 50
    report = await ledger.audit()
    assert report.ok, report.problems
    assert report.minted == 4000  # the four other players' starting grants

    (record,) = await rows(ledger, models.erasures)
    assert (record.run_id, record.requested_by, record.request_id) == ("lt1", "admins/root", "erase-1")
    assert (record.accounts, record.escrows, record.transfers, record.grant_claims) == (4, 3, 26, 4)
    assert (record.house_chips, record.treasury_chips) == (8, -4025 + 50)
    (logged,) = [r for r in caplog.records if r.getMessage() == "load-test run erased"]
    assert logged.__dict__["fields"] == {
        "run_id": "lt1",
        "requested_by": "admins/root",
        "request_id": "erase-1",
        "accounts": 4,
        "escrows": 3,
        "transfers": 26,
        "grant_claims": 4,
        "house_chips": 8,
        "treasury_chips": -3975,
    }

    # The wallet goes on: the others play, and a run player may be opened afresh (its starting
    # grant too: its claim was erased with it). The run's stored answers stay (retention): a
    # retry of its old CreateAccount gets its old answer, a new request opens the account.
    await ledger.hold("h-m7", "m7", {"alice": 10, "lt1-5-3": 10})
    await ledger.settle("s-m7", "m7", [("alice", 0, "lost"), ("lt1-5-3", 1, "won")])
    await ledger.call("CreateAccount", wallet_pb2.CreateAccountRequest(request_id="again", player="players/lt1-0"))
    assert await ledger.balance("player-lt1-0") == 1000


async def test_retries_second_erasures_and_request_ids(ledger: Ledger, caplog: pytest.LogCaptureFixture) -> None:
    await run_lt1(ledger)
    first = await erase(ledger, "lt1")
    after = await ledger.snapshot()
    with caplog.at_level(logging.INFO, logger="buraco.wallet"):
        assert await erase(ledger, "lt1") == first  # a retry: the stored answer, nothing more done
    assert await ledger.snapshot() == after
    assert not [r for r in caplog.records if r.getMessage() == "load-test run erased"]  # nothing erased again
    await refused(ledger, grpc.StatusCode.ALREADY_EXISTS, "EraseLoadTestRun", request("lt2"), ADMIN)
    assert await erase(ledger, "lt1", "erase-2") == dict.fromkeys(KINDS, 0)
    assert len(await rows(ledger, models.erasures)) == 2  # every erasure asked for is recorded


async def test_a_dry_run_counts_the_same_and_erases_nothing(ledger: Ledger) -> None:
    await run_lt1(ledger)
    before = await ledger.snapshot()
    assert await erase(ledger, "lt1", "dry", dry_run=True) == {
        "accounts": 4,
        "escrows": 3,
        "transfers": 26,
        "grant_claims": 4,
    }
    assert await ledger.snapshot() == before  # no idempotency record either
    assert await erase(ledger, "lt1", "dry", dry_run=True) == await erase(ledger, "lt1", "real")


async def test_runs_sharing_the_prefix_are_separate(ledger: Ledger) -> None:
    await ledger.open("lt1-0", "lt1-5-3", "lt10-1", "lt1-x", "alice")
    untouched = await accounts_of(ledger, ["player-lt10-1", "player-lt1-x", "player-alice"])
    assert await erase(ledger, "lt1") == {"accounts": 1, "escrows": 0, "transfers": 1, "grant_claims": 1}
    assert await ledger.balance("player-lt1-5-3") == 1000
    assert await erase(ledger, "lt1-5", "erase-2") == {"accounts": 1, "escrows": 0, "transfers": 1, "grant_claims": 1}
    for gone in ("player-lt1-0", "player-lt1-5-3"):
        name = f"accounts/{gone}"
        await refused(ledger, grpc.StatusCode.NOT_FOUND, "GetAccount", wallet_pb2.GetAccountRequest(name=name))
    assert await accounts_of(ledger, ["player-lt10-1", "player-lt1-x", "player-alice"]) == untouched


async def test_a_pot_shared_with_another_run_is_refused(ledger: Ledger) -> None:
    await run_lt1(ledger)  # lt10-1 won match m6 against lt1-5-3, of run lt1-5
    message = await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "EraseLoadTestRun", request("lt10"), ADMIN)
    assert "(accounts/player-lt1-5-3)" in message, message


async def test_a_pot_shared_with_a_player_outside_the_run_is_refused(ledger: Ledger) -> None:
    await ledger.open("lt1-0", "lt1-1", "alice")
    await ledger.hold("h", "m1", {"lt1-0": 10, "alice": 10})
    await ledger.settle("s", "m1", [("lt1-0", 0, "won"), ("alice", 1, "lost")])
    message = await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "EraseLoadTestRun", request("lt1"), ADMIN)
    assert "1 account(s) outside the run" in message and "accounts/player-alice" in message, message
    await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "EraseLoadTestRun", request("lt1", "d", True), ADMIN)


async def test_live_holds_and_open_pots_are_refused(ledger: Ledger) -> None:
    await ledger.open("lt1-0", "lt1-1")
    await ledger.hold("h1", "m1", {"lt1-0": 10, "lt1-1": 10}, hold_ttl=Duration(seconds=60))
    message = await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "EraseLoadTestRun", request("lt1"), ADMIN)
    assert "2 live hold(s)" in message and "1 pot(s) still open (accounts/match-m1" in message, message
    # Expired, the holds are no longer live, but nobody closed the pot: still refused.
    ledger.clock.advance(seconds=61)
    await ledger.call("ExpireHolds", wallet_pb2.ExpireHoldsRequest(request_id="x", match_id="m1"))
    message = await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "EraseLoadTestRun", request("lt1"), ADMIN)
    assert "live hold" not in message and "1 pot(s) still open" in message, message
    await void(ledger, "v", "m1")
    assert await erase(ledger, "lt1") == {"accounts": 2, "escrows": 1, "transfers": 6, "grant_claims": 2}


async def test_an_erasure_that_would_leave_the_house_below_zero_is_refused(ledger: Ledger) -> None:
    await ledger.open("lt1-0", "lt1-1")
    await ledger.hold("h", "m1", {"lt1-0": 50, "lt1-1": 50})
    await ledger.settle("s", "m1", [("lt1-0", 0, "won"), ("lt1-1", 1, "lost")])
    # The house's 20 chips of cut were taken back to the treasury meanwhile.
    await ledger.call(
        "AdminCorrection",
        wallet_pb2.AdminCorrectionRequest(request_id="c", account="accounts/house", amount_chips=-15, note="sweep"),
        ADMIN,
    )
    message = await refused(ledger, grpc.StatusCode.FAILED_PRECONDITION, "EraseLoadTestRun", request("lt1"), ADMIN)
    assert "the house has 5 chips, fewer than the 20" in message, message


async def test_new_transfers_never_reuse_an_erased_id(ledger: Ledger) -> None:
    await ledger.open("alice", "lt1-0")
    await ledger.hold("h", "m1", {"lt1-0": 5})
    await void(ledger, "v", "m1")
    newest = max(row.id for row in await rows(ledger, models.transfers))
    await erase(ledger, "lt1")
    await ledger.open("bob")
    assert max(row.id for row in await rows(ledger, models.transfers)) > newest


async def test_only_admins_erase_and_the_request_is_checked(ledger: Ledger) -> None:
    await ledger.open("lt1-0")
    for identity in (SERVICE, GAME, player("lt1-0")):
        await refused(ledger, grpc.StatusCode.PERMISSION_DENIED, "EraseLoadTestRun", request("lt1"), identity)
    for bad in ("", "l1", "LT1", "lt_1", "lt%", "-lt1", "a" * 41):
        message = await refused(ledger, grpc.StatusCode.INVALID_ARGUMENT, "EraseLoadTestRun", request(bad), ADMIN)
        assert "run_id" in message
    no_id = common_pb2.EraseLoadTestRunRequest(run_id="lt1")
    assert "request_id" in await refused(ledger, grpc.StatusCode.INVALID_ARGUMENT, "EraseLoadTestRun", no_id, ADMIN)
    assert await ledger.balance("player-lt1-0") == 1000

