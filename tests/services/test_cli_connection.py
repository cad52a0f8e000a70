"""`TableConnection`'s own bookkeeping on a Play stream: an action waiting for its answer when the
stream ends for good, or when no answer comes, fails instead of waiting for ever; waiters of the
model wake on every change, and one that is cancelled leaves the others waiting."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from engine.actions import DRAW
from services.cli.seat import TableConnection


class _Failed(grpc.aio.AioRpcError):
    def __init__(self) -> None:
        super().__init__(grpc.StatusCode.PERMISSION_DENIED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                         details="no seat", debug_error_string="")


def _connection(retry_seconds: float = 30.0) -> tuple[TableConnection, asyncio.Event]:
    """A Play connection whose stream (no server) fails for good once `fail` is set."""
    connection = TableConnection("127.0.0.1:1", "token", "tables/t", retry_seconds=retry_seconds, play=True)
    fail = asyncio.Event()

    async def stream() -> None:
        await fail.wait()
        connection.stream_error = _Failed()
        raise connection.stream_error

    connection._follow_stream = stream  # type: ignore[method-assign]
    connection._follower = asyncio.ensure_future(connection._follow())
    return connection, fail


async def test_an_action_pending_when_the_stream_fails_gets_the_streams_error() -> None:
    connection, fail = _connection()
    acting = asyncio.ensure_future(connection.act(DRAW))
    while not connection._pending:
        await asyncio.sleep(0)
    fail.set()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await asyncio.wait_for(acting, 10)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and not connection._pending
    with pytest.raises(ConnectionError):  # the stream is gone: no more actions
        await connection.act(DRAW)
    with pytest.raises(grpc.aio.AioRpcError):
        await connection._follower  # type: ignore[misc]


async def test_an_action_without_an_answer_times_out() -> None:
    connection, fail = _connection(retry_seconds=-9.95)  # the answer is awaited retry_seconds + 10 s
    with pytest.raises(TimeoutError, match="no answer on the Play stream"):
        await asyncio.wait_for(connection.act(DRAW), 10)
    assert not connection._pending
    fail.set()
    with pytest.raises(grpc.aio.AioRpcError):
        await connection._follower  # type: ignore[misc]


async def test_every_waiter_wakes_on_a_change_and_a_cancelled_one_leaves_the_others() -> None:
    connection, fail = _connection()
    seen: list[int] = []

    async def wait_for_seq(seq: int) -> None:
        await connection.wait_until(lambda model: model.seq >= seq)
        seen.append(seq)

    waiters: list[Any] = [asyncio.ensure_future(wait_for_seq(n)) for n in (1, 2, 2)]
    cancelled = asyncio.ensure_future(wait_for_seq(1))
    while len(connection._waiters) < 4:
        await asyncio.sleep(0)
    cancelled.cancel()
    connection.model.seq = 1
    await connection._applied()
    await waiters[0]
    assert seen == [1] and not any(w.done() for w in waiters[1:])
    connection.model.seq = 2
    await connection._applied()
    await asyncio.gather(*waiters[1:])
    assert seen == [1, 2, 2] and cancelled.cancelled()
    fail.set()
    with pytest.raises(grpc.aio.AioRpcError):
        await connection._follower  # type: ignore[misc]
