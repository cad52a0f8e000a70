"""A failed call classified (`Refused`: definitive; `Unreachable`: retry with the same request id),
a trailer read as text, and ratings read in batches."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from buraco.v1 import ranking_pb2
from services.client import ratings
from services.client.calls import TRANSIENT, Refused, Unreachable, classified, trailer
from tests.services.client.conftest import Failed


async def fail_with(error: BaseException) -> None:
    raise error


@pytest.mark.parametrize("code", list(grpc.StatusCode))
async def test_every_status_is_refused_or_unreachable(code: grpc.StatusCode) -> None:
    if code == grpc.StatusCode.OK:
        return
    with pytest.raises(Unreachable if code in TRANSIENT else Refused) as raised:
        await classified("wallet", lambda: fail_with(Failed(code)))
    assert (raised.value.service, raised.value.code, raised.value.message) == ("wallet", code.name, "test")


async def test_a_channel_that_cannot_start_a_call_is_unreachable() -> None:
    for error in (OSError("no route"), TimeoutError()):
        with pytest.raises(Unreachable) as raised:
            await classified("ranking", lambda e=error: fail_with(e))  # type: ignore[misc]
        assert raised.value.code == "UNAVAILABLE"


def test_a_trailer_is_read_as_text() -> None:
    error = Failed(grpc.StatusCode.FAILED_PRECONDITION, (("buraco-current-seq", "12"), ("x-bin", b"raw")))
    assert trailer(error, "buraco-current-seq") == "12"
    assert trailer(error, "x-bin") == "raw"
    assert trailer(error, "retry-after-ms") is None


class Ranking:
    """BatchGetRatings answering each player's name length as the ordinal (or one rating short)."""

    def __init__(self, short: bool = False) -> None:
        self.batches: list[int] = []
        self.short = short

    async def BatchGetRatings(self, request: ranking_pb2.BatchGetRatingsRequest, timeout: float) -> Any:
        self.batches.append(len(request.player_names))
        names = list(request.player_names)[: -1 if self.short else None]
        return ranking_pb2.BatchGetRatingsResponse(ratings=[ranking_pb2.Rating(ordinal=len(n)) for n in names])


async def test_ratings_are_read_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ratings, "RATINGS_BATCH", 2)
    ranking: Any = Ranking()
    found = await ratings.batch_ratings(ranking, ["a", "bb", "ccc", "dddd", "e"], "aberto", 2, 5)
    assert found == {"a": 9, "bb": 10, "ccc": 11, "dddd": 12, "e": 9}  # len("players/") == 8
    assert ranking.batches == [2, 2, 1]
    with pytest.raises(Refused, match="INVALID_RESPONSE"):
        await ratings.batch_ratings(Ranking(short=True), ["a", "bb"], "aberto", 2, 5)  # type: ignore[arg-type]


class SlowRanking(Ranking):
    """A Ranking whose calls wait until released, recording each call's players and preset."""

    def __init__(self, failing: bool = False) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.calls: list[tuple[str, list[str]]] = []
        self.failing = failing

    async def BatchGetRatings(self, request: ranking_pb2.BatchGetRatingsRequest, timeout: float) -> Any:
        self.calls.append((request.preset, list(request.player_names)))
        await self.release.wait()
        if self.failing:
            raise Failed(grpc.StatusCode.UNAVAILABLE)
        return await super().BatchGetRatings(request, timeout)


async def test_concurrent_callers_ratings_are_read_together() -> None:
    ranking: Any = SlowRanking()
    reads = ratings.CoalescedRatings(lambda: ranking, 5)
    first = asyncio.create_task(reads.ratings(["a"], "aberto", 2))  # read at once, alone
    while not ranking.calls:
        await asyncio.sleep(0)
    # asked while that read is under way: read together next, one call per preset and table size
    later = [asyncio.create_task(reads.ratings(players, preset, 2))
             for players, preset in ((["bb", "a"], "aberto"), (["ccc"], "aberto"), (["dddd"], "fechado"))]
    for _ in range(5):
        await asyncio.sleep(0)
    assert ranking.calls == [("aberto", ["players/a"])]
    ranking.release.set()
    assert await first == {"a": 9}
    assert [await task for task in later] == [{"bb": 10, "a": 9}, {"ccc": 11}, {"dddd": 12}]
    assert sorted(ranking.calls) == [("aberto", ["players/a"]), ("aberto", ["players/bb", "players/a", "players/ccc"]),
                                     ("fechado", ["players/dddd"])]


async def test_a_failed_read_fails_every_caller_it_was_reading_for() -> None:
    ranking: Any = SlowRanking(failing=True)
    reads = ratings.CoalescedRatings(lambda: ranking, 5)
    tasks = [asyncio.create_task(reads.ratings([p], "aberto", 2)) for p in ("a", "b")]
    for _ in range(5):
        await asyncio.sleep(0)
    assert ranking.calls == [("aberto", ["players/a", "players/b"])]  # one read for both
    ranking.release.set()
    for task in tasks:
        with pytest.raises(Unreachable):
            await task
    ranking.failing = False  # and the next read goes through
    assert await reads.ratings(["c"], "aberto", 2) == {"c": 9}
