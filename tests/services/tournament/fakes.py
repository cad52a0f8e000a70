"""In-process stand-ins for the services the tournament service calls, served through the real
server frame (so tokens are checked and `current_identity()` works), speaking the real contracts:

- `FakeWallet`: a small double-entry ledger with the wallet's rules for what tournaments use
  (HoldBets into a tournament pot, Void of one player or the whole pot, Settle by prize shares
  with the 20% house cut and its rounding, idempotent request ids) and an audit.
- `FakeRanking`: BatchGetRatings from a table of ratings.
- `FakeGameSessions`: CreateTable / GetTable / CancelTable; each table's players connect (or not,
  as the test says), the match is played by engine bots (or its result is dictated), and the end
  is reported to the tournament service as the game-session service's outbox does: with the match
  id as request id, retried until it is accepted.

Each fake can be told to fail calls (`fail`), to apply a call but lose its answer (`lose_answer`),
which is what a crash or a timeout looks like from the tournament service's side.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from buraco.v1 import (
    common_pb2,
    game_session_pb2,
    game_session_pb2_grpc,
    ranking_pb2,
    ranking_pb2_grpc,
    tournament_pb2,
    tournament_pb2_grpc,
    wallet_pb2,
    wallet_pb2_grpc,
)
from engine.bots import make_bot
from engine.match import MatchState
from engine.rules import ruleset_from_spec
from services.client.channels import channel
from services.common.auth import Kind, Minter, current_identity
from services.common.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from services.common.idempotency import request_hash
from services.common.server import Deps, ServiceSpec

HOUSE_PERCENT = 20
#: Fakes keep no tables (their configs never run migrations).
EMPTY_MIGRATIONS = Path(__file__).parent


class Faults:
    """Failures to inject, per method name: `fail` answers UNAVAILABLE without doing anything;
    `lose_answer` does the work, then answers UNAVAILABLE (the caller cannot know it was done)."""

    def __init__(self) -> None:
        self.fail: dict[str, int] = {}
        self.lose_answer: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def before(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        if self.fail.get(method, 0) > 0:
            self.fail[method] -= 1
            raise UnavailableError(f"{method}: injected failure")

    def after(self, method: str) -> None:
        if self.lose_answer.get(method, 0) > 0:
            self.lose_answer[method] -= 1
            raise UnavailableError(f"{method}: injected lost answer")


class Idempotent:
    """Stored answers by (caller, request id), as services.common.idempotency keeps them."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], tuple[str, bytes]] = {}

    def stored(self, method: str, request: Any, response_type: Any) -> Any:
        key = (current_identity().principal, request.request_id)
        if key not in self.answers:
            return None
        digest, data = self.answers[key]
        if digest != request_hash(method, request):
            raise AlreadyExistsError(f"request_id {request.request_id!r} was already used for a different request")
        return response_type.FromString(data)

    def store(self, method: str, request: Any, response: Any) -> None:
        key = (current_identity().principal, request.request_id)
        self.answers[key] = (request_hash(method, request), response.SerializeToString())


# -- wallet -----------------------------------------------------------------------------------------


@dataclass
class Hold:
    id: str
    pot: str
    player: str
    amount: int
    state: str = "pending"  # pending, posted, voided


@dataclass
class LedgerTransfer:
    debit: str
    credit: str
    amount: int
    reason: str


