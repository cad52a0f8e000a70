"""What the matchmaking tests run against: the real wallet and ranking services in-process (each on
the test's database: its own SQLite file, or the test's PostgreSQL schema), a small fake
game-session service served by two replicas (to exercise the NotOwner redirect), and the
matchmaking service itself with a clock the test moves and a platform wrapper that injects faults
at each step of the start saga.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy import insert

from buraco.v1 import (
    common_pb2,
    game_session_pb2,
    game_session_pb2_grpc,
    matchmaking_pb2,
    matchmaking_pb2_grpc,
    wallet_pb2,
    wallet_pb2_grpc,
)
from services.client.channels import act_for
from services.common import migrations
from services.common.auth import Kind, Minter, current_identity
from services.common.config import Config
from services.common.db import Database
from services.common.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    NotFoundError,
    NotOwnerError,
    PermissionDeniedError,
)
from services.common.idempotency import request_hash
from services.common.server import Deps, Server, ServiceSpec
from services.matchmaking.matcher import Windows
from services.matchmaking.ports import Account, GameTable, Platform, Refused, SeatSpec, Unreachable
from services.matchmaking.remote import GrpcPlatform
from services.matchmaking.service import Running, build_spec
from services.matchmaking.settings import MatchmakingSettings
from services.ranking import models as ranking_models
from services.ranking.service import SPEC as RANKING
from services.wallet.service import WalletService, run_audit
from services.wallet.settings import WalletSettings
from tests.conftest import DatabaseTarget
from tests.services.harness import bearer, dev_minter, make_config, running

#: Fakes keep no tables (their configs never run migrations).
EMPTY_MIGRATIONS = Path(__file__).parent
WAIT_SECONDS = 30.0

Metadata = tuple[tuple[str, str], ...]


# -- the fake game-session service ------------------------------------------------------------------


@dataclass
class FakeTable:
    id: str
    match_id: str
    options: common_pb2.TableOptions
    seats: list[common_pb2.Participant]
    lobby_table: str
    #: Which replica owns it (0 or 1).
    owner: int
    state: int = game_session_pb2.Table.STATE_WAITING


class GameSessions:
    """The tables of the fake game-session service, shared by its replicas."""

    def __init__(self) -> None:
        self.tables: dict[str, FakeTable] = {}
        self.answers: dict[tuple[str, str], tuple[str, bytes]] = {}
        self.addresses: list[str] = ["", ""]
        #: Calls per method, and redirects answered.
        self.calls: dict[str, int] = {}
        self.redirects = 0
        #: New tables are owned by this replica (a test moves them to test the redirect).
        self.new_owner: int | None = None

    def message(self, table: FakeTable) -> game_session_pb2.Table:
        return game_session_pb2.Table(
            name=f"tables/{table.id}",
            match_id=table.match_id,
            options=table.options,
            seats=[game_session_pb2.Seat(seat=i, participant=p) for i, p in enumerate(table.seats)],
            state=table.state,  # type: ignore[arg-type]
            owner_address=self.addresses[table.owner],
            lobby_table=table.lobby_table,
        )

    def finish(self, table: str) -> None:
        self.tables[table.removeprefix("tables/")].state = game_session_pb2.Table.STATE_FINISHED


class FakeReplica(game_session_pb2_grpc.GameSessionServiceServicer):
    """One replica: CreateTable (any replica; it owns the table), GetTable and CancelTable (the
    owner only: another replica answers with the NotOwner redirect)."""

    def __init__(self, shared: GameSessions, index: int) -> None:
        self.shared = shared
        self.index = index

    def _count(self, method: str) -> None:
        self.shared.calls[method] = self.shared.calls.get(method, 0) + 1

    def _owned(self, name: str) -> FakeTable:
        table = self.shared.tables.get(name.removeprefix("tables/"))
        if table is None:
            raise NotFoundError(f"{name} does not exist")
        if table.owner != self.index:
            self.shared.redirects += 1
            raise NotOwnerError(name, self.shared.addresses[table.owner], epoch=2)
        return table

    async def CreateTable(self, request: game_session_pb2.CreateTableRequest, context: Any) -> game_session_pb2.Table:
        identity = current_identity()
        if identity.kind is not Kind.SERVICE:
            raise PermissionDeniedError("tables are created by services")
        self._count("CreateTable")
        key = (identity.principal, request.request_id)
        digest = request_hash("CreateTable", request)
        if key in self.shared.answers:
            stored_digest, data = self.shared.answers[key]
            if stored_digest != digest:
                raise AlreadyExistsError("request id reused")
            return game_session_pb2.Table.FromString(data)
        if request.table_id in self.shared.tables:
            raise AlreadyExistsError(f"tables/{request.table_id} exists")
        definition = request.table
        assert len(definition.seats) == definition.options.players
        if definition.options.mode != common_pb2.TABLE_MODE_PRACTICE:
            assert all(s.participant.WhichOneof("kind") == "player" for s in definition.seats), "bots only at practice"
        owner = self.index if self.shared.new_owner is None else self.shared.new_owner
        table = FakeTable(
            request.table_id,
            definition.match_id,
            definition.options,
            [s.participant for s in sorted(definition.seats, key=lambda s: s.seat)],
            definition.lobby_table,
            owner,
        )
        self.shared.tables[table.id] = table
        reply = self.shared.message(table)
        self.shared.answers[key] = (digest, reply.SerializeToString())
        return reply

    async def GetTable(self, request: game_session_pb2.GetTableRequest, context: Any) -> game_session_pb2.Table:
        current_identity()
        self._count("GetTable")
        return self.shared.message(self._owned(request.name))

    async def CancelTable(self, request: game_session_pb2.CancelTableRequest, context: Any) -> game_session_pb2.Table:
        current_identity().require_kind(Kind.SERVICE, method="GameSessionService.CancelTable")
        self._count("CancelTable")
        table = self._owned(request.name)
        if table.state not in (game_session_pb2.Table.STATE_WAITING, game_session_pb2.Table.STATE_CANCELLED):
            raise FailedPreconditionError(f"{request.name}: the match has started")
        table.state = game_session_pb2.Table.STATE_CANCELLED
        return self.shared.message(table)


def fake_spec(replica: FakeReplica) -> ServiceSpec:
    def register(server: grpc.aio.Server, deps: Deps) -> None:
        game_session_pb2_grpc.add_GameSessionServiceServicer_to_server(replica, server)

    return ServiceSpec(
        name="game_session",
        grpc_services=("buraco.v1.GameSessionService",),
        register=register,
        migrations=EMPTY_MIGRATIONS,
    )


# -- fault injection ---------------------------------------------------------------------------------


class Faults:
    """Per platform method: `fail` n calls (Unreachable, nothing done), `lose` n answers (done,
    then Unreachable), `refuse` n calls (Refused with a code, nothing done)."""

    def __init__(self) -> None:
        #: Methods whose calls never return (until cancelled), and an event set when one hangs.
        self.hang: set[str] = set()
        self.hanging = asyncio.Event()
        self.fail: dict[str, int] = {}
        self.lose: dict[str, int] = {}
        self.refuse: dict[str, tuple[int, str]] = {}
        self.calls: dict[str, int] = {}

    def before(self, method: str) -> None:
        self.calls[method] = self.calls.get(method, 0) + 1
        if self.fail.get(method, 0) > 0:
            self.fail[method] -= 1
            raise Unreachable(method, "UNAVAILABLE", "injected failure")
        count, code = self.refuse.get(method, (0, ""))
        if count > 0:
            self.refuse[method] = (count - 1, code)
            raise Refused(method, code, "injected refusal")

    def after(self, method: str) -> None:
        if self.lose.get(method, 0) > 0:
            self.lose[method] -= 1
            raise Unreachable(method, "UNAVAILABLE", "injected lost answer")


class FaultyPlatform:
    """The real gRPC platform with `Faults` before and after each call."""

    def __init__(self, inner: Platform, faults: Faults) -> None:
        self.inner = inner
        self.faults = faults

    async def account(self, player: str) -> Account | None:
        self.faults.before("account")
        return await self.inner.account(player)

    async def ratings(self, players: Sequence[str], preset: str, seats: int) -> dict[str, float]:
        self.faults.before("ratings")
        return await self.inner.ratings(players, preset, seats)

    async def hold_bets(
        self, request_id: str, match_id: str, stakes: Sequence[tuple[str, int]], ttl_seconds: int
    ) -> None:
        self.faults.before("hold_bets")
        if "hold_bets" in self.faults.hang:
            self.faults.hanging.set()
            await asyncio.Event().wait()
        await self.inner.hold_bets(request_id, match_id, stakes, ttl_seconds)
        self.faults.after("hold_bets")

    async def void_pot(self, request_id: str, match_id: str, reason: str) -> None:
        self.faults.before("void_pot")
        await self.inner.void_pot(request_id, match_id, reason)
        self.faults.after("void_pot")

    async def create_table(
        self,
        request_id: str,
        table_id: str,
        match_id: str,
        options: bytes,
        seats: Sequence[SeatSpec],
        lobby_table: str | None,
    ) -> GameTable:
        self.faults.before("create_table")
        table = await self.inner.create_table(request_id, table_id, match_id, options, seats, lobby_table)
        self.faults.after("create_table")
        return table

    async def get_table(self, table: str) -> GameTable:
        self.faults.before("get_table")
        return await self.inner.get_table(table)

    async def cancel_table(self, request_id: str, table: str, reason: str, address: str = "") -> None:
        self.faults.before("cancel_table")
        await self.inner.cancel_table(request_id, table, reason, address)
        self.faults.after("cancel_table")

    async def close(self) -> None:
        await self.inner.close()


# -- the platform ------------------------------------------------------------------------------------


class ManualClock:
    """Matchmaking's clock in tests: moves only when told."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Platform_:
    """The services matchmaking calls, as the tests see them."""

    addresses: dict[str, str]
    wallet: wallet_pb2_grpc.WalletServiceAsyncStub
    wallet_db: Database
    ranking_db: Database
    tables: GameSessions
    minter: Minter
    faults: Faults = field(default_factory=Faults)

    def admin(self) -> Metadata:
        return bearer(self.minter.mint(Kind.ADMIN, "treasurer"))

    async def fund(self, player: str, chips: int) -> None:
        await self.wallet.CreateAccount(
            wallet_pb2.CreateAccountRequest(request_id=f"open-{player}", player=f"players/{player}"),
            metadata=self.admin(),
        )
        if chips:
            await self.wallet.Grant(
                wallet_pb2.GrantRequest(
                    request_id=f"grant-{player}-{chips}",
                    player=f"players/{player}",
                    amount_chips=chips,
                    kind=wallet_pb2.GrantRequest.KIND_PROMOTION,
                ),
                metadata=self.admin(),
            )

    async def account(self, player: str) -> tuple[int, int]:
        """(posted balance, held chips)."""
        reply = await self.wallet.GetAccount(
            wallet_pb2.GetAccountRequest(name=f"accounts/player-{player}"), metadata=self.admin()
        )
        return reply.balance_chips, reply.held_chips

    async def held(self, player: str) -> int:
        return (await self.account(player))[1]

    async def audit(self) -> None:
        report = await run_audit(self.wallet_db)
        assert report.ok, report.problems

    async def rate(self, player: str, rating: float, preset: str = "aberto", seats: int = 2) -> None:
        """Gives `player` this displayed rating (ordinal = mu - 3 sigma) in the ranking service's
        own table, as if it had played."""
        async with self.ranking_db.transaction() as session:
            await session.execute(
                insert(ranking_models.ratings).values(
                    player=player,
                    preset=preset,
                    players=seats,
                    mu=rating + 3.0,
                    sigma=1.0,
                    matches=10,
                    updated_at=datetime.now(UTC),
                )
            )


