"""Registration: the window, buy-ins held and released, retries, pairs, and what happens when
the wallet or ranking fail or lose their answers; reported results checked and idempotent."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import grpc
import pytest

from buraco.v1 import common_pb2, tournament_pb2
from tests.services.tournament.fakes import Plan
from tests.services.tournament.support import Platform, TournamentService, finished, players
from tests.services.tournament.test_tournaments import check_payouts, tables_made, wait_delivered

T = tournament_pb2.Tournament


async def code_of(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def unregister(service: TournamentService, tournament: str, player: str, request_id: str) -> object:
    return await service.stub.Unregister(
        tournament_pb2.UnregisterRequest(tournament=f"tournaments/{tournament}", request_id=request_id),
        metadata=service.as_player(player),
    )


async def test_the_window_the_buy_in_and_retries(service: TournamentService, platform: Platform) -> None:
    await platform.fund(["ana", "bia", "caio", "duda"], 150)
    await platform.fund(["eva"], 50)  # cannot cover the buy-in
    now = service.clock.now
    await service.create("cup", opens=now + timedelta(minutes=10), max_entrants=3, min_entrants=2)
    assert await code_of(service.register("cup", "ana")) == grpc.StatusCode.FAILED_PRECONDITION  # not open yet
    service.advance(600)
    await service.settle()
    assert (
        await service.stub.GetTournament(
            tournament_pb2.GetTournamentRequest(name="tournaments/cup"), metadata=service.as_admin()
        )
    ).state == T.STATE_REGISTRATION

    first = await service.register("cup", "ana")
    assert first.complete and first.players == ["players/ana"] and (await platform.balance("ana")) == 50
    assert await service.register("cup", "ana") == first  # a retry: the first answer, one hold
    assert (await platform.held("ana")) == 100
    assert await code_of(service.register("cup", "ana", request_id="other")) == grpc.StatusCode.FAILED_PRECONDITION
    # The same request id for another request: ALREADY_EXISTS.
    assert (
        await code_of(
            service.stub.Register(
                tournament_pb2.RegisterRequest(tournament="tournaments/other", request_id="reg-ana"),
                metadata=service.as_player("ana"),
            )
        )
        == grpc.StatusCode.ALREADY_EXISTS
    )

    refused = await code_of(service.register("cup", "eva"))
    assert refused == grpc.StatusCode.FAILED_PRECONDITION and (await platform.balance("eva")) == 50
    assert [e.players for e in await service.entrants("cup")] == [["players/ana"]]  # the failed one is not listed

    # A service acting for a player registers that player.
    via_service = await service.stub.Register(
        tournament_pb2.RegisterRequest(tournament="tournaments/cup", request_id="for-bia"),
        metadata=service.as_service("matchmaking", "bia"),
    )
    assert via_service.players == ["players/bia"]
    await service.register("cup", "caio")
    assert await code_of(service.register("cup", "duda")) == grpc.StatusCode.FAILED_PRECONDITION  # full

    # Unregistering releases the buy-in (once, even when retried) and frees the place.
    left = await unregister(service, "cup", "caio", "bye-caio")
    assert left.withdrawn and (await platform.balance("caio")) == 150  # type: ignore[attr-defined]
    assert await unregister(service, "cup", "caio", "bye-caio") == left
    assert (await platform.balance("caio")) == 150 and (await platform.held("caio")) == 0
    assert await code_of(unregister(service, "cup", "caio", "bye-again")) == grpc.StatusCode.FAILED_PRECONDITION
    await service.register("cup", "duda")
    cup = await service.stub.GetTournament(
        tournament_pb2.GetTournamentRequest(name="tournaments/cup"), metadata=service.as_player("eva")
    )
    assert (cup.entrant_count, cup.pool_chips) == (3, 300)  # the buy-ins held so far
    listed = await service.entrants("cup")
    assert [(e.players[0], e.withdrawn) for e in listed] == [
        ("players/ana", False),
        ("players/bia", False),
        ("players/caio", True),
        ("players/duda", False),
    ]
    # After the close, neither registering nor unregistering.
    service.advance(3600)
    await service.settle()
    assert await code_of(unregister(service, "cup", "ana", "late")) == grpc.StatusCode.FAILED_PRECONDITION
    assert await code_of(service.register("cup", "caio", request_id="late")) == grpc.StatusCode.FAILED_PRECONDITION
    await platform.audit()


async def test_pairs_register_together_and_an_incomplete_pair_is_refunded(
    service: TournamentService, platform: Platform
) -> None:
    everyone = players("pr", 10)
    await platform.fund(everyone, 400)
    structure = {1: 7000, 2: 3000}
    await service.create("pairs", players=4, buy_in_chips=50, min_entrants=2, prizes=structure)
    pairs = [(everyone[i], everyone[i + 1]) for i in range(0, 8, 2)]
    for a, b in pairs:
        half = await service.register("pairs", a, partner=b)
        assert not half.complete and half.players == [f"players/{a}", f"players/{b}"]
        assert (await platform.balance(a)) == 350 and (await platform.balance(b)) == 400
    # Someone naming a player already in a pair, or themselves, is refused.
    assert await code_of(service.register("pairs", "pr009", partner="pr001")) == grpc.StatusCode.FAILED_PRECONDITION
    assert await code_of(service.register("pairs", "pr009", partner="pr009")) == grpc.StatusCode.INVALID_ARGUMENT
    assert await code_of(service.register("pairs", "pr009")) == grpc.StatusCode.INVALID_ARGUMENT  # no partner
    for a, b in pairs:
        whole = await service.register("pairs", b, partner=a)
        assert whole.complete and (await platform.balance(b)) == 350
    await service.register("pairs", "pr009", partner="pr010")  # pr010 never registers
    await service.start("pairs")
    done = await service.until("pairs", finished)
    assert done.tournament.state == T.STATE_FINISHED and done.tournament.entrant_count == 4
    assert (await platform.balance("pr009")) == 400 and (
        await platform.balance("pr010")
    ) == 400  # released at the start
    dropped = [e for e in await service.entrants("pairs") if e.players[0] == "players/pr009"]
    assert dropped[0].withdrawn and not dropped[0].complete
    tables = list(platform.tables.tables.values())
    assert all(len(t.players) == 4 for t in tables)
    for t in tables:  # partners sit opposite each other (seats 0 and 2, 1 and 3)
        assert {frozenset((t.players[0], t.players[2])), frozenset((t.players[1], t.players[3]))} <= {
            frozenset(p) for p in pairs
        }
    await check_payouts(service, platform, "pairs", everyone[:8], 400, 50, structure, per_entry=2)


@pytest.mark.fake_wallet
async def test_lost_wallet_answers_are_recovered_without_double_holds(
    service: TournamentService, platform: Platform
) -> None:
    everyone = players("wf", 4)
    await platform.fund(everyone, 200)
    await service.create("wf", min_entrants=2)
    # The hold is made but its answer is lost: the call says UNAVAILABLE; a retry finishes it.
    platform.wallet.faults.lose_answer["HoldBets"] = 1
    assert await code_of(service.register("wf", "wf001")) == grpc.StatusCode.UNAVAILABLE
    assert (await platform.held("wf001")) == 100
    again = await service.register("wf", "wf001")
    assert again.complete and (await platform.held("wf001")) == 100
    # The wallet is unreachable and the player never retries: the scheduler finishes the hold.
    platform.wallet.faults.fail["HoldBets"] = 1
    assert await code_of(service.register("wf", "wf002")) == grpc.StatusCode.UNAVAILABLE
    assert (await platform.held("wf002")) == 0
    service.advance(16)  # three call timeouts later the row is stale
    await service.settle()
    listed = {e.players[0]: e for e in await service.entrants("wf")}
    assert listed["players/wf002"].complete and (await platform.held("wf002")) == 100
    # A release whose answer is lost: retried with the same request id, released once.
    platform.wallet.faults.lose_answer["Void"] = 1
    assert await code_of(unregister(service, "wf", "wf002", "out")) == grpc.StatusCode.UNAVAILABLE
    assert (await unregister(service, "wf", "wf002", "out")).withdrawn  # type: ignore[attr-defined]
    assert (await platform.balance("wf002")) == 200
    await service.register("wf", "wf003")
    await service.register("wf", "wf004")
    # Ranking is down at the start: after the seeding wait, seeds follow the registration order.
    platform.ranking.faults.fail["BatchGetRatings"] = 10_000
    for player, rating in zip(["wf001", "wf003", "wf004"], [1.0, 5.0, 9.0], strict=True):
        platform.ranking.ratings[player] = rating
    # The prizes are paid, but the first answer is lost: paid once all the same.
    platform.wallet.faults.lose_answer["Settle"] = 1
    await service.start("wf")
    await service.settle()
    assert (
        await service.stub.GetTournament(
            tournament_pb2.GetTournamentRequest(name="tournaments/wf"), metadata=service.as_admin()
        )
    ).current_round == 0  # waiting for ratings
    service.advance(31)
    await service.until("wf", lambda w: w.tournament.state == T.STATE_FINISHED)
    await service.settle()  # the payout's answer was lost: retried after a (clock) moment
    service.advance(1)
    done = await service.until("wf", finished)
    assert done.tournament.state == T.STATE_FINISHED
    seeds = {e.players[0]: e.seed for e in await service.entrants("wf") if e.complete}
    assert seeds == {"players/wf001": 1, "players/wf003": 2, "players/wf004": 3}
    assert platform.wallet.faults.calls["Settle"] >= 2
    await check_payouts(service, platform, "wf", ["wf001", "wf003", "wf004"], 200, 100, {1: 6000, 2: 4000})
    assert (await platform.balance("wf002")) == 200


async def test_reported_results_are_checked_and_idempotent(service: TournamentService, platform: Platform) -> None:
    await platform.fund(["ra", "rb"], 100)
    platform.plan_tables(lambda match, seated: Plan(wait=True))
    await service.create("rep")
    await service.register_all("rep", ["ra", "rb"])
    await service.start("rep")
    seen = await service.until("rep", tables_made(1))
    (pairing,) = seen.pairings(1)
    seats = platform.tables.tables[pairing.match_id].players

    def report(outcomes: list[tuple[str, int]], scores: list[int], request_id: str = "") -> object:
        return service.stub.ReportMatchResult(
            tournament_pb2.ReportMatchResultRequest(
                request_id=request_id or pairing.match_id,
                tournament="tournaments/rep",
                match_id=pairing.match_id,
                outcomes=[
                    common_pb2.PlayerOutcome(player=f"players/{p}", seat=i, outcome=o)  # type: ignore[arg-type]
                    for i, (p, o) in enumerate(outcomes)
                ],
                match_scores=scores,
            ),
            metadata=service.as_service("game-session"),
        )

    won, lost = common_pb2.OUTCOME_WON, common_pb2.OUTCOME_LOST
    assert await code_of(report([("ra", won), ("zz", lost)], [10, 5], "x1")) == grpc.StatusCode.FAILED_PRECONDITION
    assert await code_of(report([(seats[0], won), (seats[1], won)], [10, 5], "x2")) == (
        grpc.StatusCode.FAILED_PRECONDITION
    )
    assert await code_of(report([(seats[0], won), (seats[1], lost)], [10], "x3")) == grpc.StatusCode.INVALID_ARGUMENT
    wrong_match = service.stub.ReportMatchResult(
        tournament_pb2.ReportMatchResultRequest(
            request_id="x4",
            tournament="tournaments/rep",
            match_id="rep-r9-m9",
            match_scores=[1, 2],
            outcomes=[
                common_pb2.PlayerOutcome(player=f"players/{p}", seat=i, outcome=won if i else lost)
                for i, p in enumerate(seats)
            ],
        ),
        metadata=service.as_service("game-session"),
    )
    assert await code_of(wrong_match) == grpc.StatusCode.NOT_FOUND
    # The real result: seat 1 won (an abandoning seat-0 player does not change it).
    assert await code_of(report([(seats[0], common_pb2.OUTCOME_ABANDONED), (seats[1], won)], [120, 640], "r1")) == (
        grpc.StatusCode.OK
    )
    assert await code_of(report([(seats[0], common_pb2.OUTCOME_ABANDONED), (seats[1], won)], [120, 640], "r1")) == (
        grpc.StatusCode.OK  # the outbox retrying
    )
    # Another report about the decided match (a new request id) is accepted and changes nothing.
    assert await code_of(report([(seats[0], won), (seats[1], lost)], [900, 0], "late")) == grpc.StatusCode.OK
    done = await service.until("rep", finished)
    (match,) = done.pairings(1)
    winner_player = platform.tables.tables[pairing.match_id].players[1]
    winner = next(e for e in await service.entrants("rep") if e.players[0] == f"players/{winner_player}")
    assert match.winner == winner.name and list(match.scores) == [120, 640]
    # The table's own report (request id = match id, as the outbox sends it) arrives late: OK, ignored.
    platform.tables.release(pairing.match_id)
    await wait_delivered(platform, pairing.match_id)
    assert pairing.match_id in platform.tables.delivered
    assert list((await service.bracket("rep")).rounds[0].pairings[0].scores) == [120, 640]
    await platform.audit()


@pytest.mark.parametrize("lost", ["CreateTable", "GetTable"])
async def test_table_calls_that_fail_are_retried(service: TournamentService, platform: Platform, lost: str) -> None:
    await platform.fund(["ta", "tb"], 100)
    platform.tables.faults.fail[lost] = 3
    if lost == "GetTable":
        platform.plan_tables(lambda match, seated: Plan(absent=frozenset({"tb"})))
    await service.create("tc", no_show_seconds=30)
    await service.register_all("tc", ["ta", "tb"])
    await service.start("tc")
    for _ in range(4):  # each failure is retried a (clock) moment later
        await service.settle()
        service.advance(1)
    await service.until("tc", tables_made(1))
    if lost == "GetTable":
        service.advance(30)
        for _ in range(4):
            await service.settle()
            service.advance(1)
    done = await service.until("tc", finished)
    (match,) = done.pairings(1)
    assert platform.tables.faults.calls[lost] >= 4
    if lost == "GetTable":
        assert match.forfeit and list(match.no_shows) == ["players/tb"]
    await platform.audit()


async def test_concurrent_registrations_never_overfill_nor_hold_twice(
    service: TournamentService, platform: Platform
) -> None:
    everyone = players("cc", 24)
    await platform.fund(everyone, 100)
    await service.create("crowd", max_entrants=10, min_entrants=2)

    async def attempt(player: str, request_id: str) -> grpc.StatusCode:
        return await code_of(service.register("crowd", player, request_id=request_id))

    # Everyone at once, and the first three also twice more with other request ids.
    calls = [attempt(p, f"a-{p}") for p in everyone] + [attempt(p, f"{k}-{p}") for p in everyone[:3] for k in "bc"]
    codes = await asyncio.gather(*calls)
    assert codes.count(grpc.StatusCode.OK) == 10
    assert set(codes) <= {grpc.StatusCode.OK, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED}
    listed = [e for e in await service.entrants("crowd") if not e.withdrawn]
    names = [e.players[0] for e in listed]
    assert len(listed) == 10 and len(set(names)) == 10 and all(e.complete for e in listed)
    holding = [p for p in everyone if (await platform.held(p))]
    assert sorted(f"players/{p}" for p in holding) == sorted(names)
    assert all([await platform.held(p) == 100 for p in holding])
    await platform.audit()
