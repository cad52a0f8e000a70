"""`make bench-sessions`: concurrent tables of bot players against one game-session process.

The orchestrator (this module's `main`) starts, each pinned to core 0 when `taskset` exists:

1. a plain `grpc.aio` unary echo server (bytes in, the same bytes out), the baseline: a driver
   measures its highest call rate, then it stops (again after the ramp; the ratio is to the higher);
2. `python -m services.game_session serve` on PostgreSQL in a schema of its own (dropped at the
   end), or SQLite with `--database sqlite`; a fresh process and schema for each scenario.

A driver process (`python -m bench.game_sessions drive`, on the other cores) opens the
tables through the real API: a service token creates each table (every seat a player), one player
token per seat holds the seat's `Play` stream (its actions go up and the table's changes come down
on it; `--stream changes`: unary action calls beside `SubscribeChanges`, a message per change;
`--stream events`: beside `Subscribe`, a message per event, for comparison), and the seat is played
by an engine bot (`engine.bots`, random-legal by default) deciding from what the stream told it
(`services.client.connection.play_seat`). Latency is the time from sending an action to receiving its first
event on the acting seat's stream. A finished match is replaced by a new table, so the number of
tables stays constant. The orchestrator steers the driver with JSON commands on its stdin.

Scenarios:
(a) human pace: `--tables` (1,000) tables, one action every `--pace` (2) seconds per table; the
    target is p99 under 50 ms;
(b) ramp: `--ramp-tables` tables, the offered rate raised step by step (x1.5) until the p99 passes
    100 ms or the rate achieved falls below 90% of the rate offered (halved instead while no step
    has passed yet), then up to `--ramp-bisect` (3) steps halfway between the best pass and the
    lowest failure; the highest passing step is the sustained rate, which should reach 40% of the
    echo rate. A step that fails is measured once more (`--ramp-retries`) and counts as failed
    only if that window fails too: the best of two, as for the echo baseline (before and after
    the ramp), because on a shared machine other loads only ever slow a window down.

Printed as `bench: NAME VALUE UNIT`: echo rate, concurrent tables, actions/s, p50/p99 latency,
memory per table (server RSS growth / tables), server CPU per 1,000 actions, the ramp's
sustained rate and its ratio to the echo rate; and, to tell where a slow tail comes from, the
driver's own CPU and event-loop lag and the latency of a no-op call (Health/Check every 50 ms) to
the server during the window.

    python -m bench.game_sessions [--tables 1000] [--pace 2] [--seconds 20]
        [--ramp-tables 200] [--ramp-seconds 5] [--players 2] [--bot random] [--database postgresql]
        [--stream play|changes|events]
    python -m bench.game_sessions --smoke      # a tiny run (CI): every figure, in seconds

Every option also reads an environment variable: BURACO_BENCH_<OPTION> (e.g. BURACO_BENCH_TABLES).
"""

from __future__ import annotations

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)
# ruff: noqa: E402  (the imports below come after that call on purpose)

import argparse
import asyncio
import contextlib
import gc
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import asyncpg
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
from services.common.measure import cpu_seconds, percentile
from services.game_session.collector import GC_THRESHOLDS, collect_young_and_freeze

ROOT = Path(__file__).resolve().parents[1]
ECHO_METHOD = "/buraco.bench.Echo/Echo"
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
HUMAN_P99_MS = 50.0
RAMP_P99_MS = 100.0
RAMP_TARGET_RATIO = 0.40
#: seconds between two settles of the driver's collector (below)
DRIVER_GC_SETTLE_SECONDS = 0.25


def report(name: str, value: float, unit: str) -> None:
    print(f"bench: {name} {value:.6g} {unit}", flush=True)


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE


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


def pinned(command: list[str], cores: str | None) -> list[str]:
    """`command` run on `cores` (taskset -c) when taskset exists and there is more than one core."""
    if cores is None or shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return command
    return ["taskset", "-c", cores, *command]


def driver_cores() -> str | None:
    count = os.cpu_count() or 1
    return None if count < 2 else ("1" if count == 2 else f"1-{count - 1}")


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
        self.service_token = self.minter.mint(Kind.SERVICE, "bench", ttl=24 * 3600)
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


# --- the orchestrator -------------------------------------------------------------------------------

