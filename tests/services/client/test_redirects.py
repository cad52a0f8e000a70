"""Owner redirects: the parser (the trailer, the status details, both, neither), and `Owners`
following them, by itself against fake replicas and across two real game-session servers sharing a
database (a redirect followed on a channel kept per owner; an owner that does not answer sends the
call back to the entry address)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import status_pb2

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc
from services.client.calls import Unreachable
from services.client.redirects import Owners, Redirect, redirect_of
from services.common.auth import Kind
from services.common.errors import NotOwnerError
from tests.services.client.conftest import Failed, clients_at
from tests.services.game_session.conftest import Cluster, table_request

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


def not_owner(owner: str = "", **details: Any) -> Failed:
    """The failure a replica's `NotOwnerError` gives its caller."""
    return Failed(UNAVAILABLE, NotOwnerError("tables/t1", owner, **details).metadata)


def status_details(details: common_pb2.NotOwnerDetails) -> tuple[str, bytes]:
    packed = any_pb2.Any()
    packed.Pack(details)
    return "grpc-status-details-bin", status_pb2.Status(code=14, details=[packed]).SerializeToString()


# -- the parser ---------------------------------------------------------------------------------------


def test_a_redirect_read_from_the_trailer_and_the_details_together() -> None:
    assert redirect_of(not_owner("10.0.0.7:50052", epoch=3)) == Redirect("10.0.0.7:50052", 0.0, "tables/t1", 3)
    # no owner at the moment: no trailer, the details say how long to wait
    assert redirect_of(not_owner(retry_after_ms=200)) == Redirect("", 0.2, "tables/t1", 0)


def test_a_redirect_read_from_the_trailer_alone() -> None:
    assert redirect_of(Failed(UNAVAILABLE, (("buraco-owner-address", "10.0.0.7:50052"),))) == Redirect(
        "10.0.0.7:50052"
    )


def test_a_redirect_read_from_the_status_details_alone() -> None:
    details = common_pb2.NotOwnerDetails(resource="tables/t1", owner_address="b:2", epoch=5, retry_after_ms=50)
    assert redirect_of(Failed(UNAVAILABLE, (status_details(details),))) == Redirect("b:2", 0.05, "tables/t1", 5)
    # both present and different: the trailer names the owner
    both = Failed(UNAVAILABLE, (status_details(details), ("buraco-owner-address", "c:3")))
    assert redirect_of(both) == Redirect("c:3", 0.05, "tables/t1", 5)


def test_neither_is_no_redirect() -> None:
    assert redirect_of(Failed(UNAVAILABLE)) is None  # a replica stopping, or one that cannot be reached
    assert redirect_of(Failed(UNAVAILABLE, (("retry-after-ms", "10"),))) is None
    # only UNAVAILABLE redirects
    assert redirect_of(Failed(grpc.StatusCode.ABORTED, (("buraco-owner-address", "b:2"),))) is None
    assert redirect_of(Failed(grpc.StatusCode.NOT_FOUND, NotOwnerError("tables/t1", "b:2").metadata)) is None
    # status details without NotOwnerDetails, or that cannot be read, are not a redirect
    other = any_pb2.Any()
    other.Pack(common_pb2.RulesetRef(preset="aberto"))
    unrelated = status_pb2.Status(code=14, details=[other]).SerializeToString()
    assert redirect_of(Failed(UNAVAILABLE, (("grpc-status-details-bin", unrelated),))) is None
    assert redirect_of(Failed(UNAVAILABLE, (("grpc-status-details-bin", b"\xff\xff not a status"),))) is None


# -- following them, against fake replicas ------------------------------------------------------------


class FakeStub:
    """A replica's GetTable: each call takes the next answer of its script (a table or a failure)."""

    def __init__(self, address: str, script: list[Any], log: list[str]) -> None:
        self.address, self.script, self.log = address, script, log

    async def GetTable(self, request: game_session_pb2.GetTableRequest, timeout: float) -> game_session_pb2.Table:
        self.log.append(self.address)
        answer = self.script.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, game_session_pb2.Table)
        return answer


