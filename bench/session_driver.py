"""The processes `make bench-sessions` (bench/game_sessions.py, the orchestrator) starts besides
the server under test, and steers by JSON lines:

- the driver (`python -m bench.game_sessions drive`): opens tables of bot players through the
  real API, paces their actions (`run`: an offered rate over every table for a window), keeps the
  number of tables constant by replacing each finished match, and answers each command with its
  figures (latencies, the driver's own CPU and event-loop lag, a no-op call's latency);
- the echo baseline: a plain `grpc.aio` unary echo server (`python -m bench.game_sessions
  echo-serve`) and the driver's client that measures its highest call rate (`echo`).

The bench's design, its scenarios and its figures are described in bench/game_sessions.py.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc
from engine.bots import make_bot
from engine.match import MatchState
from engine.rules import preset
from engine.selfplay import play_hand
from services.client.channels import ChannelPool
from services.client.connection import TableConnection, Timing, play_seat
from services.common.auth import Kind, Minter, ensure_dev_keys, load_private_key
from services.common.collector import GC_THRESHOLDS, collect_young_and_freeze
from services.common.measure import percentile

ECHO_METHOD = "/buraco.bench.Echo/Echo"
#: seconds between two settles of the driver's collector (below)
DRIVER_GC_SETTLE_SECONDS = 0.25


async def settle_collector(interval: float, settled: Callable[[], None] | None = None) -> None:
    """The driver's own collector, as the service's (`collector.Settler`): the young
    generations collected and frozen every `interval` seconds. Left to its thresholds, the
    collector pauses the driver for hundreds of milliseconds at 1,000 tables, and every action in
    flight is counted that much late: the driver's pauses must stay well under the latencies it
    measures. A shorter interval shortens the pauses but costs the driver more CPU, which the ramp,
    near a full core, cannot spare (DRIVER_GC_SETTLE_SECONDS; the measurements behind it are in
    docs/game-session.md)."""
    while True:
        await asyncio.sleep(interval)
        collect_young_and_freeze()
        if settled is not None:
            settled()


def match_length(ruleset: str, players: int, bot: str, hands: int = 8) -> float:
    """The mean number of actions of an express match (one hand) with the bench's bots: the engine
    plays `hands` hands offline (a few hundred milliseconds)."""
    rules = preset(ruleset)
    total = 0
    for hand in range(hands):
        match = MatchState(rules, players, first_dealer=hand % players)
        match.start_hand(seed=f"bench-length-{hand}")
        bots = [make_bot(bot, seed=f"bench-length-{hand}/{seat}", rules=rules) for seat in range(players)]
        total += play_hand(match, bots)
    return total / hands


# --- the echo server (baseline) ---------------------------------------------------------------------

async def echo_serve() -> None:
    """A grpc.aio server whose one unary method returns its request: the baseline's server."""
    server = grpc.aio.server()

    async def echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return request

    handler = grpc.method_handlers_generic_handler(
        "buraco.bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(json.dumps({"message": "listening", "address": f"127.0.0.1:{port}"}), flush=True)
    await server.wait_for_termination()


async def echo_rate(address: str, seconds: float, concurrency: int) -> float:
    payload = b"x" * 64
    pool = ChannelPool(4)
    try:
        calls = [pool.get(address).unary_unary(ECHO_METHOD, None, None) for _ in range(4)]
        count = 0
        deadline = time.perf_counter() + seconds

        async def loop(index: int) -> None:
            nonlocal count
            call = calls[index % len(calls)]
            while time.perf_counter() < deadline:
                await call(payload)
                count += 1

        for index in range(concurrency):  # warm the connections
            await calls[index % len(calls)](payload)
        started = time.perf_counter()
        await asyncio.gather(*(loop(i) for i in range(concurrency)))
        return count / (time.perf_counter() - started)
    finally:
        await pool.close()


# --- the driver: tables of bots ---------------------------------------------------------------------

@dataclass
class Pace:
    """The driver's pace, shared by every table: seconds between two actions of one table."""

    interval: float = 0.0
    running: asyncio.Event = field(default_factory=asyncio.Event)


class BenchTable:
    """One table: its seats' connections and bots, paced as one."""

    def __init__(self, driver: Driver, name: str, players: list[str]) -> None:
        self.driver = driver
        self.name = name
        self.players = players
        self.next_action = 0.0
        self.connections: list[TableConnection] = []
        self.actions = 0
        #: actions still to play unpaced before the first window: the table's match moved ahead
        self.ageing = 0

    async def pace(self) -> None:
        if self.ageing > 0:
            self.ageing -= 1
            if self.ageing == 0:
                self.driver.aged()
            return
        pace = self.driver.pace
        await pace.running.wait()
        now = time.perf_counter()
        if self.next_action <= 0.0:
            self.next_action = now + random.uniform(0, pace.interval)  # spread the tables' phases
        if self.next_action > now:
            await asyncio.sleep(self.next_action - now)
            await pace.running.wait()
        self.next_action = max(self.next_action + pace.interval, time.perf_counter() - pace.interval)
        self.actions += 1


class Driver:
    def __init__(self, config: dict[str, Any]) -> None:
        self.address = str(config["address"])
        self.players = int(config.get("players", 2))
        self.ruleset = str(config.get("preset", "aberto"))
        self.bot_kind = str(config.get("bot", "random"))
        stream = str(config.get("stream", "changes"))
        self.by_change = stream != "events"
        self.play_stream = stream == "play"
        private, _ = ensure_dev_keys(Path(config["keys"]))
        self.minter = Minter(load_private_key(private), audience="buraco")
        # matchmaking's identity, whose place the driver takes: CreateTable admits the services that
        # seat players only (docs/contracts.md, "Who may call what")
        self.service_token = self.minter.mint(Kind.SERVICE, "matchmaking", ttl=24 * 3600)
        self.pool = ChannelPool(int(config.get("channels", 16)))
        self.pace = Pace()
        self.timing = Timing()
        self.tables: dict[str, BenchTable] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.errors: list[str] = []
        self.created = 0
        self.finished = 0
        self.wanted = 0
        self.run_id = uuid.uuid4().hex[:8]
        self.settling: asyncio.Task[None] | None = None
        self.ageing_tables = 0
        self.all_aged = asyncio.Event()

    async def create_table(self) -> BenchTable:
        self.created += 1
        index = self.created
        players = [f"b{self.run_id}t{index}s{s}" for s in range(self.players)]
        stub = game_session_pb2_grpc.GameSessionServiceStub(self.pool.get(self.address))
        options = common_pb2.TableOptions(
            ruleset=common_pb2.RulesetRef(preset=self.ruleset), players=self.players,
            length=common_pb2.MATCH_LENGTH_EXPRESS, mode=common_pb2.TABLE_MODE_PRACTICE,
            draw_seconds=300, play_seconds=600,
        )
        request = game_session_pb2.CreateTableRequest(
            request_id=f"bench-{self.run_id}-{index}",
            table=game_session_pb2.Table(
                match_id=f"bench-{self.run_id}-{index}", options=options,
                seats=[game_session_pb2.Seat(seat=s, participant=common_pb2.Participant(player=f"players/{p}"))
                       for s, p in enumerate(players)],
            ),
        )
        table: game_session_pb2.Table = await stub.CreateTable(
            request, metadata=(("authorization", f"Bearer {self.service_token}"),), timeout=30)
        bench_table = BenchTable(self, table.name, players)
        for player in players:
            connection = TableConnection(
                self.address, self.minter.mint(Kind.PLAYER, player, ttl=24 * 3600), table.name, channels=self.pool,
                by_change=self.by_change, play=self.play_stream)
            connection.timing = self.timing
            bench_table.connections.append(connection)
        await asyncio.gather(*(c.start() for c in bench_table.connections))
        self.tables[table.name] = bench_table
        return bench_table

    def launch(self, table: BenchTable) -> None:
        task = asyncio.get_running_loop().create_task(self.play(table))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def play(self, table: BenchTable) -> None:
        rules = preset(self.ruleset)
        try:
            await asyncio.gather(*(
                play_seat(c, make_bot(self.bot_kind, seed=f"{table.name}/{seat}", rules=rules), rules, table.pace)
                for seat, c in enumerate(table.connections)
            ))
            self.finished += 1
        except Exception as error:  # one table's failure is counted, the bench goes on
            self.errors.append(f"{table.name}: {type(error).__name__}: {error}")
        finally:
            if table.ageing > 0:  # its match ended before its age: it counts as aged
                table.ageing = 0
                self.aged()
            for connection in table.connections:
                await connection.close()
            self.tables.pop(table.name, None)
        if len(self.tables) < self.wanted:  # keep the number of tables: a new match replaces it
            try:
                self.launch(await self.create_table())
            except grpc.aio.AioRpcError as error:
                self.errors.append(f"CreateTable: {error.code().name}: {error.details()}")

    def aged(self) -> None:
        self.ageing_tables -= 1
        if self.ageing_tables <= 0:
            self.all_aged.set()

    async def setup(self, tables: int, spread: float = 0.0) -> dict[str, Any]:
        """Open `tables` tables. `spread` > 0: then play each table's match ahead, unpaced, by a
        random number of actions up to `spread` times a match's mean length (`match_length`), so
        that the tables are at every point of their matches and the matches end (new tables
        replacing them) spread over time, as on a replica in steady use. Started together, the
        ramp's matches would all be early in their hand for the first steps, then all end within
        seconds of each other about a match's length into the ramp: neither is the steady state
        whose sustained rate the ramp measures."""
        self.wanted = tables
        started = time.perf_counter()
        semaphore = asyncio.Semaphore(50)
        length = 0.0
        ages: list[int] = []
        if spread > 0:
            length = match_length(self.ruleset, self.players, self.bot_kind)
            ages = [random.randrange(int(spread * length) + 1) for _ in range(tables)]
        self.ageing_tables = sum(1 for age in ages if age > 0)
        self.all_aged.clear()
        if self.ageing_tables == 0:
            self.all_aged.set()

        async def one(index: int) -> None:
            async with semaphore:
                table = await self.create_table()
                table.ageing = ages[index] if ages else 0
                self.launch(table)

        while len(self.tables) < tables:
            await asyncio.gather(*(one(i) for i in range(len(self.tables), tables)))
        await self.all_aged.wait()
        aged_seconds = time.perf_counter() - started
        self.timing.samples.clear()  # the unpaced actions' latencies are not measured
        # The tables' long-lived objects leave the collector's scans: shorter pauses in the driver.
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)  # as the service does: most young objects die by refcount
        if self.settling is None:
            self.settling = asyncio.ensure_future(settle_collector(DRIVER_GC_SETTLE_SECONDS))
        return {"tables": len(self.tables), "seconds": time.perf_counter() - started,
                "match_actions": length, "aged_actions": sum(ages), "aged_seconds": aged_seconds}

    async def run(self, rate: float, warmup: float, seconds: float, out: TextIO) -> dict[str, Any]:
        """Offer `rate` actions/s over the tables for warmup + seconds; figures of the window."""
        self.pace.interval = max(len(self.tables), 1) / rate
        for table in self.tables.values():
            table.next_action = 0.0
        self.pace.running.set()
        await asyncio.sleep(warmup)
        start = time.perf_counter()
        counted_before = sum(t.actions for t in self.tables.values())
        finished_before = self.finished
        print(json.dumps({"event": "window"}), file=out, flush=True)
        cpu_before = time.process_time()
        lags: list[float] = []

        async def watch_loop() -> None:
            """How late this driver's own event loop runs (a late driver inflates the latencies)."""
            while True:
                before = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - before - 0.01)

        health: list[float] = []
        health_stub = health_pb2_grpc.HealthStub(self.pool.get(self.address))

        async def probe_server() -> None:
            """A no-op call every 50 ms: how long the server's loop keeps any call waiting."""
            while True:
                before = time.perf_counter()
                await health_stub.Check(health_pb2.HealthCheckRequest(), timeout=30)
                health.append(time.perf_counter() - before)
                await asyncio.sleep(0.05)

        watcher = asyncio.ensure_future(watch_loop())
        prober = asyncio.ensure_future(probe_server())
        await asyncio.sleep(seconds)
        watcher.cancel()
        prober.cancel()
        end = time.perf_counter()
        self.pace.running.clear()
        window = [latency for sent, latency in self.timing.samples if start <= sent < end]
        answered = len(window)
        self.timing.samples = [s for s in self.timing.samples if s[0] >= end]
        return {
            "offered": rate,
            "actions": answered,
            "paced": sum(t.actions for t in self.tables.values()) - counted_before,
            "seconds": end - start,
            "latencies": window,
            "tables": len(self.tables),
            "matches_finished": self.finished - finished_before,
            "errors": self.errors[-5:],
            "error_count": len(self.errors),
            "driver_cpu": time.process_time() - cpu_before,
            "driver_lag_p99": percentile(lags, 0.99),
            "driver_lag_max": max(lags, default=0.0),
            "health_p50": percentile(health, 0.5),
            "health_p99": percentile(health, 0.99),
        }

    async def stop(self) -> None:
        self.wanted = 0
        if self.settling is not None:
            self.settling.cancel()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.pool.close()


async def drive() -> None:
    """The driver process: JSON commands on stdin, one JSON answer each on stdout."""
    loop = asyncio.get_running_loop()
    driver: Driver | None = None
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        kind = command["cmd"]
        answer: dict[str, Any]
        if kind == "echo":
            answer = {"rate": await echo_rate(command["address"], command["seconds"], command["concurrency"])}
        elif kind == "setup":
            if driver is not None:
                await driver.stop()
            driver = Driver(command)
            answer = await driver.setup(int(command["tables"]), float(command.get("spread", 0.0)))
        elif kind == "run":
            assert driver is not None
            answer = await driver.run(command["rate"], command["warmup"], command["seconds"], sys.stdout)
        elif kind == "release":  # forget the tables (before their server goes away)
            if driver is not None:
                await driver.stop()
                driver = None
            answer = {"ok": True}
        elif kind == "stop":
            if driver is not None:
                await driver.stop()
            print(json.dumps({"ok": True}), flush=True)
            break
        else:
            answer = {"error": f"unknown command {kind!r}"}
        print(json.dumps(answer), flush=True)

