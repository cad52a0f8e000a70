"""Quick-match tickets through the service, on both databases: the life of a ticket, eligibility,
rating windows, parties, idempotent retries, bad input, restarts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import event, select
from sqlalchemy import update as sql_update

from buraco.v1 import common_pb2, matchmaking_pb2
from services.matchmaking import models
from services.matchmaking import tickets as tickets_module
from tests.conftest import DatabaseTarget
from tests.services.matchmaking.support import Platform_, Service, code_of, matchmaking_service

Ticket = matchmaking_pb2.Ticket
COMPETITIVE = common_pb2.TABLE_MODE_COMPETITIVE


async def test_two_practice_tickets_are_matched_confirmed_and_seated(service: Service) -> None:
    first = await service.ticket("ana")
    assert first.state == Ticket.STATE_SEARCHING and first.position == 1
    assert first.rating_low == -2.0 and first.rating_high == 2.0  # unrated players: 0, the initial window
    assert list(first.players) == ["players/ana"]
    second = await service.ticket("bia")
    await service.settle()
    a, b = await service.get(first, "ana"), await service.get(second, "bia")
    assert a.state == b.state == Ticket.STATE_PROPOSED
    assert a.assignment.match_id == b.assignment.match_id != ""
    assert {a.assignment.seat, b.assignment.seat} == {0, 1}
    assert a.confirm_deadline.seconds > 0
    await service.confirm_all(a, b)
    a, b = await service.get(first, "ana"), await service.get(second, "bia")
    assert a.state == b.state == Ticket.STATE_MATCHED
    assert a.assignment.table == b.assignment.table == f"tables/mm-{a.assignment.match_id}"
    assert a.assignment.game_session_address == service.platform.tables.addresses[0]
    table = service.platform.tables.tables[f"mm-{a.assignment.match_id}"]
    assert table.options.mode == common_pb2.TABLE_MODE_PRACTICE and table.options.bet_chips == 0
    assert [p.player for p in table.seats][a.assignment.seat] == "players/ana"
    # Practice: the wallet is never asked (no accounts were even opened).
    assert "hold_bets" not in service.platform.faults.calls
    assert "account" not in service.platform.faults.calls


async def test_competitive_tickets_need_a_registered_player_who_covers_the_bet(service: Service) -> None:
    code, message = await code_of(service.ticket("nobody", mode=COMPETITIVE, bet=50))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "players/nobody is not registered" in message
    await service.platform.fund("poor", 40)
    code, message = await code_of(service.ticket("poor", mode=COMPETITIVE, bet=50))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "insufficient chips" in message
    await service.platform.fund("rich1", 500)
    await service.platform.fund("rich2", 500)
    one = await service.ticket("rich1", mode=COMPETITIVE, bet=50)
    two = await service.ticket("rich2", mode=COMPETITIVE, bet=50)
    await service.settle()
    await service.confirm_all(await service.get(one), await service.get(two))
    assert (await service.get(one)).state == Ticket.STATE_MATCHED
    assert await service.platform.held("rich1") == await service.platform.held("rich2") == 50
    table = next(iter(service.platform.tables.tables.values()))
    assert table.options.mode == COMPETITIVE and table.options.bet_chips == 50


async def test_the_rating_window_widens_with_waiting_time(service: Service) -> None:
    await service.platform.rate("low", 0.0)
    await service.platform.rate("high", 9.0)
    low = await service.ticket("low")
    high = await service.ticket("high")
    assert (high.rating_low, high.rating_high) == (7.0, 11.0)
    await service.settle()
    assert (await service.get(low)).state == Ticket.STATE_SEARCHING  # 9 apart, windows of 2
    await service.advance(30)  # half width 2 + 2*3 = 8: still short
    assert (await service.get(low)).state == Ticket.STATE_SEARCHING
    seen = await service.get(low)
    assert (seen.rating_low, seen.rating_high) == (-8.0, 8.0)
    await service.advance(10)  # 10 >= 9
    assert (await service.get(low)).state == Ticket.STATE_PROPOSED
    assert (await service.get(high)).state == Ticket.STATE_PROPOSED


async def test_a_party_is_seated_as_partners(service: Service) -> None:
    party = await service.stub.CreateParty(
        matchmaking_pb2.CreatePartyRequest(request_id="p1"), metadata=service.player("leo")
    )
    invite = matchmaking_pb2.InviteToPartyRequest(name=party.name, request_id="i1", player="players/mia")
    code, _ = await code_of(service.stub.InviteToParty(invite, metadata=service.player("zoe")))
    assert code == grpc.StatusCode.NOT_FOUND  # zoe cannot even see the party
    party = await service.stub.InviteToParty(invite, metadata=service.player("leo"))
    assert list(party.invited) == ["players/mia"]
    code, _ = await code_of(
        service.stub.JoinParty(
            matchmaking_pb2.JoinPartyRequest(name=party.name, request_id="j"), metadata=service.player("zoe")
        )
    )
    assert code == grpc.StatusCode.NOT_FOUND
    party = await service.stub.JoinParty(
        matchmaking_pb2.JoinPartyRequest(name=party.name, request_id="j1"), metadata=service.player("mia")
    )
    assert list(party.members) == ["players/leo", "players/mia"] and not party.invited
    # Only the leader queues the party, and only for 4-player tables.
    code, _ = await code_of(service.ticket("mia", players=4, party=party.name))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, message = await code_of(service.ticket("leo", players=2, party=party.name))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("ticket.party:")
    pair = await service.ticket("leo", players=4, party=party.name)
    assert list(pair.players) == ["players/leo", "players/mia"]
    # A member of a queued party cannot queue alone too.
    code, message = await code_of(service.ticket("mia", players=4))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "live ticket" in message
    singles = [await service.ticket(p, players=4) for p in ("ned", "oli")]
    await service.settle()
    pair = await service.get(pair, "mia")
    assert pair.state == Ticket.STATE_PROPOSED
    for ticket in [pair, *singles]:
        for player in ticket.players:
            await service.confirm(ticket, player.removeprefix("players/"))
    await service.settle()
    pair_as_leo, pair_as_mia = await service.get(pair, "leo"), await service.get(pair, "mia")
    assert pair_as_leo.state == Ticket.STATE_MATCHED
    # Partners: same side (seats 0 and 2, or 1 and 3).
    assert pair_as_leo.assignment.seat % 2 == pair_as_mia.assignment.seat % 2
    assert pair_as_leo.assignment.seat != pair_as_mia.assignment.seat
    singles = [await service.get(t) for t in singles]
    assert {singles[0].assignment.seat % 2, singles[1].assignment.seat % 2} == {1 - pair_as_leo.assignment.seat % 2}


async def test_tickets_are_cancelled_while_searching_not_once_matched(service: Service) -> None:
    ticket = await service.ticket("ana")
    cancel = matchmaking_pb2.CancelTicketRequest(name=ticket.name, request_id="c1")
    cancelled = await service.stub.CancelTicket(cancel, metadata=service.player("ana"))
    assert cancelled.state == Ticket.STATE_CANCELLED
    assert await service.stub.CancelTicket(cancel, metadata=service.player("ana")) == cancelled  # a retry
    again = await service.ticket("ana", request_id="second")  # the player may queue again
    other = await service.ticket("bia")
    await service.settle()
    await service.confirm_all(await service.get(again), await service.get(other))
    code, message = await code_of(
        service.stub.CancelTicket(
            matchmaking_pb2.CancelTicketRequest(name=again.name, request_id="c2"), metadata=service.player("ana")
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "matched" in message


async def test_watch_streams_the_ticket_until_it_is_final(service: Service) -> None:
    ticket = await service.ticket("ana")
    stream = service.stub.WatchTicket(
        matchmaking_pb2.WatchTicketRequest(name=ticket.name), metadata=service.player("ana")
    )
    first: Ticket = await stream.read()  # type: ignore[assignment]
    assert first.state == Ticket.STATE_SEARCHING and first.position == 1 and first.estimated_wait.seconds > 0
    other = await service.ticket("bia")
    await service.settle()
    proposed: Ticket = await stream.read()  # type: ignore[assignment]
    assert proposed.state == Ticket.STATE_PROPOSED
    await service.confirm_all(proposed, await service.get(other))
    last = proposed
    async for update in _rest(stream):
        last = update
    assert last.state == Ticket.STATE_MATCHED
    assert last.assignment.table and last.assignment.game_session_address


async def test_a_watch_streams_periodic_view_reads_nothing_from_the_database(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no pass since the ticket was made, the loop cannot place it: the first view counts its
    # place in the database, and the refreshes after it keep that place without reading again
    # (a count per waiting stream every few seconds grows as the square of a burst).
    monkeypatch.setattr(tickets_module, "REFRESH_SECONDS", 0.05)
    await service.running.loop.stop()
    ticket = await service.ticket("ana", players=4)
    stream = service.stub.WatchTicket(
        matchmaking_pb2.WatchTicketRequest(name=ticket.name), metadata=service.player("ana")
    )
    first: Ticket = await stream.read()  # type: ignore[assignment]
    assert first.state == Ticket.STATE_SEARCHING and first.position == 1
    db = service.running.core.db

    def no_read(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a periodic view read the database")

    for name in ("driver_connection", "read_each", "read_connection", "read", "write", "write_each"):
        monkeypatch.setattr(db, name, no_read)
    service.clock.advance(2)  # the estimated wait moves: the next refresh sends a view
    refreshed: Ticket = await stream.read()  # type: ignore[assignment]
    assert refreshed.state == Ticket.STATE_SEARCHING and refreshed.position == 1
    assert refreshed.estimated_wait.seconds == first.estimated_wait.seconds - 2
    stream.cancel()


class _Refused:
    """A statement that must not run."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError("a ticket's place was counted in the database")


