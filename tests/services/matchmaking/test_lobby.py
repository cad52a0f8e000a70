"""The lobby through the service, on both databases: the chief and their options, listing with
filters and pages, private tables and invitations, the chief's hand-over, bots at practice tables
only, starting a match through the saga, rematches, and the lobby streams."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.field_mask_pb2 import FieldMask

from buraco.v1 import common_pb2, matchmaking_pb2
from tests.services.matchmaking.support import Service, code_of

LobbyTable = matchmaking_pb2.LobbyTable
PRACTICE = common_pb2.TABLE_MODE_PRACTICE
COMPETITIVE = common_pb2.TABLE_MODE_COMPETITIVE


def options(**fields: Any) -> common_pb2.TableOptions:
    values: dict[str, Any] = {
        "ruleset": common_pb2.RulesetRef(preset=fields.pop("preset", "aberto")),
        "players": 2,
        "length": common_pb2.MATCH_LENGTH_EXPRESS,
        "mode": PRACTICE,
        **fields,
    }
    return common_pb2.TableOptions(**values)


class Lobby:
    """The lobby RPCs as players call them."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.stub = service.stub
        self.count = 0

    def rid(self) -> str:
        self.count += 1
        return f"r{self.count}"

    async def create(self, player: str, **fields: Any) -> LobbyTable:
        request = matchmaking_pb2.CreateLobbyTableRequest(
            request_id=self.rid(), lobby_table=LobbyTable(options=options(**fields))
        )
        reply: LobbyTable = await self.stub.CreateLobbyTable(request, metadata=self.service.player(player))
        return reply

    async def call(self, method: str, caller: str, table: LobbyTable, **fields: Any) -> LobbyTable:
        request_type = getattr(matchmaking_pb2, f"{method}Request")
        request = request_type(name=table.name, request_id=self.rid(), **fields)
        reply: LobbyTable = await getattr(self.stub, method)(request, metadata=self.service.player(caller))
        return reply

    async def update(self, player: str, table: LobbyTable, paths: list[str], **fields: Any) -> LobbyTable:
        request = matchmaking_pb2.UpdateLobbyTableRequest(
            request_id=self.rid(),
            lobby_table=LobbyTable(name=table.name, options=options(**fields)),
            update_mask=FieldMask(paths=paths),
        )
        reply: LobbyTable = await self.stub.UpdateLobbyTable(request, metadata=self.service.player(player))
        return reply

    async def get(self, table: LobbyTable, player: str | None = None) -> LobbyTable:
        metadata = self.service.player(player) if player else self.service.service()
        reply: LobbyTable = await self.stub.GetLobbyTable(
            matchmaking_pb2.GetLobbyTableRequest(name=table.name), metadata=metadata
        )
        return reply

    async def list(self, player: str, **filters: Any) -> list[str]:
        names: list[str] = []
        token = ""
        while True:
            page = await self.stub.ListLobbyTables(
                matchmaking_pb2.ListLobbyTablesRequest(page_size=2, page_token=token, **filters),
                metadata=self.service.player(player),
            )
            assert len(page.lobby_tables) <= 2
            names += [t.name for t in page.lobby_tables]
            token = page.next_page_token
            if not token:
                return names


async def read(stream: Any) -> Any:
    """The next message of a server stream."""
    return await stream.read()


def seated(table: LobbyTable) -> list[str]:
    return [
        s.participant.player
        if s.participant.WhichOneof("kind") == "player"
        else f"bot{s.participant.bot}"
        if s.participant.WhichOneof("kind") == "bot"
        else ""
        for s in table.seats
    ]


async def test_the_creator_is_chief_and_sits_first(service: Service) -> None:
    lobby = Lobby(service)
    table = await lobby.create("ana", players=4)
    assert table.chief == "players/ana" and table.state == LobbyTable.STATE_OPEN
    assert seated(table) == ["players/ana", "", "", ""]
    code, message = await code_of(lobby.create("nobody", mode=COMPETITIVE, bet_chips=10))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "not registered" in message
    code, message = await code_of(lobby.create("ana", players=3))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("lobby_table.options.players")
    code, message = await code_of(lobby.create("ana", length=common_pb2.MATCH_LENGTH_POINTS, target_points=3010))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("lobby_table.options.target_points")


