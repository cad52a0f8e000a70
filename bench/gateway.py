"""`make bench-gateway`: what the player gateway adds to a move, and how many players one gateway
core holds at human pace.

The orchestrator (this module's `main`) starts, each pinned with `taskset` when there are at least
two cores (`layout`):

1. `python -m services.game_session serve` on PostgreSQL, in a schema of its own dropped at the end
   (or SQLite with `--database sqlite`): core 1;
2. `python -m services.gateway` in front of it (local mode, the per-address rate limit lifted:
   every simulated player comes from this machine's one address): core 0, alone, so that its CPU
   read from /proc is the core's work for the gateway;
3. a driver (`python -m bench.gateway drive`, bench/gateway_driver.py) on the other cores (on two
   cores: core 1, beside the game session), steered by JSON commands on its stdin. Its players
   are seated two to a table created with a service token (`CreateTable`, as matchmaking would):
   `gateway` players each hold one WebSocket to the gateway, as a browser does, and `direct`
   players each hold the game session's `Play` stream (`TableConnection(play=True)`), the
   baseline. Both play with the same engine bot from the same model of their seat; a table
   acts every `--pace` (2) seconds, so each of its two players about every 4 s. A move's latency
   is from sending it to the arrival of its first event at the table's players (a socket's
   `changes` message, or the event off a `Play` stream; the first of the two seats, as
   bench-sessions counts).

Scenarios:
(a) human pace: `--players` (1,000) players through the gateway and `--direct-players` (as many)
    directly, in the same windows: p50 and p99 of a move on each path, and what the gateway adds
    (the difference; target: p99 added under 10 ms), with their ratios. Of `--human-windows` (3)
    windows the figures are the quietest's, the one whose direct players saw the lowest p99
    (other loads on a shared machine only ever slow a window down, both paths alike; every window
    is printed as a `bench-step:` line). Also the gateway's memory per socket (its RSS growth over
    the sockets opened, each with its table subscription and upstream `Play` stream, after the
    windows; and per idle socket, signed in with nothing subscribed), its CPU share and CPU per
    1,000 moves. Two gateway players first play one table before the gateway's memory is read,
    so that its first channels and code paths are warm.
(b) capacity: gateway players, level by level (`--levels`), each level on fresh processes (a new
    game session and schema, gateway and driver) with all its players connected and seated before
    its windows: players added to a running game session slow the moves of its tables for a
    while, direct players' too, which is the game session's behaviour, not the gateway's. A level
    holds when the p99 of the moves through the gateway is under 100 ms, at least 90% of the
    offered moves are answered and no table fails; a level that does not hold is measured once
    more (`--retries`) and fails only if that window fails too (other loads on a shared machine
    only ever slow a window down); a window that fails while other processes took more than 30%
    of the gateway's core (its busy time in /proc/stat less the gateway's own CPU: printed
    DISTURBED) is measured again after a pause, up to `--disturbed-retries` (6) times over the
    ramp, without counting as a failure. The ramp stops at the first level that fails. Reported:
    the highest level that holds, the gateway's CPU share there (from /proc), and players per
    gateway core = players / that share (target: at least 2,000).

Each window also reports, to tell where a slow tail comes from, the driver's own CPU and
event-loop lag, the game session's CPU share, and the latency of `GET /healthz` on the gateway
every 100 ms (a small load of its own on the gateway, counted in its CPU). Figures are printed as
`bench: NAME VALUE UNIT`.

    python -m bench.gateway [--players 1000] [--direct-players 1000] [--pace 2] [--seconds 20]
        [--levels 1000,1500,2000,2500,3000,4000,6000,8000] [--level-seconds 10] [--database postgresql]
    python -m bench.gateway --smoke      # a tiny run (CI): every figure, in seconds

Every option also reads an environment variable: BURACO_BENCH_<OPTION> (e.g. BURACO_BENCH_PLAYERS).
"""

from __future__ import annotations

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)
# ruff: noqa: E402  (the imports below come after that call on purpose)

import argparse
import asyncio
import contextlib
import math
import os
import resource
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.game_sessions import Child, base_env, create_schema, engine_place, pinned, report, rss_bytes, server_env
from bench.gateway_driver import DIRECT, GATEWAY, drive
from services.common.auth import ensure_dev_keys
from services.common.measure import CLOCK_TICKS, cpu_seconds

ADDED_P99_TARGET_MS = 10.0
LEVEL_P99_MS = 100.0
PLAYERS_PER_CORE_TARGET = 2000.0
#: the share of the offered moves a level must answer
ACHIEVED_RATIO = 0.9
#: a window in which other processes took more of the gateway's core than this is disturbed
DISTURBED_SHARE = 0.3
#: the capacity ramp's levels (players through the gateway)
DEFAULT_LEVELS = "1000,1500,2000,2500,3000,4000,6000,8000"


