"""Helpers of the tournament tests: the services the tournament service calls (`Platform`), the
tournament service running in-process on one database with a clock the test moves, and a client
that speaks its contract as admins, players and the game-session service do.

`Platform` is the one place that knows which services are real: the tests see addresses
(`Platform.addresses`, which the tournament service is configured with) and a few operations
(fund a player, read a balance, audit the ledger, decide how tables play). The wallet is the real
wallet service (its audit is the wallet's own), except in tests marked `fake_wallet`, which inject
its faults into a fake; ranking and game sessions are fakes (docs/tournaments.md, "Testing
against the real services").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import grpc

from buraco.v1 import common_pb2, tournament_pb2, tournament_pb2_grpc, wallet_pb2, wallet_pb2_grpc
from services.client.channels import act_for
from services.common.auth import Kind, Minter
from services.common.db import Database
from services.common.server import Server
from services.tournament.service import Running, build_spec
from services.tournament.settings import TournamentSettings
from services.wallet.service import run_audit
from tests.conftest import DatabaseTarget
from tests.services.harness import bearer, make_config, running
from tests.services.tournament.fakes import FakeGameSessions, FakeRanking, FakeWallet, Plan

#: The longest any scenario may take to reach the state it waits for.
WAIT_SECONDS = 60.0


class Ledger(Protocol):
    """The wallet as the tests read and fund it."""

    async def fund(self, player: str, chips: int) -> None: ...

    async def account(self, player: str) -> tuple[int, int]:
        """The player's posted balance and the chips held out of it."""
        ...

    async def house(self) -> int: ...

    async def audit(self) -> None: ...


class FakeLedger:
    def __init__(self, wallet: FakeWallet) -> None:
        self.wallet = wallet

    async def fund(self, player: str, chips: int) -> None:
        self.wallet.fund(player, chips)

    async def account(self, player: str) -> tuple[int, int]:
        return self.wallet.balance(player), self.wallet.held(player)

    async def house(self) -> int:
        return self.wallet.balances.get("house", 0)

    async def audit(self) -> None:
        self.wallet.audit()


