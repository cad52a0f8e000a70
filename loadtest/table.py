"""Playing a seat at a game-session table, every call timed into the run's recorder.

The client is the suite's own (`services.client.connection.TableConnection` and `play_seat`): it follows
the table's `SubscribeChanges` stream into a model of what the seat knows, decides with an engine bot
from that view, sends each action with a fresh `request_id` and the `expected_seq` it saw,
retries an action after UNAVAILABLE or ABORTED with the same `request_id` (at the owner named by
a redirect), and resumes a broken stream with `after_seq`. `RecordedConnection` adds the timing:
each attempt of each call is recorded under `game_session.<Method>`, the stream's first event
(the snapshot) under `game_session.SubscribeChanges`, and every resumption counts in `stream_resumes`.
With `--play-stream` the seat acts on its `Play` stream: the snapshot is recorded under
`game_session.Play`, each action (from sending it to its answer on the stream) under
`game_session.Play/<Method>`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from buraco.v1 import common_pb2, game_session_pb2
from engine.bots import make_bot
from loadtest.client import Calls, StepError
from loadtest.payouts import expected_deltas
from loadtest.settings import Settings
from services.client.calls import trailer
from services.client.channels import ChannelPool
from services.client.connection import RETRYABLE, ActionRefused, TableConnection, play_seat
from services.client.model import ruleset_of


class RecordedConnection(TableConnection):
    """A TableConnection whose calls and stream are timed into `calls.recorder`."""

    def __init__(
        self,
        calls: Calls,
        address: str,
        token: str,
        table: str,
        channels: ChannelPool,
        fallbacks: Sequence[str] = (),
        play: bool = False,
    ) -> None:
        super().__init__(address, token, table, channels=channels, play=play)
        self.stream_name = "game_session.Play" if play else "game_session.SubscribeChanges"
        self.calls = calls
        #: Replicas to try in turn when the current one fails without naming an owner (it is
        #: gone): what a client behind a Kubernetes Service gets by reconnecting.
        self.fallbacks = list(fallbacks)

    def _redirect(self, error: grpc.aio.AioRpcError) -> None:
        before = self.address
        super()._redirect(error)
        if self.address != before or not self.fallbacks:
            self.calls.recorder.counters["redirects"] += self.address != before
            return
        at = self.fallbacks.index(before) + 1 if before in self.fallbacks else 0
        self.address = self.fallbacks[at % len(self.fallbacks)]

    async def start(self, wait: bool = True) -> None:
        started = time.perf_counter()
        try:
            await super().start(wait)
        except grpc.aio.AioRpcError as error:
            self.calls.recorder.error("rpc", self.stream_name, error.code().name)
            raise
        delay = time.perf_counter() - started
        self.calls.recorder.ok("rpc", self.stream_name, delay)
        self.calls.recorder.first_event("rpc", self.stream_name, delay)

    async def send(self, method: str, request: Any) -> game_session_pb2.ActionResult:
        """As TableConnection's, timed: from sending the action to its answer on the stream."""
        name = f"game_session.Play/{method}"
        started = time.perf_counter()
        try:
            result = await super().send(method, request)
        except ActionRefused as refused:
            self.calls.recorder.error("rpc", name, refused.code.name)
            raise
        except grpc.aio.AioRpcError as error:
            self.calls.recorder.error("rpc", name, error.code().name)
            raise
        self.calls.recorder.ok("rpc", name, time.perf_counter() - started)
        return result

    async def _unary(self, method: str, request: Any) -> Any:
        """As TableConnection's: retries on UNAVAILABLE/ABORTED with the same request (so the same
        request_id), following redirects; each attempt is one recorded call."""
        delay = 0.05
        give_up = time.monotonic() + self.retry_seconds
        while True:
            try:
                return await self.calls.unary(
                    f"game_session.{method}", getattr(self.stub, method), request, self.metadata
                )
            except grpc.aio.AioRpcError as error:
                if time.monotonic() > give_up:
                    raise
                if error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    # the rate limiter: wait as it says, then the same request again
                    wait = trailer(error, "retry-after-ms")
                    if wait is None:
                        raise
                    self.calls.recorder.counters["rate_limited"] += 1
                    await asyncio.sleep(int(wait) / 1000)
                    continue
                if error.code() not in RETRYABLE:
                    raise
                self._redirect(error)
                self.calls.recorder.counters["action_retries"] += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)


@dataclass(frozen=True)
class MatchResult:
    """What the player saw of the match's end, and the balance change it implies."""

    seat: int
    outcome: int
    delta: int
    actions: int
    resumes: int


def settlement(settings: Settings, seat: int, outcomes: Sequence[common_pb2.PlayerOutcome], first_seat: int) -> int:
    """The player's expected balance change from the match's outcomes (practice: none)."""
    if settings.practice:
        return 0
    mine = next((o.outcome for o in outcomes if o.seat == seat), common_pb2.OUTCOME_UNSPECIFIED)
    if mine == common_pb2.OUTCOME_VOID:
        return 0
    winners = [o.seat for o in outcomes if o.outcome == common_pb2.OUTCOME_WON]
    return expected_deltas(settings.bet, settings.seats, winners, first_seat, settings.house_cut_percent)[seat]


async def play_match(
    calls: Calls,
    settings: Settings,
    rng: random.Random,
    address: str,
    token: str,
    table: str,
    channels: ChannelPool,
) -> MatchResult:
    """Follow the table (SubscribeChanges, or Play with `--play-stream`), play the seat with the
    run's bot to the match's end, and read the outcome."""
    connection = RecordedConnection(calls, address, token, table, channels, play=settings.play_stream)
    connection.retry_seconds = settings.wait_timeout_s
    try:
        await asyncio.wait_for(connection.start(), settings.wait_timeout_s)
        model = connection.model
        if model.viewer_seat is None:
            raise StepError("NOT_SEATED", f"{table}: the stream shows no seat for this player")
        assert model.table is not None
        rules = ruleset_of(model.table.options.ruleset)
        bot = make_bot(settings.bot, rng.randrange(1 << 30), rules)

        async def pace() -> None:
            await asyncio.sleep(rng.uniform(0, 2 * settings.think_time_s))

        actions = await play_seat(connection, bot, rules, pace=pace if settings.think_time_s else None)
        ended = model.match_end
        if ended is None:
            raise StepError("TABLE_CANCELLED" if model.cancelled else "NO_MATCH_END", f"{table}: no MatchEnded")
        # The first dealer, from the last hand's dealer: the deal moves one seat per hand.
        first_seat = (model.dealer - (model.hand_number - 1) + 1) % model.players
        seat = model.viewer_seat
        outcome = next((o.outcome for o in ended.outcomes if o.seat == seat), common_pb2.OUTCOME_UNSPECIFIED)
        calls.recorder.counters["stream_resumes"] += connection.reconnects
        return MatchResult(
            seat, outcome, settlement(settings, seat, ended.outcomes, first_seat), actions, connection.reconnects
        )
    finally:
        await connection.close()


def table_request(
    match_id: str, table_id: str, players: Sequence[str], options: common_pb2.TableOptions
) -> game_session_pb2.CreateTableRequest:
    """CreateTable as matchmaking makes it: the players in seat order (`players/{id}` names)."""
    return game_session_pb2.CreateTableRequest(
        request_id=f"{match_id}-table",
        table_id=table_id,
        table=game_session_pb2.Table(
            match_id=match_id,
            options=options,
            seats=[
                game_session_pb2.Seat(seat=i, participant=common_pb2.Participant(player=name))
                for i, name in enumerate(players)
            ],
        ),
    )