@dataclass(frozen=True)
class Layout:
    """Where each process runs (taskset core lists; None: anywhere)."""

    gateway: str | None
    session: str | None
    driver: str | None


def layout(cores: int) -> Layout:
    """The gateway alone on core 0; the game session on core 1; the driver on the cores left, or
    beside the game session on a machine of two."""
    if cores < 2:
        return Layout(None, None, None)
    if cores == 2:
        return Layout("0", "1", "1")
    return Layout("0", "1", "2" if cores == 3 else f"2-{cores - 1}")


def gateway_env(workdir: Path, session_address: str) -> dict[str, str]:
    return {
        **base_env(workdir),
        "BURACO_ENV": "local",
        "BURACO_HOST": "127.0.0.1",
        "BURACO_GATEWAY_PORT": "0",
        "BURACO_METRICS_ENABLED": "false",
        "BURACO_GAME_SESSION_ADDRESS": session_address,
        "BURACO_GATEWAY_WEB": "false",
        # every simulated player comes from this machine: the limit per client address would
        # count them as one (the limit per player stays as configured)
        "BURACO_GATEWAY_ADDRESS_RATE_PER_SECOND": "1000000",
        "BURACO_GATEWAY_ADDRESS_RATE_BURST": "1000000",
    }


def waited_seconds(pid: int) -> float:
    """Time the process's threads have spent runnable but waiting for a CPU (/proc schedstat):
    other work on its core, which a window's tail then shows without the gateway's CPU showing it."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            total += int((task / "schedstat").read_text().split()[1])
    return total / 1e9


def cores_busy_seconds() -> dict[str, float]:
    """CPU seconds each core has been busy (/proc/stat), by name (`core0`, ...)."""
    busy = {}
    for line in Path("/proc/stat").read_text().splitlines():
        fields = line.split()
        if fields[0].startswith("cpu") and fields[0][3:].isdigit():
            ticks = [int(x) for x in fields[1:8]]  # user nice system idle iowait irq softirq
            busy[f"core{fields[0][3:]}"] = (sum(ticks) - ticks[3] - ticks[4]) / CLOCK_TICKS
    return busy


def disturbed(cpu: dict[str, float], seconds: float, core: str | None) -> bool:
    """Whether other processes took more than DISTURBED_SHARE of the gateway's core (`core`, a
    taskset list of one core; None: not pinned, unknown) in a window: its busy time less the
    gateway's own CPU."""
    other = (cpu.get(f"core{core}", math.nan) - cpu["gateway"]) / max(seconds, 1e-9)
    return math.isfinite(other) and other > DISTURBED_SHARE


def ms(seconds: float) -> float:
    return seconds * 1000


def holds(window: dict[str, Any]) -> bool:
    """Whether a capacity window held: gateway moves' p99 under LEVEL_P99_MS, at least
    ACHIEVED_RATIO of the offered moves answered, no table failed."""
    figures = window["kinds"][GATEWAY]
    offered = figures["offered"] * window["seconds"]
    return (figures["actions"] > 0 and ms(figures["p99"]) < LEVEL_P99_MS
            and figures["actions"] >= ACHIEVED_RATIO * offered and figures["tables_failed"] == 0)


def players_per_core(players: float, cpu_share: float) -> float:
    """Players one gateway core would hold at the CPU cost per player measured (0: none measured)."""
    return players / cpu_share if players > 0 and cpu_share > 0 else 0.0


def baseline_p99(window: dict[str, Any]) -> float:
    """The direct players' p99 in a window (how quiet the machine was for it), inf without any."""
    figures = window["kinds"][DIRECT]
    return float(figures["p99"]) if figures["actions"] else math.inf


def step_line(label: str, window: dict[str, Any], cpu: dict[str, float]) -> str:
    seconds = max(window["seconds"], 1e-9)
    figures, direct = window["kinds"][GATEWAY], window["kinds"][DIRECT]
    baseline = (f"direct {direct['players']} players p50 {ms(direct['p50']):.1f} ms p99 {ms(direct['p99']):.1f} ms "
                if direct["actions"] else "")
    return (f"bench-step: {label} {figures['players']} players offered {figures['offered']:.0f}/s "
            f"achieved {figures['actions'] / seconds:.0f}/s p50 {ms(figures['p50']):.1f} ms "
            f"p99 {ms(figures['p99']):.1f} ms {baseline}gateway cpu {cpu['gateway'] / seconds:.3f} "
            f"(waited for a cpu {cpu.get('gateway_waited', 0.0) / seconds:.3f}) cores busy "
            + " ".join(f"{cpu[core] / seconds:.2f}" for core in sorted(cpu) if core.startswith("core")) + " "
            f"session cpu {cpu['session'] / seconds:.3f} driver cpu {window['driver_cpu'] / seconds:.3f} "
            f"driver loop lag p99 {ms(window['driver_lag_p99']):.0f} ms "
            f"healthz p99 {ms(window['health_p99']):.0f} ms tables failed {figures['tables_failed']}")