class Child:
    """A child process speaking JSON lines."""

    def __init__(self, command: list[str], env: dict[str, str], stdin: bool = False,
                 merge_stderr: bool = False, cwd: Path = ROOT) -> None:
        self.process = subprocess.Popen(
            command, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if merge_stderr else None,
        )
        self.log: list[str] = []

    async def read(self, until: str | None = None) -> dict[str, Any]:
        """The next JSON object printed (with `message == until` when given)."""
        assert self.process.stdout is not None
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, self.process.stdout.readline)
            if not line:
                raise RuntimeError(f"{self.process.args!r} exited ({self.process.wait()}):\n" + "".join(self.log[-30:]))
            self.log.append(line)
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and (until is None or entry.get("message") == until):
                return entry

    def drain(self) -> None:
        """Keep reading its output so that it never blocks on a full pipe."""
        stdout = self.process.stdout
        assert stdout is not None
        asyncio.get_running_loop().run_in_executor(None, lambda: [None for _ in stdout])

    def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    async def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        self.send(command)
        return await self.read()

    async def run_window(self, command: dict[str, Any], pid: int) -> tuple[dict[str, Any], float]:
        """Send a `run`; its result and the server's CPU seconds during its measured window."""
        self.send(command)
        window = await self.read()  # {"event": "window"}: the measured window opens
        if window.get("event") != "window":
            raise RuntimeError(f"the driver answered {window}")
        cpu_start = cpu_seconds(pid)
        result = await self.read()
        return result, cpu_seconds(pid) - cpu_start

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def base_env(workdir: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "BURACO_DEV_KEYS_DIR": str(workdir / "keys")}


def native_engine() -> Path | None:
    """`build/native` when it holds a mypyc build of the engine as it is now (`make engine-native`
    copies the sources beside the compiled modules: every source there must equal the tree's)."""
    native = ROOT / "build" / "native"
    built = sorted((native / "engine").rglob("*.py"))
    if not built or not any((native / "engine").rglob("*.so")):
        return None
    for copy in built:
        source = ROOT / copy.relative_to(native)
        if not source.is_file() or source.read_bytes() != copy.read_bytes():
            return None
    return native


def driver_place() -> tuple[Path, str]:
    """Where the driver runs and which engine it imports: in `build/native` (its first import
    path: `python -m` puts the working directory before PYTHONPATH) when the compiled engine is
    built and current, whose bots take about half the CPU per decision, which leaves the machine's
    cores to the server and PostgreSQL. The server under test runs the engine as production does."""
    native = native_engine()
    return (native, "native (build/native)") if native is not None else (ROOT, "pure Python")


async def create_schema(url: str, schema: str, drop: bool = False) -> None:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"), timeout=10)
    try:
        statement = f'DROP SCHEMA IF EXISTS "{schema}" CASCADE' if drop else f'CREATE SCHEMA "{schema}"'
        await connection.execute(statement)
    finally:
        await connection.close()


def server_env(workdir: Path, args: argparse.Namespace, schema: str | None) -> dict[str, str]:
    env = {
        **base_env(workdir),
        "BURACO_ENV": "local",
        "BURACO_PORT": "0",
        "BURACO_METRICS_ENABLED": "false",
        "BURACO_RATE_LIMIT_PER_SECOND": "1000000",
        "BURACO_RATE_LIMIT_BURST": "1000000",
        "BURACO_SERVICE_RATE_LIMIT_PER_SECOND": "1000000",
        "BURACO_MAX_STREAMS_PER_CALLER": "100",
        "BURACO_GAME_SESSION_BOT_DELAY_MS": "0",
        "BURACO_GAME_SESSION_START_SECONDS": "5",
        # the driver's players never drop; a table it lets go must not turn into a bot table
        "BURACO_GAME_SESSION_DISCONNECT_GRACE_SECONDS": "86400",
    }
    if args.database == "sqlite":
        env["BURACO_DATABASE_URL"] = f"sqlite+aiosqlite:///{workdir / 'game_session.db'}"
    else:
        env["BURACO_DATABASE_URL"] = args.postgres_url
        assert schema is not None
        env["BURACO_DATABASE_SCHEMA"] = schema
    return env


