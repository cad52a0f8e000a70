"""The ranking service's gRPC API: a thin servicer (read the caller, check the input,
call core, build the reply; errors are mapped by the server pipeline).

Every RPC answers UNIMPLEMENTED until issue #6 builds it.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc

from buraco.v1 import ranking_pb2, ranking_pb2_grpc
from services.common.errors import not_built
from services.common.server import Deps

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
ISSUE = 6


class RankingApi(ranking_pb2_grpc.RankingServiceServicer):
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def RecordMatch(
        self, request: ranking_pb2.RecordMatchRequest, context: Context
    ) -> ranking_pb2.RecordMatchResponse:
        raise not_built("buraco.v1.RankingService/RecordMatch", ISSUE)

    async def GetPlayer(
        self, request: ranking_pb2.GetPlayerRequest, context: Context
    ) -> ranking_pb2.PlayerProfile:
        raise not_built("buraco.v1.RankingService/GetPlayer", ISSUE)

    async def ListXpEvents(
        self, request: ranking_pb2.ListXpEventsRequest, context: Context
    ) -> ranking_pb2.ListXpEventsResponse:
        raise not_built("buraco.v1.RankingService/ListXpEvents", ISSUE)

    async def GetRating(self, request: ranking_pb2.GetRatingRequest, context: Context) -> ranking_pb2.Rating:
        raise not_built("buraco.v1.RankingService/GetRating", ISSUE)

    async def BatchGetRatings(
        self, request: ranking_pb2.BatchGetRatingsRequest, context: Context
    ) -> ranking_pb2.BatchGetRatingsResponse:
        raise not_built("buraco.v1.RankingService/BatchGetRatings", ISSUE)

    async def ListRatingHistory(
        self, request: ranking_pb2.ListRatingHistoryRequest, context: Context
    ) -> ranking_pb2.ListRatingHistoryResponse:
        raise not_built("buraco.v1.RankingService/ListRatingHistory", ISSUE)

    async def ListLeaderboardEntries(
        self, request: ranking_pb2.ListLeaderboardEntriesRequest, context: Context
    ) -> ranking_pb2.ListLeaderboardEntriesResponse:
        raise not_built("buraco.v1.RankingService/ListLeaderboardEntries", ISSUE)

    async def GetLeaderboardRank(
        self, request: ranking_pb2.GetLeaderboardRankRequest, context: Context
    ) -> ranking_pb2.LeaderboardEntry:
        raise not_built("buraco.v1.RankingService/GetLeaderboardRank", ISSUE)

    async def ListLeaderboardNeighbors(
        self, request: ranking_pb2.ListLeaderboardNeighborsRequest, context: Context
    ) -> ranking_pb2.ListLeaderboardNeighborsResponse:
        raise not_built("buraco.v1.RankingService/ListLeaderboardNeighbors", ISSUE)


def register(server: grpc.aio.Server, deps: Deps) -> None:
    ranking_pb2_grpc.add_RankingServiceServicer_to_server(RankingApi(deps), server)
