"""`make bench-matchmaking`: the matcher's speed, the service's end-to-end rate, and match quality.

1. One matching pass over 100,000 waiting tickets across every modality (8 presets, 2 and 4 seats,
   express and three points targets, competitive at three bets and practice; 10% of the 4-seat
   tickets are parties), on one core: the target is under 1 s. Baseline in the same run: bucketing
   and sorting the same tickets by rating, the least any pass must do.
2. End to end through the gRPC service, competitive 2-player tickets, every player confirming:
   the real wallet (every player's bet held) and ranking services and a minimal game-session
   service in one child process, the matchmaking service alone in another (its CPU time is the
   matchmaking core's), the clients in this one; SQLite in a temporary folder and PostgreSQL
   (BURACO_BENCH_POSTGRES_URL, default `postgresql://postgres@127.0.0.1:5432/test`, in a schema
   of its own dropped afterwards, skipped when unreachable). Every player creates a ticket,
   follows it with WatchTicket, confirms the proposal and waits for MATCHED. First a burst
   (`--players` at once: its duration and tickets matched per second), then steady arrivals
   (`--rates`, each for `--rate-seconds`, new players evenly spaced): the p99 of CreateTicket and
   ConfirmTicket, the p50 and p99 time to MATCHED, and the highest rate whose calls kept a p99
   under 100 ms. For every phase, per ticket: the matchmaking process's SQL statements,
   transactions and round trips (counted in the process, `SqlCounter`), its CPU time and so
   tickets per second per matchmaking core, and the other services' statements and CPU.
   `BENCH_PROFILE=FILE` writes the matchmaking process's cProfile statistics to FILE.
3. Match quality on a simulated arrival stream (a Poisson stream of tickets over 30 simulated
   minutes, ratings from a normal distribution, a pass every simulated second): the mean rating
   spread per table (highest minus lowest ticket rating) and the mean wait, with the same stream
   seated first come, first served (no skill) as the baseline.

4. `--baseline PATH` (a checkout of the commit compared against, e.g. a `git worktree`): instead of
   2., bursts of `--players` served by the baseline's services and by this checkout's,
   interleaved `--rounds` times each (both counted and driven by this benchmark's code), each
   side's figures prefixed `baseline_`/`this_`, then the medians and their ratios (`..._ratio`,
   above 1 when this checkout is better).

Each figure is printed as `bench: NAME VALUE UNIT`.

    python -m bench.matchmaking [--tickets 100000] [--players 10000] [--databases sqlite,postgresql]
        [--rates 20,50,100,200,300] [--rate-seconds 20] [--baseline PATH [--rounds 3]]
"""

from __future__ import annotations

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)
# ruff: noqa: E402  (the imports below come after that call on purpose)

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc

from buraco.v1 import (
    common_pb2,
    game_session_pb2,
    game_session_pb2_grpc,
    matchmaking_pb2,
    matchmaking_pb2_grpc,
    wallet_pb2,
    wallet_pb2_grpc,
)
from engine.rules import PRESETS
from services.common.auth import Kind, Minter, current_identity, ensure_dev_keys, load_private_key
from services.common.config import Config
from services.common.errors import NotFoundError
from services.common.measure import cpu_seconds, percentile
from services.common.server import Deps, Server, ServiceSpec
from services.matchmaking.matcher import BucketKey, Waiting, Windows, match_pass
from services.matchmaking.service import build_spec
from services.matchmaking.settings import MatchmakingSettings
from services.ranking.service import SPEC as RANKING
from services.wallet.service import WalletService
from services.wallet.settings import WalletSettings

BET = 10
#: Players of the burst per client connection, as players come through several gateways. (The
#: server takes any number of calls on one connection; what bounds a burst is the queue of calls
#: it has not taken up yet, `Config.max_pending_calls`, whatever the connections.)
PLAYERS_PER_CHANNEL = 250
TARGETS = (0, 1005, 1505, 3005)
BETS = (10, 100, 1000)


def report(name: str, value: float, unit: str) -> None:
    print(f"bench: {name} {value:.4g} {unit}", flush=True)


# -- 1. the matcher ---------------------------------------------------------------------------------


def random_key(rng: random.Random) -> BucketKey:
    target = rng.choice(TARGETS)
    length = common_pb2.MATCH_LENGTH_EXPRESS if target == 0 else common_pb2.MATCH_LENGTH_POINTS
    competitive = rng.random() < 0.6
    return (
        rng.choice(list(PRESETS)),
        rng.choice((2, 4)),
        length,
        target,
        common_pb2.TABLE_MODE_COMPETITIVE if competitive else common_pb2.TABLE_MODE_PRACTICE,
        rng.choice(BETS) if competitive else 0,
    )


