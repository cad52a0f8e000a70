"""The matchmaking service's gRPC API: a thin servicer (read the caller, check the input,
call core, build the reply; errors are mapped by the server pipeline).

Every RPC answers UNIMPLEMENTED until issue #7 builds it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from buraco.v1 import matchmaking_pb2, matchmaking_pb2_grpc
from services.common.errors import not_built
from services.common.server import Deps

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
ISSUE = 7


class MatchmakingApi(matchmaking_pb2_grpc.MatchmakingServiceServicer):
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def CreateTicket(
        self, request: matchmaking_pb2.CreateTicketRequest, context: Context
    ) -> matchmaking_pb2.Ticket:
        raise not_built("buraco.v1.MatchmakingService/CreateTicket", ISSUE)

    async def GetTicket(
        self, request: matchmaking_pb2.GetTicketRequest, context: Context
    ) -> matchmaking_pb2.Ticket:
        raise not_built("buraco.v1.MatchmakingService/GetTicket", ISSUE)

    async def CancelTicket(
        self, request: matchmaking_pb2.CancelTicketRequest, context: Context
    ) -> matchmaking_pb2.Ticket:
        raise not_built("buraco.v1.MatchmakingService/CancelTicket", ISSUE)

    async def ConfirmTicket(
        self, request: matchmaking_pb2.ConfirmTicketRequest, context: Context
    ) -> matchmaking_pb2.Ticket:
        raise not_built("buraco.v1.MatchmakingService/ConfirmTicket", ISSUE)

    def WatchTicket(
        self, request: matchmaking_pb2.WatchTicketRequest, context: Context
    ) -> AsyncIterator[matchmaking_pb2.Ticket]:
        raise not_built("buraco.v1.MatchmakingService/WatchTicket", ISSUE)

    async def CreateParty(
        self, request: matchmaking_pb2.CreatePartyRequest, context: Context
    ) -> matchmaking_pb2.Party:
        raise not_built("buraco.v1.MatchmakingService/CreateParty", ISSUE)

    async def GetParty(
        self, request: matchmaking_pb2.GetPartyRequest, context: Context
    ) -> matchmaking_pb2.Party:
        raise not_built("buraco.v1.MatchmakingService/GetParty", ISSUE)

    async def InviteToParty(
        self, request: matchmaking_pb2.InviteToPartyRequest, context: Context
    ) -> matchmaking_pb2.Party:
        raise not_built("buraco.v1.MatchmakingService/InviteToParty", ISSUE)

    async def JoinParty(
        self, request: matchmaking_pb2.JoinPartyRequest, context: Context
    ) -> matchmaking_pb2.Party:
        raise not_built("buraco.v1.MatchmakingService/JoinParty", ISSUE)

    async def LeaveParty(
        self, request: matchmaking_pb2.LeavePartyRequest, context: Context
    ) -> matchmaking_pb2.Party:
        raise not_built("buraco.v1.MatchmakingService/LeaveParty", ISSUE)

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

    async def SitDown(
        self, request: matchmaking_pb2.SitDownRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
        raise not_built("buraco.v1.MatchmakingService/SitDown", ISSUE)

    async def StandUp(
        self, request: matchmaking_pb2.StandUpRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
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

    async def SetReady(
        self, request: matchmaking_pb2.SetReadyRequest, context: Context
    ) -> matchmaking_pb2.LobbyTable:
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


def register(server: grpc.aio.Server, deps: Deps) -> None:
    matchmaking_pb2_grpc.add_MatchmakingServiceServicer_to_server(MatchmakingApi(deps), server)
