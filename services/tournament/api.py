"""The tournament service's gRPC API: a thin servicer (read the caller, check the input,
call core, build the reply; errors are mapped by the server pipeline).

Every RPC answers UNIMPLEMENTED until issue #8 builds it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from buraco.v1 import tournament_pb2, tournament_pb2_grpc
from services.common.errors import not_built
from services.common.server import Deps

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
ISSUE = 8


class TournamentApi(tournament_pb2_grpc.TournamentServiceServicer):
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def CreateTournament(
        self, request: tournament_pb2.CreateTournamentRequest, context: Context
    ) -> tournament_pb2.Tournament:
        raise not_built("buraco.v1.TournamentService/CreateTournament", ISSUE)

    async def GetTournament(
        self, request: tournament_pb2.GetTournamentRequest, context: Context
    ) -> tournament_pb2.Tournament:
        raise not_built("buraco.v1.TournamentService/GetTournament", ISSUE)

    async def ListTournaments(
        self, request: tournament_pb2.ListTournamentsRequest, context: Context
    ) -> tournament_pb2.ListTournamentsResponse:
        raise not_built("buraco.v1.TournamentService/ListTournaments", ISSUE)

    async def CancelTournament(
        self, request: tournament_pb2.CancelTournamentRequest, context: Context
    ) -> tournament_pb2.Tournament:
        raise not_built("buraco.v1.TournamentService/CancelTournament", ISSUE)

    async def Register(
        self, request: tournament_pb2.RegisterRequest, context: Context
    ) -> tournament_pb2.Entrant:
        raise not_built("buraco.v1.TournamentService/Register", ISSUE)

    async def Unregister(
        self, request: tournament_pb2.UnregisterRequest, context: Context
    ) -> tournament_pb2.Entrant:
        raise not_built("buraco.v1.TournamentService/Unregister", ISSUE)

    async def ListEntrants(
        self, request: tournament_pb2.ListEntrantsRequest, context: Context
    ) -> tournament_pb2.ListEntrantsResponse:
        raise not_built("buraco.v1.TournamentService/ListEntrants", ISSUE)

    async def ListStandings(
        self, request: tournament_pb2.ListStandingsRequest, context: Context
    ) -> tournament_pb2.ListStandingsResponse:
        raise not_built("buraco.v1.TournamentService/ListStandings", ISSUE)

    async def GetBracket(
        self, request: tournament_pb2.GetBracketRequest, context: Context
    ) -> tournament_pb2.Bracket:
        raise not_built("buraco.v1.TournamentService/GetBracket", ISSUE)

    async def ReportMatchResult(
        self, request: tournament_pb2.ReportMatchResultRequest, context: Context
    ) -> tournament_pb2.ReportMatchResultResponse:
        raise not_built("buraco.v1.TournamentService/ReportMatchResult", ISSUE)

    def WatchTournament(
        self, request: tournament_pb2.WatchTournamentRequest, context: Context
    ) -> AsyncIterator[tournament_pb2.TournamentUpdate]:
        raise not_built("buraco.v1.TournamentService/WatchTournament", ISSUE)


def register(server: grpc.aio.Server, deps: Deps) -> None:
    tournament_pb2_grpc.add_TournamentServiceServicer_to_server(TournamentApi(deps), server)
