"""Fixtures of the client library's tests: two game-session servers sharing one database (each
test on SQLite and on PostgreSQL), a service's `Clients` entering the game sessions at one of
them, and a failed call as a client sees it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import pytest

from services.client.channels import Clients
from tests.conftest import DatabaseTarget
from tests.services.game_session.conftest import Cluster
from tests.services.harness import make_config


@pytest.fixture
async def two(db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[Cluster]:
    """Two game-session servers on the test's database; `two.nodes` are [first, second]."""
    cluster = Cluster(db_target, tmp_path)
    try:
        await cluster.start()
        await cluster.start()
        yield cluster
    finally:
        for node in list(cluster.nodes):
            await cluster.stop(node)


def clients_at(cluster: Cluster, tmp_path: Path, entry: str, service: str = "matchmaking") -> Clients:
    """`service`'s `Clients` (its own token) whose game-session address is `entry`."""
    return Clients(make_config(service, tmp_path, addresses={"game_session": entry}), cluster.minter)


class Failed(grpc.aio.AioRpcError):
    """A call's failure as a client sees it: a status code and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, trailers: Sequence[tuple[str, str | bytes]] = ()) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailers), details="test",
                         debug_error_string="")
