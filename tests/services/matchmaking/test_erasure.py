"""EraseLoadTestRun through the service, on both databases: what a finished run leaves is erased
(and nothing of anyone else: a player of another run whose id shares the prefix, a normal player),
dry runs count the same and erase nothing, retries answer as the first call, refusals while the
run is in progress or shares records with outside players change nothing, only admins may call
it, and a run player's ticket created while the erasure runs stays whole."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import grpc
from sqlalchemy import event, insert, select

from buraco.v1 import common_pb2, matchmaking_pb2
from services.matchmaking import models
from tests.services.matchmaking.support import Service, code_of
from tests.services.matchmaking.test_lobby import Lobby

Ticket = matchmaking_pb2.Ticket
LobbyTable = matchmaking_pb2.LobbyTable
KINDS = ["tickets", "parties", "sagas", "lobby_tables", "recent"]
#: Every table of the service but the idempotency keys (an erasure stores its answer there).
TABLES = [
    models.tickets,
    models.queue_members,
    models.parties,
    models.party_members,
    models.sagas,
    models.recent,
    models.lobby_tables,
    models.lobby_invitations,
]


async def erase(
    service: Service, run: str, request_id: str, *, dry_run: bool = False, metadata: Any = None
) -> common_pb2.EraseLoadTestRunResponse:
    reply: common_pb2.EraseLoadTestRunResponse = await service.stub.EraseLoadTestRun(
        common_pb2.EraseLoadTestRunRequest(request_id=request_id, run_id=run, dry_run=dry_run),
        metadata=metadata if metadata is not None else service.platform.admin(),
    )
    return reply


def counts(reply: common_pb2.EraseLoadTestRunResponse) -> dict[str, int]:
    assert [record.kind for record in reply.erased] == KINDS  # every kind, in the contract's order
    return {record.kind: record.count for record in reply.erased}


async def rows(service: Service) -> dict[str, list[str]]:
    """Every row of the service's tables (as text, sorted), by table."""
    out: dict[str, list[str]] = {}
    async with service.running.core.db.read() as session:
        for table in TABLES:
            out[table.name] = sorted(repr(tuple(row)) for row in await session.execute(select(table)))
    return out


def naming(snapshot: dict[str, list[str]], player: str) -> list[str]:
    """The rows that name `player` exactly (a quoted string in the row's text)."""
    return [row for table in snapshot.values() for row in table if f"'{player}'" in row]


async def play(service: Service, one: str, two: str, *, rid: str = "") -> tuple[Ticket, Ticket]:
    """A practice quick match of two players, through to MATCHED."""
    a = await service.ticket(one, request_id=f"t-{one}{rid}")
    b = await service.ticket(two, request_id=f"t-{two}{rid}")
    await service.settle()
    a, b = await service.get(a), await service.get(b)
    assert a.state == b.state == Ticket.STATE_PROPOSED and a.assignment.match_id == b.assignment.match_id
    await service.confirm_all(a, b)
    a, b = await service.get(a), await service.get(b)
    assert a.state == b.state == Ticket.STATE_MATCHED
    return a, b