def waiting_tickets(count: int, seed: int = 1) -> list[Waiting]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        key = random_key(rng)
        party = key[1] == 4 and rng.random() < 0.1
        players = (f"p{i}a", f"p{i}b") if party else (f"p{i}",)
        recent = frozenset({f"p{rng.randrange(count)}"}) if rng.random() < 0.3 else frozenset()
        out.append(Waiting(f"t{i}", key, players, rng.gauss(15, 7), rng.uniform(0, 180), recent=recent))
    return out


def _best_of_three(work: Any) -> tuple[float, float]:
    """The best wall-clock and CPU (process) seconds of three runs of `work`."""
    wall = cpu = float("inf")
    for _ in range(3):
        started, started_cpu = time.perf_counter(), time.process_time()
        work()
        wall = min(wall, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - started_cpu)
    return wall, cpu


def bench_matcher(count: int) -> None:
    tickets = waiting_tickets(count)
    windows = Windows()
    tables = len(match_pass(tickets, windows))

    def bucket_and_sort() -> None:
        buckets: dict[BucketKey, list[Waiting]] = {}
        for ticket in tickets:
            buckets.setdefault(ticket.key, []).append(ticket)
        for bucket in buckets.values():
            bucket.sort(key=lambda w: w.rating)

    wall, cpu = _best_of_three(lambda: match_pass(tickets, windows))
    baseline_wall, baseline_cpu = _best_of_three(bucket_and_sort)
    report(f"matcher_pass_{count}_tickets", wall, "s")
    report(f"matcher_pass_{count}_tickets_cpu", cpu, "s")
    report("matcher_pass_tables_formed", tables, "tables")
    report("matcher_pass_baseline_bucket_and_sort", baseline_wall, "s")
    report("matcher_pass_ratio_to_baseline", cpu / baseline_cpu, "x")


# -- 3. match quality -------------------------------------------------------------------------------


def fifo_pass(waiting: list[Waiting]) -> list[tuple[list[Waiting], float]]:
    """The baseline: each bucket seated in arrival order, ratings ignored."""
    buckets: dict[BucketKey, list[Waiting]] = {}
    for ticket in sorted(waiting, key=lambda w: -w.waited_seconds):
        buckets.setdefault(ticket.key, []).append(ticket)
    tables = []
    for key, bucket in buckets.items():
        group: list[Waiting] = []
        size = 0
        for ticket in bucket:
            if key[1] == 2 and len(ticket.players) > 1:
                continue
            if size + len(ticket.players) > key[1]:
                continue
            group.append(ticket)
            size += len(ticket.players)
            if size == key[1]:
                ratings = [t.rating for t in group]
                tables.append((group, max(ratings) - min(ratings)))
                group, size = [], 0
    return tables


def simulate(
    skill: bool,
    seconds: int = 1800,
    rate: float = 20.0,
    seed: int = 3,
    pass_seconds: float = 1.0,
    windows: Windows | None = None,
) -> tuple[float, float, int]:
    """(mean spread, mean wait in seconds, tables) for a Poisson stream of `rate` tickets/s over
    `seconds` of simulated time, with a pass every `pass_seconds`."""
    rng = random.Random(seed)
    windows = windows or Windows()
    arrivals: dict[str, float] = {}
    waiting: dict[str, Waiting] = {}
    spreads: list[float] = []
    waits: list[float] = []
    keys = [random_key(rng) for _ in range(12)]  # the popular modalities of the simulation
    count = 0
    for step in range(round(seconds / pass_seconds)):
        now = step * pass_seconds
        for _ in range(_poisson(rng, rate * pass_seconds)):
            count += 1
            key = rng.choice(keys)
            players = (f"p{count}a", f"p{count}b") if key[1] == 4 and rng.random() < 0.1 else (f"p{count}",)
            waiting[f"t{count}"] = Waiting(f"t{count}", key, players, rng.gauss(15, 7), 0.0)
            arrivals[f"t{count}"] = now
        current = [replace(w, waited_seconds=now - arrivals[w.ticket]) for w in waiting.values()]
        if skill:
            tables = [([waiting[t] for t in p.tickets], p.spread) for p in match_pass(current, windows)]
        else:
            tables = fifo_pass(current)
        for members, spread in tables:
            spreads.append(spread)
            for member in members:
                waits.append(now - arrivals[member.ticket])
                del waiting[member.ticket]
    return sum(spreads) / len(spreads), sum(waits) / len(waits), len(spreads)


def _poisson(rng: random.Random, mean: float) -> int:
    # Knuth's method is slow for large means; the sum of exponential gaps is fine here.
    count, total = 0, rng.expovariate(mean)
    while total < 1.0:
        count += 1
        total += rng.expovariate(mean)
    return count


