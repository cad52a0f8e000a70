"""The simulated players: their journeys, step by step, in one driver process.

A journey is a sequence of steps, each timed and recorded as a `step` series (and the whole
journey as step `journey`); the first step that fails ends the journey, its error counted under
the step by status code (or the driver's own code: `TIMEOUT`, `SETTLE_MISMATCH`, ...). After a
failed journey the player pauses a second before the next one, so a service that fails fast
(UNIMPLEMENTED) is not hammered in a tight loop.

Scenario `journey` (the player's path through the public services):
    signup       (once per player) the wallet opens the account with its starting grant (a service
                 call, as the sign-up flow would make); ranking: the player's profile before
    fund         the player reads their account; tops it up with a promotion grant when short
    queue        matchmaking: CreateTicket, then WatchTicket until MATCHED (confirming a proposal)
    play         game sessions: SubscribeChanges, then the bot plays every turn (loadtest.table)
    settle       the wallet shows the pot paid out: the stake lost, or the share of the pot less
                 the house cut won (checked to the chip)
    leaderboard  ranking: the profile counts the match; the player's rank and the top 10

Scenario `tables` (no matchmaking): players sit in groups of `seats`; per group the driver holds
the stakes (step `hold`) and creates the table (`create_table`) with a service token, as
matchmaking would; then each player plays, checks the settlement and the leaderboard as above.

Scenario `backend` (wallet and ranking only): players sit in groups of `seats`; per group the
driver holds the stakes (as matchmaking would), plays the match with engine bots locally, settles
it and records it (as the game-session service would), then each player checks their balance
and the leaderboard as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from buraco.v1 import (
    common_pb2,
    game_session_pb2_grpc,
    matchmaking_pb2,
    matchmaking_pb2_grpc,
    ranking_pb2,
    ranking_pb2_grpc,
    wallet_pb2,
    wallet_pb2_grpc,
)
from engine.bots import make_bot
from engine.match import MatchState
from engine.rules import Ruleset, preset
from loadtest.client import Calls, Channels, RunEnded, StepError, Tokens, client_tls, status_name
from loadtest.payouts import expected_deltas
from loadtest.recorder import Recorder
from loadtest.settings import Settings
from loadtest.table import play_match, table_request
from services.client.channels import ChannelPool
from services.common.auth import Kind
from services.common.tls import host_of

T = TypeVar("T")

FAILED_JOURNEY_PAUSE_S = 1.0
#: Polls (the settlement, the ranking) start this often and slow down to POLL_MAX_S.
POLL_INTERVAL_S = 0.05
POLL_MAX_S = 1.0
#: The service identity accounts are opened and topped up with (the sign-up flow, a gateway): a
#: service's rate limit is per service, far above one admin's.
#: The admin who tops players up with promotional chips (an operator, in a real deployment).
TOP_UP_ADMIN = "loadtest"
#: Grants top a player up to this many stakes.
TOP_UP_STAKES = 20


async def gather_all(*awaitables: Awaitable[T]) -> list[T]:
    """Every result, once all have finished; then the first failure, if any, is raised. (A bare
    gather would leave the others running on after one failed, into the group's next match.)"""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)  # type: ignore[arg-type]


def match_rules(settings: Settings) -> Ruleset:
    """The engine ruleset of the run's tables: the preset, express (target 0) or to the target."""
    return dataclasses.replace(preset(settings.preset), target=settings.target_points)


def table_options(settings: Settings) -> common_pb2.TableOptions:
    return common_pb2.TableOptions(
        ruleset=common_pb2.RulesetRef(preset=settings.preset),
        players=settings.seats,
        length=common_pb2.MATCH_LENGTH_POINTS if settings.target_points else common_pb2.MATCH_LENGTH_EXPRESS,
        target_points=settings.target_points,
        mode=common_pb2.TABLE_MODE_PRACTICE if settings.practice else common_pb2.TABLE_MODE_COMPETITIVE,
        bet_chips=settings.bet,
    )


@dataclass
class Player:
    index: int
    id: str
    rng: random.Random
    signed_up: bool = False
    journeys: int = 0
    #: The profile's match count before the current journey's match.
    matches_before: int = 0

    @property
    def name(self) -> str:
        return f"players/{self.id}"

    @property
    def account(self) -> str:
        return f"accounts/player-{self.id}"


@dataclass
class Driver:
    """One process's share of the players, and what they call the services with."""

    settings: Settings
    recorder: Recorder
    tokens: Tokens
    channels: Channels = field(default_factory=Channels)
    clock: float = 0.0  # the run's start, time.perf_counter()

    def __post_init__(self) -> None:
        self.calls = Calls(self.recorder, timeout=self.settings.rpc_timeout_s)
        # TLS: the owners' pod addresses (redirects) are verified as the game-session service's name
        self.game_channels = ChannelPool(
            self.settings.connections, tls=self.channels.tls,
            server_name=self.settings.tls_server_name or host_of(self.settings.targets["game_session"]))
        self.stopping = asyncio.Event()

    # -- stubs ------------------------------------------------------------------------------------
    def wallet(self, player: Player) -> wallet_pb2_grpc.WalletServiceAsyncStub:
        return wallet_pb2_grpc.WalletServiceStub(self.channels.get(self.settings.targets["wallet"], player.index))

    def ranking(self, player: Player) -> ranking_pb2_grpc.RankingServiceAsyncStub:
        return ranking_pb2_grpc.RankingServiceStub(self.channels.get(self.settings.targets["ranking"], player.index))

    def matchmaking(self, player: Player) -> matchmaking_pb2_grpc.MatchmakingServiceAsyncStub:
        channel = self.channels.get(self.settings.targets["matchmaking"], player.index)
        return matchmaking_pb2_grpc.MatchmakingServiceStub(channel)

    def player(self, index: int) -> Player:
        s = self.settings
        return Player(index, f"{s.run_id}-{index}", random.Random(f"{s.seed}/{index}"))

    # -- steps ------------------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def step(self, name: str) -> AsyncIterator[None]:
        started = time.perf_counter()
        try:
            yield
        except (asyncio.CancelledError, RunEnded):
            raise
        except Exception as error:
            self.recorder.error("step", name, status_name(error))
            raise
        self.recorder.ok("step", name, time.perf_counter() - started)

    async def signup(self, player: Player) -> None:
        wallet, ranking = self.wallet(player), self.ranking(player)
        async with self.step("signup"):
            if self.uses("wallet"):
                await self.calls.unary(
                    "wallet.CreateAccount",
                    wallet.CreateAccount,
                    wallet_pb2.CreateAccountRequest(request_id=f"{player.id}-signup", player=player.name),
                    self.tokens.player(player.id),  # a player opens their own account, as at the gateway
                )
            if self.uses("ranking"):
                profile = await self.calls.unary(
                    "ranking.GetPlayer",
                    ranking.GetPlayer,
                    ranking_pb2.GetPlayerRequest(name=player.name),
                    self.tokens.player(player.id),
                )
                player.matches_before = profile.stats.matches
        player.signed_up = True

    def uses(self, service: str) -> bool:
        """Whether the run calls `service` (the backend scenario may load one service alone)."""
        return service in self.settings.only

    async def fund(self, player: Player) -> int:
        """The player's posted balance before the match, topped up when short of a stake."""
        wallet = self.wallet(player)
        account = await self.calls.unary(
            "wallet.GetAccount",
            wallet.GetAccount,
            wallet_pb2.GetAccountRequest(name=player.account),
            self.tokens.player(player.id),
        )
        balance = account.balance_chips
        if account.held_chips:
            raise StepError("CHIPS_HELD", f"{player.account} still holds {account.held_chips} chips")
        if balance < self.settings.bet:
            amount = self.settings.bet * TOP_UP_STAKES
            await self.calls.unary(
                "wallet.Grant",
                wallet.Grant,
                wallet_pb2.GrantRequest(
                    request_id=f"{player.id}-topup-{player.journeys}",
                    player=player.name,
                    amount_chips=amount,
                    kind=wallet_pb2.GrantRequest.KIND_PROMOTION,
                    note="load test",
                ),
                self.tokens.admin(TOP_UP_ADMIN),
            )
            balance += amount
        return balance

    async def check_settled(self, player: Player, balance_before: int, delta: int) -> None:
        """Wait until the player's holds are resolved; the balance must have moved by `delta`."""
        wallet = self.wallet(player)
        deadline = time.monotonic() + self.settings.wait_timeout_s
        pause = POLL_INTERVAL_S
        while True:
            account = await self.calls.unary(
                "wallet.GetAccount",
                wallet.GetAccount,
                wallet_pb2.GetAccountRequest(name=player.account),
                self.tokens.player(player.id),
            )
            if account.held_chips == 0:
                break
            if time.monotonic() > deadline:
                raise StepError("TIMEOUT", f"{player.account}: stake still held after {self.settings.wait_timeout_s} s")
            await asyncio.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)
        if account.balance_chips != balance_before + delta:
            raise StepError(
                "SETTLE_MISMATCH",
                f"{player.account}: balance {account.balance_chips}, expected {balance_before} {delta:+d}",
            )

    async def check_ranking(self, player: Player) -> None:
        """The profile counts the new match (waiting for it to be recorded); rank and top 10."""
        ranking = self.ranking(player)
        metadata = self.tokens.player(player.id)
        deadline = time.monotonic() + self.settings.wait_timeout_s
        pause = POLL_INTERVAL_S
        while True:
            profile = await self.calls.unary(
                "ranking.GetPlayer", ranking.GetPlayer, ranking_pb2.GetPlayerRequest(name=player.name), metadata
            )
            if profile.stats.matches > player.matches_before or self.settings.practice:
                break
            if time.monotonic() > deadline:
                waited = self.settings.wait_timeout_s
                raise StepError("TIMEOUT", f"{player.name}: match not on the profile after {waited} s")
            await asyncio.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)
        player.matches_before = profile.stats.matches
        board = ranking_pb2.Leaderboard(
            scope=ranking_pb2.Leaderboard.SCOPE_GLOBAL,
            period=ranking_pb2.Leaderboard.PERIOD_ALL_TIME,
            metric=ranking_pb2.Leaderboard.METRIC_XP,
        )
        if not self.settings.practice:
            entry = await self.calls.unary(
                "ranking.GetLeaderboardRank",
                ranking.GetLeaderboardRank,
                ranking_pb2.GetLeaderboardRankRequest(leaderboard=board, player=player.name),
                metadata,
            )
            if entry.value != profile.xp:
                raise StepError("RANK_MISMATCH", f"{player.name}: leaderboard XP {entry.value}, profile {profile.xp}")
        await self.calls.unary(
            "ranking.ListLeaderboardEntries",
            ranking.ListLeaderboardEntries,
            ranking_pb2.ListLeaderboardEntriesRequest(leaderboard=board, page_size=10),
            metadata,
        )

    # -- scenario `journey` -------------------------------------------------------------------------
    async def queue(self, player: Player) -> matchmaking_pb2.MatchAssignment:
        s = self.settings
        stub = self.matchmaking(player)
        metadata = self.tokens.player(player.id)
        preferences = matchmaking_pb2.MatchPreferences(
            preset=s.preset,
            players=s.seats,
            length=common_pb2.MATCH_LENGTH_POINTS if s.target_points else common_pb2.MATCH_LENGTH_EXPRESS,
            target_points=s.target_points,
            mode=common_pb2.TABLE_MODE_PRACTICE if s.practice else common_pb2.TABLE_MODE_COMPETITIVE,
            bet_chips=s.bet,
        )
        ticket = await self.calls.unary(
            "matchmaking.CreateTicket",
            stub.CreateTicket,
            matchmaking_pb2.CreateTicketRequest(
                request_id=f"{player.id}-ticket-{player.journeys}",
                ticket=matchmaking_pb2.Ticket(preferences=preferences),
            ),
            metadata,
        )
        confirmed = False

        async def watch() -> matchmaking_pb2.MatchAssignment:
            nonlocal confirmed
            request = matchmaking_pb2.WatchTicketRequest(name=ticket.name)
            async for update in self.calls.stream("matchmaking.WatchTicket", stub.WatchTicket, request, metadata):
                if update.state == matchmaking_pb2.Ticket.STATE_MATCHED:
                    assignment: matchmaking_pb2.MatchAssignment = update.assignment
                    return assignment
                if update.state == matchmaking_pb2.Ticket.STATE_PROPOSED and not confirmed:
                    confirmed = True
                    await self.calls.unary(
                        "matchmaking.ConfirmTicket",
                        stub.ConfirmTicket,
                        matchmaking_pb2.ConfirmTicketRequest(
                            name=ticket.name, request_id=f"{player.id}-confirm-{player.journeys}"
                        ),
                        metadata,
                    )
                elif update.state in (matchmaking_pb2.Ticket.STATE_FAILED, matchmaking_pb2.Ticket.STATE_CANCELLED):
                    state = matchmaking_pb2.Ticket.State.Name(update.state).removeprefix("STATE_")
                    raise StepError(f"TICKET_{state}", update.failure_reason or state.lower())
            raise StepError("STREAM_ENDED", f"{ticket.name}: WatchTicket ended before a match")

        watching = asyncio.ensure_future(asyncio.wait_for(watch(), s.wait_timeout_s))
        ending = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({watching, ending}, return_when=asyncio.FIRST_COMPLETED)
            if watching.done():
                return watching.result()
            # The run is ending (--duration) while this player waits: the others stop queueing,
            # so leave the queue rather than time out; matched meanwhile, play the match.
            try:
                await self.calls.unary(
                    "matchmaking.CancelTicket",
                    stub.CancelTicket,
                    matchmaking_pb2.CancelTicketRequest(
                        name=ticket.name, request_id=f"{player.id}-cancel-{player.journeys}"
                    ),
                    metadata,
                    expected=(grpc.StatusCode.FAILED_PRECONDITION,),
                )
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
                return await watching
            raise RunEnded(f"{ticket.name}: left the queue as the run ended")
        finally:
            ending.cancel()
            if not watching.done():
                watching.cancel()

    async def journey(self, player: Player) -> None:
        if not player.signed_up:
            await self.signup(player)
        async with self.step("fund"):
            balance = await self.fund(player)
        async with self.step("queue"):
            assignment = await self.queue(player)
        await self.play_and_check(player, assignment.game_session_address, assignment.table, balance)

    async def play_and_check(self, player: Player, address: str, table: str, balance: int) -> None:
        """Steps play, settle and leaderboard of one player at one table."""
        async with self.step("play"):
            result = await play_match(
                self.calls, self.settings, player.rng, address, self.tokens.token(Kind.PLAYER, player.id), table,
                self.game_channels,
            )
        async with self.step("settle"):
            await self.check_settled(player, balance, result.delta)
        async with self.step("leaderboard"):
            await self.check_ranking(player)

    # -- scenario `tables` ------------------------------------------------------------------------
    async def tables_match(self, group: Sequence[Player], number: int) -> None:
        """The driver seats each group at a table as matchmaking would (holds, CreateTable); the
        players then play, see the settlement and the leaderboard, each on their own."""
        s = self.settings
        for player in group:
            if not player.signed_up:
                await self.signup(player)
            player.journeys = number
        balances = [0] * len(group)
        if not s.practice:
            async with self.step("fund"):
                balances = await gather_all(*(self.fund(player) for player in group))
        head = group[0]
        match_id = f"{head.id}-m{number}"
        service = self.tokens.service("matchmaking")
        if not s.practice:
            async with self.step("hold"):
                await self.calls.unary(
                    "wallet.HoldBets",
                    self.wallet(head).HoldBets,
                    wallet_pb2.HoldBetsRequest(
                        request_id=f"{match_id}-hold",
                        match_id=match_id,
                        stakes=[wallet_pb2.Stake(player=p.name, amount_chips=s.bet) for p in group],
                    ),
                    service,
                )
        async with self.step("create_table"):
            stub = game_session_pb2_grpc.GameSessionServiceStub(
                self.game_channels.get(s.targets["game_session"])
            )
            table = await self.calls.unary(
                "game_session.CreateTable",
                stub.CreateTable,
                table_request(match_id, match_id, [p.name for p in group], table_options(s)),
                service,
            )
        address = table.owner_address or s.targets["game_session"]
        await gather_all(
            *(self.play_and_check(p, address, table.name, balances[seat]) for seat, p in enumerate(group))
        )

    # -- scenario `backend` -----------------------------------------------------------------------
    async def backend_match(self, group: Sequence[Player], number: int) -> None:
        s = self.settings
        for player in group:
            if not player.signed_up:
                await self.signup(player)
            player.journeys = number  # keys this match's request ids (a top-up must not replay the last)
        chips = not s.practice and self.uses("wallet")
        balances = [0] * len(group)
        if chips:
            async with self.step("fund"):
                balances = await gather_all(*(self.fund(player) for player in group))
        head = group[0]
        match_id = f"{head.id}-m{number}"
        wallet, ranking = self.wallet(head), self.ranking(head)
        if chips:
            async with self.step("hold"):
                await self.calls.unary(
                    "wallet.HoldBets",
                    wallet.HoldBets,
                    wallet_pb2.HoldBetsRequest(
                        request_id=f"{match_id}-hold",
                        match_id=match_id,
                        stakes=[wallet_pb2.Stake(player=p.name, amount_chips=s.bet) for p in group],
                    ),
                    self.tokens.service("matchmaking"),
                )
        async with self.step("play"):
            match, first_seat = await self.play_locally(head.rng)
        winners = [seat for seat in range(s.seats) if match.winner >= 0 and seat % 2 == match.winner]
        outcomes = [
            common_pb2.PlayerOutcome(
                player=p.name,
                seat=seat,
                outcome=common_pb2.OUTCOME_WON if seat in winners else common_pb2.OUTCOME_LOST,
            )
            for seat, p in enumerate(group)
        ]
        async with self.step("settle"):
            service = self.tokens.service("game-session")
            if chips:
                await self.calls.unary(
                    "wallet.Settle",
                    wallet.Settle,
                    wallet_pb2.SettleRequest(
                        request_id=f"{match_id}-settle", match_id=match_id, outcomes=outcomes, first_seat=first_seat
                    ),
                    service,
                )
            if self.uses("ranking"):
                end = Timestamp()
                end.FromDatetime(datetime.now(UTC))
                participants = [
                    ranking_pb2.RecordMatchRequest.Participant(
                        player=o.player, seat=o.seat, outcome=o.outcome, score=match.totals[o.seat % 2]
                    )
                    for o in outcomes
                ]
                await self.calls.unary(
                    "ranking.RecordMatch",
                    ranking.RecordMatch,
                    ranking_pb2.RecordMatchRequest(
                        request_id=f"{match_id}-record",
                        match_id=match_id,
                        options=table_options(s),
                        participants=participants,
                        end_time=end,
                    ),
                    service,
                )
            if chips:
                deltas = expected_deltas(s.bet, s.seats, winners, first_seat, s.house_cut_percent)
                checks = (self.check_settled(p, balances[seat], deltas[seat]) for seat, p in enumerate(group))
                await gather_all(*checks)
        if self.uses("ranking"):
            async with self.step("leaderboard"):
                await gather_all(*(self.check_ranking(p) for p in group))

    async def play_locally(self, rng: random.Random) -> tuple[MatchState, int]:
        """A whole match between engine bots, pausing `think_time` before each action."""
        s = self.settings
        rules = match_rules(s)
        first_dealer = rng.randrange(s.seats)
        match = MatchState(rules, s.seats, first_dealer=first_dealer)
        bots = [make_bot(s.bot, rng.randrange(1 << 30), rules) for _ in range(s.seats)]
        while match.needs_deal():
            match.start_hand(seed=rng.randrange(1 << 62))
            hand = match.hand
            assert hand is not None
            while not hand.is_terminal():
                seat = hand.to_act
                match.apply(bots[seat].choose(hand.view(seat), hand.legal_actions()), seat)
                await asyncio.sleep(rng.uniform(0, 2 * s.think_time_s) if s.think_time_s else 0)
        return match, (first_dealer + 1) % s.seats

    # -- the run ----------------------------------------------------------------------------------
    def _keep_going(self, done: int) -> bool:
        return keep_going(self.settings, self.stopping, done)

    async def run_player(self, player: Player, start_delay: float) -> None:
        await run_journeys(self.recorder, player, start_delay, self._keep_going, self.journey)

    async def run_group(self, group: Sequence[Player], start_delay: float) -> None:
        await asyncio.sleep(start_delay)
        number = 0
        while self._keep_going(number):
            started = time.perf_counter()
            self.recorder.counters["matches_started"] += 1
            try:
                if self.settings.scenario == "tables":
                    await self.tables_match(group, number)
                else:
                    await self.backend_match(group, number)
            except Exception:
                self.recorder.counters["matches_failed"] += 1
                number += 1
                await asyncio.sleep(FAILED_JOURNEY_PAUSE_S)
                continue
            number += 1
            self.recorder.counters["matches_completed"] += 1
            self.recorder.ok("step", "journey", time.perf_counter() - started)