class Bench:
    """The running processes and the commands the scenarios send."""

    def __init__(self, driver: Child, gateway: Child, session: Child, config: dict[str, Any],
                 gateway_core: str | None = None) -> None:
        self.gateway_core = gateway_core
        self.driver = driver
        self.gateway = gateway
        self.session = session
        self.config = config

    async def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        answer = await self.driver.ask({**self.config, **command})
        if "error" in answer:
            raise RuntimeError(f"the driver answered {answer}")
        return answer

    def cpu(self) -> dict[str, float]:
        return {"gateway": cpu_seconds(self.gateway.process.pid), "session": cpu_seconds(self.session.process.pid),
                "gateway_waited": waited_seconds(self.gateway.process.pid), **cores_busy_seconds()}

    async def window(self, warmup: float, seconds: float) -> tuple[dict[str, Any], dict[str, float]]:
        """A measured window: the driver's figures and each server's CPU seconds during it."""
        self.driver.send({"cmd": "run", "warmup": warmup, "seconds": seconds})
        opened = await self.driver.read()
        if opened.get("event") != "window":
            raise RuntimeError(f"the driver answered {opened}")
        before = self.cpu()
        result = await self.driver.read()
        after = self.cpu()
        return result, {name: after[name] - before[name] for name in before}


async def human_pace(bench: Bench, args: argparse.Namespace) -> None:
    gateway_pid = bench.gateway.process.pid
    await bench.ask({"cmd": "connect", "players": 2})  # a warm-up table: the gateway's first channels
    await bench.ask({"cmd": "seat"})
    rss_start = rss_bytes(gateway_pid)
    opened = await bench.ask({"cmd": "connect", "players": args.players - 2})
    rss_idle = rss_bytes(gateway_pid)
    await bench.ask({"cmd": "direct", "players": args.direct_players})
    seated = await bench.ask({"cmd": "seat"})
    windows = []
    for index in range(max(1, args.human_windows)):
        measured = await bench.window(args.warmup, args.seconds)
        print(step_line(f"human (window {index + 1})", *measured), flush=True)
        windows.append(measured)
    window, cpu = min(windows, key=lambda measured: baseline_p99(measured[0]))
    rss_after = rss_bytes(gateway_pid)
    seconds = max(window["seconds"], 1e-9)
    through, direct = window["kinds"][GATEWAY], window["kinds"][DIRECT]
    sockets = max(1, args.players - 2)
    gateway_share = cpu["gateway"] / seconds
    report("gateway_human_players", through["players"], "players")
    report("gateway_human_direct_players", direct["players"], "players")
    report("gateway_human_connect_seconds", opened["seconds"], "s")
    report("gateway_human_setup_seconds", seated["seconds"], "s")
    report("gateway_human_offered_actions_per_s", through["offered"], "actions/s")
    report("gateway_human_actions_per_s", through["actions"] / seconds, "actions/s")
    report("gateway_direct_actions_per_s", direct["actions"] / seconds, "actions/s")
    report("gateway_move_latency_p50", ms(through["p50"]), "ms")
    report("gateway_move_latency_p99", ms(through["p99"]), "ms")
    report("gateway_direct_latency_p50", ms(direct["p50"]), "ms")
    report("gateway_direct_latency_p99", ms(direct["p99"]), "ms")
    report("gateway_added_latency_p50", ms(through["p50"] - direct["p50"]), "ms")
    report("gateway_added_latency_p99", ms(through["p99"] - direct["p99"]), "ms")
    report("gateway_added_latency_p99_target", ADDED_P99_TARGET_MS, "ms")
    report("gateway_move_p50_vs_direct", through["p50"] / max(direct["p50"], 1e-9), "ratio")
    report("gateway_move_p99_vs_direct", through["p99"] / max(direct["p99"], 1e-9), "ratio")
    report("gateway_memory_per_socket", (rss_after - rss_start) / sockets / 1024, "KiB")
    report("gateway_memory_per_idle_socket", (rss_idle - rss_start) / sockets / 1024, "KiB")
    report("gateway_rss", rss_after / 2**20, "MiB")
    report("gateway_human_cpu_share", gateway_share, "cores")
    report("gateway_cpu_per_1000_actions", cpu["gateway"] / max(1, through["actions"]) * 1000, "s")
    report("gateway_human_players_per_core", players_per_core(through["players"], gateway_share), "players")
    report("gateway_human_session_cpu_share", cpu["session"] / seconds, "cores")
    report("gateway_human_driver_cpu_share", window["driver_cpu"] / seconds, "cores")
    report("gateway_human_driver_loop_lag_p99", ms(window["driver_lag_p99"]), "ms")
    report("gateway_human_healthz_p99", ms(window["health_p99"]), "ms")
    report("gateway_human_tables_failed", through["tables_failed"] + direct["tables_failed"], "tables")
    for line in window["errors"]:
        print(f"bench: error {line}", file=sys.stderr)


