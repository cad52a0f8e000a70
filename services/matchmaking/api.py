"""The matchmaking service's gRPC API: a thin servicer (read the caller, check the input,
call core, build the reply; errors are mapped by the server pipeline).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from buraco.v1 import common_pb2, matchmaking_pb2, matchmaking_pb2_grpc
from engine.errors import RulesetError
from engine.rules import PARAMETERS, PRESETS, ruleset_from_spec
from services.common import validation as check
from services.common.auth import Identity, Kind, current_identity
from services.common.errors import InvalidArgumentError, not_built
from services.common.server import Deps
from services.matchmaking.core import Core, Preferences, Viewer

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
ISSUE = 7
#: The largest bet a table takes (the wallet's own limit per stake is far above).
MAX_BET_CHIPS = 10**12


def viewer_of(identity: Identity) -> Viewer:
    return Viewer(identity.player, privileged=identity.kind is not Kind.PLAYER)


def acting_player(identity: Identity) -> str:
    """The player the call is for: the caller, or the player a service or admin acts for."""
    return identity.require_player()


def check_preferences(p: matchmaking_pb2.MatchPreferences, field: str) -> Preferences:
    check.require(p.preset in PRESETS, f"{field}.preset", f"one of {', '.join(PRESETS)}")
    check.require(p.players in (2, 4), f"{field}.players", "must be 2 or 4")
    check.enum(p.length, f"{field}.length", common_pb2.MatchLength.DESCRIPTOR)
    if p.length == common_pb2.MATCH_LENGTH_POINTS:
        check.int_range(p.target_points, f"{field}.target_points", 505, 3005)
    else:
        check.require(p.target_points == 0, f"{field}.target_points", "must be 0 for an express match")
    check.enum(p.mode, f"{field}.mode", common_pb2.TableMode.DESCRIPTOR)
    if p.mode == common_pb2.TABLE_MODE_COMPETITIVE:
        check.int_range(p.bet_chips, f"{field}.bet_chips", 1, MAX_BET_CHIPS)
    else:
        check.require(p.bet_chips == 0, f"{field}.bet_chips", "must be 0 at practice tables (no chips)")
    return Preferences(p.preset, p.players, p.length, p.target_points, p.mode, p.bet_chips)


def _override(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # a bare word


def check_table_options(options: common_pb2.TableOptions, field: str) -> common_pb2.TableOptions:
    """A lobby table's options, checked as the game-session service checks them."""
    out = common_pb2.TableOptions()
    out.CopyFrom(options)
    preset = options.ruleset.preset
    check.require(preset in PRESETS, f"{field}.ruleset.preset", f"one of {', '.join(PRESETS)}")
    check.require(options.players in (2, 4), f"{field}.players", "must be 2 or 4")
    check.enum(options.length, f"{field}.length", common_pb2.MatchLength.DESCRIPTOR)
    if options.length == common_pb2.MATCH_LENGTH_POINTS:
        check.int_range(options.target_points, f"{field}.target_points", 505, 3005)
    else:
        check.require(options.target_points == 0, f"{field}.target_points", "must be 0 for an express match")
    check.enum(options.mode, f"{field}.mode", common_pb2.TableMode.DESCRIPTOR)
    if options.mode == common_pb2.TABLE_MODE_COMPETITIVE:
        check.int_range(options.bet_chips, f"{field}.bet_chips", 1, MAX_BET_CHIPS)
    else:
        check.require(options.bet_chips == 0, f"{field}.bet_chips", "must be 0 at practice tables (no chips)")
    if options.draw_seconds:
        check.int_range(options.draw_seconds, f"{field}.draw_seconds", 5, 300)
    if options.play_seconds:
        check.int_range(options.play_seconds, f"{field}.play_seconds", 5, 600)
    spec: dict[str, Any] = {"preset": preset}
    for key in sorted(options.ruleset.overrides):
        path = f"{field}.ruleset.overrides[{key[:40]!r}]"
        check.require(key in PARAMETERS and key != "name", path, "not a ruleset parameter")
        check.require(key != "target", path, "set the match length with length and target_points")
        spec[key] = _override(options.ruleset.overrides[key])
    spec["target"] = options.target_points if options.length == common_pb2.MATCH_LENGTH_POINTS else 0
    try:
        ruleset_from_spec(spec)
    except (RulesetError, TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{field}.ruleset", str(error)[:200]) from None
    return out


class MatchmakingApi(matchmaking_pb2_grpc.MatchmakingServiceServicer):
    def __init__(self, deps: Deps, core: Core) -> None:
        self.deps = deps
        self.core = core

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
        return await self.core.create_ticket(identity.principal, player, request, preferences, party)

    async def GetTicket(self, request: matchmaking_pb2.GetTicketRequest, context: Context) -> matchmaking_pb2.Ticket:
        identity = current_identity()
        ticket = check.resource_id(request.name, "name", "tickets")
        return await self.core.get_ticket(ticket, viewer_of(identity))

    async def CancelTicket(
        self, request: matchmaking_pb2.CancelTicketRequest, context: Context
    ) -> matchmaking_pb2.Ticket:
        identity = current_identity()
        ticket = check.resource_id(request.name, "name", "tickets")
        check.request_id(request.request_id)
        return await self.core.cancel_ticket(identity.principal, request, ticket, viewer_of(identity))

    async def ConfirmTicket(
        self, request: matchmaking_pb2.ConfirmTicketRequest, context: Context
    ) -> matchmaking_pb2.Ticket:
        identity = current_identity()
        ticket = check.resource_id(request.name, "name", "tickets")
        check.request_id(request.request_id)
        return await self.core.confirm_ticket(identity.principal, request, ticket, viewer_of(identity))

    async def WatchTicket(
        self, request: matchmaking_pb2.WatchTicketRequest, context: Context
    ) -> AsyncIterator[matchmaking_pb2.Ticket]:
        identity = current_identity()
        ticket = check.resource_id(request.name, "name", "tickets")
        async for update in self.core.watch_ticket(ticket, viewer_of(identity)):
            yield update

    # -- parties ----------------------------------------------------------------------------------

    async def CreateParty(self, request: matchmaking_pb2.CreatePartyRequest, context: Context) -> matchmaking_pb2.Party:
        identity = current_identity()
        player = acting_player(identity)
        check.request_id(request.request_id)
        return await self.core.create_party(identity.principal, request, player)

    async def GetParty(self, request: matchmaking_pb2.GetPartyRequest, context: Context) -> matchmaking_pb2.Party:
        identity = current_identity()
        party = check.resource_id(request.name, "name", "parties")
        return await self.core.get_party(party, viewer_of(identity))

    async def InviteToParty(
        self, request: matchmaking_pb2.InviteToPartyRequest, context: Context
    ) -> matchmaking_pb2.Party:
        identity = current_identity()
        player = acting_player(identity)
        party = check.resource_id(request.name, "name", "parties")
        check.request_id(request.request_id)
        invitee = check.player(request.player, "player")
        check.require(invitee != player, "player", "the leader is already in the party")
        return await self.core.invite_to_party(identity.principal, request, party, player, invitee)

    async def JoinParty(self, request: matchmaking_pb2.JoinPartyRequest, context: Context) -> matchmaking_pb2.Party:
        identity = current_identity()
        player = acting_player(identity)
        party = check.resource_id(request.name, "name", "parties")
        check.request_id(request.request_id)
        return await self.core.join_party(identity.principal, request, party, player)

    async def LeaveParty(self, request: matchmaking_pb2.LeavePartyRequest, context: Context) -> matchmaking_pb2.Party:
        identity = current_identity()
        player = acting_player(identity)
        party = check.resource_id(request.name, "name", "parties")
        check.request_id(request.request_id)
        return await self.core.leave_party(identity.principal, request, party, player)

    # -- the lobby --------------------------------------------------------------------------------

    async def CreateLobbyTable(
        self, request: matchmaking_pb2.CreateLobbyTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/CreateLobbyTable", ISSUE)

    async def GetLobbyTable(
        self, request: matchmaking_pb2.GetLobbyTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/GetLobbyTable", ISSUE)

    async def ListLobbyTables(
        self, request: matchmaking_pb2.ListLobbyTablesRequest, context: Context
    ) -> matchmaking_pb2.ListLobbyTablesResponse:
        raise not_built("buraco.v1.MatchmakingService/ListLobbyTables", ISSUE)

    async def UpdateLobbyTable(
        self, request: matchmaking_pb2.UpdateLobbyTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/UpdateLobbyTable", ISSUE)

    async def SitDown(self, request: matchmaking_pb2.SitDownRequest, context: Context) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/SitDown", ISSUE)

    async def StandUp(self, request: matchmaking_pb2.StandUpRequest, context: Context) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/StandUp", ISSUE)

    async def LeaveLobbyTable(
        self, request: matchmaking_pb2.LeaveLobbyTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/LeaveLobbyTable", ISSUE)

    async def InviteToTable(
        self, request: matchmaking_pb2.InviteToTableRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/InviteToTable", ISSUE)

    async def FillWithBots(
        self, request: matchmaking_pb2.FillWithBotsRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/FillWithBots", ISSUE)

    async def SetReady(self, request: matchmaking_pb2.SetReadyRequest, context: Context) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/SetReady", ISSUE)

    async def StartMatch(
        self, request: matchmaking_pb2.StartMatchRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/StartMatch", ISSUE)

    async def RequestRematch(
        self, request: matchmaking_pb2.RequestRematchRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/RequestRematch", ISSUE)

    def WatchLobbyTable(
        self, request: matchmaking_pb2.WatchLobbyTableRequest, context: Context
    ) -> AsyncIterator[matchmaking_pb2.LobbyTable]:
        raise not_built("buraco.v1.MatchmakingService/WatchLobbyTable", ISSUE)

    def WatchLobby(
        self, request: matchmaking_pb2.WatchLobbyRequest, context: Context
    ) -> AsyncIterator[matchmaking_pb2.LobbyUpdate]:
        raise not_built("buraco.v1.MatchmakingService/WatchLobby", ISSUE)