async def test_a_finished_run_is_erased_and_nothing_else(service: Service) -> None:
    lobby = Lobby(service)
    # The run lt1: a quick match, a cancelled ticket, a party that disbanded, a lobby table that
    # played a match with a bot (inviting an outside player) then closed, and a lobby table that
    # closed before any match (its invitation of lt1-3 the only trace of whose it was).
    run_match = await play(service, "lt1-1", "lt1-2")
    cancelled = await service.ticket("lt1-3", request_id="t-cancel")
    await service.stub.CancelTicket(
        matchmaking_pb2.CancelTicketRequest(name=cancelled.name, request_id="c"), metadata=service.player("lt1-3")
    )
    party = await service.stub.CreateParty(
        matchmaking_pb2.CreatePartyRequest(request_id="p"), metadata=service.player("lt1-3")
    )
    await service.stub.InviteToParty(
        matchmaking_pb2.InviteToPartyRequest(name=party.name, request_id="i", player="players/lt1-4"),
        metadata=service.player("lt1-3"),
    )
    await service.stub.JoinParty(
        matchmaking_pb2.JoinPartyRequest(name=party.name, request_id="j"), metadata=service.player("lt1-4")
    )
    await service.stub.LeaveParty(
        matchmaking_pb2.LeavePartyRequest(name=party.name, request_id="l"), metadata=service.player("lt1-3")
    )
    played = await lobby.create("lt1-1")
    await lobby.call("InviteToTable", "lt1-1", played, player="players/carol")
    await lobby.call("FillWithBots", "lt1-1", played)
    await lobby.call("SetReady", "lt1-1", played, ready=True)
    await lobby.call("StartMatch", "lt1-1", played)
    await service.settle()
    assert (await lobby.get(played)).state == LobbyTable.STATE_IN_MATCH
    assert (await lobby.call("LeaveLobbyTable", "lt1-1", played)).state == LobbyTable.STATE_CLOSED
    unplayed = await lobby.create("lt1-2")
    await lobby.call("InviteToTable", "lt1-2", unplayed, player="players/lt1-3")
    await lobby.call("LeaveLobbyTable", "lt1-2", unplayed)
    # Closed before any match and never inviting anyone: nothing names whose it was; it stays.
    anonymous = await lobby.create("lt1-4")
    await lobby.call("LeaveLobbyTable", "lt1-4", anonymous)

    # Everyone else: normal players, players of the runs lt1-5 and lt10 (ids sharing the prefix),
    # an open lobby table, and an outside player's memory of a run player (their own row: kept).
    outside_match = await play(service, "alice", "bob")
    other_runs = await play(service, "lt1-5-3", "lt10-1")
    open_table = await lobby.create("alice")
    async with service.running.core.db.write() as session:
        await session.execute(
            insert(models.recent).values(player="dave", others=["lt1-1"], update_time=service.clock.now)
        )
    run_players = [f"lt1-{n}" for n in range(1, 5)]
    before = await rows(service)
    assert all(naming(before, player) for player in run_players[:3])  # lt1-4 left no trace
    erased_tables = [table.name.removeprefix("lobbyTables/") for table in (played, unplayed)]

    def kept(row: str) -> bool:
        """Whether a row stays: it names no run player and no erased table (whose invitation of
        carol goes with it), or it is the outside player's own memory."""
        return row.startswith("('dave'") or not any(f"'{name}'" in row for name in run_players + erased_tables)

    expected = {"tickets": 3, "parties": 1, "sagas": 2, "lobby_tables": 2, "recent": 2}
    dry = await erase(service, "lt1", "dry", dry_run=True)
    assert dry.run_id == "lt1" and dry.dry_run and counts(dry) == expected
    assert await rows(service) == before  # a dry run erases nothing

    erased = await erase(service, "lt1", "erase-1")
    assert erased.run_id == "lt1" and not erased.dry_run and counts(erased) == expected
    after = await rows(service)
    assert [row for player in run_players for row in naming(after, player) if not row.startswith("('dave'")] == []
    # Everything of everyone else is as it was; the anonymous closed table stays.
    assert after == {table: [row for row in table_rows if kept(row)] for table, table_rows in before.items()}
    assert any(anonymous.name.removeprefix("lobbyTables/") in row for row in after[models.lobby_tables.name])

    # A retry answers as the first call; the same id for another request is ALREADY_EXISTS; a new
    # erasure finds nothing more.
    assert await erase(service, "lt1", "erase-1") == erased
    code, _ = await code_of(erase(service, "lt10", "erase-1"))
    assert code == grpc.StatusCode.ALREADY_EXISTS
    assert counts(await erase(service, "lt1", "erase-2")) == dict.fromkeys(KINDS, 0)
    assert counts(await erase(service, "lt1", "dry-2", dry_run=True)) == dict.fromkeys(KINDS, 0)

    # The erased records are gone from every read; the others' are served as before.
    for ticket in run_match:
        code, _ = await code_of(service.get(ticket))
        assert code == grpc.StatusCode.NOT_FOUND
        code, _ = await code_of(
            service.stub.WatchTicket(matchmaking_pb2.WatchTicketRequest(name=ticket.name), metadata=service.service())
            .read()
        )
        assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await code_of(lobby.get(played))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await code_of(
        service.stub.GetParty(matchmaking_pb2.GetPartyRequest(name=party.name), metadata=service.service())
    )
    assert code == grpc.StatusCode.NOT_FOUND
    for ticket in (*outside_match, *other_runs):
        assert (await service.get(ticket)).state == Ticket.STATE_MATCHED
    assert (await lobby.get(open_table)).state == LobbyTable.STATE_OPEN
    # The service goes on matching (the run's players too, as new records).
    await play(service, "alice", "lt1-1", rid="-again")