async def capacity(args: argparse.Namespace, fresh: Callable[[str], AbstractAsyncContextManager[Bench]]) -> None:
    best: tuple[int, float, float, float] | None = None  # players, p50 ms, p99 ms, gateway CPU share
    failures = disturbed_windows = 0
    disturbed_left = args.disturbed_retries
    for level in sorted(set(args.levels)):
        async with fresh(f"level-{level}") as bench:
            try:
                await bench.ask({"cmd": "connect", "players": level})
                await bench.ask({"cmd": "seat"})
            except RuntimeError as error:  # the gateway refused sockets or tables: the level fails
                print(f"bench-step: level {level} could not be opened: {error}", flush=True)
                break
            failed_windows = attempt = 0
            while True:
                attempt += 1
                window, cpu = await bench.window(args.level_warmup, args.level_seconds)
                other = disturbed(cpu, window["seconds"], bench.gateway_core)
                print(step_line(f"level {level}" + (f" (window {attempt})" if attempt > 1 else ""), window, cpu)
                      + (" DISTURBED: other work on the gateway's core" if other else ""), flush=True)
                failures += window["kinds"][GATEWAY]["tables_failed"]
                for line in window["errors"]:
                    print(f"bench: error {line}", file=sys.stderr)
                if holds(window):
                    break
                if other and disturbed_left > 0:  # not the gateway's failure: measured again, after a pause
                    disturbed_left -= 1
                    disturbed_windows += 1
                    await asyncio.sleep(args.disturbed_pause)
                    continue
                failed_windows += 1
                if failed_windows > max(0, args.retries):
                    break
        if not holds(window):
            break
        figures = window["kinds"][GATEWAY]
        best = (figures["players"], ms(figures["p50"]), ms(figures["p99"]),
                cpu["gateway"] / max(window["seconds"], 1e-9))
    players, p50, p99, share = best if best is not None else (0, math.nan, math.nan, 0.0)
    report("gateway_max_players", players, "players")
    report("gateway_max_players_latency_p50", p50, "ms")
    report("gateway_max_players_latency_p99", p99, "ms")
    report("gateway_max_players_cpu_share", share, "cores")
    report("gateway_players_per_core", players_per_core(players, share), "players")
    report("gateway_players_per_core_target", PLAYERS_PER_CORE_TARGET, "players")
    report("gateway_ramp_tables_failed", failures, "tables")
    report("gateway_ramp_disturbed_windows", disturbed_windows, "windows")


@contextlib.asynccontextmanager
async def running(args: argparse.Namespace, workdir: Path, label: str) -> AsyncIterator[Bench]:
    """A fresh game session (its own schema, dropped after), a gateway in front of it and a driver,
    stopped at the end."""
    places = layout(os.cpu_count() or 1)
    keys = workdir / "keys"
    folder = workdir / label
    folder.mkdir()
    children: list[Child] = []
    schema = None
    try:
        if args.database == "postgresql":
            schema = f"bench_{uuid.uuid4().hex[:12]}"
            await create_schema(args.postgres_url, schema)
        env = {**server_env(folder, args, schema), "BURACO_DEV_KEYS_DIR": str(keys)}
        engine_cwd, _ = engine_place()
        session = Child(pinned([sys.executable, "-m", "services.game_session", "serve"], places.session), env,
                        merge_stderr=True, cwd=engine_cwd)
        children.append(session)
        session_address = str((await session.read("listening"))["address"])
        session.drain()
        gateway = Child(pinned([sys.executable, "-m", "services.gateway"], places.gateway),
                        gateway_env(workdir, session_address), merge_stderr=True)
        children.append(gateway)
        port = int((await gateway.read("listening"))["port"])
        gateway.drain()
        driver = Child(pinned([sys.executable, "-m", "bench.gateway", "drive"], places.driver), base_env(workdir),
                       stdin=True, cwd=engine_cwd)
        children.append(driver)
        yield Bench(driver, gateway, session, {
            "address": session_address, "gateway": f"http://127.0.0.1:{port}", "keys": str(keys),
            "preset": args.preset, "bot": args.bot, "pace": args.pace}, places.gateway)
        await driver.ask({"cmd": "stop"})
    finally:
        for child in reversed(children):
            child.stop()
        if schema is not None:
            await create_schema(args.postgres_url, schema, drop=True)


