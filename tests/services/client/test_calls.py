"""A failed call classified (`Refused`: definitive; `Unreachable`: retry with the same request id),
a trailer read as text, and ratings read in batches."""

from __future__ import annotations

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