async def test_tables_are_listed_by_filters_in_pages(service: Service) -> None:
    lobby = Lobby(service)
    await service.platform.fund("cris", 1000)
    two = await lobby.create("ana")
    four = await lobby.create("bia", players=4, preset="fechado")
    money = await lobby.create("cris", mode=COMPETITIVE, bet_chips=200)
    full = await lobby.create("davi")
    await lobby.call("SitDown", "edu", full)
    hidden = await lobby.create("fabi", private=True)
    assert set(await lobby.list("zoe")) == {two.name, four.name, money.name, full.name}
    assert set(await lobby.list("zoe", players=4)) == {four.name}
    assert set(await lobby.list("zoe", preset="fechado")) == {four.name}
    assert set(await lobby.list("zoe", mode=COMPETITIVE)) == {money.name}
    assert set(await lobby.list("zoe", mode=COMPETITIVE, max_bet_chips=100)) == set()
    assert full.name not in await lobby.list("zoe", only_with_free_seat=True)
    await lobby.call("InviteToTable", "fabi", hidden, player="players/zoe")
    assert hidden.name in await lobby.list("zoe")
    code, message = await code_of(
        service.stub.ListLobbyTables(
            matchmaking_pb2.ListLobbyTablesRequest(page_token="garbage!"), metadata=service.player("zoe")
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("page_token")


async def test_private_tables_admit_only_invited_players(service: Service) -> None:
    lobby = Lobby(service)
    table = await lobby.create("ana", private=True)
    code, _ = await code_of(lobby.call("SitDown", "bia", table))
    assert code == grpc.StatusCode.NOT_FOUND  # bia cannot even see it
    code, _ = await code_of(lobby.get(table, "bia"))
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await code_of(lobby.call("InviteToTable", "bia", table, player="players/caio"))
    assert code == grpc.StatusCode.NOT_FOUND
    table = await lobby.call("InviteToTable", "ana", table, player="players/bia")
    assert list(table.invited) == ["players/bia"]
    table = await lobby.call("SitDown", "bia", table)
    assert seated(table) == ["players/ana", "players/bia"]
    # Seated players may invite nobody: the chief does.
    code, _ = await code_of(lobby.call("InviteToTable", "bia", table, player="players/caio"))
    assert code == grpc.StatusCode.PERMISSION_DENIED


async def test_the_next_seated_player_becomes_chief(service: Service) -> None:
    lobby = Lobby(service)
    table = await lobby.create("ana", players=4)
    await lobby.call("SitDown", "bia", table, seat=2)
    await lobby.call("SitDown", "caio", table, seat=1)
    table = await lobby.call("SitDown", "duda", table)
    assert seated(table) == ["players/ana", "players/caio", "players/bia", "players/duda"]
    code, _ = await code_of(lobby.call("SitDown", "edu", table))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    table = await lobby.call("LeaveLobbyTable", "ana", table)
    assert table.chief == "players/caio"
    table = await lobby.call("StandUp", "bia", table)  # stays as an onlooker
    table = await lobby.call("LeaveLobbyTable", "caio", table)
    assert table.chief == "players/duda"  # seat 2 is free now: the next seated is at seat 3
    table = await lobby.call("LeaveLobbyTable", "duda", table)
    assert table.chief == "players/bia"  # nobody seated: the onlooker
    table = await lobby.call("LeaveLobbyTable", "bia", table)
    assert table.state == LobbyTable.STATE_CLOSED and table.chief == ""


async def test_the_chief_sets_the_options_between_matches(service: Service) -> None:
    lobby = Lobby(service)
    table = await lobby.create("ana", players=4)
    await lobby.call("SitDown", "bia", table, seat=3)
    code, _ = await code_of(lobby.update("bia", table, ["options.draw_seconds"], draw_seconds=20))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, message = await code_of(lobby.update("ana", table, ["options.name"]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("update_mask.paths[0]")
    code, message = await code_of(
        lobby.update("ana", table, ["options.length", "options.target_points"], length=2, target_points=100)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "target_points" in message
    code, message = await code_of(lobby.update("ana", table, ["options.players"], players=2))
    assert code == grpc.StatusCode.FAILED_PRECONDITION  # bia sits at seat 3
    await lobby.call("SetReady", "bia", table, ready=True)
    table = await lobby.update(
        "ana",
        table,
        ["options.length", "options.target_points", "options.play_seconds", "options.spectators_allowed"],
        length=common_pb2.MATCH_LENGTH_POINTS,
        target_points=3005,
        play_seconds=90,
        spectators_allowed=True,
    )
    assert (table.options.target_points, table.options.play_seconds, table.options.spectators_allowed) == (
        3005,
        90,
        True,
    )
    assert table.options.players == 4 and not any(s.ready for s in table.seats)  # new terms: ready again


async def test_bots_fill_seats_at_practice_tables_only(service: Service) -> None:
    lobby = Lobby(service)
    await service.platform.fund("ana", 1000)
    money = await lobby.create("ana", mode=COMPETITIVE, bet_chips=10)
    code, message = await code_of(lobby.call("FillWithBots", "ana", money))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "practice" in message
    table = await lobby.create("bia", players=4)
    code, _ = await code_of(lobby.call("FillWithBots", "caio", table))
    assert code == grpc.StatusCode.NOT_FOUND or code == grpc.StatusCode.PERMISSION_DENIED
    await lobby.call("SitDown", "caio", table)
    code, _ = await code_of(lobby.call("FillWithBots", "caio", table))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    table = await lobby.call("FillWithBots", "bia", table, level=common_pb2.BOT_LEVEL_HARD)
    assert seated(table) == ["players/bia", "players/caio", "bot3", "bot3"]
    code, message = await code_of(
        lobby.update("bia", table, ["options.mode", "options.bet_chips"], mode=COMPETITIVE, bet_chips=5)
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "bots" in message
    await lobby.call("SetReady", "caio", table, ready=True)
    code, message = await code_of(lobby.call("StartMatch", "bia", table))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "players/bia" in message  # bia is not ready
    await lobby.call("SetReady", "bia", table, ready=True)
    table = await lobby.call("StartMatch", "bia", table)
    assert table.state == LobbyTable.STATE_STARTING
    await service.settle()
    table = await lobby.get(table, "caio")
    assert table.state == LobbyTable.STATE_IN_MATCH and table.game_table.seat == 1
    game = service.platform.tables.tables[table.game_table.table.removeprefix("tables/")]
    assert [p.WhichOneof("kind") for p in game.seats] == ["player", "player", "bot", "bot"]
    assert game.lobby_table == table.name and game.options.mode == PRACTICE


async def test_the_chiefs_bot_level_seats_its_bots_and_goes_to_the_game_table(service: Service) -> None:
    """`options.bot_level` is the chief's option: FillWithBots without a level seats bots of it,
    changing it changes the seated bots' level too, and the game table gets it with the options."""
    lobby = Lobby(service)
    easy, hard = common_pb2.BOT_LEVEL_EASY, common_pb2.BOT_LEVEL_HARD
    table = await lobby.create("ana", players=4, bot_level=easy)
    assert table.options.bot_level == easy
    table = await lobby.call("FillWithBots", "ana", table)
    assert seated(table) == ["players/ana", "bot1", "bot1", "bot1"]
    table = await lobby.update("ana", table, ["options.bot_level"], bot_level=hard)
    assert table.options.bot_level == hard and seated(table) == ["players/ana", "bot3", "bot3", "bot3"]
    code, message = await code_of(lobby.update("ana", table, ["options.bot_level"], bot_level=9))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message.startswith("lobby_table.options.bot_level: unknown bot level 9"), message
    code, message = await code_of(lobby.call("FillWithBots", "ana", table, level=8))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("level: unknown bot level 8"), message
    await lobby.call("SetReady", "ana", table, ready=True)
    await lobby.call("StartMatch", "ana", table)
    await service.settle()
    table = await lobby.get(table, "ana")
    assert table.state == LobbyTable.STATE_IN_MATCH
    game = service.platform.tables.tables[table.game_table.table.removeprefix("tables/")]
    assert game.options.bot_level == hard and [p.bot for p in game.seats[1:]] == [hard] * 3


async def test_a_competitive_lobby_match_holds_every_bet_then_rematches(service: Service) -> None:
    lobby = Lobby(service)
    for player in ("ana", "bia"):
        await service.platform.fund(player, 1000)
    table = await lobby.create("ana", mode=COMPETITIVE, bet_chips=100)
    stream = service.stub.WatchLobbyTable(
        matchmaking_pb2.WatchLobbyTableRequest(name=table.name), metadata=service.player("bia")
    )
    assert (await read(stream)).state == LobbyTable.STATE_OPEN
    await lobby.call("SitDown", "bia", table)
    for player in ("ana", "bia"):
        await lobby.call("SetReady", player, table, ready=True)
    await lobby.call("StartMatch", "ana", table)
    await service.settle()
    seen: list[LobbyTable] = []
    while not seen or seen[-1].state != LobbyTable.STATE_IN_MATCH:
        seen.append(await read(stream))
    stream.cancel()
    first = seen[-1].game_table
    assert first.table and first.game_session_address and first.seat == 1
    assert await service.platform.held("ana") == await service.platform.held("bia") == 100
    # A rematch waits for the match to end.
    code, message = await code_of(lobby.call("RequestRematch", "ana", table))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "still being played" in message
    service.platform.tables.finish(first.table)
    table = await lobby.call("RequestRematch", "ana", table)
    assert table.state == LobbyTable.STATE_OPEN and [s.wants_rematch for s in table.seats] == [True, False]
    table = await lobby.call("RequestRematch", "bia", table)
    assert table.state == LobbyTable.STATE_STARTING
    await service.settle()
    table = await lobby.get(table, "ana")
    assert table.state == LobbyTable.STATE_IN_MATCH and table.game_table.match_id != first.match_id
    assert len(service.platform.tables.tables) == 2
    # (the first match's holds are the game session's to settle; the second match holds again)
    assert await service.platform.held("ana") == 200


async def test_a_lobby_start_that_cannot_hold_reopens_the_table(service: Service) -> None:
    lobby = Lobby(service)
    await service.platform.fund("ana", 1000)
    await service.platform.fund("bia", 100)
    table = await lobby.create("ana", mode=COMPETITIVE, bet_chips=100)
    await lobby.call("SitDown", "bia", table)
    for player in ("ana", "bia"):
        await lobby.call("SetReady", player, table, ready=True)
    table = await lobby.update("ana", table, ["options.bet_chips"], mode=COMPETITIVE, bet_chips=150)
    for player in ("ana", "bia"):
        await lobby.call("SetReady", player, table, ready=True)
    await lobby.call("StartMatch", "ana", table)
    await service.settle()
    table = await lobby.get(table, "ana")
    assert table.state == LobbyTable.STATE_OPEN and not any(s.ready for s in table.seats)
    assert seated(table) == ["players/ana", ""]  # bia, who could not cover the bet, stood up
    assert await service.platform.held("ana") == await service.platform.held("bia") == 0
    assert not service.platform.tables.tables


async def test_watch_lobby_streams_matching_tables_as_they_come_and_go(service: Service) -> None:
    lobby = Lobby(service)
    existing = await lobby.create("ana")
    await lobby.create("bia", players=4)  # filtered out
    stream = service.stub.WatchLobby(matchmaking_pb2.WatchLobbyRequest(players=2), metadata=service.player("zoe"))
    first = await read(stream)
    assert first.upserted.name == existing.name
    new = await lobby.create("caio")
    assert (await read(stream)).upserted.name == new.name
    await lobby.call("LeaveLobbyTable", "caio", new)  # closed: no longer open
    assert (await read(stream)).removed == new.name
    stream.cancel()


async def test_lobby_and_party_retries_and_bad_input(service: Service) -> None:
    lobby = Lobby(service)
    ana, bia = service.player("ana"), service.player("bia")
    table = await lobby.create("ana")
    sit = matchmaking_pb2.SitDownRequest(name=table.name, request_id="sit-1")
    first = await service.stub.SitDown(sit, metadata=bia)
    assert await service.stub.SitDown(sit, metadata=bia) == first  # a retry: the first answer
    code, _ = await code_of(
        service.stub.SitDown(matchmaking_pb2.SitDownRequest(name=table.name, request_id="sit-1", seat=1), metadata=bia)
    )
    assert code == grpc.StatusCode.ALREADY_EXISTS  # the same id for another request
    cases: list[tuple[Any, str]] = [
        (service.stub.GetLobbyTable(matchmaking_pb2.GetLobbyTableRequest(name="tables/x"), metadata=ana), "name"),
        (service.stub.ListLobbyTables(matchmaking_pb2.ListLobbyTablesRequest(page_size=-1), metadata=ana), "page_size"),
        (service.stub.ListLobbyTables(matchmaking_pb2.ListLobbyTablesRequest(players=3), metadata=ana), "players"),
        (service.stub.ListLobbyTables(matchmaking_pb2.ListLobbyTablesRequest(preset="x"), metadata=ana), "preset"),
        (
            service.stub.UpdateLobbyTable(
                matchmaking_pb2.UpdateLobbyTableRequest(request_id="u", lobby_table=LobbyTable(name=table.name)),
                metadata=ana,
            ),
            "update_mask",
        ),
        (
            service.stub.SitDown(matchmaking_pb2.SitDownRequest(name=table.name, request_id="s", seat=7), metadata=ana),
            "seat",
        ),
        (
            service.stub.FillWithBots(
                matchmaking_pb2.FillWithBotsRequest(name=table.name, request_id="f", level=9),  # type: ignore[arg-type]
                metadata=ana,
            ),
            "level",
        ),
        (service.stub.SetReady(matchmaking_pb2.SetReadyRequest(name=table.name), metadata=ana), "request_id"),
        (
            service.stub.InviteToTable(
                matchmaking_pb2.InviteToTableRequest(name=table.name, request_id="i", player="bob"), metadata=ana
            ),
            "player",
        ),
        (service.stub.GetParty(matchmaking_pb2.GetPartyRequest(name="party/1"), metadata=ana), "name"),
    ]
    for call, field in cases:
        code, message = await code_of(call)
        assert (code, message.split(":")[0]) == (grpc.StatusCode.INVALID_ARGUMENT, field), message
    code, _ = await code_of(
        service.stub.GetLobbyTable(matchmaking_pb2.GetLobbyTableRequest(name="lobbyTables/nope"), metadata=ana)
    )
    assert code == grpc.StatusCode.NOT_FOUND
    code, _ = await code_of(service.stub.GetParty(matchmaking_pb2.GetPartyRequest(name="parties/nope"), metadata=ana))
    assert code == grpc.StatusCode.NOT_FOUND
    # A party holds two: a third is refused.
    party = await service.stub.CreateParty(matchmaking_pb2.CreatePartyRequest(request_id="p"), metadata=ana)
    await service.stub.InviteToParty(
        matchmaking_pb2.InviteToPartyRequest(name=party.name, request_id="i1", player="players/bia"), metadata=ana
    )
    await service.stub.JoinParty(matchmaking_pb2.JoinPartyRequest(name=party.name, request_id="j"), metadata=bia)
    code, message = await code_of(
        service.stub.InviteToParty(
            matchmaking_pb2.InviteToPartyRequest(name=party.name, request_id="i2", player="players/caio"), metadata=ana
        )
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "full" in message
    left = await service.stub.LeaveParty(
        matchmaking_pb2.LeavePartyRequest(name=party.name, request_id="l"), metadata=ana
    )
    assert not left.members  # the leader left: disbanded