async def orchestrate(args: argparse.Namespace) -> int:
    # a socket each (gateway and driver) per player: keep clear of the default 1,024 descriptors
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
    places = layout(os.cpu_count() or 1)
    print(f"bench-server, bench-driver: engine {engine_place()[1]}; cores: gateway {places.gateway}, game session "
          f"{places.session}, driver {places.driver}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as folder:
        workdir = Path(folder)
        ensure_dev_keys(workdir / "keys")
        async with running(args, workdir, "human") as bench:
            await human_pace(bench, args)
        await capacity(args, lambda label: running(args, workdir, label))
    return 0


def even(text: str) -> int:
    """A number of players: two to a table."""
    value = int(text)
    if value < 2 or value % 2:
        raise argparse.ArgumentTypeError(f"{text}: an even number of players, at least 2")
    return value


def levels(text: str) -> list[int]:
    return [even(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    def env(name: str, default: Any) -> Any:
        return os.environ.get(f"BURACO_BENCH_{name.upper()}", default)

    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="bench", choices=("bench", "drive"))
    parser.add_argument("--smoke", action="store_true", help="a tiny run for CI (a few players, seconds)")
    parser.add_argument("--players", type=even, default=even(env("players", "1000")),
                        help="players through the gateway at human pace (and the capacity ramp's first level)")
    parser.add_argument("--direct-players", type=even, default=None,
                        help="players on the game session's Play stream directly, the baseline (default: --players)")
    parser.add_argument("--pace", type=float, default=float(env("pace", 2.0)),
                        help="seconds between a table's actions (each of its two players acts about every 2x)")
    parser.add_argument("--warmup", type=float, default=float(env("warmup", 5.0)))
    parser.add_argument("--seconds", type=float, default=float(env("seconds", 20.0)))
    parser.add_argument("--human-windows", type=int, default=int(env("human_windows", 3)),
                        help="human-pace windows; the figures are the quietest's (lowest direct p99)")
    parser.add_argument("--levels", type=levels, default=levels(env("levels", DEFAULT_LEVELS)),
                        help="players through the gateway at each step of the capacity ramp")
    parser.add_argument("--level-warmup", type=float, default=float(env("level_warmup", 3.0)))
    parser.add_argument("--level-seconds", type=float, default=float(env("level_seconds", 10.0)))
    parser.add_argument("--retries", type=int, default=int(env("retries", 1)),
                        help="more windows at a level before it counts as failed")
    parser.add_argument("--disturbed-retries", type=int, default=int(env("disturbed_retries", 6)),
                        help="windows measured again (over the whole ramp) when a level failed while other"
                             " processes took the gateway's core; they do not count against --retries")
    parser.add_argument("--disturbed-pause", type=float, default=float(env("disturbed_pause", 15.0)),
                        help="seconds to wait before measuring a disturbed window again")
    parser.add_argument("--preset", default=env("preset", "aberto"))
    parser.add_argument("--bot", choices=("random", "heuristic"), default=env("bot", "random"))
    parser.add_argument("--database", choices=("postgresql", "sqlite"), default=env("database", "postgresql"))
    parser.add_argument("--postgres-url", default=os.environ.get(
        "BURACO_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.mode == "drive":
        with contextlib.suppress(ImportError):  # as the services do: less CPU per message
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        asyncio.run(drive())
        return 0
    if args.smoke:
        args.players, args.direct_players, args.pace, args.warmup, args.seconds = 6, 6, 0.2, 1.0, 2.0
        args.human_windows, args.disturbed_retries, args.disturbed_pause = 2, 2, 1.0
        args.levels, args.level_warmup, args.level_seconds = [6, 10], 0.5, 1.5
    if args.direct_players is None:
        args.direct_players = int(os.environ.get("BURACO_BENCH_DIRECT_PLAYERS", args.players))
    return asyncio.run(orchestrate(args))


if __name__ == "__main__":
    sys.exit(main())
