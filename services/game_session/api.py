"""The game-session service's gRPC API: a thin servicer (read the caller, check the input,
call core, build the reply; errors are mapped by the server pipeline).

Every RPC answers UNIMPLEMENTED until issue #4 builds it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from buraco.v1 import game_session_pb2, game_session_pb2_grpc
from services.common.errors import not_built
from services.common.server import Deps

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
ISSUE = 4


class GameSessionApi(game_session_pb2_grpc.GameSessionServiceServicer):
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def CreateTable(
        self, request: game_session_pb2.CreateTableRequest, context: Context
    ) -> game_session_pb2.Table:
        raise not_built("buraco.v1.GameSessionService/CreateTable", ISSUE)

    async def GetTable(
        self, request: game_session_pb2.GetTableRequest, context: Context
    ) -> game_session_pb2.Table:
        raise not_built("buraco.v1.GameSessionService/GetTable", ISSUE)

    async def ListTables(
        self, request: game_session_pb2.ListTablesRequest, context: Context
    ) -> game_session_pb2.ListTablesResponse:
        raise not_built("buraco.v1.GameSessionService/ListTables", ISSUE)

    async def CancelTable(
        self, request: game_session_pb2.CancelTableRequest, context: Context
    ) -> game_session_pb2.Table:
        raise not_built("buraco.v1.GameSessionService/CancelTable", ISSUE)

    def Subscribe(
        self, request: game_session_pb2.SubscribeRequest, context: Context
    ) -> AsyncIterator[game_session_pb2.TableEvent]:
        raise not_built("buraco.v1.GameSessionService/Subscribe", ISSUE)

    async def GetTableSnapshot(
        self, request: game_session_pb2.GetTableSnapshotRequest, context: Context
    ) -> game_session_pb2.TableSnapshot:
        raise not_built("buraco.v1.GameSessionService/GetTableSnapshot", ISSUE)

    async def Draw(
        self, request: game_session_pb2.DrawRequest, context: Context
    ) -> game_session_pb2.DrawResponse:
        raise not_built("buraco.v1.GameSessionService/Draw", ISSUE)

    async def TakeDiscard(
        self, request: game_session_pb2.TakeDiscardRequest, context: Context
    ) -> game_session_pb2.TakeDiscardResponse:
        raise not_built("buraco.v1.GameSessionService/TakeDiscard", ISSUE)

    async def Meld(
        self, request: game_session_pb2.MeldRequest, context: Context
    ) -> game_session_pb2.MeldResponse:
        raise not_built("buraco.v1.GameSessionService/Meld", ISSUE)

    async def AddToMeld(
        self, request: game_session_pb2.AddToMeldRequest, context: Context
    ) -> game_session_pb2.AddToMeldResponse:
        raise not_built("buraco.v1.GameSessionService/AddToMeld", ISSUE)

    async def Discard(
        self, request: game_session_pb2.DiscardRequest, context: Context
    ) -> game_session_pb2.DiscardResponse:
        raise not_built("buraco.v1.GameSessionService/Discard", ISSUE)

    async def LeaveTable(
        self, request: game_session_pb2.LeaveTableRequest, context: Context
    ) -> game_session_pb2.LeaveTableResponse:
        raise not_built("buraco.v1.GameSessionService/LeaveTable", ISSUE)

    async def GetLegalMoves(
        self, request: game_session_pb2.GetLegalMovesRequest, context: Context
    ) -> game_session_pb2.GetLegalMovesResponse:
        raise not_built("buraco.v1.GameSessionService/GetLegalMoves", ISSUE)

    async def ExportRecords(
        self, request: game_session_pb2.ExportRecordsRequest, context: Context
    ) -> game_session_pb2.ExportRecordsResponse:
        raise not_built("buraco.v1.GameSessionService/ExportRecords", ISSUE)

    async def ProposeAnnulment(
        self, request: game_session_pb2.ProposeAnnulmentRequest, context: Context
    ) -> game_session_pb2.ProposeAnnulmentResponse:
        raise not_built("buraco.v1.GameSessionService/ProposeAnnulment", ISSUE)

    async def VoteAnnulment(
        self, request: game_session_pb2.VoteAnnulmentRequest, context: Context
    ) -> game_session_pb2.VoteAnnulmentResponse:
        raise not_built("buraco.v1.GameSessionService/VoteAnnulment", ISSUE)

    async def SendChat(
        self, request: game_session_pb2.SendChatRequest, context: Context
    ) -> game_session_pb2.SendChatResponse:
        raise not_built("buraco.v1.GameSessionService/SendChat", ISSUE)

    async def MuteChat(
        self, request: game_session_pb2.MuteChatRequest, context: Context
    ) -> game_session_pb2.MuteChatResponse:
        raise not_built("buraco.v1.GameSessionService/MuteChat", ISSUE)


def register(server: grpc.aio.Server, deps: Deps) -> None:
    game_session_pb2_grpc.add_GameSessionServiceServicer_to_server(GameSessionApi(deps), server)
