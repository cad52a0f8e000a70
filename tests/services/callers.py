"""Who may call what, checked over gRPC (docs/contracts.md, "Who may call what"): the outcome of a
call as (status, message), and the PERMISSION_DENIED a caller outside a method's table gets."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import grpc


async def outcome(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    """The call's status and message (OK and "" when it succeeded)."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details() or ""
    return grpc.StatusCode.OK, ""


def denied(principal: str, method: str, who: str) -> tuple[grpc.StatusCode, str]:
    """The refusal of `method` (`WalletService.Settle`) to `principal`, naming who may call it."""
    return grpc.StatusCode.PERMISSION_DENIED, f"{principal} may not call {method}: only {who} may"
