"""`TableConnection`: its own bookkeeping on a Play stream (an action waiting for its answer when the
stream ends for good, or when no answer comes, fails instead of waiting for ever; waiters of the
model wake on every change, and one that is cancelled leaves the others waiting), and its stream and
actions following the redirect to the table's owner across two game-session servers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from engine.actions import DRAW
from engine.bots import make_bot
from engine.rules import preset
from services.client.connection import TableConnection, play_seat
from services.common.auth import Kind
from tests.conftest import DatabaseTarget
from tests.services.game_session.conftest import Cluster, table_request


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


@pytest.mark.parametrize("stream", ["SubscribeChanges", "Subscribe", "Play"])
async def test_a_connection_follows_the_redirect_to_the_tables_owner(tmp_path: Path, stream: str) -> None:
    """Connected through a replica that does not own the table, a client is redirected to the owner
    (UNAVAILABLE + buraco-owner-address) for its stream and its actions, and plays on there, on
    either stream."""
    cluster = Cluster(DatabaseTarget("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'gs.db'}"), tmp_path)
    owner = await cluster.start()
    other = await cluster.start()
    connections: list[TableConnection] = []
    try:
        request = table_request("redirected", "ann", "bob")
        table = await cluster.stub(owner).CreateTable(request, metadata=cluster.token(Kind.SERVICE, "matchmaking"))
        connections = [TableConnection(other.address, cluster.minter.mint(Kind.PLAYER, p), table.name,
                                       by_change=stream != "Subscribe", play=stream == "Play") for p in ("ann", "bob")]
        await asyncio.gather(*(c.start() for c in connections))
        assert [c.address for c in connections] == [owner.address] * 2
        assert all(c.home == other.address for c in connections)
        rules = preset("aberto")
        games = [play_seat(c, make_bot("random", seed=s), rules) for s, c in enumerate(connections)]
        assert sum(await asyncio.wait_for(asyncio.gather(*games), 60)) > 20
        assert all(c.model.finished and c.address == owner.address for c in connections)
    finally:
        for connection in connections:
            await connection.close()
        for node in list(cluster.nodes):
            await cluster.stop(node)
