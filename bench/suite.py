"""The whole suite under the journey of real players: ``python -m bench.suite`` (``make bench-suite``).

For each level (a number of players), a fresh suite as ``make run`` starts it (``services.local``:
one process per service, the four the journey calls; on PostgreSQL in a schema of its own, dropped
at the end, or SQLite with ``--database sqlite``), the compiled engine when ``build/native`` is
current (as the image runs it), then ``python -m loadtest`` with the journey scenario: every player
signs up, is funded, queues, confirms, plays one express match at human pace (``--think-time``,
mean seconds before each game action), sees the pot settled to the chip and reads the leaderboard.
The players start evenly over ``--ramp`` seconds, so that all of them play at once for most of the run.
Each player acts on its table's ``Play`` stream, as the gateway does for every browser it holds a
socket for (``--stream changes``: unary action calls beside ``SubscribeChanges`` instead).

Prints one figure per line as ``bench: NAME VALUE UNIT``, per level: the RPC calls per second, the
worst p99 over every RPC (and which RPC it is, on a ``worst:`` line; every RPC's on ``rpc:`` lines;
a stream's is the time to its first message), the errors, the journeys
completed, each process's CPU share in cores (every service, PostgreSQL's processes, the driver);
the services' own measure of the same calls (bench/service_latency.py: on ``service:`` lines, each
unary call's and move's p99 as a histogram bucket bound and its share over the ``--p99-ms`` bound;
the worst of each, and the worst event loop lag, as figures);
and last ``journey_players_within_p99`` (the largest level with every RPC's p99 under ``--p99-ms``
and no error; 0 when none).

The services keep their production rate limits (a player at human pace stays far under them), except
without think time (``--smoke``), where they are lifted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import service_latency
from bench.game_sessions import create_schema, engine_place
from loadtest.smoke import JOURNEY_SERVICES, LocalSuite
from loadtest.sweep import ALL, Level, level_of, process_meters, suite_processes
from services.local import PROCESSES

ROOT = Path(__file__).resolve().parents[1]


def report(name: str, value: float, unit: str) -> None:
    print(f"bench: {name} {value:.6g} {unit}", flush=True)


def loadtest_command(args: argparse.Namespace, suite: LocalSuite, players: int, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "loadtest", "--scenario", "journey", "--targets", suite.targets(),
        "--token-key", str(suite.token_key()),
        "--players", str(players), "--journeys", "1", "--ramp", str(args.ramp),
        "--think-time", str(args.think_time),
        "--processes", str(args.processes), "--seats", str(args.seats), "--out", str(out),
        "--wait-timeout", str(args.wait_timeout), *(["--play-stream"] if args.stream == "play" else []),
    ]


def worst_rpc(report_json: dict[str, Any]) -> tuple[str, float]:
    rows = [r for r in report_json["rows"] if r["kind"] == "rpc" and r["p99_ms"] is not None]
    if not rows:
        return "-", float("nan")
    row = max(rows, key=lambda r: r["p99_ms"])
    return row["name"], float(row["p99_ms"])


def run_level(args: argparse.Namespace, players: int, workdir: Path, schema: str | None) -> Level | None:
    place, _ = engine_place()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if args.think_time == 0:
        # players without think time call far faster than a person: lift the per-player limit
        env.update(BURACO_RATE_LIMIT_PER_SECOND="100000", BURACO_RATE_LIMIT_BURST="100000")
    if args.database == "postgres":
        assert schema is not None
        env["BURACO_DATABASE_URL"] = args.postgres_url
        env["BURACO_DATABASE_SCHEMA"] = schema
    suite = LocalSuite(workdir / "suite", args.port_base, args.metrics_base, env, cwd=place, only=JOURNEY_SERVICES)
    try:
        if not suite.wait_ready(args.start_timeout):
            sys.stderr.write("".join(suite.log))
            print(f"bench.suite: the suite did not start for {players} players", file=sys.stderr)
            return None
        meters = process_meters(suite_processes(suite.process.pid), postgres=args.database == "postgres")
        before = {name: meter() for name, meter in meters.items()}
        started = time.monotonic()
        out = workdir / f"report-{players}"
        finished = subprocess.run(loadtest_command(args, suite, players, out), cwd=place, env=env,
                                  capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        shares = {name: (meter() - before[name]) / wall for name, meter in meters.items()}
        metrics_ports = {name: args.metrics_base + PROCESSES.index(name) for name in JOURNEY_SERVICES}
        measured = service_latency.scrape(metrics_ports)
    finally:
        suite.stop()
    path = out / "report.json"
    if finished.returncode == 2 or not path.is_file():
        sys.stderr.write(finished.stdout[-3000:] + finished.stderr[-3000:])
        print(f"bench.suite: the load test at {players} players failed to run", file=sys.stderr)
        return None
    document = json.loads(path.read_text())
    level = level_of(players, document, ALL, args.p99_ms)
    counters = document["summary"]["counters"]
    name, p99 = worst_rpc(document)
    prefix = f"journey_{players}"
    report(f"{prefix}_calls_per_s", level.calls_per_s, "calls/s")
    report(f"{prefix}_worst_p99", p99, "ms")
    print(f"worst: {prefix} {name} p99 {p99:.1f} ms", flush=True)
    for row in sorted(document["rows"], key=lambda r: r["name"]):
        if row["kind"] == "rpc" and row["p99_ms"] is not None:
            print(f"rpc: {prefix} {row['name']} calls {row['calls']} p50 {row['p50_ms']:.1f} ms "
                  f"p99 {row['p99_ms']:.1f} ms", flush=True)
    report_service_side(prefix, measured, args.p99_ms)
    report(f"{prefix}_errors", float(document["summary"]["rpc_errors"]), "calls")
    for row in document["rows"]:
        if row["errors"]:
            print(f"errors: {prefix} {row['kind']} {row['name']} {row['errors_by_code']}", flush=True)
    report(f"{prefix}_journeys_completed", float(counters.get("journeys_completed", 0)), "journeys")
    report(f"{prefix}_journeys_failed", float(counters.get("journeys_failed", 0)), "journeys")
    for process, share in shares.items():
        report(f"{prefix}_cpu_{process}", share, "cores")
    report(f"{prefix}_cpu_driver", float(counters.get("driver_cpu_ms", 0)) / 1000 / wall, "cores")
    report(f"{prefix}_driver_cpu_per_call", float(document["summary"]["driver_cpu_us_per_call"]), "us")
    if finished.returncode != 0:
        sys.stderr.write(finished.stdout[-1500:])
    return level


def report_service_side(prefix: str, measured: list[service_latency.Histogram], p99_ms: float) -> None:
    """The services' own view of the same calls (bench/service_latency.py): each unary call's and
    move's p99 as the bucket bound it falls under and its share of calls over the bound (at the
    first bucket bound from `p99_ms` up), on `service:` lines; the worst of each as figures, and
    the worst event loop's p99 lag."""
    calls = service_latency.calls(measured)
    bounds = sorted({bound for h in calls for bound in h.buckets})
    bound = next((b for b in bounds if b >= p99_ms / 1000), math.inf)
    worst_p99, worst_share = 0.0, 0.0
    for histogram in sorted(calls, key=lambda h: (h.service, h.name)):
        p99 = histogram.quantile_bound(0.99)
        share = histogram.share_over(bound) if math.isfinite(bound) else 0.0
        worst_p99, worst_share = max(worst_p99, p99), max(worst_share, share)
        print(f"service: {prefix} {histogram.name} calls {histogram.count:.0f} p99 under {p99 * 1000:g} ms "
              f"over {bound * 1000:g} ms {share * 100:.2f} %", flush=True)
    report(f"{prefix}_service_worst_p99_bound", worst_p99 * 1000, "ms")
    report(f"{prefix}_service_worst_share_over_bound", worst_share * 100, "%")
    lag = max((h.quantile_bound(0.99) for h in service_latency.loops(measured)), default=math.nan)
    report(f"{prefix}_service_loop_lag_worst_p99_bound", lag * 1000, "ms")