def summarise(name: str, result: dict[str, Any]) -> tuple[float, float, float]:
    """(actions/s, p50 ms, p99 ms) of a run window."""
    latencies = [x * 1000 for x in result["latencies"]]
    rate = result["actions"] / max(result["seconds"], 1e-9)
    return rate, percentile(latencies, 0.5), percentile(latencies, 0.99)


async def ramp_step(driver: Any, pid: int, offered: float, args: argparse.Namespace) -> \
        tuple[dict[str, Any], float, bool]:
    """One step of the ramp at `offered` actions/s: (the driver's result, the server's CPU seconds,
    whether it passed). A window that fails is followed by up to `--ramp-retries` more at the same
    rate, and the step is the first window that passes, else the last: the best of them, as the
    echo baseline is the better of its two runs (other loads on a shared machine only ever slow a
    window down). Every window is printed."""
    for attempt in range(1 + max(0, args.ramp_retries)):
        result, cpu_used = await driver.run_window(
            {"cmd": "run", "rate": offered, "warmup": args.ramp_warmup, "seconds": args.ramp_seconds}, pid)
        rate, p50, p99 = summarise("ramp", result)
        seconds = max(result["seconds"], 1e-9)
        print(f"bench-step: offered {offered:.0f}/s achieved {rate:.0f}/s p50 {p50:.1f} ms "
              f"p99 {p99:.1f} ms server cpu {cpu_used / seconds:.3f} "
              f"driver cpu {result['driver_cpu'] / seconds:.3f} "
              f"driver loop lag p99 {result['driver_lag_p99'] * 1000:.0f} ms "
              f"health check p99 {result['health_p99'] * 1000:.0f} ms"
              + (f" (window {attempt + 1})" if attempt else ""), flush=True)
        passed = p99 < RAMP_P99_MS and rate >= 0.9 * offered and result["actions"] > 0
        if passed:
            break
    return result, cpu_used, passed