class FakeClients:
    """`Clients`' two game-session stubs: the entry's, and a replica's by address."""

    def __init__(self, scripts: dict[str, list[Any]]) -> None:
        self.log: list[str] = []
        self.stubs = {address: FakeStub(address, script, self.log) for address, script in scripts.items()}

    @property
    def game_session(self) -> FakeStub:
        return self.stubs["entry"]

    def game_session_at(self, address: str) -> FakeStub:
        return self.stubs[address]


async def get_table(stub: game_session_pb2_grpc.GameSessionServiceAsyncStub) -> game_session_pb2.Table:
    reply: game_session_pb2.Table = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/t1"), timeout=5)
    return reply


def owners(scripts: dict[str, list[Any]], **options: Any) -> tuple[Owners, FakeClients]:
    fake = FakeClients(scripts)
    made: Any = fake  # duck-typed: Owners uses only the two game-session stubs
    return Owners(made, **options), fake


async def test_a_redirect_is_followed_and_an_ownerless_one_waits_then_asks_the_entry_again() -> None:
    table = game_session_pb2.Table(name="tables/t1")
    follow, fake = owners({
        "entry": [not_owner(retry_after_ms=20), not_owner("b:2")],
        "b:2": [table],
    })
    assert await follow.call(get_table) == table
    assert fake.log == ["entry", "entry", "b:2"] and follow.redirects == 2


async def test_an_owner_that_does_not_answer_sends_the_call_back_to_the_entry() -> None:
    table = game_session_pb2.Table(name="tables/t1")
    follow, fake = owners({"gone:1": [Failed(UNAVAILABLE)], "entry": [table]})
    assert await follow.call(get_table, "gone:1") == table
    assert fake.log == ["gone:1", "entry"]


async def test_other_failures_are_raised_as_they_are() -> None:
    follow, fake = owners({"entry": [Failed(UNAVAILABLE)], "b:2": [Failed(grpc.StatusCode.DEADLINE_EXCEEDED)]})
    with pytest.raises(grpc.aio.AioRpcError) as at_entry:
        await follow.call(get_table)  # the entry itself does not answer: nowhere else to go
    assert at_entry.value.code() == UNAVAILABLE
    with pytest.raises(grpc.aio.AioRpcError) as at_owner:
        await follow.call(get_table, "b:2")
    assert at_owner.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert fake.log == ["entry", "b:2"]


async def test_redirects_without_end_give_up_as_unreachable() -> None:
    follow, fake = owners({"entry": [not_owner("b:2")], "b:2": [not_owner("c:3")], "c:3": [not_owner("b:2")]},
                          max_redirects=2)
    with pytest.raises(Unreachable, match="no owner found after 2 redirects"):
        await follow.call(get_table)
    assert fake.log == ["entry", "b:2", "c:3"]


# -- following them across two real game-session servers ----------------------------------------------


async def test_calls_reach_the_owner_through_another_replica_on_one_channel_per_owner(
    two: Cluster, tmp_path: Path
) -> None:
    owner, other = two.nodes
    matchmaking = two.token(Kind.SERVICE, "matchmaking")
    await two.stub(owner).CreateTable(table_request("t1", "ann", "bob"), metadata=matchmaking)
    clients = clients_at(two, tmp_path, other.address)
    follow = Owners(clients)
    try:
        for _ in range(3):
            table = await follow.call(get_table)
            assert table.name == "tables/t1" and table.owner_address == owner.address
        assert follow.redirects == 3  # the entry redirects every time; the owner answers
        assert clients.channel_at(owner.address) is clients.channel_at(owner.address)
        assert list(clients._replicas) == [owner.address]
    finally:
        await clients.close()


async def test_a_call_at_an_owner_that_stopped_goes_back_to_the_entry(two: Cluster, tmp_path: Path) -> None:
    gone, entry = two.nodes
    matchmaking = two.token(Kind.SERVICE, "matchmaking")
    await two.stub(gone).CreateTable(table_request("t1", "ann", "bob"), metadata=matchmaking)
    gone_address = gone.address
    await two.stop(gone)  # a graceful stop releases its tables: the entry takes t1 over when asked
    clients = clients_at(two, tmp_path, entry.address)
    follow = Owners(clients)
    try:
        table = await follow.call(get_table, gone_address)
        assert table.owner_address == entry.address and follow.redirects == 1
    finally:
        await clients.close()