class FakeWallet(wallet_pb2_grpc.WalletServiceServicer):
    def __init__(self) -> None:
        self.transfers: list[LedgerTransfer] = []
        self.balances: dict[str, int] = {"treasury": 0, "house": 0}
        self.holds: dict[str, Hold] = {}
        self.pots: dict[str, str] = {}  # pot account -> open, settled, voided
        self.idempotent = Idempotent()
        self.faults = Faults()

    # helpers for the tests
    def _move(self, debit: str, credit: str, amount: int, reason: str) -> wallet_pb2.Transfer:
        self.transfers.append(LedgerTransfer(debit, credit, amount, reason))
        self.balances[debit] = self.balances.get(debit, 0) - amount
        self.balances[credit] = self.balances.get(credit, 0) + amount
        return wallet_pb2.Transfer(
            name=f"transfers/{len(self.transfers)}",
            debit_account=f"accounts/{debit}",
            credit_account=f"accounts/{credit}",
            amount_chips=amount,
            reason=getattr(wallet_pb2, f"REASON_CODE_{reason.upper()}"),
            state=wallet_pb2.Transfer.STATE_POSTED,
        )

    def fund(self, player: str, chips: int) -> None:
        self._move("treasury", f"player-{player}", chips, "grant")

    def balance(self, player: str) -> int:
        return self.balances.get(f"player-{player}", 0)

    def held(self, player: str) -> int:
        return sum(h.amount for h in self.holds.values() if h.player == player and h.state == "pending")

    def live_holds(self, pot: str) -> list[Hold]:
        return [h for h in self.holds.values() if h.pot == pot and h.state == "pending"]

    def audit(self) -> None:
        """The wallet's audit: balances are the sums of their transfers, everything sums to zero,
        no player is negative or holds more than they have, closed pots hold nothing."""
        recomputed: dict[str, int] = {"treasury": 0, "house": 0}
        for t in self.transfers:
            assert t.amount > 0
            recomputed[t.debit] = recomputed.get(t.debit, 0) - t.amount
            recomputed[t.credit] = recomputed.get(t.credit, 0) + t.amount
        assert {k: v for k, v in recomputed.items() if v} == {k: v for k, v in self.balances.items() if v}
        assert sum(self.balances.values()) == 0
        for account, balance in self.balances.items():
            if account.startswith("player-"):
                player = account.removeprefix("player-")
                assert balance >= 0, account
                assert self.held(player) <= balance, account
            if account.startswith("tournament-") and self.pots.get(account) != "open":
                assert balance == 0, account
        for pot, state in self.pots.items():
            if state != "open":
                assert not self.live_holds(pot), pot

    # the RPCs
    def _mover(self, method: str) -> None:
        current_identity().require_kind(Kind.SERVICE, Kind.ADMIN, method=f"WalletService.{method}")

    @staticmethod
    def _pot(request: Any) -> str:
        if request.WhichOneof("pot") != "tournament":
            raise InvalidArgumentError("tournament", "the fake wallet keeps tournament pots only")
        return "tournament-" + str(request.tournament).removeprefix("tournaments/")

    async def HoldBets(self, request: wallet_pb2.HoldBetsRequest, context: Any) -> wallet_pb2.HoldBetsResponse:
        self._mover("HoldBets")
        self.faults.before("HoldBets")
        stored = self.idempotent.stored("HoldBets", request, wallet_pb2.HoldBetsResponse)
        if stored is not None:
            return stored  # type: ignore[no-any-return]
        pot = self._pot(request)
        if self.pots.get(pot, "open") != "open":
            raise FailedPreconditionError(f"{pot} is {self.pots[pot]}")
        if not 1 <= len(request.stakes) <= 1024:
            raise InvalidArgumentError("stakes", "1 to 1024")
        for i, stake in enumerate(request.stakes):
            player = stake.player.removeprefix("players/")
            if f"player-{player}" not in self.balances:
                raise FailedPreconditionError(f"stakes[{i}].player: players/{player} has no account")
            if self.balance(player) - self.held(player) < stake.amount_chips:
                raise FailedPreconditionError(f"stakes[{i}].player: players/{player} cannot cover the stake")
            if any(h.player == player for h in self.live_holds(pot)):
                raise FailedPreconditionError(f"stakes[{i}].player: players/{player} already has a live hold")
        self.pots[pot] = "open"
        reply = wallet_pb2.HoldBetsResponse()
        for stake in request.stakes:
            hold = Hold(f"h{len(self.holds) + 1}", pot, stake.player.removeprefix("players/"), stake.amount_chips)
            self.holds[hold.id] = hold
            reply.holds.add(
                name=f"transfers/{hold.id}", amount_chips=hold.amount, state=wallet_pb2.Transfer.STATE_PENDING
            )
        self.idempotent.store("HoldBets", request, reply)
        self.faults.after("HoldBets")
        return reply

    async def Void(self, request: wallet_pb2.VoidRequest, context: Any) -> wallet_pb2.VoidResponse:
        self._mover("Void")
        self.faults.before("Void")
        stored = self.idempotent.stored("Void", request, wallet_pb2.VoidResponse)
        if stored is not None:
            return stored  # type: ignore[no-any-return]
        pot = self._pot(request)
        if pot not in self.pots:
            raise NotFoundError(f"{pot}: no pot")
        if self.pots[pot] != "open":
            raise FailedPreconditionError(f"{pot} is {self.pots[pot]}")
        if request.penalised_players:
            raise InvalidArgumentError("penalised_players", "not used by tournaments")
        live = self.live_holds(pot)
        chosen = live
        if request.players:
            wanted = [p.removeprefix("players/") for p in request.players]
            chosen = [h for h in live if h.player in wanted]
            missing = set(wanted) - {h.player for h in chosen}
            if missing:
                raise FailedPreconditionError(f"players: {sorted(missing)} have no live stake in {pot}")
        for hold in chosen:
            hold.state = "voided"
        if not request.players:
            self.pots[pot] = "voided"
        reply = wallet_pb2.VoidResponse(
            transfers=[wallet_pb2.Transfer(name=f"transfers/{h.id}", amount_chips=h.amount) for h in chosen]
        )
        self.idempotent.store("Void", request, reply)
        self.faults.after("Void")
        return reply

    async def Settle(self, request: wallet_pb2.SettleRequest, context: Any) -> wallet_pb2.SettleResponse:
        self._mover("Settle")
        self.faults.before("Settle")
        stored = self.idempotent.stored("Settle", request, wallet_pb2.SettleResponse)
        if stored is not None:
            return stored  # type: ignore[no-any-return]
        pot = self._pot(request)
        if self.pots.get(pot) != "open":
            raise FailedPreconditionError(f"{pot} is {self.pots.get(pot, 'missing')}")
        live = self.live_holds(pot)
        if not live:
            raise FailedPreconditionError(f"{pot} has no live buy-ins")
        holders = {h.player for h in live}
        seen: set[str] = set()
        prizes: list[tuple[str, int, int]] = []
        for i, prize in enumerate(request.prizes):
            player = prize.player.removeprefix("players/")
            if player in seen or not 1 <= prize.share_bp <= 10_000 or prize.place < 1:
                raise InvalidArgumentError(f"prizes[{i}]", "bad prize")
            if player not in holders:
                raise FailedPreconditionError(f"prizes[{i}].player: players/{player} has no live buy-in")
            seen.add(player)
            prizes.append((player, prize.place, prize.share_bp))
        if sum(share for _, _, share in prizes) != 10_000:
            raise InvalidArgumentError("prizes", "the shares must add up to 10000 basis points")
        reply = wallet_pb2.SettleResponse()
        total = 0
        for hold in live:
            hold.state = "posted"
            total += hold.amount
            reply.transfers.append(self._move(f"player-{hold.player}", pot, hold.amount, "bet"))
        cut = total * HOUSE_PERCENT // 100
        net = total - cut
        amounts = [net * share // 10_000 for _, _, share in prizes]
        left = net - sum(amounts)
        for i in sorted(range(len(prizes)), key=lambda i: (prizes[i][1], i))[:left]:
            amounts[i] += 1
        for (player, _, _), amount in zip(prizes, amounts, strict=True):
            if amount:
                reply.transfers.append(self._move(pot, f"player-{player}", amount, "settle"))
        if cut:
            reply.transfers.append(self._move(pot, "house", cut, "house_cut"))
        self.pots[pot] = "settled"
        reply.pot_chips, reply.house_cut_chips = total, cut
        self.idempotent.store("Settle", request, reply)
        self.faults.after("Settle")
        return reply


# -- ranking ----------------------------------------------------------------------------------------


class FakeRanking(ranking_pb2_grpc.RankingServiceServicer):
    def __init__(self) -> None:
        self.ratings: dict[str, float] = {}
        self.faults = Faults()

    async def BatchGetRatings(
        self, request: ranking_pb2.BatchGetRatingsRequest, context: Any
    ) -> ranking_pb2.BatchGetRatingsResponse:
        current_identity()
        self.faults.before("BatchGetRatings")
        if not 1 <= len(request.player_names) <= 1000 or request.players not in (2, 4):
            raise InvalidArgumentError("player_names", "1 to 1000 players, 2 or 4 seats")
        return ranking_pb2.BatchGetRatingsResponse(
            ratings=[
                ranking_pb2.Rating(
                    player=name,
                    preset=request.preset,
                    players=request.players,
                    ordinal=self.ratings.get(name.removeprefix("players/"), 0.0),
                )
                for name in request.player_names
            ]
        )


# -- game sessions ----------------------------------------------------------------------------------


@dataclass
class Plan:
    """What happens at a table: who joins, who wins, whether the end is reported."""

    #: Players who never connect.
    absent: frozenset[str] = frozenset()
    #: The winning side and the scores; None: engine bots play the match.
    result: tuple[int, tuple[int, int]] | None = None
    #: Whether the end reaches the tournament service (False: the report is lost).
    report: bool = True
    #: The match waits for `FakeGameSessions.release(match_id)` before it ends.
    wait: bool = False


@dataclass
class FakeTable:
    id: str
    match_id: str
    options: common_pb2.TableOptions
    players: list[str]
    tournament: str
    plan: Plan
    state: game_session_pb2.Table.State.ValueType = game_session_pb2.Table.STATE_WAITING
    connected: set[str] = field(default_factory=set)
    scores: tuple[int, int] = (0, 0)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def play_match(options: common_pb2.TableOptions, players: int, seed: str) -> tuple[int, tuple[int, int]]:
    """Engine bots play the match (random legal moves); the winning side and the totals."""
    spec: dict[str, Any] = {"preset": options.ruleset.preset}
    spec["target"] = options.target_points if options.length == common_pb2.MATCH_LENGTH_POINTS else 0
    rules = ruleset_from_spec(spec)
    match = MatchState(rules, players, 0)
    bots = [make_bot("random", f"{seed}/{seat}") for seat in range(players)]  # string seeds: the same every run
    hand = 0
    while not match.is_over():
        if match.needs_deal():
            hand += 1
            match.start_hand(seed=f"{seed}:{hand}")
            continue
        state = match.hand
        assert state is not None
        seat = state.to_act
        match.apply(bots[seat].choose(state.view(seat), state.legal_actions()), seat)
    return match.winner, (match.totals[0], match.totals[1])


def quick_result(match_id: str) -> tuple[int, tuple[int, int]]:
    """A match result without playing it (cheaper than `play_match` for big tournaments): a
    winner and distinct scores, drawn from the match id."""
    rng = random.Random(match_id)
    low, high = rng.randrange(-200, 800, 5), rng.randrange(805, 2000, 5)
    side = rng.randrange(2)
    return side, ((high, low) if side == 0 else (low, high))


class FakeGameSessions(game_session_pb2_grpc.GameSessionServiceServicer):
    def __init__(self, minter: Minter) -> None:
        self.tables: dict[str, FakeTable] = {}
        self.by_match: dict[str, str] = {}
        self.idempotent = Idempotent()
        self.faults = Faults()
        self.minter = minter
        #: Where the tournament service listens (set once it runs; reports wait for it).
        self.tournament_address = ""
        #: The plan for each new table (a function of its match id and players).
        self.planner: Callable[[str, list[str]], Plan] = lambda match, players: Plan()
        self.reports: dict[str, int] = {}  # match id -> delivery attempts
        self.delivered: set[str] = set()
        self.cancelled: set[str] = set()
        self._cancellations = asyncio.Condition()
        #: Reports the tournament service refused for good (match id -> status).
        self.refused: dict[str, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._token = ""

    def table_message(self, table: FakeTable) -> game_session_pb2.Table:
        return game_session_pb2.Table(
            name=f"tables/{table.id}",
            match_id=table.match_id,
            options=table.options,
            seats=[
                game_session_pb2.Seat(
                    seat=i,
                    participant=common_pb2.Participant(player=f"players/{p}"),
                    connected=p in table.connected,
                )
                for i, p in enumerate(table.players)
            ],
            state=table.state,
            match_scores=list(table.scores),
            tournament=f"tournaments/{table.tournament}",
        )

    async def CreateTable(self, request: game_session_pb2.CreateTableRequest, context: Any) -> game_session_pb2.Table:
        identity = current_identity()
        if identity.kind is not Kind.SERVICE:
            raise PermissionDeniedError("tables are created by services")
        self.faults.before("CreateTable")
        stored = self.idempotent.stored("CreateTable", request, game_session_pb2.Table)
        if stored is not None:
            return stored  # type: ignore[no-any-return]
        definition = request.table
        if request.table_id in self.tables or definition.match_id in self.by_match:
            raise AlreadyExistsError(f"tables/{request.table_id} or its match id exists")
        if definition.options.mode != common_pb2.TABLE_MODE_COMPETITIVE or definition.options.bet_chips:
            raise InvalidArgumentError("table.options", "a tournament table is competitive without a bet")
        players = [seat.participant.player.removeprefix("players/") for seat in definition.seats]
        if len(players) != definition.options.players or not all(players):
            raise InvalidArgumentError("table.seats", "one player per seat")
        table = FakeTable(
            request.table_id,
            definition.match_id,
            definition.options,
            players,
            definition.tournament.removeprefix("tournaments/"),
            self.planner(definition.match_id, players),
        )
        table.connected = {p for p in players if p not in table.plan.absent}
        self.tables[table.id] = table
        self.by_match[table.match_id] = table.id
        reply = self.table_message(table)
        self.idempotent.store("CreateTable", request, reply)
        if table.connected == set(players):  # everyone is here: the match is played
            self._spawn(self._play(table))
        self.faults.after("CreateTable")
        return reply

    async def GetTable(self, request: game_session_pb2.GetTableRequest, context: Any) -> game_session_pb2.Table:
        current_identity()
        self.faults.before("GetTable")
        table = self.tables.get(request.name.removeprefix("tables/"))
        if table is None:
            raise NotFoundError(f"{request.name} does not exist")
        return self.table_message(table)

    async def CancelTable(self, request: game_session_pb2.CancelTableRequest, context: Any) -> game_session_pb2.Table:
        current_identity().require_kind(Kind.SERVICE, method="GameSessionService.CancelTable")
        self.faults.before("CancelTable")
        table = self.tables.get(request.name.removeprefix("tables/"))
        if table is None:
            raise NotFoundError(f"{request.name} does not exist")
        if table.state == game_session_pb2.Table.STATE_CANCELLED:
            return self.table_message(table)
        if table.state != game_session_pb2.Table.STATE_WAITING:
            raise FailedPreconditionError(f"{request.name}: the match has started")
        table.state = game_session_pb2.Table.STATE_CANCELLED
        self.cancelled.add(table.match_id)
        async with self._cancellations:
            self._cancellations.notify_all()
        return self.table_message(table)

    async def until_cancelled(self, match_ids: set[str], timeout: float = 30.0) -> None:
        """Waits until every table of `match_ids` was cancelled (the tournament cancels the tables
        of a decided pairing after recording the decision, so a watcher may see the decision first)."""
        async with asyncio.timeout(timeout), self._cancellations:
            await self._cancellations.wait_for(lambda: match_ids <= self.cancelled)

    # the tables' life
    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def release(self, *match_ids: str) -> None:
        for match in match_ids:
            self.tables[self.by_match[match]].release.set()

    def cancel_externally(self, match_id: str) -> None:
        """Someone else cancels a waiting table (not the tournament service)."""
        table = self.tables[self.by_match[match_id]]
        table.state = game_session_pb2.Table.STATE_CANCELLED

    async def _play(self, table: FakeTable) -> None:
        table.state = game_session_pb2.Table.STATE_PLAYING
        if table.plan.wait:
            await table.release.wait()
        if table.plan.result is not None:
            side, scores = table.plan.result
        else:
            side, scores = play_match(table.options, len(table.players), table.match_id)
        table.scores = scores
        table.state = game_session_pb2.Table.STATE_FINISHED
        if table.plan.report:
            await self._report(table, side)

    async def _report(self, table: FakeTable, side: int) -> None:
        """The outbox: the match id as request id, retried until the tournament service answers
        (a permanent refusal ends the retries, as it does in the real outbox)."""
        request = tournament_pb2.ReportMatchResultRequest(
            request_id=table.match_id,
            tournament=f"tournaments/{table.tournament}",
            match_id=table.match_id,
            outcomes=[
                common_pb2.PlayerOutcome(
                    player=f"players/{p}",
                    seat=i,
                    outcome=common_pb2.OUTCOME_WON if i % 2 == side else common_pb2.OUTCOME_LOST,
                )
                for i, p in enumerate(table.players)
            ],
            match_scores=list(table.scores),
        )
        rng = random.Random(table.match_id)
        while True:
            self.reports[table.match_id] = self.reports.get(table.match_id, 0) + 1
            if self.tournament_address:
                token = self.minter.mint(Kind.SERVICE, "game-session")
                try:
                    async with channel(self.tournament_address, token=token) as onward:
                        stub = tournament_pb2_grpc.TournamentServiceStub(onward)
                        await stub.ReportMatchResult(request, timeout=5)
                    self.delivered.add(table.match_id)
                    return
                except grpc.aio.AioRpcError as error:
                    if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                        self.refused[table.match_id] = f"{error.code().name}: {error.details()}"
                        return
            # The outbox's own retry delay (short, jittered), not a test's synchronisation.
            await asyncio.sleep(0.05 + rng.random() * 0.05)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def spec_for(name: str, service: str, add: Callable[[grpc.aio.Server], None]) -> ServiceSpec:
    """A ServiceSpec serving a fake through the real server frame."""

    def register(server: grpc.aio.Server, deps: Deps) -> None:
        add(server)

    return ServiceSpec(
        name=name, grpc_services=(service,), register=register, migrations=EMPTY_MIGRATIONS, calls_others=False
    )
