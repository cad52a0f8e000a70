"""Players' ratings read from the ranking service in batches (matchmaking's windows, tournaments'
seeding)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from buraco.v1 import ranking_pb2, ranking_pb2_grpc
from services.client.calls import Refused, classified

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
    """`batch_ratings` for many concurrent callers: the players asked for while a read is under way
    are read together by the next one (per preset and table size, `RATINGS_BATCH` players per
    call), so a burst of callers costs a few calls rather than one each. A caller alone is read at
    once. A read that fails fails every caller it was reading for, with the same error."""

    def __init__(self, ranking: Callable[[], ranking_pb2_grpc.RankingServiceAsyncStub], timeout: float) -> None:
        #: the ranking stub, asked for at each read (the channel under it may be replaced)
        self.ranking = ranking
        self.timeout = timeout
        self._pending: dict[tuple[str, int], list[tuple[Sequence[str], asyncio.Future[dict[str, float]]]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def ratings(self, players: Sequence[str], preset: str, seats: int) -> dict[str, float]:
        future: asyncio.Future[dict[str, float]] = asyncio.get_running_loop().create_future()
        self._pending.setdefault((preset, seats), []).append((players, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="ratings-reads")
        return await future

    async def _run(self) -> None:
        while self._pending:
            pending, self._pending = self._pending, {}
            await asyncio.gather(*(self._read(preset, seats, asked) for (preset, seats), asked in pending.items()))

    async def _read(self, preset: str, seats: int,
                    asked: list[tuple[Sequence[str], asyncio.Future[dict[str, float]]]]) -> None:
        everyone = list(dict.fromkeys(player for players, _ in asked for player in players))
        try:
            found = await batch_ratings(self.ranking(), everyone, preset, seats, self.timeout)
        except Exception as error:
            for _, future in asked:
                if not future.done():
                    future.set_exception(error)
            return
        for players, future in asked:
            if not future.done():
                future.set_result({player: found[player] for player in players})
