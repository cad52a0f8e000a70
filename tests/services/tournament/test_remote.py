"""The tournament service's calls to game sessions (`remote.GrpcServices`) against two real
game-session servers sharing a database, entered at the replica that does not own the tables: they
follow the redirect to the owner (reads, cancellations), and a CreateTable retried after its
answer was lost gets the table back instead of a refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from buraco.v1 import common_pb2
from services.client.channels import Clients
from services.tournament.ports import Refused, TableSeat, TableState
from services.tournament.remote import GrpcServices
from tests.conftest import DatabaseTarget
from tests.services.game_session.conftest import Cluster, options
from tests.services.harness import make_config


@pytest.fixture
async def two_ways(db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[tuple[GrpcServices, GrpcServices]]:
    """Two replicas; GrpcServices entering at the first (which will own the tables: they are
    created there), and GrpcServices entering at the second."""
    cluster = Cluster(db_target, tmp_path)
    made: list[Clients] = []
    try:
        for _ in range(2):
            node = await cluster.start()
            config = make_config("tournament", tmp_path, addresses={"game_session": node.address})
            made.append(Clients(config, cluster.minter))
        yield GrpcServices(made[0], timeout=10), GrpcServices(made[1], timeout=10)
    finally:
        for clients in made:
            await clients.close()
        for node in list(cluster.nodes):
            await cluster.stop(node)


def table_options() -> bytes:
    return options(mode=common_pb2.TABLE_MODE_COMPETITIVE).SerializeToString()


async def test_tournament_table_calls_follow_the_redirect_to_the_owner(
    two_ways: tuple[GrpcServices, GrpcServices],
) -> None:
    at_owner, services = two_ways
    # the tournament's first attempt reached the replica that now owns the table
    created = await at_owner.create_table("tt-r1-m1", "r1-m1", "r1-m1", table_options(), ["ann", "bob"], "cup")
    expected = TableState("tables/r1-m1", "waiting", (TableSeat("ann", False), TableSeat("bob", False)), (0, 0))
    assert created == expected

    # read through the other replica: redirected to the owner
    assert await services.get_table("tables/r1-m1") == expected
    # the retry of a creation whose answer was lost, its stored answer gone: the table, read at its owner
    again = await services.create_table("tt-r1-m1-again", "r1-m1", "r1-m1", table_options(), ["ann", "bob"], "cup")
    assert again == expected
    # another match's table by that id is not ours
    with pytest.raises(Refused) as refused:
        await services.create_table("tt-r1-m2", "r1-m1", "r1-m2", table_options(), ["cy", "di"], "cup")
    assert refused.value.code == "ALREADY_EXISTS"
    # cancelled at the owner, through the other replica
    await services.cancel_table("tt-cancel-r1-m1", "tables/r1-m1", "a player did not show")
    assert (await services.get_table("tables/r1-m1")).state == "cancelled"
    # once for every call about the live table above (a cancelled table is read by any replica)
    assert services.tables.owners.redirects == 4
    assert at_owner.tables.owners.redirects == 0