class WalletLedger:
    """The real wallet service: funded by an admin's grants, read with GetAccount, audited by the
    wallet's own audit (`python -m services.wallet audit`) on its database."""

    def __init__(self, stub: wallet_pb2_grpc.WalletServiceAsyncStub, db: Database, minter: Minter) -> None:
        self.stub = stub
        self.db = db
        self.admin = bearer(minter.mint(Kind.ADMIN, "treasurer"))

    async def fund(self, player: str, chips: int) -> None:
        await self.stub.CreateAccount(
            wallet_pb2.CreateAccountRequest(request_id=f"open-{player}", player=f"players/{player}"),
            metadata=self.admin,
        )
        await self.stub.Grant(
            wallet_pb2.GrantRequest(
                request_id=f"grant-{player}",
                player=f"players/{player}",
                amount_chips=chips,
                kind=wallet_pb2.GrantRequest.KIND_PROMOTION,
            ),
            metadata=self.admin,
        )

    async def _read(self, name: str) -> wallet_pb2.Account | None:
        try:
            reply: wallet_pb2.Account = await self.stub.GetAccount(
                wallet_pb2.GetAccountRequest(name=name), metadata=self.admin
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        return reply

    async def account(self, player: str) -> tuple[int, int]:
        account = await self._read(f"accounts/player-{player}")
        return (account.balance_chips, account.held_chips) if account else (0, 0)

    async def house(self) -> int:
        account = await self._read("accounts/house")
        return account.balance_chips if account else 0

    async def audit(self) -> None:
        report = await run_audit(self.db)
        assert report.ok, report.problems


@dataclass
class Platform:
    """The wallet, ranking and game-session services as the tournament tests use them."""

    addresses: dict[str, str]
    ledger: Ledger
    ranking: FakeRanking
    tables: FakeGameSessions
    keys_dir: Path
    minter: Minter

    @property
    def wallet(self) -> FakeWallet:
        """The fake wallet, for tests that inject its faults (`@pytest.mark.fake_wallet`)."""
        assert isinstance(self.ledger, FakeLedger), "this test needs @pytest.mark.fake_wallet"
        return self.ledger.wallet

    async def fund(self, players: Iterable[str], chips: int) -> None:
        gate = asyncio.Semaphore(8)

        async def one(player: str) -> None:
            async with gate:
                await self.ledger.fund(player, chips)

        await asyncio.gather(*(one(p) for p in players))

    async def balance(self, player: str) -> int:
        """Chips the player can spend (balance less holds)."""
        balance, held = await self.ledger.account(player)
        return balance - held

    async def held(self, player: str) -> int:
        return (await self.ledger.account(player))[1]

    async def house(self) -> int:
        return await self.ledger.house()

    async def audit(self) -> None:
        await self.ledger.audit()
        assert not self.tables.refused, self.tables.refused

    def plan_tables(self, planner: Callable[[str, list[str]], Plan]) -> None:
        self.tables.planner = planner


class ManualClock:
    """The tournament service's clock in tests: moves only when told."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2030, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


#: Quick settings for tests: the scheduler wakes often, tables are read on every tick.
FAST = TournamentSettings(
    tick_seconds=0.5,
    poll_seconds=1.0,
    reconcile_seconds=5.0,
    result_grace_seconds=10.0,
    seeding_wait_seconds=30.0,
    lease_seconds=30.0,
    replica_id="test",
    watch_poll_seconds=0.5,
    call_timeout_seconds=5.0,
    retry_seconds=0.05,
    max_retry_seconds=0.5,
)


@dataclass
class TournamentService:
    """A tournament service running in-process on one database, and a client of it."""

    server: Server
    running: Running
    clock: ManualClock
    platform: Platform
    channel: grpc.aio.Channel
    stub: tournament_pb2_grpc.TournamentServiceAsyncStub = field(init=False)

    def __post_init__(self) -> None:
        self.stub = tournament_pb2_grpc.TournamentServiceStub(self.channel)

    def as_admin(self) -> tuple[tuple[str, str], ...]:
        return bearer(self.platform.minter.mint(Kind.ADMIN, "root"))

    def as_player(self, player: str) -> tuple[tuple[str, str], ...]:
        return bearer(self.platform.minter.mint(Kind.PLAYER, player))

    def as_service(self, name: str, player: str | None = None) -> tuple[tuple[str, str], ...]:
        metadata = bearer(self.platform.minter.mint(Kind.SERVICE, name))
        return metadata + act_for(player) if player else metadata

    def advance(self, seconds: float) -> None:
        """Moves the clock and lets the scheduler look at once."""
        self.clock.advance(seconds)
        self.running.scheduler.wake()

    async def settle(self) -> None:
        """Waits until the scheduler has done everything that is due now."""
        await self.running.scheduler.next_pass()

    async def create(self, tournament_id: str, **fields: Any) -> tournament_pb2.Tournament:
        return await self.stub.CreateTournament(
            tournament_pb2.CreateTournamentRequest(
                request_id=f"create-{tournament_id}",
                tournament_id=tournament_id,
                tournament=definition(self.clock.now, **fields),
            ),
            metadata=self.as_admin(),
        )

    async def register(self, tournament_id: str, player: str, partner: str = "", request_id: str = "") -> Any:
        return await self.stub.Register(
            tournament_pb2.RegisterRequest(
                tournament=f"tournaments/{tournament_id}",
                request_id=request_id or f"reg-{player}",
                partner=f"players/{partner}" if partner else "",
            ),
            metadata=self.as_player(player),
        )

    async def register_all(self, tournament_id: str, players: Iterable[str]) -> None:
        gate = asyncio.Semaphore(8)

        async def one(player: str) -> None:
            async with gate:
                await self.register(tournament_id, player)

        await asyncio.gather(*(one(p) for p in players))

    async def start(self, tournament_id: str) -> None:
        """Moves the clock to the start time."""
        t = await self.stub.GetTournament(
            tournament_pb2.GetTournamentRequest(name=f"tournaments/{tournament_id}"), metadata=self.as_admin()
        )
        self.clock.now = max(self.clock.now, t.start_time.ToDatetime(tzinfo=UTC))
        self.running.scheduler.wake()

    async def until(
        self, tournament_id: str, condition: Callable[[Watched], bool], *, timeout: float = WAIT_SECONDS
    ) -> Watched:
        """Follows WatchTournament until `condition` holds on what it has streamed."""
        return await watch_until(self.stub, self.as_admin(), tournament_id, condition, timeout)

    async def bracket(self, tournament_id: str) -> tournament_pb2.Bracket:
        return await self.stub.GetBracket(
            tournament_pb2.GetBracketRequest(tournament=f"tournaments/{tournament_id}"), metadata=self.as_admin()
        )

    async def standings(self, tournament_id: str) -> list[tournament_pb2.Standing]:
        out: list[tournament_pb2.Standing] = []
        token = ""
        while True:
            page = await self.stub.ListStandings(
                tournament_pb2.ListStandingsRequest(parent=f"tournaments/{tournament_id}", page_token=token),
                metadata=self.as_admin(),
            )
            out.extend(page.standings)
            token = page.next_page_token
            if not token:
                return out

    async def entrants(self, tournament_id: str) -> list[tournament_pb2.Entrant]:
        out: list[tournament_pb2.Entrant] = []
        token = ""
        while True:
            page = await self.stub.ListEntrants(
                tournament_pb2.ListEntrantsRequest(parent=f"tournaments/{tournament_id}", page_token=token),
                metadata=self.as_admin(),
            )
            out.extend(page.entrants)
            token = page.next_page_token
            if not token:
                return out


@dataclass
class Watched:
    """The latest of each kind of update a WatchTournament stream has sent."""

    tournament: tournament_pb2.Tournament = field(default_factory=tournament_pb2.Tournament)
    bracket: tournament_pb2.Bracket = field(default_factory=tournament_pb2.Bracket)
    standings: tournament_pb2.ListStandingsResponse = field(default_factory=tournament_pb2.ListStandingsResponse)
    updates: int = 0
    kinds: set[str] = field(default_factory=set)

    def pairings(self, round_number: int | None = None) -> list[tournament_pb2.Pairing]:
        return [p for r in self.bracket.rounds if round_number is None or r.number == round_number for p in r.pairings]


def finished(w: Watched) -> bool:
    """Finished (or cancelled) with its chips settled."""
    return (
        w.tournament.state in (tournament_pb2.Tournament.STATE_FINISHED, tournament_pb2.Tournament.STATE_CANCELLED)
        and w.tournament.chips_settled
    )


async def watch_until(
    stub: tournament_pb2_grpc.TournamentServiceAsyncStub,
    metadata: Any,
    tournament_id: str,
    condition: Callable[[Watched], bool],
    timeout: float = WAIT_SECONDS,
) -> Watched:
    seen = Watched()
    try:
        async with asyncio.timeout(timeout):
            return await _follow(stub, metadata, tournament_id, condition, seen)
    except TimeoutError:
        raise AssertionError(
            f"no such state in {timeout} s; the last one:\n{seen.tournament}\n{seen.bracket}"
        ) from None


async def _follow(
    stub: tournament_pb2_grpc.TournamentServiceAsyncStub,
    metadata: Any,
    tournament_id: str,
    condition: Callable[[Watched], bool],
    seen: Watched,
) -> Watched:
    stream = stub.WatchTournament(
        tournament_pb2.WatchTournamentRequest(name=f"tournaments/{tournament_id}"), metadata=metadata
    )
    try:
        async for update in stream:
            kind = update.WhichOneof("update")
            assert kind is not None
            getattr(seen, kind).CopyFrom(getattr(update, kind))
            seen.updates += 1
            seen.kinds.add(kind)
            if len(seen.kinds) == 3 and condition(seen):  # the whole state has arrived
                return seen
    finally:
        stream.cancel()
    raise AssertionError(f"the stream ended before the condition held: {seen.tournament}")


def definition(now: datetime, **fields: Any) -> tournament_pb2.Tournament:
    """A tournament opening now, starting in an hour, with the given fields changed."""
    options = common_pb2.TableOptions(
        ruleset=common_pb2.RulesetRef(preset=fields.pop("preset", "classico_104")),
        players=fields.pop("players", 2),
        length=common_pb2.MATCH_LENGTH_EXPRESS,
        mode=common_pb2.TABLE_MODE_COMPETITIVE,
    )
    prizes = fields.pop("prizes", {1: 6000, 2: 4000})
    out = tournament_pb2.Tournament(
        display_name=fields.pop("display_name", "Copa do Bairro"),
        table_options=options,
        format=fields.pop("format", tournament_pb2.Tournament.FORMAT_SINGLE_ELIMINATION),
        swiss_rounds=fields.pop("swiss_rounds", 0),
        buy_in_chips=fields.pop("buy_in_chips", 100),
        prizes=[tournament_pb2.Tournament.PrizeShare(place=p, share_bp=s) for p, s in sorted(prizes.items())],
        min_entrants=fields.pop("min_entrants", 2),
        max_entrants=fields.pop("max_entrants", 128),
    )
    out.no_show_timeout.FromSeconds(fields.pop("no_show_seconds", 60))
    out.registration_open_time.FromDatetime(fields.pop("opens", now))
    out.registration_close_time.FromDatetime(fields.pop("closes", now + timedelta(hours=1)))
    out.start_time.FromDatetime(fields.pop("starts", now + timedelta(hours=1)))
    assert not fields, f"unknown fields {fields}"
    return out


@contextlib.asynccontextmanager
async def tournament_service(
    platform: Platform,
    db_target: DatabaseTarget,
    tmp_path: Path,
    *,
    clock: ManualClock | None = None,
    settings: TournamentSettings = FAST,
) -> AsyncIterator[TournamentService]:
    clock = clock or ManualClock()
    ready: list[Running] = []
    spec = build_spec(clock=clock, settings=settings, on_ready=ready.append)
    config = make_config(
        "tournament",
        tmp_path,
        database_url=db_target.url,
        database_schema=db_target.schema,
        addresses={**platform.addresses, "tournament": "127.0.0.1:1", "matchmaking": "127.0.0.1:1"},
    )
    async with running(spec, config) as server, grpc.aio.insecure_channel(server.address) as channel:
        platform.tables.tournament_address = server.address
        try:
            yield TournamentService(server, ready[0], clock, platform, channel)
        finally:
            platform.tables.tournament_address = ""


def players(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(1, count + 1)]