def bench_quality() -> None:
    spread, wait, tables = simulate(skill=True)
    fifo_spread, fifo_wait, _ = simulate(skill=False)
    report("quality_tables", tables, "tables")
    report("quality_mean_rating_spread", spread, "rating_points")
    report("quality_mean_wait", wait, "s")
    report("quality_fifo_mean_rating_spread", fifo_spread, "rating_points")
    report("quality_fifo_mean_wait", fifo_wait, "s")
    report("quality_spread_ratio_to_fifo", spread / fifo_spread, "x")
    report("quality_wait_ratio_to_fifo", wait / fifo_wait, "x")


# -- 2. end to end ----------------------------------------------------------------------------------


class Tables(game_session_pb2_grpc.GameSessionServiceServicer):
    """A minimal game-session service: CreateTable (idempotent), GetTable, CancelTable."""

    def __init__(self, address: list[str]) -> None:
        self.tables: dict[str, game_session_pb2.Table] = {}
        self.address = address

    async def CreateTable(self, request: game_session_pb2.CreateTableRequest, context: Any) -> game_session_pb2.Table:
        current_identity().require_kind(Kind.SERVICE, method="GameSessionService.CreateTable")
        table = self.tables.get(request.table_id)
        if table is None:
            table = game_session_pb2.Table()
            table.CopyFrom(request.table)
            table.name = f"tables/{request.table_id}"
            table.state = game_session_pb2.Table.STATE_WAITING
            table.owner_address = self.address[0]
            self.tables[request.table_id] = table
        return table

    async def GetTable(self, request: game_session_pb2.GetTableRequest, context: Any) -> game_session_pb2.Table:
        table = self.tables.get(request.name.removeprefix("tables/"))
        if table is None:
            raise NotFoundError(f"{request.name} does not exist")
        return table

    async def CancelTable(self, request: game_session_pb2.CancelTableRequest, context: Any) -> game_session_pb2.Table:
        table = await self.GetTable(game_session_pb2.GetTableRequest(name=request.name), context)
        table.state = game_session_pb2.Table.STATE_CANCELLED
        return table


def _config(service: str, workdir: Path, database: tuple[str, str | None]) -> Config:
    return Config(
        service=service,
        env="local",
        port=0,
        metrics_enabled=False,
        database_url=database[0],
        database_schema=database[1],
        dev_keys_dir=workdir / "keys",
        rate_limit_per_second=1e6,
        rate_limit_burst=1_000_000,
        service_rate_limit_per_second=1e6,
        max_streams_per_caller=64,
        # The burst's players call without deadlines and all at once: the whole burst waits in the
        # queue of calls the service has not taken up yet, for as long as the service needs to
        # reach them (a call that waited longer than this would be cancelled by grpc, CANCELLED).
        max_pending_calls=1_000_000,
        max_pending_seconds=3600,
        shutdown_grace_seconds=2.0,
        log_level="WARNING",
    )


class SqlCounter:
    """Counts the round trips this process makes to its databases. Statements: every cursor
    execution through SQLAlchemy (savepoints included; an executemany is one), every statement run
    on an engine connection's driver (`DriverStatement`) and every query of a raw asyncpg pool
    (the wallet's and ranking's hot paths). Transactions: the BEGINs sent (SQLAlchemy's and the
    raw pools'; a connection in autocommit sends none), ends: their COMMITs and ROLLBACKs, pings:
    the liveness checks of pooled connections (services.common.db). On PostgreSQL each of these is
    a round trip."""

    def __init__(self) -> None:
        self.statements = 0
        self.transactions = 0
        self.ends = 0
        self.pings = 0

    def _statement(self, *event: Any) -> None:
        if not event[-1]:  # an executemany is counted where asyncpg logs it (`_engine_query`)
            self.statements += 1

    def _control(self, verb: str) -> bool:
        """Counts a BEGIN, COMMIT or ROLLBACK; whether `verb` was one."""
        if verb.startswith(("BEGIN", "START")):
            self.transactions += 1
        elif verb.startswith(("COMMIT", "ROLLBACK")):
            self.ends += 1
        else:
            return False
        return True

    def _raw_query(self, record: Any) -> None:
        if not self._control(record.query.lstrip()[:8].upper()):
            self.statements += 1

    def _engine_query(self, record: Any) -> None:
        # SQLAlchemy's single statements run as prepared statements, which asyncpg does not log
        # (the cursor event counts them); it logs the rest: transactions' BEGINs and ends, pings
        # (";"), executemanys and the statements run on the driver's connection itself
        # (services.common.db.DriverStatement).
        query = record.query.strip()
        if self._control(query[:8].upper()):
            return
        if query == ";":
            self.pings += 1
        else:
            self.statements += 1

    def install(self) -> None:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        event.listen(Engine, "before_cursor_execute", self._statement)
        create_pool = asyncpg.create_pool
        connect = asyncpg.connect

        def counted_pool(*args: Any, **kwargs: Any) -> Any:
            init = kwargs.pop("init", None)

            async def counting(connection: Any) -> None:
                connection.add_query_logger(self._raw_query)
                if init is not None:
                    await init(connection)

            return create_pool(*args, init=counting, **kwargs)

        async def counted_connect(*args: Any, **kwargs: Any) -> Any:  # SQLAlchemy's connections
            connection = await connect(*args, **kwargs)
            connection.add_query_logger(self._engine_query)
            return connection

        asyncpg.create_pool = counted_pool
        asyncpg.connect = counted_connect

    def snapshot(self) -> dict[str, int]:
        return {"statements": self.statements, "transactions": self.transactions, "ends": self.ends,
                "pings": self.pings}