async def test_a_run_in_progress_or_shared_is_refused_and_nothing_changes(service: Service) -> None:
    lobby = Lobby(service)
    ids = itertools.count()

    async def refused(run: str, *reasons: str) -> None:
        before = await rows(service)
        for dry_run in (True, False):
            code, message = await code_of(erase(service, run, f"refused-{next(ids)}", dry_run=dry_run))
            assert code == grpc.StatusCode.FAILED_PRECONDITION, message
            assert message.startswith(f"load-test run {run} was not erased"), message
            for reason in reasons:
                assert reason in message, message
        assert await rows(service) == before

    # A searching ticket; then the same ticket proposed (and its start confirming).
    searching = await service.ticket("lt2-1")
    await refused("lt2", "still in progress: 1 ticket searching or proposed (" + searching.name + ")")
    other = await service.ticket("lt2-2")
    await service.settle()
    await refused("lt2", "2 tickets searching or proposed", "1 match start not ended")
    await service.confirm_all(await service.get(searching), await service.get(other))
    assert counts(await erase(service, "lt2", "lt2-done")) == {
        "tickets": 2, "parties": 0, "sagas": 1, "lobby_tables": 0, "recent": 2
    }

    # A match with a player outside the run.
    await play(service, "lt3-1", "erin")
    await refused("lt3", "shared with players outside the run: 1 match start")
    # An open party, and a party that invited an outside player.
    party = await service.stub.CreateParty(
        matchmaking_pb2.CreatePartyRequest(request_id="p"), metadata=service.player("lt4-1")
    )
    await refused("lt4", "1 open party (" + party.name + ")")
    await service.stub.InviteToParty(
        matchmaking_pb2.InviteToPartyRequest(name=party.name, request_id="i", player="players/frank"),
        metadata=service.player("lt4-1"),
    )
    await refused("lt4", "1 open party", "shared with players outside the run: 1 party (" + party.name + ")")
    # Disbanded, the party keeps its leader only (frank's invitation went with the disbanding).
    await service.stub.LeaveParty(
        matchmaking_pb2.LeavePartyRequest(name=party.name, request_id="l"), metadata=service.player("lt4-1")
    )
    assert counts(await erase(service, "lt4", "lt4-done"))["parties"] == 1
    # A lobby table not closed, with an outside player at it; a run player invited to an outside table.
    table = await lobby.create("lt5-1")
    await refused("lt5", "1 lobby table not closed (" + table.name + ")")
    await lobby.call("SitDown", "gina", table)
    await lobby.call("StandUp", "lt5-1", table)
    await refused("lt5", "1 lobby table not closed", "shared with players outside the run: 1 lobby table")
    outside = await lobby.create("hugo")
    await lobby.call("InviteToTable", "hugo", outside, player="players/lt6-1")
    await refused("lt6", "1 lobby table outside the run that invited a run player (" + outside.name + ")")


async def test_only_admins_erase_and_the_request_is_checked(service: Service) -> None:
    for metadata in (service.player("lt1-1"), service.service(), service.service(player="lt1-1")):
        code, _ = await code_of(erase(service, "lt1", "r", metadata=metadata))
        assert code == grpc.StatusCode.PERMISSION_DENIED
    code, message = await code_of(erase(service, "lt1", ""))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("request_id"), message
    for run in ("", "lt", "LT1", "-lt1", "lt1_2", "lt1%", "x" * 41):
        for dry_run in (False, True):
            code, message = await code_of(erase(service, run, "r", dry_run=dry_run))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("run_id"), (run, message)


async def test_a_ticket_created_while_the_run_is_erased_stays_whole(service: Service) -> None:
    """A run player's CreateTicket during the erasure is either seen by it (and refused: live) or
    not seen at all: the new ticket and its queue entry stay, the run's older records go."""
    old, _ = await play(service, "lt7-1", "lt7-2")
    created: list[asyncio.Task[Ticket]] = []

    async def meanwhile() -> None:
        task = asyncio.create_task(service.ticket("lt7-1", request_id="t-new"))
        created.append(task)
        if service.running.core.db.dialect != "sqlite":
            # PostgreSQL: the ticket commits while the erasure's transaction is open (SQLite's one
            # writer makes it wait for the erasure instead).
            await task

    service.running.erasure.before_deleting = meanwhile
    reply = await erase(service, "lt7", "during")
    assert counts(reply) == {"tickets": 2, "parties": 0, "sagas": 1, "lobby_tables": 0, "recent": 2}
    new = await created[0]
    assert (await service.get(new)).state == Ticket.STATE_SEARCHING
    code, _ = await code_of(service.get(old))
    assert code == grpc.StatusCode.NOT_FOUND
    async with service.running.core.db.read() as session:
        queued = (await session.execute(select(models.queue_members))).all()
    assert [(row.player, row.ticket_id) for row in queued] == [("lt7-1", new.name.removeprefix("tickets/"))]
    # The run goes on: its new ticket blocks the next erasure until it ends.
    code, message = await code_of(erase(service, "lt7", "after"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "1 ticket searching or proposed" in message
    await service.stub.CancelTicket(
        matchmaking_pb2.CancelTicketRequest(name=new.name, request_id="c"), metadata=service.player("lt7-1")
    )
    assert counts(await erase(service, "lt7", "after-cancel"))["tickets"] == 1


async def test_a_large_run_is_erased_in_a_few_statements(service: Service) -> None:
    """The statements do not grow with the run: eight reads, then deletes of 500 ids each."""
    players = 1200
    await service.running.loop.stop()  # only the erasure's statements run
    async with service.running.core.db.write() as session:
        await session.execute(
            insert(models.recent),
            [
                {"player": f"lt8-{n}", "others": [f"lt8-{n + 1}"], "update_time": service.clock.now}
                for n in range(players)
            ],
        )
    statements: list[str] = []

    def executed(connection: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "DELETE")) and "idempotency" not in statement:
            statements.append(statement)

    engine = service.running.core.db.engine.sync_engine
    event.listen(engine, "before_cursor_execute", executed)
    try:
        reply = await erase(service, "lt8", "large")
    finally:
        event.remove(engine, "before_cursor_execute", executed)
    assert counts(reply)["recent"] == players
    assert len(statements) == 8 + 3, statements  # the eight reads; the recent rows in 3 chunks
