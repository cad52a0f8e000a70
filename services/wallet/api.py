"""The wallet service's gRPC API: a thin servicer (read the caller, check the input,
call core, build the reply; errors are mapped by the server pipeline).

Every RPC answers UNIMPLEMENTED until issue #5 builds it.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc

from buraco.v1 import wallet_pb2, wallet_pb2_grpc
from services.common.errors import not_built
from services.common.server import Deps

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
ISSUE = 5


class WalletApi(wallet_pb2_grpc.WalletServiceServicer):
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    async def GetAccount(self, request: wallet_pb2.GetAccountRequest, context: Context) -> wallet_pb2.Account:
        raise not_built("buraco.v1.WalletService/GetAccount", ISSUE)

    async def CreateAccount(
        self, request: wallet_pb2.CreateAccountRequest, context: Context
    ) -> wallet_pb2.Account:
        raise not_built("buraco.v1.WalletService/CreateAccount", ISSUE)

    async def ListTransfers(
        self, request: wallet_pb2.ListTransfersRequest, context: Context
    ) -> wallet_pb2.ListTransfersResponse:
        raise not_built("buraco.v1.WalletService/ListTransfers", ISSUE)

    async def HoldBets(
        self, request: wallet_pb2.HoldBetsRequest, context: Context
    ) -> wallet_pb2.HoldBetsResponse:
        raise not_built("buraco.v1.WalletService/HoldBets", ISSUE)

    async def Settle(self, request: wallet_pb2.SettleRequest, context: Context) -> wallet_pb2.SettleResponse:
        raise not_built("buraco.v1.WalletService/Settle", ISSUE)

    async def Void(self, request: wallet_pb2.VoidRequest, context: Context) -> wallet_pb2.VoidResponse:
        raise not_built("buraco.v1.WalletService/Void", ISSUE)

    async def ExpireHolds(
        self, request: wallet_pb2.ExpireHoldsRequest, context: Context
    ) -> wallet_pb2.ExpireHoldsResponse:
        raise not_built("buraco.v1.WalletService/ExpireHolds", ISSUE)

    async def Grant(self, request: wallet_pb2.GrantRequest, context: Context) -> wallet_pb2.Transfer:
        raise not_built("buraco.v1.WalletService/Grant", ISSUE)

    async def AdminCorrection(
        self, request: wallet_pb2.AdminCorrectionRequest, context: Context
    ) -> wallet_pb2.Transfer:
        raise not_built("buraco.v1.WalletService/AdminCorrection", ISSUE)


def register(server: grpc.aio.Server, deps: Deps) -> None:
    wallet_pb2_grpc.add_WalletServiceServicer_to_server(WalletApi(deps), server)
