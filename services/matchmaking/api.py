"""The matchmaking service's gRPC API: a thin servicer (read the caller, check the input,
call the tickets, the parties or the lobby, build the reply; errors are mapped by the server
pipeline).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from buraco.v1 import common_pb2, matchmaking_pb2, matchmaking_pb2_grpc
from engine.rules import PRESETS
from services.common import loadtest_runs
from services.common import validation as check
from services.common.auth import Identity, Kind, current_identity
from services.common.server import Deps
from services.matchmaking.core import Viewer
from services.matchmaking.erasure import Erasure
from services.matchmaking.lobby import UPDATABLE, Filters, Lobby
from services.matchmaking.options import check_bot_level, check_preferences, check_table_options
from services.matchmaking.parties import Parties
from services.matchmaking.tickets import Tickets

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


def viewer_of(identity: Identity) -> Viewer:
    return Viewer(identity.player, privileged=identity.kind is not Kind.PLAYER)


def acting_player(identity: Identity) -> str:
    """The player the call is for: the caller, or the player a service or admin acts for."""
    return identity.require_player()


class MatchmakingApi(matchmaking_pb2_grpc.MatchmakingServiceServicer):
    def __init__(self, deps: Deps, tickets: Tickets, parties: Parties, lobby: Lobby, erasure: Erasure) -> None:
        self.deps = deps
        self.tickets = tickets
        self.parties = parties
        self.lobby = lobby
        self.erasure = erasure

    # -- tickets ----------------------------------------------------------------------------------

    async def CreateTicket(
        self, request: matchmaking_pb2.CreateTicketRequest, context: Context
    ) -> matchmaking_pb2.Ticket:
        identity = current_identity()
        player = acting_player(identity)
        check.request_id(request.request_id)
        check.message(request, "ticket")
        check.message(request.ticket, "preferences", "ticket.preferences")
        preferences = check_preferences(request.ticket.preferences, "ticket.preferences")
        party = None
        if request.ticket.party:
            party = check.resource_id(request.ticket.party, "ticket.party", "parties")
            check.require(preferences.seats == 4, "ticket.party", "a party plays as partners: 4-player tables only")
        return await self.tickets.create_ticket(identity.principal, player, request, preferences, party)

    async def GetTicket(self, request: matchmaking_pb2.GetTicketRequest, context: Context) -> matchmaking_pb2.Ticket:
        identity = current_identity()
        ticket = check.resource_id(request.name, "name", "tickets")
        return await self.tickets.get_ticket(ticket, viewer_of(identity))

    async def CancelTicket(
        self, request: matchmaking_pb2.CancelTicketRequest, context: Context
    ) -> matchmaking_pb2.Ticket:
        identity = current_identity()
        ticket = check.resource_id(request.name, "name", "tickets")
        check.request_id(request.request_id)
        return await self.tickets.cancel_ticket(identity.principal, request, ticket, viewer_of(identity))

    async def ConfirmTicket(
        self, request: matchmaking_pb2.ConfirmTicketRequest, context: Context
    ) -> matchmaking_pb2.Ticket:
        identity = current_identity()
        ticket = check.resource_id(request.name, "name", "tickets")
        check.request_id(request.request_id)
        return await self.tickets.confirm_ticket(identity.principal, request, ticket, viewer_of(identity))

    async def WatchTicket(
        self, request: matchmaking_pb2.WatchTicketRequest, context: Context
    ) -> AsyncIterator[matchmaking_pb2.Ticket]:
        identity = current_identity()
        ticket = check.resource_id(request.name, "name", "tickets")
        async for update in self.tickets.watch_ticket(ticket, viewer_of(identity)):
            yield update

    # -- parties ----------------------------------------------------------------------------------

    async def CreateParty(self, request: matchmaking_pb2.CreatePartyRequest, context: Context) -> matchmaking_pb2.Party:
        identity = current_identity()
        player = acting_player(identity)
        check.request_id(request.request_id)
        return await self.parties.create_party(identity.principal, request, player)

    async def GetParty(self, request: matchmaking_pb2.GetPartyRequest, context: Context) -> matchmaking_pb2.Party:
        identity = current_identity()
        party = check.resource_id(request.name, "name", "parties")
        return await self.parties.get_party(party, viewer_of(identity))

    async def InviteToParty(
        self, request: matchmaking_pb2.InviteToPartyRequest, context: Context
    ) -> matchmaking_pb2.Party:
        identity = current_identity()
        player = acting_player(identity)
        party = check.resource_id(request.name, "name", "parties")
        check.request_id(request.request_id)
        invitee = check.player(request.player, "player")
        check.require(invitee != player, "player", "the leader is already in the party")
        return await self.parties.invite_to_party(identity.principal, request, party, player, invitee)

    async def JoinParty(self, request: matchmaking_pb2.JoinPartyRequest, context: Context) -> matchmaking_pb2.Party:
        identity = current_identity()
        player = acting_player(identity)
        party = check.resource_id(request.name, "name", "parties")
        check.request_id(request.request_id)
        return await self.parties.join_party(identity.principal, request, party, player)

    async def LeaveParty(self, request: matchmaking_pb2.LeavePartyRequest, context: Context) -> matchmaking_pb2.Party:
        identity = current_identity()
        player = acting_player(identity)
        party = check.resource_id(request.name, "name", "parties")
        check.request_id(request.request_id)
        return await self.parties.leave_party(identity.principal, request, party, player)

    # -- the lobby --------------------------------------------------------------------------------

    def _lobby_id(self, name: str, field: str = "name") -> str:
        return check.resource_id(name, field, "lobbyTables")

    async def CreateLobbyTable(
        self, request: matchmaking_pb2.CreateLobbyTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        check.request_id(request.request_id)
        check.message(request, "lobby_table")
        check.message(request.lobby_table, "options", "lobby_table.options")
        options = check_table_options(request.lobby_table.options, "lobby_table.options")
        return await self.lobby.create(identity.principal, request, player, options)

    async def GetLobbyTable(
        self, request: matchmaking_pb2.GetLobbyTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        return await self.lobby.get(self._lobby_id(request.name), viewer_of(identity))

    async def ListLobbyTables(
        self, request: matchmaking_pb2.ListLobbyTablesRequest, context: Context
    ) -> matchmaking_pb2.ListLobbyTablesResponse:
        identity = current_identity()
        size = check.page_size(request.page_size, default=20, maximum=100)
        token = check.page_token(request.page_token)
        after = token.get("after")
        check.require(after is None or isinstance(after, str), "page_token", "not a page token of this service")
        return await self.lobby.list_tables(viewer_of(identity), _filters(request), size, after)

    async def UpdateLobbyTable(
        self, request: matchmaking_pb2.UpdateLobbyTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        check.request_id(request.request_id)
        check.message(request, "lobby_table")
        table = self._lobby_id(request.lobby_table.name, "lobby_table.name")
        check.message(request, "update_mask")
        paths = list(request.update_mask.paths)
        check.require(bool(paths), "update_mask", "required: the options to change, e.g. options.bet_chips")
        for i, path in enumerate(paths):
            check.require(path in UPDATABLE, f"update_mask.paths[{i}]", f"one of {', '.join(sorted(UPDATABLE))}")
        return await self.lobby.update_options(identity.principal, request, table, player, paths)

    async def SitDown(self, request: matchmaking_pb2.SitDownRequest, context: Context) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        table = self._lobby_id(request.name)
        check.request_id(request.request_id)
        seat = None
        if request.HasField("seat"):
            seat = check.int_range(request.seat, "seat", 0, 3)
        return await self.lobby.sit(identity.principal, request, table, player, seat)

    async def StandUp(self, request: matchmaking_pb2.StandUpRequest, context: Context) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        table = self._lobby_id(request.name)
        check.request_id(request.request_id)
        return await self.lobby.stand(identity.principal, request, table, player)

    async def LeaveLobbyTable(
        self, request: matchmaking_pb2.LeaveLobbyTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        table = self._lobby_id(request.name)
        check.request_id(request.request_id)
        return await self.lobby.leave(identity.principal, request, table, player)

    async def InviteToTable(
        self, request: matchmaking_pb2.InviteToTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        table = self._lobby_id(request.name)
        check.request_id(request.request_id)
        invitee = check.player(request.player, "player")
        check.require(invitee != player, "player", "the chief needs no invitation")
        return await self.lobby.invite(identity.principal, request, table, player, invitee)

    async def FillWithBots(
        self, request: matchmaking_pb2.FillWithBotsRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        table = self._lobby_id(request.name)
        check.request_id(request.request_id)
        check_bot_level(request.level, "level", unset="the table's options.bot_level (MEDIUM when unset)")
        return await self.lobby.fill_with_bots(identity.principal, request, table, player, request.level)

    async def SetReady(self, request: matchmaking_pb2.SetReadyRequest, context: Context) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        table = self._lobby_id(request.name)
        check.request_id(request.request_id)
        return await self.lobby.set_ready(identity.principal, request, table, player, request.ready)

    async def StartMatch(
        self, request: matchmaking_pb2.StartMatchRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        table = self._lobby_id(request.name)
        check.request_id(request.request_id)
        return await self.lobby.start(identity.principal, request, table, player)

    async def RequestRematch(
        self, request: matchmaking_pb2.RequestRematchRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        identity = current_identity()
        player = acting_player(identity)
        table = self._lobby_id(request.name)
        check.request_id(request.request_id)
        return await self.lobby.request_rematch(identity.principal, request, table, player)

    async def WatchLobbyTable(
        self, request: matchmaking_pb2.WatchLobbyTableRequest, context: Context
    ) -> AsyncIterator[matchmaking_pb2.LobbyTable]:
        identity = current_identity()
        table = self._lobby_id(request.name)
        async for update in self.lobby.watch(table, viewer_of(identity)):
            yield update

    async def WatchLobby(
        self, request: matchmaking_pb2.WatchLobbyRequest, context: Context
    ) -> AsyncIterator[matchmaking_pb2.LobbyUpdate]:
        identity = current_identity()
        async for update in self.lobby.watch_lobby(viewer_of(identity), _filters(request)):
            yield update

    # -- administration ---------------------------------------------------------------------------

    async def EraseLoadTestRun(
        self, request: common_pb2.EraseLoadTestRunRequest, context: Context
    ) -> common_pb2.EraseLoadTestRunResponse:
        identity, run = loadtest_runs.admitted(request, "MatchmakingService")
        return await self.erasure.erase(identity.principal, request, run)


def _filters(request: matchmaking_pb2.ListLobbyTablesRequest | matchmaking_pb2.WatchLobbyRequest) -> Filters:
    if request.preset:
        check.require(request.preset in PRESETS, "preset", f"one of {', '.join(PRESETS)}")
    check.require(request.players in (0, 2, 4), "players", "2 or 4 (0: any)")
    check.enum(request.mode, "mode", common_pb2.TableMode.DESCRIPTOR, required=False)
    check.require(request.max_bet_chips >= 0, "max_bet_chips", "must not be negative")
    return Filters(request.preset, request.players, request.mode, request.max_bet_chips, request.only_with_free_seat)
