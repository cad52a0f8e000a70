"""`Tables` across two game-session servers sharing a database, entered at the replica that does
not own the table: CreateTable's retry whose table exists (ALREADY_EXISTS) gets the table back, read
at its owner; a table of another match by that id stays a refusal; reads and cancellations follow
the redirect to the owner."""

from __future__ import annotations

from pathlib import Path

import pytest

from buraco.v1 import game_session_pb2
from services.client.calls import Refused
from services.client.redirects import Owners
from services.client.tables import TABLE_STATES, Tables
from services.common.auth import Kind
from tests.services.client.conftest import clients_at
from tests.services.game_session.conftest import Cluster, table_request


async def test_a_retried_create_whose_table_exists_gets_it_back_from_its_owner(two: Cluster, tmp_path: Path) -> None:
    owner, entry = two.nodes
    first = table_request("t1", "ann", "bob", match_id="m1")
    made = await two.stub(owner).CreateTable(first, metadata=two.token(Kind.SERVICE, "matchmaking"))
    clients = clients_at(two, tmp_path, entry.address)
    owners = Owners(clients)
    tables = Tables(owners, timeout=10)
    try:
        # the first attempt's answer was lost, and its stored answer is gone (another request id):
        # the replica asked says ALREADY_EXISTS; the table is read at its owner
        retry = table_request("t1", "ann", "bob", match_id="m1")
        retry.request_id = "create-t1-again"
        found = await tables.create(retry)
        assert found == made and found.owner_address == owner.address
        assert owners.redirects == 1
        # the same request again: the stored answer, no recovery needed
        assert await tables.create(first) == made
        # a table of another match by that id is not ours: the refusal stands
        clash = table_request("t1", "cy", "di", match_id="m2")
        with pytest.raises(Refused) as refused:
            await tables.create(clash)
        assert refused.value.code == "ALREADY_EXISTS"
        # a new table id for a match that has a table already: the refusal stands (the table by
        # the new id does not exist; that is no reason to say NOT_FOUND)
        other = table_request("t9", "ann", "bob", match_id="m1")
        with pytest.raises(Refused) as refused:
            await tables.create(other)
        assert refused.value.code == "ALREADY_EXISTS" and "m1" in refused.value.message
    finally:
        await clients.close()


async def test_reads_and_cancellations_follow_the_redirect(two: Cluster, tmp_path: Path) -> None:
    owner, entry = two.nodes
    matchmaking = two.token(Kind.SERVICE, "matchmaking")
    await two.stub(owner).CreateTable(table_request("t1", "ann", "bob"), metadata=matchmaking)
    clients = clients_at(two, tmp_path, entry.address)
    tables = Tables(Owners(clients), timeout=10)
    try:
        table = await tables.get("tables/t1")
        assert TABLE_STATES[table.state] == "waiting" and table.owner_address == owner.address
        cancel = game_session_pb2.CancelTableRequest(name="tables/t1", request_id="cancel-t1", reason="test")
        assert TABLE_STATES[(await tables.cancel(cancel)).state] == "cancelled"
        assert TABLE_STATES[(await tables.get("tables/t1", owner.address)).state] == "cancelled"
        with pytest.raises(Refused) as refused:
            await tables.get("tables/nope")
        assert refused.value.code == "NOT_FOUND"
    finally:
        await clients.close()
