"""Players' ratings read from the ranking service in batches (matchmaking's windows, tournaments'
seeding)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from buraco.v1 import ranking_pb2, ranking_pb2_grpc
from services.client.calls import Refused, classified
from services.client.coalesce import Coalesced

#: Players per BatchGetRatings call.
RATINGS_BATCH = 1000


async def batch_ratings(
    ranking: ranking_pb2_grpc.RankingServiceAsyncStub, players: Sequence[str], preset: str, seats: int, timeout: float
) -> dict[str, float]:
    """Each player's displayed rating (the ordinal) for the preset and table size, `RATINGS_BATCH`
    players per call. A failure is raised classified (`Refused`, `Unreachable`); an answer whose
    count of ratings is not the count of players asked for is `Refused` (`INVALID_RESPONSE`)."""
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


class CoalescedRatings:
    """`batch_ratings` for many concurrent callers (`services.client.coalesce.Coalesced`): the
    players asked for while a read is under way are read together by the next one, per preset and
    table size, so a burst of callers costs a few calls rather than one each."""

    def __init__(self, ranking: Callable[[], ranking_pb2_grpc.RankingServiceAsyncStub], timeout: float) -> None:
        async def read(kind: tuple[str, int], players: list[str]) -> dict[str, float]:
            # the ranking stub asked for at each read: the channel under it may be replaced
            return await batch_ratings(ranking(), players, kind[0], kind[1], timeout)

        self._reads: Coalesced[tuple[str, int], str, float] = Coalesced(read, "ratings-reads")

    async def ratings(self, players: Sequence[str], preset: str, seats: int) -> dict[str, float]:
        return await self._reads.get((preset, seats), players)
