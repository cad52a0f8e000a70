"""The start saga, on both databases, with a fault injected at each step: confirmation, the hold,
the table, the notification, the compensation itself, and a crash in the middle. Whatever happens,
the wallet ends with no orphaned hold, and at most one table and one hold per match."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc

from buraco.v1 import common_pb2, game_session_pb2, matchmaking_pb2, wallet_pb2
from tests.conftest import DatabaseTarget
from tests.services.matchmaking.support import FAST, Platform_, Service, code_of, matchmaking_service

Ticket = matchmaking_pb2.Ticket
COMPETITIVE = common_pb2.TABLE_MODE_COMPETITIVE
BET = 50


async def proposed_pair(service: Service, players: tuple[str, str] = ("ana", "bia")) -> list[Ticket]:
    for player in players:
        await service.platform.fund(player, 500)
    tickets = [await service.ticket(p, mode=COMPETITIVE, bet=BET) for p in players]
    await service.settle()
    tickets = [await service.get(t) for t in tickets]
    assert {t.state for t in tickets} == {Ticket.STATE_PROPOSED}
    return tickets


async def states(service: Service, tickets: list[Ticket]) -> list[int]:
    return [(await service.get(t)).state for t in tickets]


async def test_a_player_who_does_not_confirm_fails_and_the_other_is_requeued(service: Service) -> None:
    ana, bia = await proposed_pair(service)
    await service.confirm(bia, "bia")
    await service.advance(FAST.confirm_seconds + 1)
    ana, bia = await service.get(ana), await service.get(bia)
    assert ana.state == Ticket.STATE_FAILED and ana.failure_reason == "not confirmed"
    assert bia.state == Ticket.STATE_SEARCHING and bia.position == 1
    assert not bia.HasField("assignment")
    assert await service.platform.held("bia") == 0 and not service.platform.tables.tables


async def test_a_player_who_declines_frees_the_others(service: Service) -> None:
    ana, bia = await proposed_pair(service)
    cancelled = await service.stub.CancelTicket(
        matchmaking_pb2.CancelTicketRequest(name=ana.name, request_id="no"), metadata=service.player("ana")
    )
    assert cancelled.state == Ticket.STATE_CANCELLED
    await service.settle()
    assert (await service.get(bia)).state == Ticket.STATE_SEARCHING
    code, message = await code_of(service.confirm(bia, "bia"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "searching" in message


async def test_a_player_who_cannot_cover_the_bet_at_the_hold_fails_alone(service: Service) -> None:
    ana, bia = await proposed_pair(service)
    # Between queueing and the hold, ana's chips go to another match.
    await service.platform.wallet.HoldBets(
        wallet_pb2.HoldBetsRequest(
            request_id="elsewhere", match_id="other", stakes=[wallet_pb2.Stake(player="players/ana", amount_chips=480)]
        ),
        metadata=service.service("matchmaking"),  # another match's hold, as matchmaking holds stakes
    )
    await service.confirm_all(ana, bia)
    ana, bia = await service.get(ana), await service.get(bia)
    assert ana.state == Ticket.STATE_FAILED and ana.failure_reason == "insufficient chips"
    assert bia.state == Ticket.STATE_SEARCHING
    assert await service.platform.held("bia") == 0 and await service.platform.held("ana") == 480
    assert not service.platform.tables.tables


async def test_transient_wallet_failures_are_retried_and_hold_once(service: Service) -> None:
    service.platform.faults.fail["hold_bets"] = 2
    service.platform.faults.lose["hold_bets"] = 1  # then one hold made whose answer is lost
    tickets = await proposed_pair(service)
    await service.confirm_all(*tickets)
    await service.retries()
    assert await states(service, tickets) == [Ticket.STATE_MATCHED] * 2
    assert service.platform.faults.calls["hold_bets"] == 4
    assert await service.platform.held("ana") == await service.platform.held("bia") == BET


async def test_a_hold_whose_answer_never_comes_is_voided_at_the_deadline(service: Service) -> None:
    service.platform.faults.lose["hold_bets"] = 10**6
    tickets = await proposed_pair(service)
    await service.confirm_all(*tickets)
    assert await service.platform.held("ana") == BET  # held, but the saga does not know
    first_match = (await service.get(tickets[0])).assignment.match_id
    await service.advance(FAST.start_seconds + 1)
    assert await service.platform.held("ana") == await service.platform.held("bia") == 0
    # Both requeued at the front, and at once proposed a new match together.
    again = [await service.get(t) for t in tickets]
    assert {t.state for t in again} == {Ticket.STATE_PROPOSED}
    assert again[0].assignment.match_id != first_match
    assert not service.platform.tables.tables


async def test_a_refused_table_releases_the_holds(service: Service) -> None:
    service.platform.faults.refuse["create_table"] = (1, "INVALID_ARGUMENT")
    tickets = await proposed_pair(service)
    await service.confirm_all(*tickets)
    assert await service.platform.held("ana") == await service.platform.held("bia") == 0
    assert {t.state for t in [await service.get(t) for t in tickets]} == {Ticket.STATE_PROPOSED}  # again
    assert not service.platform.tables.tables


async def test_a_lost_table_answer_is_retried_into_one_table(service: Service) -> None:
    service.platform.faults.lose["create_table"] = 1
    tickets = await proposed_pair(service)
    await service.confirm_all(*tickets)
    await service.retries()
    assert await states(service, tickets) == [Ticket.STATE_MATCHED] * 2
    assert service.platform.tables.calls["CreateTable"] == 2 and len(service.platform.tables.tables) == 1


async def test_a_table_given_up_on_is_cancelled_at_its_owner(service: Service) -> None:
    service.platform.tables.new_owner = 1  # the table lands on the other replica
    service.platform.faults.lose["create_table"] = 10**6
    tickets = await proposed_pair(service)
    await service.confirm_all(*tickets)
    await service.advance(FAST.start_seconds + 1)
    (table,) = service.platform.tables.tables.values()
    assert table.state == game_session_pb2.Table.STATE_CANCELLED
    assert service.platform.tables.redirects >= 1  # asked replica 0, followed it to replica 1
    assert await service.platform.held("ana") == await service.platform.held("bia") == 0


async def test_a_start_writes_its_saga_once_after_the_hold_and_the_table(service: Service) -> None:
    # The hold and the table are asked for in one step, and the saga's row is written once, when
    # the match has started: a retry from `holding` asks both again with the same request ids.
    moves: list[tuple[str, object]] = []
    set_state = service.running.sagas._set

    async def recorded(saga: Any, expected: str, **values: Any) -> Any:
        moves.append((expected, values.get("state")))
        return await set_state(saga, expected, **values)

    service.running.sagas._set = recorded  # type: ignore[method-assign]
    tickets = await proposed_pair(service)
    await service.confirm_all(*tickets)
    await service.settle()
    assert await states(service, tickets) == [Ticket.STATE_MATCHED] * 2
    assert moves == []
    assert await service.platform.held("ana") == await service.platform.held("bia") == BET
    assert len(service.platform.tables.tables) == 1


async def test_a_failed_notification_is_retried_without_a_second_table(service: Service) -> None:
    failures = [1]

    def before(step: str, saga: str) -> None:
        if step == "notify" and failures[0] > 0:
            failures[0] -= 1
            raise RuntimeError("injected: the database went away")

    service.running.sagas.before_step = before
    tickets = await proposed_pair(service)
    await service.confirm_all(*tickets)
    await service.retries()
    assert await states(service, tickets) == [Ticket.STATE_MATCHED] * 2
    assert failures == [0] and len(service.platform.tables.tables) == 1


async def test_compensation_keeps_trying_until_the_holds_are_released(service: Service) -> None:
    service.platform.faults.refuse["create_table"] = (1, "INVALID_ARGUMENT")
    service.platform.faults.fail["void_pot"] = 3
    tickets = await proposed_pair(service)
    await service.confirm_all(*tickets)
    await service.retries()
    assert service.platform.faults.calls["void_pot"] >= 4
    assert await service.platform.held("ana") == await service.platform.held("bia") == 0


async def test_a_crash_in_the_middle_resumes_without_holding_twice(
    platform: Platform_, db_target: DatabaseTarget, tmp_path: Path
) -> None:
    async with matchmaking_service(platform, db_target, tmp_path) as first:
        clock = first.clock
        platform.faults.lose["hold_bets"] = 10**6
        tickets = await proposed_pair(first)
        await first.confirm_all(*tickets)
        assert await platform.held("ana") == BET
    platform.faults.lose.clear()  # the process died; the next one's calls get through
    async with matchmaking_service(platform, db_target, tmp_path, clock=clock) as second:
        await second.retries()
        assert await states(second, tickets) == [Ticket.STATE_MATCHED] * 2
        assert await platform.held("ana") == await platform.held("bia") == BET
        assert len(platform.tables.tables) == 1
    await platform.audit()


async def test_shutdown_is_bounded_while_a_step_hangs(
    platform: Platform_, db_target: DatabaseTarget, tmp_path: Path
) -> None:
    settings = replace(FAST, stop_timeout_seconds=0.5)
    async with matchmaking_service(platform, db_target, tmp_path, settings=settings) as first:
        clock = first.clock
        platform.faults.hang.add("hold_bets")
        tickets = await proposed_pair(first)
        for ticket in tickets:
            await first.confirm(ticket, ticket.players[0].removeprefix("players/"))
        async with asyncio.timeout(10):
            await platform.faults.hanging.wait()
        started = time.monotonic()
    assert time.monotonic() - started < 5  # the loop was cancelled after its bounded wait
    platform.faults.hang.clear()
    async with matchmaking_service(platform, db_target, tmp_path, clock=clock) as second:
        await second.retries()
        assert await states(second, tickets) == [Ticket.STATE_MATCHED] * 2
    await platform.audit()


async def test_two_replicas_never_propose_a_ticket_twice(
    platform: Platform_, db_target: DatabaseTarget, tmp_path: Path
) -> None:
    async with (
        matchmaking_service(platform, db_target, tmp_path) as one,
        matchmaking_service(platform, db_target, tmp_path, clock=one.clock) as two,
    ):
        players = [f"p{i:02d}" for i in range(12)]
        tickets = [await (one if i % 2 else two).ticket(p) for i, p in enumerate(players)]
        await one.settle()
        await two.settle()
        seen = [await one.get(t) for t in tickets]
        assert {t.state for t in seen} == {Ticket.STATE_PROPOSED}
        matches: dict[str, list[str]] = {}
        for ticket in seen:
            matches.setdefault(ticket.assignment.match_id, []).append(ticket.name)
        assert sorted(len(names) for names in matches.values()) == [2] * 6
        for ticket in seen:
            await (one if ticket.name < "m" else two).confirm(ticket, ticket.players[0].removeprefix("players/"))
        await one.settle()
        await two.settle()
        assert {(await one.get(t)).state for t in tickets} == {Ticket.STATE_MATCHED}
        assert len(platform.tables.tables) == 6


async def test_a_stream_sees_a_change_made_on_another_replica(
    platform: Platform_, db_target: DatabaseTarget, tmp_path: Path
) -> None:
    async with (
        matchmaking_service(platform, db_target, tmp_path) as one,
        matchmaking_service(platform, db_target, tmp_path, clock=one.clock) as two,
    ):
        ticket = await one.ticket("ana")
        stream = one.stub.WatchTicket(matchmaking_pb2.WatchTicketRequest(name=ticket.name), metadata=one.player("ana"))
        first: Ticket = await stream.read()  # type: ignore[assignment]
        assert first.state == Ticket.STATE_SEARCHING
        await two.stub.CancelTicket(
            matchmaking_pb2.CancelTicketRequest(name=ticket.name, request_id="c"), metadata=two.player("ana")
        )
        async with asyncio.timeout(10):  # woken by replica one's poll of the watched versions
            last: Ticket = await stream.read()  # type: ignore[assignment]
        assert last.state == Ticket.STATE_CANCELLED


def _metric(service: Service, name: str, **labels: str) -> float:
    value = service.server.metrics.registry.get_sample_value(name, {"service": "matchmaking", **labels})
    return 0.0 if value is None else value


async def test_the_metrics_follow_the_queue_and_the_starts(service: Service) -> None:
    """What ops watch (docs/metrics.md): the queue as the last pass saw it, and matches proposed,
    started and failed, on the registry the service serves."""
    passes = _metric(service, "buraco_matchmaking_passes_total")
    await service.platform.fund("cai", 500)
    lone = await service.ticket("cai", mode=COMPETITIVE, bet=BET, players=4)
    await service.advance(30)
    assert _metric(service, "buraco_matchmaking_tickets_searching") == 1
    assert _metric(service, "buraco_matchmaking_oldest_wait_seconds") >= 30
    assert _metric(service, "buraco_matchmaking_passes_total") >= passes + 2
    assert _metric(service, "buraco_matchmaking_pass_duration_seconds_count") >= 2

    ana, bia = await proposed_pair(service)
    assert _metric(service, "buraco_matchmaking_matches_total", result="proposed") == 1
    await service.confirm_all(ana, bia)
    assert {t.state for t in [await service.get(ana), await service.get(bia)]} == {Ticket.STATE_MATCHED}
    assert _metric(service, "buraco_matchmaking_matches_total", result="started") == 1
    assert _metric(service, "buraco_matchmaking_matches_total", result="failed") == 0

    dan, eva = await proposed_pair(service, ("dan", "eva"))
    await service.advance(FAST.confirm_seconds + 1)  # nobody confirms: the start is undone
    assert await states(service, [dan, eva]) == [Ticket.STATE_FAILED] * 2
    assert _metric(service, "buraco_matchmaking_matches_total", result="proposed") == 2
    assert _metric(service, "buraco_matchmaking_matches_total", result="failed") == 1
    assert _metric(service, "buraco_matchmaking_matches_total", result="started") == 1
    assert (await service.get(lone)).state == Ticket.STATE_SEARCHING
    assert _metric(service, "buraco_matchmaking_tickets_searching") == 1  # cai's (dan and eva failed)