def _database_config(db_target: DatabaseTarget, tmp_path: Path, name: str) -> dict[str, Any]:
    if db_target.kind == "sqlite":
        return {"database_url": f"sqlite+aiosqlite:///{tmp_path / name}.db"}
    return {"database_url": db_target.url, "database_schema": db_target.schema}


@contextlib.asynccontextmanager
async def platform_for(db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[Platform_]:
    minter = dev_minter(tmp_path / "dev-keys")
    shared = GameSessions()
    async with contextlib.AsyncExitStack() as stack:
        replicas = []
        for index in range(2):
            config = make_config("game_session", tmp_path, migrate_on_start=False)
            replica = FakeReplica(shared, index)  # type: ignore[abstract]
            server = await stack.enter_async_context(running(fake_spec(replica), config))
            shared.addresses[index] = server.address
            replicas.append(server)
        wallet_config = make_config("wallet", tmp_path, **_database_config(db_target, tmp_path, "wallet"))
        settings = WalletSettings(starting_grant_chips=0, expiry_sweep_interval=timedelta(0))
        wallet = await stack.enter_async_context(running(WalletService(settings=settings).spec(), wallet_config))
        ranking_config = make_config("ranking", tmp_path, **_database_config(db_target, tmp_path, "ranking"))
        ranking = await stack.enter_async_context(running(RANKING, ranking_config))
        channel = await stack.enter_async_context(grpc.aio.insecure_channel(wallet.address))
        wallet_db = Database(wallet_config.database_url, schema=wallet_config.database_schema)
        stack.push_async_callback(wallet_db.dispose)
        ranking_db = Database(ranking_config.database_url, schema=ranking_config.database_schema)
        stack.push_async_callback(ranking_db.dispose)
        await migrations.upgrade("ranking", RANKING.migrations, ranking_db)
        yield Platform_(
            {"wallet": wallet.address, "ranking": ranking.address, "game_session": replicas[0].address},
            wallet_pb2_grpc.WalletServiceStub(channel),
            wallet_db,
            ranking_db,
            shared,
            minter,
        )


#: Quick settings: the loop ticks often, calls retry fast, the start gives up after 5 s (clock).
FAST = MatchmakingSettings(
    tick_seconds=0.05,
    confirm_seconds=20.0,
    start_seconds=5.0,
    hold_ttl_seconds=600,
    call_timeout_seconds=5.0,
    retry_seconds=0.01,
    max_retry_seconds=0.05,
    watch_poll_seconds=0.1,
    windows=Windows(initial=2.0, growth=2.0, step_seconds=10.0, maximum=20.0, open_seconds=120.0),
    stop_timeout_seconds=5.0,
)


@dataclass
class Service:
    """The matchmaking service running in-process on one database, and a client of it."""

    server: Server
    running: Running
    clock: ManualClock
    platform: Platform_
    channel: grpc.aio.Channel
    stub: matchmaking_pb2_grpc.MatchmakingServiceAsyncStub = field(init=False)

    def __post_init__(self) -> None:
        self.stub = matchmaking_pb2_grpc.MatchmakingServiceStub(self.channel)

    def player(self, name: str) -> Metadata:
        return bearer(self.platform.minter.mint(Kind.PLAYER, name))

    def service(self, name: str = "gateway", player: str | None = None) -> Metadata:
        metadata = bearer(self.platform.minter.mint(Kind.SERVICE, name))
        return metadata + act_for(player) if player else metadata

    async def settle(self) -> None:
        """Waits until the loop has done everything due now (two whole passes)."""
        async with asyncio.timeout(WAIT_SECONDS):
            await self.running.loop.next_pass()
            await self.running.loop.next_pass()

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        await self.settle()

    async def retries(self, times: int = 6) -> None:
        """Lets `times` rounds of retries run: each moves the clock past the longest backoff."""
        for _ in range(times):
            await self.advance(2 * FAST.max_retry_seconds)

    async def ticket(
        self,
        player: str,
        *,
        players: int = 2,
        mode: int = common_pb2.TABLE_MODE_PRACTICE,
        bet: int = 0,
        preset: str = "aberto",
        party: str = "",
        request_id: str | None = None,
    ) -> matchmaking_pb2.Ticket:
        request = matchmaking_pb2.CreateTicketRequest(
            request_id=request_id or f"ticket-{player}-{self.clock.now.timestamp()}",
            ticket=matchmaking_pb2.Ticket(
                party=party,
                preferences=matchmaking_pb2.MatchPreferences(
                    preset=preset,
                    players=players,
                    length=common_pb2.MATCH_LENGTH_EXPRESS,
                    mode=mode,  # type: ignore[arg-type]
                    bet_chips=bet,
                ),
            ),
        )
        reply: matchmaking_pb2.Ticket = await self.stub.CreateTicket(request, metadata=self.player(player))
        return reply

    async def get(self, ticket: matchmaking_pb2.Ticket, player: str | None = None) -> matchmaking_pb2.Ticket:
        metadata = self.player(player) if player else self.service()
        reply: matchmaking_pb2.Ticket = await self.stub.GetTicket(
            matchmaking_pb2.GetTicketRequest(name=ticket.name), metadata=metadata
        )
        return reply

    async def confirm(self, ticket: matchmaking_pb2.Ticket, player: str) -> matchmaking_pb2.Ticket:
        reply: matchmaking_pb2.Ticket = await self.stub.ConfirmTicket(
            matchmaking_pb2.ConfirmTicketRequest(name=ticket.name, request_id=f"confirm-{ticket.name}-{player}"),
            metadata=self.player(player),
        )
        return reply

    async def confirm_all(self, *tickets: matchmaking_pb2.Ticket) -> None:
        for ticket in tickets:
            for player in ticket.players:
                await self.confirm(ticket, player.removeprefix("players/"))
        await self.settle()


@contextlib.asynccontextmanager
async def matchmaking_service(
    platform: Platform_,
    db_target: DatabaseTarget,
    tmp_path: Path,
    *,
    clock: ManualClock | None = None,
    settings: MatchmakingSettings = FAST,
) -> AsyncIterator[Service]:
    clock = clock or ManualClock()
    ready: list[Running] = []

    def make_platform(deps: Deps, chosen: MatchmakingSettings) -> FaultyPlatform:
        inner = GrpcPlatform(deps.clients, chosen.call_timeout_seconds)
        return FaultyPlatform(inner, platform.faults)

    spec = build_spec(clock=clock, settings=settings, platform=make_platform, on_ready=ready.append)
    config: Config = make_config(
        "matchmaking",
        tmp_path,
        database_url=db_target.url if db_target.kind != "sqlite" else f"sqlite+aiosqlite:///{tmp_path}/mm.db",
        database_schema=db_target.schema,
        addresses={**platform.addresses, "tournament": "127.0.0.1:1", "matchmaking": "127.0.0.1:1"},
    )
    async with running(spec, config) as server, grpc.aio.insecure_channel(server.address) as channel:
        yield Service(server, ready[0], clock, platform, channel)


async def code_of(call: Any) -> tuple[grpc.StatusCode, str]:
    """The status code and message a call ends with (it must fail)."""
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return error.code(), error.details() or ""
    raise AssertionError("the call succeeded")
