"""The hand-off against the real game-session service (services/game_session, in-process, on the
test's database) instead of the fake: a quick match and a lobby match become real tables with the
right seats, match id, owner address and bot level, and a start given up on cancels its real table."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc, matchmaking_pb2
from services.common.auth import Kind
from services.game_session.service import SPEC as GAME_SESSIONS
from tests.conftest import DatabaseTarget
from tests.services.harness import bearer, make_config, running
from tests.services.matchmaking.support import (
    FAST,
    Platform_,
    Service,
    _database_config,
    matchmaking_service,
    platform_for,
)

Ticket = matchmaking_pb2.Ticket
COMPETITIVE = common_pb2.TABLE_MODE_COMPETITIVE


@pytest.fixture
async def real(db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[tuple[Service, Any]]:
    """Matchmaking calling the real game-session service; yields it and a GameSessionService stub."""
    async with contextlib.AsyncExitStack() as stack:
        platform: Platform_ = await stack.enter_async_context(platform_for(db_target, tmp_path))
        config = make_config(
            "game_session",
            tmp_path,
            **_database_config(db_target, tmp_path, "game_session"),
            addresses={**platform.addresses, "tournament": "127.0.0.1:1", "matchmaking": "127.0.0.1:1"},
        )
        sessions = await stack.enter_async_context(running(GAME_SESSIONS, config))
        platform.addresses["game_session"] = sessions.address
        service = await stack.enter_async_context(matchmaking_service(platform, db_target, tmp_path))
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(sessions.address))
        yield service, game_session_pb2_grpc.GameSessionServiceStub(channel)
        await platform.audit()


async def read_table(service: Service, stub: Any, name: str) -> game_session_pb2.Table:
    table: game_session_pb2.Table = await stub.GetTable(
        game_session_pb2.GetTableRequest(name=name),
        metadata=bearer(service.platform.minter.mint(Kind.SERVICE, "matchmaking")),
    )
    return table


async def test_a_quick_match_becomes_a_real_table(real: tuple[Service, Any]) -> None:
    service, stub = real
    for player in ("ana", "bia"):
        await service.platform.fund(player, 500)
    tickets = [await service.ticket(p, mode=COMPETITIVE, bet=40) for p in ("ana", "bia")]
    await service.settle()
    await service.confirm_all(*[await service.get(t) for t in tickets])
    ana, bia = await service.get(tickets[0], "ana"), await service.get(tickets[1], "bia")
    assert ana.state == bia.state == Ticket.STATE_MATCHED
    table = await read_table(service, stub, ana.assignment.table)
    assert table.match_id == ana.assignment.match_id
    assert table.state == game_session_pb2.Table.STATE_WAITING
    assert table.owner_address == ana.assignment.game_session_address
    assert table.seats[ana.assignment.seat].participant.player == "players/ana"
    assert table.seats[bia.assignment.seat].participant.player == "players/bia"
    assert table.options.mode == COMPETITIVE and table.options.bet_chips == 40
    assert await service.platform.held("ana") == await service.platform.held("bia") == 40


async def test_a_practice_lobby_match_with_bots_becomes_a_real_table(real: tuple[Service, Any]) -> None:
    service, stub = real
    ana = service.player("ana")
    lobby = await service.stub.CreateLobbyTable(
        matchmaking_pb2.CreateLobbyTableRequest(
            request_id="c",
            lobby_table=matchmaking_pb2.LobbyTable(
                options=common_pb2.TableOptions(
                    ruleset=common_pb2.RulesetRef(preset="aberto"),
                    players=4,
                    length=common_pb2.MATCH_LENGTH_EXPRESS,
                    mode=common_pb2.TABLE_MODE_PRACTICE,
                    bot_level=common_pb2.BOT_LEVEL_EASY,
                )
            ),
        ),
        metadata=ana,
    )
    await service.stub.FillWithBots(matchmaking_pb2.FillWithBotsRequest(name=lobby.name, request_id="b"), metadata=ana)
    await service.stub.SetReady(
        matchmaking_pb2.SetReadyRequest(name=lobby.name, request_id="r", ready=True), metadata=ana
    )
    await service.stub.StartMatch(matchmaking_pb2.StartMatchRequest(name=lobby.name, request_id="s"), metadata=ana)
    await service.settle()
    lobby = await service.stub.GetLobbyTable(matchmaking_pb2.GetLobbyTableRequest(name=lobby.name), metadata=ana)
    assert lobby.state == matchmaking_pb2.LobbyTable.STATE_IN_MATCH
    table = await read_table(service, stub, lobby.game_table.table)
    assert table.lobby_table == lobby.name and table.match_id == lobby.game_table.match_id
    assert [s.participant.WhichOneof("kind") for s in table.seats] == ["player", "bot", "bot", "bot"]
    # the chief's bot level reached the game table: its bots and the bot that would take ana's seat
    assert table.options.bot_level == common_pb2.BOT_LEVEL_EASY
    assert [s.bot_level for s in table.seats] == [common_pb2.BOT_LEVEL_UNSPECIFIED] + [common_pb2.BOT_LEVEL_EASY] * 3


async def test_a_start_given_up_on_cancels_its_real_table(real: tuple[Service, Any]) -> None:
    service, stub = real
    service.platform.faults.lose["create_table"] = 10**6  # made, but matchmaking never hears back
    tickets = [await service.ticket(p) for p in ("ana", "bia")]
    await service.settle()
    proposed = [await service.get(t) for t in tickets]
    await service.confirm_all(*proposed)
    await service.advance(FAST.start_seconds + 1)
    table = await read_table(service, stub, proposed[0].assignment.table)
    assert table.state == game_session_pb2.Table.STATE_CANCELLED