async def orchestrate(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as folder:
        workdir = Path(folder)
        ensure_dev_keys(workdir / "keys")
        python = [sys.executable, "-m", "bench.game_sessions"]
        driver_cwd, driver_engine = driver_place()
        print(f"bench-driver: engine {driver_engine}", flush=True)
        driver = Child(pinned([*python, "drive"], driver_cores()), base_env(workdir), stdin=True, cwd=driver_cwd)
        children = [driver]
        schemas: list[str] = []

        async def start_server(name: str) -> tuple[Child, str]:
            """A fresh game-session process (its own schema, or SQLite file) for one scenario."""
            schema = None
            if args.database == "postgresql":
                schema = f"bench_{uuid.uuid4().hex[:12]}"
                await create_schema(args.postgres_url, schema)
                schemas.append(schema)
            env = server_env(workdir / name, args, schema)
            (workdir / name).mkdir()
            env["BURACO_DEV_KEYS_DIR"] = str(workdir / "keys")
            server = Child(pinned([sys.executable, "-m", "services.game_session", "serve"], "0"), env,
                           merge_stderr=True)
            children.append(server)
            address = str((await server.read("listening"))["address"])
            server.drain()
            return server, address

        async def measure_echo() -> float:
            """The baseline: a plain grpc.aio unary echo, on the server's core, the same driver."""
            echo = Child(pinned([*python, "echo-serve"], "0"), base_env(workdir))
            children.append(echo)
            try:
                echo_address = (await echo.read("listening"))["address"]
                return float((await driver.ask(
                    {"cmd": "echo", "address": echo_address, "seconds": args.echo_seconds,
                     "concurrency": 64}))["rate"])
            finally:
                echo.stop()

        try:
            # 1. the baseline, measured again after the ramp: the ratio is taken to the higher of
            # the two (this machine's speed drifts; the lower would flatter the service)
            echo_rate_value = await measure_echo()
            report("sessions_echo_unary_rate", echo_rate_value, "calls/s")

            # 2. the game-session server (a fresh one per scenario)
            server, address = await start_server("human")
            pid = server.process.pid
            common = {"address": address, "players": args.players, "preset": args.preset, "bot": args.bot,
                      "stream": args.stream, "keys": str(workdir / "keys")}

            # (a) human pace
            rss_before = rss_bytes(pid)
            cpu_before_setup = cpu_seconds(pid)
            setup = await driver.ask({"cmd": "setup", "tables": args.tables, **common})
            setup_cpu = cpu_seconds(pid) - cpu_before_setup
            rate_offered = args.tables / args.pace
            result, cpu_used = await driver.run_window(
                {"cmd": "run", "rate": rate_offered, "warmup": args.warmup, "seconds": args.seconds}, pid)
            rss_after = rss_bytes(pid)
            rate, p50, p99 = summarise("human", result)
            report("sessions_human_concurrent_tables", result["tables"], "tables")
            report("sessions_human_setup_seconds", setup["seconds"], "s")
            # a table's start: CreateTable, its players' streams joined, the first deal
            report("sessions_server_cpu_per_table_start", setup_cpu / max(1, setup["tables"]) * 1000, "ms")
            report("sessions_human_offered_actions_per_s", rate_offered, "actions/s")
            report("sessions_human_actions_per_s", rate, "actions/s")
            report("sessions_human_latency_p50", p50, "ms")
            report("sessions_human_latency_p99", p99, "ms")
            report("sessions_human_p99_target", HUMAN_P99_MS, "ms")
            report("sessions_memory_per_table", (rss_after - rss_before) / max(1, result["tables"]) / 1024, "KiB")
            report("sessions_server_rss", rss_after / 2**20, "MiB")
            report("sessions_human_cpu_per_1000_actions", cpu_used / max(1, result["actions"]) * 1000, "s")
            report("sessions_human_server_cpu_share", cpu_used / max(result["seconds"], 1e-9), "cores")
            report("sessions_human_matches_finished", result["matches_finished"], "matches")
            report("sessions_human_driver_cpu_share", result["driver_cpu"] / max(result["seconds"], 1e-9), "cores")
            report("sessions_human_driver_loop_lag_p99", result["driver_lag_p99"] * 1000, "ms")
            report("sessions_human_driver_loop_lag_max", result["driver_lag_max"] * 1000, "ms")
            report("sessions_human_health_check_p50", result["health_p50"] * 1000, "ms")
            report("sessions_human_health_check_p99", result["health_p99"] * 1000, "ms")
            report("sessions_errors", result["error_count"], "errors")
            for line in result["errors"]:
                print(f"bench: error {line}", file=sys.stderr)

            # (b) the ramp, on a fresh server: the human-pace tables are gone with the first one
            await driver.ask({"cmd": "release"})
            server.stop()
            server, address = await start_server("ramp")
            pid = server.process.pid
            common["address"] = address
            ramp_setup = await driver.ask(
                {"cmd": "setup", "tables": args.ramp_tables, "spread": args.ramp_spread, **common})
            report("sessions_ramp_match_actions", ramp_setup["match_actions"], "actions")
            offered = args.ramp_start
            best: tuple[float, float, float, float] | None = None  # rate, p50, p99, cpu per 1000
            failed_at = 0.0  # the lowest offered rate that failed, once a step above a pass failed
            steps = 0
            while steps < args.ramp_steps:
                steps += 1
                result, cpu_used, passed = await ramp_step(driver, pid, offered, args)
                rate, p50, p99 = summarise("ramp", result)
                if passed and (best is None or rate > best[0]):
                    best = (rate, p50, p99, cpu_used / max(1, result["actions"]) * 1000)
                if best is None:
                    if offered / 2 < args.ramp_min:
                        break
                    offered /= 2  # the first steps failed: come down until one passes
                    continue
                if not passed:
                    failed_at = offered if not failed_at else min(failed_at, offered)
                if not failed_at:
                    offered *= 1.5
                    continue
                # between the best pass and the lowest failure: bisect while the gap is over 10 %
                low = max(best[0], offered if passed else 0.0)
                if failed_at <= 1.1 * low or args.ramp_bisect <= 0:
                    break
                args.ramp_bisect -= 1
                offered = (low + failed_at) / 2
            if best is None:
                best = (0.0, float("nan"), float("nan"), float("nan"))
            await driver.ask({"cmd": "release"})
            server.stop()
            echo_after = await measure_echo()
            report("sessions_echo_unary_rate_after", echo_after, "calls/s")
            echo_rate_value = max(echo_rate_value, echo_after)
            report("sessions_ramp_tables", args.ramp_tables, "tables")
            report("sessions_max_sustained_actions_per_s", best[0], "actions/s")
            report("sessions_max_sustained_latency_p50", best[1], "ms")
            report("sessions_max_sustained_latency_p99", best[2], "ms")
            report("sessions_max_sustained_cpu_per_1000_actions", best[3], "s")
            report("sessions_max_sustained_vs_echo", best[0] / max(echo_rate_value, 1e-9), "ratio")
            report("sessions_max_sustained_vs_echo_target", RAMP_TARGET_RATIO, "ratio")
            await driver.ask({"cmd": "stop"})
        finally:
            for child in reversed(children):
                child.stop()
            for schema in schemas:
                await create_schema(args.postgres_url, schema, drop=True)
    return 0


def build_parser() -> argparse.ArgumentParser:
    def env(name: str, default: Any) -> Any:
        return os.environ.get(f"BURACO_BENCH_{name.upper()}", default)

    parser = argparse.ArgumentParser(prog="python -m bench.game_sessions", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="bench", choices=("bench", "drive", "echo-serve"))
    parser.add_argument("--smoke", action="store_true", help="a tiny run for CI (a few tables, seconds)")
    parser.add_argument("--tables", type=int, default=int(env("tables", 1000)))
    parser.add_argument("--pace", type=float, default=float(env("pace", 2.0)), help="seconds between a table's actions")
    parser.add_argument("--warmup", type=float, default=float(env("warmup", 5.0)))
    parser.add_argument("--seconds", type=float, default=float(env("seconds", 20.0)))
    parser.add_argument("--ramp-tables", type=int, default=int(env("ramp_tables", 200)))
    parser.add_argument("--ramp-start", type=float, default=float(env("ramp_start", 200.0)))
    parser.add_argument("--ramp-steps", type=int, default=int(env("ramp_steps", 12)))
    parser.add_argument("--ramp-min", type=float, default=float(env("ramp_min", 20.0)),
                        help="the lowest rate tried when the first steps fail")
    parser.add_argument("--ramp-bisect", type=int, default=int(env("ramp_bisect", 3)),
                        help="steps spent between the last passing and the first failing rate")
    parser.add_argument("--ramp-spread", type=float, default=float(env("ramp_spread", 1.0)),
                        help="play each ramp table's match ahead by up to this many match lengths"
                             " (random), so that matches end spread over time; 0: all start together")
    parser.add_argument("--ramp-warmup", type=float, default=float(env("ramp_warmup", 2.0)))
    parser.add_argument("--ramp-seconds", type=float, default=float(env("ramp_seconds", 5.0)))
    parser.add_argument("--ramp-retries", type=int, default=int(env("ramp_retries", 1)),
                        help="more windows at a step's rate before the step counts as failed")
    parser.add_argument("--echo-seconds", type=float, default=float(env("echo_seconds", 3.0)))
    parser.add_argument("--players", type=int, choices=(2, 4), default=int(env("players", 2)))
    parser.add_argument("--preset", default=env("preset", "aberto"))
    parser.add_argument("--bot", choices=("random", "heuristic"), default=env("bot", "random"))
    parser.add_argument("--stream", choices=("play", "changes", "events"), default=env("stream", "play"),
                        help="the clients act on their Play stream (default), or by unary calls beside"
                             " SubscribeChanges (a message per change) or Subscribe (a message per event)")
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default=env("database", "postgresql"))
    parser.add_argument("--postgres-url", default=os.environ.get(
        "BURACO_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.mode in ("drive", "echo-serve"):
        with contextlib.suppress(ImportError):  # as the service does: less CPU per call and message
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    if args.mode == "drive":
        asyncio.run(drive())
        return 0
    if args.mode == "echo-serve":
        asyncio.run(echo_serve())
        return 0
    if args.smoke:
        args.tables, args.pace, args.warmup, args.seconds = 6, 0.2, 1.0, 2.0
        args.ramp_tables, args.ramp_start, args.ramp_steps = 6, 30.0, 2
        args.ramp_warmup, args.ramp_seconds, args.echo_seconds = 0.5, 1.5, 0.5
    return asyncio.run(orchestrate(args))


if __name__ == "__main__":
    sys.exit(main())