@pytest.mark.parametrize("db_target", ["postgresql"], indirect=True)  # a lone player's one-statement path
async def test_new_tickets_are_placed_from_the_loops_reading_without_counting_the_queue(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Counting a new ticket's place scans its bucket: in a burst, work that grows with the queue at
    # every ticket. While the loop's last reading is recent, the place is the tickets it read in
    # the bucket plus those queued here since; the first view of the ticket's stream repeats it.
    await service.settle()
    await service.running.loop.stop()  # no pass from here on: the places come from the last one
    refused = (_Refused(), _Refused())
    monkeypatch.setattr(tickets_module, "_CREATE_READS_COUNTING", _Refused())
    monkeypatch.setattr(tickets_module, "_AHEAD_OF_BACK", refused)
    monkeypatch.setattr(tickets_module, "_AHEAD_OF_FRONT", refused)
    made = [await service.ticket(player, players=4) for player in ("ana", "bia", "caio")]
    assert [ticket.position for ticket in made] == [1, 2, 3]
    other_bucket = await service.ticket("duda", players=2)
    assert other_bucket.position == 1
    stream = service.stub.WatchTicket(
        matchmaking_pb2.WatchTicketRequest(name=made[1].name), metadata=service.player("bia")
    )
    first: Ticket = await stream.read()  # type: ignore[assignment]
    assert first.state == Ticket.STATE_SEARCHING and first.position == 2
    stream.cancel()


@pytest.mark.parametrize("db_target", ["postgresql"], indirect=True)
async def test_a_last_confirmation_looks_its_tickets_up_by_key_not_by_scanning_them_all(service: Service) -> None:
    # A scan of every ticket ever made, at every match's last confirmation, grows with the table.
    made = await service.ticket("ana")
    db = service.running.core.db
    async with db.driver_connection() as driver:
        await driver.execute("""
            INSERT INTO matchmaking_tickets
            SELECT (jsonb_populate_record(NULL::matchmaking_tickets,
                    to_jsonb(t) || jsonb_build_object('id', 'old-' || n, 'state', 'matched'))).*
              FROM matchmaking_tickets AS t, generate_series(1, 3000) AS n WHERE t.id = $1""", made.name[8:])
        await driver.execute("ANALYZE matchmaking_tickets")
        start = tickets_module._START_IF_ALL_CONFIRMED
        now = service.clock.now
        plan = "\n".join(r[0] for r in await driver.fetch(
            "EXPLAIN " + start.sql, *start.args({"saga": "s1", "deadline": now, "now": now})))
    assert "Seq Scan on matchmaking_tickets" not in plan, plan
    assert "matchmaking_tickets" in plan, plan


async def test_the_mean_wait_is_read_once_however_many_views_ask_for_it_at_once(service: Service) -> None:
    made = []
    for player in ("ana", "bia"):
        made.append(await service.ticket(player, players=4))
        service.clock.advance(1)
    await service.settle()
    await service.get(made[0])  # the mean wait read and kept for a while
    service.clock.advance(tickets_module.MEAN_WAIT_TTL.total_seconds() + 1)
    reads: list[str] = []

    def executed(connection: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if "avg(" in statement:
            reads.append(statement)

    engine = service.running.core.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", executed)
    try:
        views = await asyncio.gather(*(service.get(made[n % 2]) for n in range(10)))
    finally:
        event.remove(engine, "before_cursor_execute", executed)
    assert [view.position for view in views] == [1, 2] * 5
    assert len(reads) == 1


async def test_retries_are_idempotent(service: Service) -> None:
    first = await service.ticket("ana", request_id="r1")
    assert await service.ticket("ana", request_id="r1") == first
    code, _ = await code_of(service.ticket("ana", request_id="r1", preset="fechado"))
    assert code == grpc.StatusCode.ALREADY_EXISTS


async def test_concurrent_first_calls_make_one_ticket(service: Service) -> None:
    # The same call sent twice at once: both get the one ticket it made.
    first, again = await asyncio.gather(*(service.ticket("ana", request_id="r1") for _ in range(2)))
    assert first == again
    # Two calls of one player at once: one ticket, the other call told the player has it.
    outcomes = await asyncio.gather(
        *(service.ticket("bia", request_id=f"b{i}") for i in range(2)), return_exceptions=True)
    made = [outcome for outcome in outcomes if isinstance(outcome, Ticket)]
    refused = [outcome for outcome in outcomes if not isinstance(outcome, Ticket)]
    assert len(made) == 1 and len(refused) == 1
    assert isinstance(refused[0], grpc.aio.AioRpcError)
    assert refused[0].code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"live ticket: {made[0].name}" in (refused[0].details() or "")
    # The refused call stored no answer: retried once the ticket is cancelled, it queues.
    cancel = matchmaking_pb2.CancelTicketRequest(name=made[0].name, request_id="c1")
    await service.stub.CancelTicket(cancel, metadata=service.player("bia"))
    retried = await service.ticket("bia", request_id=f"b{outcomes.index(refused[0])}")
    assert retried.state == Ticket.STATE_SEARCHING and retried.name != made[0].name


async def test_the_last_two_confirmations_at_once_start_the_match(service: Service) -> None:
    for round_ in range(3):
        first = await service.ticket("ana", request_id=f"a{round_}")
        second = await service.ticket("bia", request_id=f"b{round_}")
        await service.settle()
        a, b = await service.get(first, "ana"), await service.get(second, "bia")
        assert a.state == b.state == Ticket.STATE_PROPOSED
        await asyncio.gather(service.confirm(a, "ana"), service.confirm(b, "bia"))
        await service.settle()  # the clock stands still: nothing waits for the confirmation deadline
        a, b = await service.get(first, "ana"), await service.get(second, "bia")
        assert a.state == b.state == Ticket.STATE_MATCHED  # and the players may queue again


@pytest.mark.parametrize("db_target", ["postgresql"], indirect=True)  # SQLite confirms in one transaction
async def test_a_retried_confirmation_starts_the_match_its_first_call_did_not(service: Service) -> None:
    first = await service.ticket("ana")
    second = await service.ticket("bia")
    await service.settle()
    a, b = await service.get(first, "ana"), await service.get(second, "bia")
    await service.confirm(a, "ana")
    await service.confirm(b, "bia")
    # As if the last call had stopped between its confirmation and the start's move.
    async with service.running.core.db.write() as session:
        await session.execute(
            sql_update(models.sagas)
            .where(models.sagas.c.id == a.assignment.match_id)
            .values(state="confirming", next_attempt_at=models.sagas.c.confirm_deadline))
    await service.confirm(b, "bia")  # the retry answers as the first call, and moves the start on
    await service.settle()
    assert (await service.get(first, "ana")).state == Ticket.STATE_MATCHED


async def _rest(stream: Any) -> AsyncIterator[Ticket]:
    """What a stream sends until it ends (after reads with `read()`)."""
    while True:
        update = await stream.read()
        if update == grpc.aio.EOF:  # type: ignore[attr-defined]
            return
        yield update


async def test_bad_input_gets_the_right_status(service: Service) -> None:
    ana = service.player("ana")

    def create(**fields: Any) -> matchmaking_pb2.CreateTicketRequest:
        preferences: dict[str, Any] = {"preset": "aberto", "players": 2, "length": 1, "mode": 2, **fields}
        return matchmaking_pb2.CreateTicketRequest(
            request_id="x", ticket=matchmaking_pb2.Ticket(preferences=matchmaking_pb2.MatchPreferences(**preferences))
        )

    cases = [
        (matchmaking_pb2.CreateTicketRequest(ticket=create().ticket), "request_id"),
        (matchmaking_pb2.CreateTicketRequest(request_id="x"), "ticket"),
        (create(preset="poker"), "ticket.preferences.preset"),
        (create(players=3), "ticket.preferences.players"),
        (create(length=0), "ticket.preferences.length"),
        (create(target_points=505), "ticket.preferences.target_points"),
        (create(length=2, target_points=100), "ticket.preferences.target_points"),
        (create(mode=0), "ticket.preferences.mode"),
        (create(bet_chips=10), "ticket.preferences.bet_chips"),
        (create(mode=1, bet_chips=0), "ticket.preferences.bet_chips"),
    ]
    for request, field in cases:
        code, message = await code_of(service.stub.CreateTicket(request, metadata=ana))
        assert (code, message.split(":")[0]) == (grpc.StatusCode.INVALID_ARGUMENT, field), (request, message)
    code, message = await code_of(service.stub.GetTicket(matchmaking_pb2.GetTicketRequest(name="t/1"), metadata=ana))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("name:")
    ticket = await service.ticket("bia")
    for metadata in (ana, ()):
        code, _ = await code_of(
            service.stub.GetTicket(matchmaking_pb2.GetTicketRequest(name=ticket.name), metadata=metadata)
        )
        assert code in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAUTHENTICATED)
    watch = service.stub.WatchTicket(matchmaking_pb2.WatchTicketRequest(name=ticket.name), metadata=ana)
    code, _ = await code_of(watch.read())  # another player's ticket: not found, nothing streamed
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await code_of(
        service.stub.CreateTicket(create(), metadata=service.service())  # a service must act for a player
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED


async def test_waiting_tickets_survive_a_restart(
    platform: Platform_, db_target: DatabaseTarget, tmp_path: Path
) -> None:
    async with matchmaking_service(platform, db_target, tmp_path) as first:
        clock = first.clock
        ana = await first.ticket("ana", players=4)
        bia = await first.ticket("bia", players=4)
    async with matchmaking_service(platform, db_target, tmp_path, clock=clock) as second:
        assert (await second.get(ana)).state == Ticket.STATE_SEARCHING
        others = [await second.ticket(p, players=4) for p in ("caio", "duda")]
        await second.settle()
        tickets = [await second.get(t) for t in (ana, bia, *others)]
        assert {t.state for t in tickets} == {Ticket.STATE_PROPOSED}
        assert len({t.assignment.match_id for t in tickets}) == 1


async def test_positions_follow_the_queue_as_the_passes_read_it(service: Service) -> None:
    # Three single players for a 4-seat table: no table forms, they wait in arrival order.
    tickets = []
    for player in ("ana", "bia", "caio"):
        tickets.append(await service.ticket(player, players=4))
        service.clock.advance(1)
    await service.settle()
    views = [await service.get(ticket) for ticket in tickets]
    assert [view.state for view in views] == [Ticket.STATE_SEARCHING] * 3
    assert [view.position for view in views] == [1, 2, 3]
    await service.stub.CancelTicket(
        matchmaking_pb2.CancelTicketRequest(name=tickets[0].name, request_id="cancel-ana"),
        metadata=service.player("ana"),
    )
    await service.settle()
    assert [(await service.get(ticket)).position for ticket in tickets[1:]] == [1, 2]


async def test_a_started_match_replaces_each_players_recent_opponents(service: Service) -> None:
    async def recent() -> dict[str, list[str]]:
        async with service.running.core.db.read() as session:
            return {row.player: list(row.others) for row in await session.execute(select(models.recent))}

    async def match(one: str, other: str, round_: int) -> None:
        tickets = [await service.ticket(p, request_id=f"{p}{round_}") for p in (one, other)]
        await service.settle()
        await service.confirm_all(*[await service.get(t, p) for t, p in zip(tickets, (one, other), strict=True)])
        assert {(await service.get(t, p)).state for t, p in zip(tickets, (one, other), strict=True)} == {
            Ticket.STATE_MATCHED}

    await match("ana", "bia", 1)
    assert await recent() == {"ana": ["bia"], "bia": ["ana"]}
    await match("ana", "cid", 2)
    assert await recent() == {"ana": ["cid"], "bia": ["ana"], "cid": ["ana"]}
    # a new ticket carries its player's recent opponents (the matcher avoids a rematch with them)
    ticket = await service.ticket("ana", request_id="ana3")
    async with service.running.core.db.read() as session:
        row = (await session.execute(select(models.tickets.c.recent).where(
            models.tickets.c.id == ticket.name.removeprefix("tickets/")))).one()
    assert list(row.recent) == ["cid"]