async def make_schema(url: str, drop: str | None = None) -> str:
    if drop is not None:
        await create_schema(url, drop, drop=True)
        return drop
    schema = f"bench_suite_{uuid.uuid4().hex[:10]}"
    await create_schema(url, schema)
    return schema


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.suite", description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1000,2000", help="player counts, one fresh suite each (default 1000,2000)")
    parser.add_argument("--ramp", type=float, default=120.0, help="seconds over which the players start")
    parser.add_argument("--think-time", type=float, default=1.0, help="mean seconds before each game action")
    parser.add_argument("--wait-timeout", type=float, default=120.0, help="longest wait for a match or a settlement")
    parser.add_argument("--processes", type=int, default=2, help="driver processes")
    parser.add_argument("--seats", type=int, default=2, choices=(2, 4), help="players per table")
    parser.add_argument("--stream", choices=("play", "changes"), default="play",
                        help="players act on their Play stream, as the gateway does for every browser (default), "
                        "or by unary calls beside SubscribeChanges")
    parser.add_argument("--p99-ms", type=float, default=100.0, help="the bound on every RPC's p99")
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--postgres-url", default=os.environ.get(
        "BURACO_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"))
    # below Linux's ephemeral range (32768-60999), as loadtest.smoke: no outgoing connection holds them
    parser.add_argument("--port-base", type=int, default=27051, help="the suite's first port")
    parser.add_argument("--metrics-base", type=int, default=9401, help="the suite's first metrics port")
    parser.add_argument("--start-timeout", type=float, default=120.0)
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny run that checks the bench works: 4 players, no think time, SQLite")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.levels, args.ramp, args.think_time, args.processes = "4", 0.0, 0.0, 1
        args.database = "sqlite"
    try:
        levels = [int(x) for x in args.levels.split(",") if x.strip()]
    except ValueError:
        print("bench.suite: --levels: whole numbers separated by commas", file=sys.stderr)
        return 2
    _, engine = engine_place()
    print(f"bench.suite: engine {engine}, database {args.database}, think time {args.think_time} s, "
          f"ramp {args.ramp} s, {args.processes} driver process(es), actions on {args.stream}", flush=True)
    best = 0
    for players in levels:
        with tempfile.TemporaryDirectory(prefix="bench-suite-") as folder:
            schema = asyncio.run(make_schema(args.postgres_url)) if args.database == "postgres" else None
            try:
                level = run_level(args, players, Path(folder), schema)
            finally:
                if schema is not None:
                    asyncio.run(make_schema(args.postgres_url, drop=schema))
        if level is None:
            return 1
        if level.within:
            best = max(best, players)
    report("journey_players_within_p99", float(best), "players")
    return 0


if __name__ == "__main__":
    sys.exit(main())