async def create_schema(kind: str, postgres_url: str) -> str | None:
    if kind != "postgresql":
        return None
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    connection = await asyncpg.connect(postgres_url.replace("+asyncpg", ""))
    await connection.execute(f'CREATE SCHEMA "{schema}"')
    await connection.close()
    return schema


async def drop_schema(schema: str | None, postgres_url: str) -> None:
    if schema is not None:
        connection = await asyncpg.connect(postgres_url.replace("+asyncpg", ""))
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await connection.close()


def _database(kind: str, workdir: Path, name: str, postgres_url: str, schema: str | None) -> tuple[str, str | None]:
    if kind == "sqlite":
        return f"sqlite+aiosqlite:///{workdir / name}.db", None
    return postgres_url, schema


@contextlib.asynccontextmanager
async def other_services(
    workdir: Path, kind: str, postgres_url: str, schema: str | None
) -> AsyncIterator[dict[str, str]]:
    """The real wallet and ranking services and a minimal game-session service, in this process:
    their addresses by name."""
    address: list[str] = [""]
    tables = Tables(address)  # type: ignore[abstract]

    def register(server: grpc.aio.Server, deps: Deps) -> None:
        game_session_pb2_grpc.add_GameSessionServiceServicer_to_server(tables, server)

    fake = ServiceSpec("game_session", ("buraco.v1.GameSessionService",), register, Path(__file__).parent)
    servers: list[Server] = []
    try:
        wallet_settings = WalletSettings(starting_grant_chips=0, expiry_sweep_interval=timedelta(0))
        for spec, name in (
            (WalletService(settings=wallet_settings).spec(), "wallet"),
            (RANKING, "ranking"),
            (fake, "game_session"),
        ):
            config = _config(name, workdir, _database(kind, workdir, name, postgres_url, schema))
            server = Server(spec, replace(config, migrate_on_start=name != "game_session"))
            await server.start()
            servers.append(server)
        address[0] = servers[2].address
        yield {"wallet": servers[0].address, "ranking": servers[1].address, "game_session": address[0]}
    finally:
        for server in reversed(servers):
            await server.stop(0)


@contextlib.asynccontextmanager
async def matchmaking_service(
    workdir: Path, kind: str, postgres_url: str, schema: str | None, addresses: dict[str, str]
) -> AsyncIterator[str]:
    """The matchmaking service alone in this process, calling the others at `addresses`."""
    # A burst of every player at once: the confirmation window is wide so that the measure is the
    # service's rate, not how many proposals a saturated client side confirms in 20 s.
    settings = MatchmakingSettings(tick_seconds=0.05, confirm_seconds=300, start_seconds=300)
    config = _config("matchmaking", workdir, _database(kind, workdir, "matchmaking", postgres_url, schema))
    matchmaking = Server(build_spec(settings=settings), replace(config, addresses=addresses))
    await matchmaking.start()
    try:
        yield matchmaking.address
    finally:
        await matchmaking.stop(0)


