"""`make bench-sessions`: concurrent tables of bot players against one game-session process.

The orchestrator (this module's `main`) starts, each pinned to core 0 when `taskset` exists:

1. a plain `grpc.aio` unary echo server (bytes in, the same bytes out), the baseline: a driver
   measures its highest call rate, then it stops (again after the ramp; the ratio is to the higher);
2. `python -m services.game_session serve` on PostgreSQL in a schema of its own (dropped at the
   end), or SQLite with `--database sqlite`; a fresh process and schema for each scenario.

A driver process (`python -m bench.game_sessions drive`, bench/session_driver.py, on the other
cores) opens the tables through the real API: a service token creates each table (every seat a
player), one player token per seat holds the seat's `Play` stream (its actions go up and the
table's changes come down on it; `--stream changes`: unary action calls beside `SubscribeChanges`,
a message per change; `--stream events`: beside `Subscribe`, a message per event, for comparison),
and the seat is played by an engine bot (`engine.bots`, random-legal by default) deciding from what
the stream told it (`services.client.connection.play_seat`). Latency is the time from sending an
action to receiving its first event on the acting seat's stream. A finished match is replaced by a
new table, so the number of tables stays constant. The orchestrator steers the driver with JSON
commands on its stdin.

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
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg

from bench.session_driver import drive, echo_serve
from services.common.auth import ensure_dev_keys
from services.common.measure import cpu_seconds, percentile

ROOT = Path(__file__).resolve().parents[1]
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
HUMAN_P99_MS = 50.0
RAMP_P99_MS = 100.0
RAMP_TARGET_RATIO = 0.40


def report(name: str, value: float, unit: str) -> None:
    print(f"bench: {name} {value:.6g} {unit}", flush=True)


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE


def pinned(command: list[str], cores: str | None) -> list[str]:
    """`command` run on `cores` (taskset -c) when taskset exists and there is more than one core."""
    if cores is None or shutil.which("taskset") is None or (os.cpu_count() or 1) < 2:
        return command
    return ["taskset", "-c", cores, *command]


def driver_cores() -> str | None:
    count = os.cpu_count() or 1
    return None if count < 2 else ("1" if count == 2 else f"1-{count - 1}")


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


def engine_place() -> tuple[Path, str]:
    """Where the server and the driver run and so which engine they import: in `build/native` (the
    first import path: `python -m` puts the working directory before PYTHONPATH) when the compiled
    engine is built and current, as the service image runs it (deploy/Dockerfile); the driver's bots
    then take about half the CPU per decision, which leaves the machine's cores to the server and
    PostgreSQL."""
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
        "BURACO_HEALTH_PORT": "0",
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
        engine_cwd, engine = engine_place()
        print(f"bench-driver: engine {engine}", flush=True)
        print(f"bench-server: engine {engine}", flush=True)
        driver = Child(pinned([*python, "drive"], driver_cores()), base_env(workdir), stdin=True, cwd=engine_cwd)
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
                           merge_stderr=True, cwd=engine_cwd)
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