async def run_shard(settings: Settings, indices: Sequence[int]) -> tuple[Recorder, float]:
    """Drive the players `indices` (of the whole run's) to the end; their recorder and the time
    measured (from the first start to the last journey's end)."""
    recorder = Recorder()
    tokens = (Tokens.from_file(Path(settings.tokens_file)) if settings.tokens_file
              else Tokens.from_key(settings.token_key, settings.audience))
    tls = client_tls(settings.tls_ca, settings.tls_cert, settings.tls_key)
    driver = Driver(settings, recorder, tokens, Channels(settings.connections, tls, settings.tls_server_name))
    started = time.perf_counter()
    cpu_started = time.process_time()
    tasks: list[asyncio.Task[None]] = []
    spacing = settings.ramp_s / settings.players
    if settings.scenario in ("backend", "tables"):
        for first in range(0, len(indices), settings.seats):
            group = [driver.player(i) for i in indices[first : first + settings.seats]]
            tasks.append(asyncio.create_task(driver.run_group(group, spacing * group[0].index)))
    else:
        for index in indices:
            tasks.append(asyncio.create_task(driver.run_player(driver.player(index), spacing * index)))
    everything = asyncio.gather(*tasks)
    try:
        if settings.journeys:
            await everything
        else:
            done, _ = await asyncio.wait({everything}, timeout=settings.ramp_s + settings.duration_s)
            if not done:
                driver.stopping.set()  # no new journeys; those in flight finish, up to drain_s
                done, _ = await asyncio.wait({everything}, timeout=settings.drain_s)
                if not done:
                    recorder.counters["cancelled_in_flight"] += sum(not t.done() for t in tasks)
                    everything.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await everything
    finally:
        elapsed = time.perf_counter() - started
        # The driver's own CPU (every thread of the process, gRPC's included), to size drivers.
        recorder.counters["driver_cpu_ms"] += round(1000 * (time.process_time() - cpu_started))
        await driver.channels.close()
        await driver.game_channels.close()
    return recorder, elapsed


def keep_going(settings: Settings, stopping: asyncio.Event, done: int) -> bool:
    """Whether a player who has made `done` journeys starts another (the run not ending, and
    `--journeys` not reached when it is set)."""
    if stopping.is_set():
        return False
    return done < settings.journeys if settings.journeys else True


async def run_journeys(recorder: Recorder, player: Player, start_delay: float,
                       going: Callable[[int], bool], journey: Callable[[Player], Awaitable[None]]) -> None:
    """One player's journeys, one after the other while `going(journeys made)`, each counted and
    timed as the step `journey`; a failed one is counted and followed by a pause (every scenario)."""
    await asyncio.sleep(start_delay)
    while going(player.journeys):
        started = time.perf_counter()
        recorder.counters["journeys_started"] += 1
        try:
            await journey(player)
        except RunEnded:
            recorder.counters["left_queue_at_end"] += 1
            break
        except Exception:
            recorder.counters["journeys_failed"] += 1
            player.journeys += 1
            await asyncio.sleep(FAILED_JOURNEY_PAUSE_S)
            continue
        player.journeys += 1
        recorder.counters["journeys_completed"] += 1
        recorder.ok("step", "journey", time.perf_counter() - started)