def _bearer(minter: Minter, kind: Kind, name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {minter.mint(kind, name)}"),)


async def fund_players(wallet_address: str, minter: Minter, names: list[str]) -> None:
    """Open an account for each player and grant it chips (an admin's calls, untimed)."""
    admin = _bearer(minter, Kind.ADMIN, "bench")
    async with grpc.aio.insecure_channel(wallet_address) as channel:
        wallet = wallet_pb2_grpc.WalletServiceStub(channel)
        gate = asyncio.Semaphore(32)

        async def fund(player: str) -> None:
            async with gate:
                await wallet.CreateAccount(
                    wallet_pb2.CreateAccountRequest(request_id=f"o-{player}", player=f"players/{player}"),
                    metadata=admin,
                )
                await wallet.Grant(
                    wallet_pb2.GrantRequest(
                        request_id=f"g-{player}",
                        player=f"players/{player}",
                        amount_chips=1000,
                        kind=wallet_pb2.GrantRequest.KIND_PROMOTION,
                    ),
                    metadata=admin,
                )

        await asyncio.gather(*(fund(p) for p in names))


@dataclass
class Timings:
    """What the players saw: each call's latency, and each ticket's time to MATCHED (seconds)."""

    create: list[float] = field(default_factory=list)
    confirm: list[float] = field(default_factory=list)
    matched: list[float] = field(default_factory=list)


async def ticket_journey(
    stub: matchmaking_pb2_grpc.MatchmakingServiceAsyncStub, minter: Minter, player: str, timings: Timings
) -> None:
    """One player's ticket: CreateTicket, WatchTicket, ConfirmTicket on the proposal, until MATCHED."""
    metadata = _bearer(minter, Kind.PLAYER, player)
    started = time.perf_counter()
    request = matchmaking_pb2.CreateTicketRequest(
        request_id=f"t-{player}",
        ticket=matchmaking_pb2.Ticket(
            preferences=matchmaking_pb2.MatchPreferences(
                preset="aberto",
                players=2,
                length=common_pb2.MATCH_LENGTH_EXPRESS,
                mode=common_pb2.TABLE_MODE_COMPETITIVE,
                bet_chips=BET,
            )
        ),
    )
    for attempt in range(5):  # as a client does: UNAVAILABLE is retried, same request id
        try:
            call_started = time.perf_counter()
            ticket = await stub.CreateTicket(request, metadata=metadata)
            timings.create.append(time.perf_counter() - call_started)
            break
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE or attempt == 4:
                raise
            await asyncio.sleep(0.1 * 2**attempt)
    stream = stub.WatchTicket(matchmaking_pb2.WatchTicketRequest(name=ticket.name), metadata=metadata)
    confirmed = matched = False
    async for update in stream:
        if update.state == matchmaking_pb2.Ticket.STATE_PROPOSED and not confirmed:
            confirmed = True
            call_started = time.perf_counter()
            await stub.ConfirmTicket(
                matchmaking_pb2.ConfirmTicketRequest(name=ticket.name, request_id=f"c-{player}"),
                metadata=metadata,
            )
            timings.confirm.append(time.perf_counter() - call_started)
        elif update.state == matchmaking_pb2.Ticket.STATE_MATCHED:
            # The stream ends on its own once the ticket is final: read it to its end rather than
            # cancel it (thousands of cancelled streams a second on one connection make the
            # server's HTTP/2 flood protection close the connection).
            if not matched:
                matched = True
                timings.matched.append(time.perf_counter() - started)
        elif update.state not in (
            matchmaking_pb2.Ticket.STATE_SEARCHING,
            matchmaking_pb2.Ticket.STATE_PROPOSED,
        ):
            raise AssertionError(f"{player}: {update}")
    if not matched:
        raise AssertionError(f"{player}: the ticket's stream ended before MATCHED")


def percentile_ms(values: list[float], fraction: float) -> float:
    return percentile(values, fraction) * 1000


@dataclass(frozen=True)
class Usage:
    """A served process's CPU seconds and database work so far."""

    cpu: float
    statements: int
    transactions: int
    ends: int
    pings: int

    @property
    def round_trips(self) -> int:
        return self.statements + self.transactions + self.ends + self.pings


class Served:
    """A child process serving part of the platform (`--serve`): it prints its addresses as one
    JSON line, answers each `stats` line on its standard input with its SqlCounter's counts, and
    stops when its standard input closes."""

    def __init__(self, role: str, kind: str, workdir: Path, postgres_url: str, schema: str | None,
                 addresses: dict[str, str] | None = None, services_from: Path | None = None) -> None:
        command = [sys.executable, "-m", "bench.matchmaking", "--serve", role, "--kind", kind,
                   "--workdir", str(workdir), "--postgres-url", postgres_url, "--schema", schema or "",
                   "--addresses", json.dumps(addresses or {})]
        # `services_from`: a directory whose packages the child imports first (`--baseline`)
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                        cwd=services_from)
        self.role = role

    async def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await asyncio.get_running_loop().run_in_executor(None, self.process.stdout.readline)
        if not line:
            raise RuntimeError(f"the {self.role} process exited ({self.process.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def addresses(self) -> dict[str, str]:
        return await self._line()

    async def usage(self) -> Usage:
        assert self.process.stdin is not None
        self.process.stdin.write("stats\n")
        self.process.stdin.flush()
        counts = await self._line()
        return Usage(cpu_seconds(self.process.pid), counts["statements"], counts["transactions"], counts["ends"],
                     counts["pings"])

    async def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.get_running_loop().run_in_executor(None, lambda: self.process.wait(timeout=60))
        except subprocess.TimeoutExpired:
            self.process.kill()


@dataclass
class Platform:
    matchmaking_address: str
    wallet_address: str
    minter: Minter
    matchmaking: Served
    others: Served

    async def usage(self) -> tuple[Usage, Usage]:
        return await self.matchmaking.usage(), await self.others.usage()


@contextlib.asynccontextmanager
async def platform_processes(kind: str, workdir: Path, postgres_url: str,
                             services_from: Path | None = None) -> AsyncIterator[Platform]:
    """The matchmaking service in a process of its own, the wallet, ranking and game sessions in
    another, the clients in this one: the matchmaking process's CPU is the matchmaking core's."""
    schema = await create_schema(kind, postgres_url)
    served: list[Served] = []
    try:
        others = Served("others", kind, workdir, postgres_url, schema, services_from=services_from)
        served.append(others)
        addresses = await others.addresses()
        matchmaking = Served("matchmaking", kind, workdir, postgres_url, schema, addresses, services_from)
        served.append(matchmaking)
        address = (await matchmaking.addresses())["matchmaking"]
        private, _ = ensure_dev_keys(workdir / "keys")
        minter = Minter(load_private_key(private), audience="buraco")
        yield Platform(address, addresses["wallet"], minter, matchmaking, others)
    finally:
        for process in reversed(served):
            await process.stop()
        await drop_schema(schema, postgres_url)


async def serve(role: str, kind: str, workdir: Path, postgres_url: str, schema: str | None,
                addresses: dict[str, str]) -> int:
    """A child process of the end-to-end run (see `Served`)."""
    # Standard output carries the answers to the parent; everything else written there (the
    # services' logs) goes to standard error instead.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    counter = SqlCounter()
    counter.install()
    # BENCH_PROFILE=file: the matchmaking process's cProfile statistics, written when it stops.
    profile = cProfile.Profile() if os.environ.get("BENCH_PROFILE") and role == "matchmaking" else None
    if profile is not None:
        profile.enable()
    async with contextlib.AsyncExitStack() as stack:
        if role == "others":
            served = await stack.enter_async_context(other_services(workdir, kind, postgres_url, schema))
        else:
            address = await stack.enter_async_context(
                matchmaking_service(workdir, kind, postgres_url, schema, addresses)
            )
            served = {"matchmaking": address}
        print(json.dumps(served), file=answers, flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            if line.strip() == "stats":
                print(json.dumps(counter.snapshot()), file=answers, flush=True)
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.environ["BENCH_PROFILE"])
    return 0


def report_usage(label: str, tickets: int, elapsed: float, before: tuple[Usage, Usage],
                 after: tuple[Usage, Usage]) -> float:
    """Prints the matchmaking process's and the other services' work per ticket over a phase;
    returns tickets per second of matchmaking CPU (per matchmaking core)."""
    (mm0, other0), (mm1, other1) = before, after
    cpu = mm1.cpu - mm0.cpu
    statements = (mm1.statements - mm0.statements) / tickets
    transactions = (mm1.transactions - mm0.transactions) / tickets
    report(f"{label}_matchmaking_statements_per_ticket", statements, "statements")
    report(f"{label}_matchmaking_transactions_per_ticket", transactions, "transactions")
    report(f"{label}_matchmaking_pings_per_ticket", (mm1.pings - mm0.pings) / tickets, "pings")
    report(f"{label}_matchmaking_round_trips_per_ticket", (mm1.round_trips - mm0.round_trips) / tickets, "round_trips")
    report(f"{label}_other_services_statements_per_ticket", (other1.statements - other0.statements) / tickets,
           "statements")
    report(f"{label}_other_services_round_trips_per_ticket", (other1.round_trips - other0.round_trips) / tickets,
           "round_trips")
    report(f"{label}_matchmaking_cpu_per_ticket", 1000 * cpu / tickets, "ms")
    report(f"{label}_other_services_cpu_per_ticket", 1000 * (other1.cpu - other0.cpu) / tickets, "ms")
    report(f"{label}_matchmaking_cpu", 100 * cpu / elapsed, "%_of_a_core")
    report(f"{label}_other_services_cpu", 100 * (other1.cpu - other0.cpu) / elapsed, "%_of_a_core")
    per_core = tickets / cpu if cpu > 0 else float("inf")
    report(f"{label}_tickets_per_matchmaking_core", per_core, "tickets/s")
    return per_core


async def bench_end_to_end(kind: str, players: int, rates: list[float], seconds: float, postgres_url: str,
                           services_from: Path | None = None, label: str = "") -> dict[str, float]:
    """A burst (every player at once: the most tickets/s the platform matches), then a steady
    arrival at each rate (the RPCs' latency and the processes' CPU at that rate)."""
    with tempfile.TemporaryDirectory() as folder:
        async with platform_processes(kind, Path(folder), postgres_url, services_from) as served:
            names = [f"b{i:05d}" for i in range(players)]
            await fund_players(served.wallet_address, served.minter, names)
            # Players connect as players do, not all over one connection: one per PLAYERS_PER_CHANNEL.
            async with contextlib.AsyncExitStack() as stack:
                stubs = [
                    matchmaking_pb2_grpc.MatchmakingServiceStub(
                        await stack.enter_async_context(grpc.aio.insecure_channel(served.matchmaking_address))
                    )
                    for _ in range(max(1, -(-players // PLAYERS_PER_CHANNEL)))
                ]
                timings = Timings()
                before = await served.usage()
                driver_before, database_before = time.process_time(), postgres_cpu_seconds()
                started = time.perf_counter()
                async with asyncio.timeout(max(600.0, players / 5)):
                    await asyncio.gather(
                        *(
                            ticket_journey(stubs[i % len(stubs)], served.minter, p, timings)
                            for i, p in enumerate(names)
                        )
                    )
                elapsed = time.perf_counter() - started
                after = await served.usage()
                driver = time.process_time() - driver_before
                database = postgres_cpu_seconds() - database_before
            report(f"{label}e2e_{kind}_tickets_matched_per_second", len(timings.matched) / elapsed, "tickets/s")
            report(f"{label}e2e_{kind}_burst_{players}_players_seconds", elapsed, "s")
            report(f"{label}e2e_{kind}_time_to_matched_p50", percentile_ms(timings.matched, 0.5), "ms")
            report(f"{label}e2e_{kind}_time_to_matched_p99", percentile_ms(timings.matched, 0.99), "ms")
            per_core = report_usage(f"{label}e2e_{kind}_burst", players, elapsed, before, after)
            # the players' side (this process) and the database, for the machine's whole budget
            report(f"{label}e2e_{kind}_burst_driver_cpu_per_ticket", 1000 * driver / players, "ms")
            if kind == "postgresql":
                report(f"{label}e2e_{kind}_burst_postgresql_cpu_per_ticket", 1000 * database / players, "ms")
            within = 0.0
            for rate in rates:
                worst = await steady_arrivals(kind, served, rate, seconds)
                if worst < 100:
                    within = max(within, rate)
            if rates:
                report(f"e2e_{kind}_steady_highest_rate_with_rpc_p99_under_100ms", within, "tickets/s")
    return {"seconds": elapsed, "tickets_per_matchmaking_core": per_core,
            "matched_p50_ms": percentile_ms(timings.matched, 0.5)}


def mixed_checkout(baseline: Path, folder: Path) -> Path:
    """A directory importing this benchmark (`bench`) with the baseline's packages (`--baseline`):
    the children serve the baseline's services, counted and driven by this benchmark's code."""
    for entry in baseline.iterdir():
        if entry.is_dir() and (entry / "__init__.py").exists() and entry.name != "bench":
            (folder / entry.name).symlink_to(entry)
    (folder / "bench").symlink_to(Path(__file__).resolve().parent)
    return folder


async def compare_with_baseline(kind: str, players: int, baseline: Path, rounds: int, postgres_url: str) -> None:
    """Bursts of `players` served by the baseline's services and by this checkout's, interleaved
    (baseline, this, baseline, this, ...): each side's figures prefixed `baseline_`/`this_`, then
    the medians' ratios (this over the baseline; for seconds, the baseline's over this: above 1 is
    faster) as `..._ratio`."""
    sides: dict[str, list[dict[str, float]]] = {"baseline": [], "this": []}
    with tempfile.TemporaryDirectory() as folder:
        mixed = mixed_checkout(baseline.resolve(), Path(folder))
        for _ in range(rounds):
            for side, services_from in (("baseline", mixed), ("this", None)):
                sides[side].append(
                    await bench_end_to_end(kind, players, [], 0.0, postgres_url, services_from, f"{side}_"))
    for figure, unit in (("tickets_per_matchmaking_core", "tickets/s"), ("seconds", "s"), ("matched_p50_ms", "ms")):
        base = statistics.median(run[figure] for run in sides["baseline"])
        this = statistics.median(run[figure] for run in sides["this"])
        report(f"e2e_{kind}_burst_{figure}_median_baseline", base, unit)
        report(f"e2e_{kind}_burst_{figure}_median_this", this, unit)
        faster = this / base if figure == "tickets_per_matchmaking_core" else base / this
        report(f"e2e_{kind}_burst_{figure}_ratio", faster, "x")


async def steady_arrivals(kind: str, served: Platform, rate: float, seconds: float) -> float:
    """New players arrive at `rate` tickets/s for `seconds` (evenly spaced), each following their
    ticket to MATCHED; prints the calls' p99, the time to MATCHED and the processes' work per
    ticket; returns the worse p99 of CreateTicket and ConfirmTicket in ms."""
    count = max(2, int(rate * seconds) // 2 * 2)  # 2-player tables: an even number of tickets
    names = [f"s{int(rate)}-{i:05d}" for i in range(count)]
    await fund_players(served.wallet_address, served.minter, names)
    label = f"e2e_{kind}_steady_{rate:g}_per_s"
    async with grpc.aio.insecure_channel(served.matchmaking_address) as channel:
        stub = matchmaking_pb2_grpc.MatchmakingServiceStub(channel)
        timings = Timings()
        before = await served.usage()
        started = time.perf_counter()
        journeys = []
        for index, player in enumerate(names):
            await asyncio.sleep(max(0.0, started + index / rate - time.perf_counter()))
            journeys.append(asyncio.create_task(ticket_journey(stub, served.minter, player, timings)))
        arrived = time.perf_counter() - started
        async with asyncio.timeout(600):
            await asyncio.gather(*journeys)
        elapsed = time.perf_counter() - started
        after = await served.usage()
    create_p99, confirm_p99 = percentile_ms(timings.create, 0.99), percentile_ms(timings.confirm, 0.99)
    report(f"{label}_arrival_rate_achieved", count / arrived if arrived > 0 else float("inf"), "tickets/s")
    report(f"{label}_create_ticket_p99", create_p99, "ms")
    report(f"{label}_confirm_ticket_p99", confirm_p99, "ms")
    report(f"{label}_time_to_matched_p50", percentile_ms(timings.matched, 0.5), "ms")
    report(f"{label}_time_to_matched_p99", percentile_ms(timings.matched, 0.99), "ms")
    report_usage(label, count, elapsed, before, after)
    return max(create_p99, confirm_p99)


def postgres_cpu_seconds() -> float:
    """The CPU seconds of this machine's PostgreSQL server processes so far (every process named
    `postgres`; the benchmark's database is taken to be the local one, as by default)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() == "postgres":
                total += cpu_seconds(int(entry.name))
        except OSError:
            continue  # gone meanwhile
    return total


async def postgres_reachable(url: str) -> bool:
    try:
        connection = await asyncpg.connect(url.replace("+asyncpg", ""), timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await connection.close()
    return True


async def main(args: argparse.Namespace) -> int:
    if args.serve:
        addresses = json.loads(args.addresses)
        return await serve(args.serve, args.kind, Path(args.workdir), args.postgres_url, args.schema or None, addresses)
    bench_matcher(args.tickets)
    bench_quality()
    for kind in args.databases.split(","):
        if kind == "postgresql" and not await postgres_reachable(args.postgres_url):
            print(f"bench: skipped PostgreSQL, not reachable at {args.postgres_url}", flush=True)
            continue
        if args.baseline:
            await compare_with_baseline(kind, args.players, Path(args.baseline), args.rounds, args.postgres_url)
            continue
        rates = [float(rate) for rate in args.rates.split(",") if rate]
        await bench_end_to_end(kind, args.players, rates, args.rate_seconds, args.postgres_url)
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.matchmaking")
    parser.add_argument("--tickets", type=int, default=100_000, help="waiting tickets of the matcher pass")
    parser.add_argument("--players", type=int, default=10_000, help="players of the end-to-end burst")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument(
        "--rates", default="20,50,100,200,300", help="steady arrival rates to run, tickets/s ('' for none)"
    )
    parser.add_argument("--rate-seconds", type=float, default=20.0, help="how long each steady arrival lasts")
    parser.add_argument("--baseline", default="", help="a checkout to compare bursts with (its services, this bench)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved bursts per side with --baseline")
    parser.add_argument("--serve", default="", help=argparse.SUPPRESS)  # the end-to-end run's children
    parser.add_argument("--kind", default="", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default="", help=argparse.SUPPRESS)
    parser.add_argument("--schema", default="", help=argparse.SUPPRESS)
    parser.add_argument("--addresses", default="{}", help=argparse.SUPPRESS)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BURACO_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"),
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(parse())))
