"""The table client's own logic: the settlement a match's outcomes imply, and where a connection
goes when a replica fails (redirect to the named owner, else the next known replica)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import grpc

from buraco.v1 import common_pb2
from loadtest.client import Calls
from loadtest.recorder import Recorder
from loadtest.settings import Settings
from loadtest.table import RecordedConnection, settlement
from services.client.channels import ChannelPool

WON, LOST, VOID = common_pb2.OUTCOME_WON, common_pb2.OUTCOME_LOST, common_pb2.OUTCOME_VOID


def outcomes(*kinds: common_pb2.Outcome.ValueType) -> list[common_pb2.PlayerOutcome]:
    return [common_pb2.PlayerOutcome(player=f"players/p{seat}", seat=seat, outcome=k) for seat, k in enumerate(kinds)]


def test_settlement_of_each_seat() -> None:
    two = Settings(bet=10, seats=2)
    assert [settlement(two, seat, outcomes(WON, LOST), 0) for seat in (0, 1)] == [6, -10]
    four = Settings(bet=7, seats=4, players=4)
    # net pot 23 (28 less a cut of 5): the odd chip to the winner who acts first from seat 1
    assert [settlement(four, seat, outcomes(WON, LOST, WON, LOST), 1) for seat in range(4)] == [4, -7, 5, -7]
    assert settlement(two, 0, outcomes(VOID, VOID), 0) == 0
    assert settlement(replace(two, bet=0, practice=True), 0, outcomes(WON, LOST), 0) == 0


class FakeError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode, trailers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailers), "test", None)


def connection(address: str, fallbacks: list[str]) -> RecordedConnection:
    return RecordedConnection(Calls(Recorder()), address, "token", "tables/t1", ChannelPool(1), fallbacks=fallbacks)


def test_redirects_follow_the_owner_else_the_next_replica() -> None:
    c = connection("a:1", ["a:1", "b:2", "c:3"])
    c._redirect(FakeError(grpc.StatusCode.UNAVAILABLE, (("buraco-owner-address", "c:3"),)))
    assert c.address == "c:3"
    assert c.calls.recorder.counters["redirects"] == 1
    c._redirect(FakeError(grpc.StatusCode.UNAVAILABLE))  # c is gone and names no owner: next one
    assert c.address == "a:1"
    c._redirect(FakeError(grpc.StatusCode.UNAVAILABLE))
    assert c.address == "b:2"
    lonely: Any = connection("a:1", [])
    lonely._redirect(FakeError(grpc.StatusCode.UNAVAILABLE))
    assert lonely.address == "a:1"  # nowhere else to go: retry there
