"""What services share when they call each other: the classification of a call's failure
(`Refused`: a definitive answer; `Unreachable`: transient or unknown, retry with the same request
id), the ranking ratings read in batches, and the game-session table states as names.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import grpc

from buraco.v1 import game_session_pb2, ranking_pb2, ranking_pb2_grpc

T = TypeVar("T")

#: Answers that say nothing final about the request: retry it later, with the same request id.
TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAUTHENTICATED,
    }
)
#: Players per BatchGetRatings call.
RATINGS_BATCH = 1000

TABLE_STATES = {
    game_session_pb2.Table.STATE_WAITING: "waiting",
    game_session_pb2.Table.STATE_PLAYING: "playing",
    game_session_pb2.Table.STATE_FINISHED: "finished",
    game_session_pb2.Table.STATE_CANCELLED: "cancelled",
}


class CallError(Exception):
    def __init__(self, service: str, code: str, message: str) -> None:
        super().__init__(f"{service}: {code}: {message}")
        self.service = service
        self.code = code
        self.message = message


class Refused(CallError):
    """A definitive answer: retrying the same request would get it again."""


class Unreachable(CallError):
    """The outcome is unknown or the error is transient: retry with the same request id."""


async def classified(service: str, call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, its failure raised as `Refused` or `Unreachable`."""
    try:
        return await call()
    except grpc.aio.AioRpcError as error:
        kind = Unreachable if error.code() in TRANSIENT else Refused
        raise kind(service, error.code().name, error.details() or "") from None
    except (OSError, TimeoutError) as error:  # a channel that cannot even start a call
        raise Unreachable(service, "UNAVAILABLE", str(error)) from None


async def batch_ratings(
    ranking: ranking_pb2_grpc.RankingServiceAsyncStub, players: Sequence[str], preset: str, seats: int, timeout: float
) -> dict[str, float]:
    """Each player's displayed rating (the ordinal) for the preset and table size."""
    found: dict[str, float] = {}
    for start in range(0, len(players), RATINGS_BATCH):
        batch = list(players[start : start + RATINGS_BATCH])
        request = ranking_pb2.BatchGetRatingsRequest(
            player_names=[f"players/{p}" for p in batch], preset=preset, players=seats
        )

        async def call(r: ranking_pb2.BatchGetRatingsRequest = request) -> ranking_pb2.BatchGetRatingsResponse:
            reply: ranking_pb2.BatchGetRatingsResponse = await ranking.BatchGetRatings(r, timeout=timeout)
            return reply

        reply = await classified("ranking", call)
        if len(reply.ratings) != len(batch):
            raise Refused("ranking", "INVALID_RESPONSE", f"{len(reply.ratings)} ratings for {len(batch)} players")
        for player, rating in zip(batch, reply.ratings, strict=True):
            found[player] = rating.ordinal
    return found
