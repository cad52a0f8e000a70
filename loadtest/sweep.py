"""`python -m loadtest.sweep`: the largest load a suite holds within a latency bound.

    python -m loadtest.sweep --levels 8,16,32,64 --service wallet -- --scenario backend --only wallet

Runs `python -m loadtest` once per level (`--players LEVEL` plus the arguments after `--`, each run
writing its reports under --out/LEVEL), and prints one line per level: the calls per second of the
service's RPCs, their worst p99 (the largest p99 over the service's RPCs), the error rate, and
whether the level is within the bound (`--p99-ms`, default 100, and no error). The last line names
the largest level within it. It stops after the first level over the bound (the next ones only
queue more) unless given `--all`. docs/performance.md shows how the figures of this machine were measured with it.

With `--pid PID` (Linux: the service's process) each line also gives the CPU the process used
during the run, in % of one core, and the CPU seconds it spent per player-minute: a figure that,
unlike latency, does not depend on what else the machine runs, from which the players one core
holds follow (`players * 100 / cpu%`, at full use of the core).

The whole suite at once (`--service all`: the bound applies to every RPC of the run):

    python -m loadtest.sweep --service all --suite SUITE_PID --postgres --levels 1000,2000 -- ...

`--suite PID` (the `services.local` process) measures each of its services' processes, named by
their module, and `--pid NAME=PID` any other process; `--postgres` adds PostgreSQL's processes on
this machine as one (the backends alive at the end of the level: CPU of backends that exit during
it is not counted). Each line then ends with every process's share of a core, and the driver's
own (from its report).
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.measure import cpu_seconds

SERVICES = ("matchmaking", "game_session", "wallet", "ranking")
ALL = "all"


def suite_processes(suite_pid: int) -> dict[str, int]:
    """The processes `services.local` started, by service name (`python -m services.NAME`)."""
    out: dict[str, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != suite_pid:
                continue
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        modules = [a.decode() for a in argv if a.startswith(b"services.")]
        if modules:
            out[modules[0].removeprefix("services.")] = int(stat.parent.name)
    return out


def postgres_cpu_seconds() -> float:
    """CPU time so far of every process named `postgres` on this machine (the server and its backends)."""
    total = 0.0
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "postgres":
                total += cpu_seconds(int(comm.parent.name))
        except OSError:
            continue
    return total


def process_meters(pids: dict[str, int], postgres: bool) -> dict[str, Callable[[], float]]:
    """A CPU-seconds reading per measured process, by name."""
    meters: dict[str, Callable[[], float]] = {name: functools.partial(cpu_seconds, pid) for name, pid in pids.items()}
    if postgres:
        meters["postgres"] = postgres_cpu_seconds
    return meters


def parse_pid(text: str) -> tuple[str, int]:
    """`--pid` values: `PID` (named "service") or `NAME=PID`."""
    name, _, pid = text.rpartition("=")
    try:
        return name or "service", int(pid)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--pid {text!r}: expected PID or NAME=PID") from None


@dataclass(frozen=True)
class Level:
    players: int
    calls_per_s: float
    worst_p99_ms: float | None
    error_rate: float
    within: bool


def level_of(players: int, report: dict[str, Any], service: str, p99_ms: float) -> Level:
    """One level's figures for `service` from a run's report.json."""
    prefix = "" if service == ALL else f"{service}."
    rows = [r for r in report["rows"] if r["kind"] == "rpc" and r["name"].startswith(prefix)]
    calls = sum(r["calls"] for r in rows)
    errors = sum(r["errors"] for r in rows)
    p99s = [r["p99_ms"] for r in rows if r["p99_ms"] is not None]
    worst = max(p99s) if p99s else None
    elapsed = float(report["summary"]["elapsed_s"]) or 1.0
    rate = errors / calls if calls else 0.0
    within = calls > 0 and errors == 0 and worst is not None and worst < p99_ms
    return Level(players, round(sum(r["ok"] for r in rows) / elapsed, 1), worst, round(rate, 6), within)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--levels", required=True, help="player counts to try, in order: 8,16,32")
    parser.add_argument(
        "--service", choices=(*SERVICES, ALL), required=True, help="whose RPCs the bound applies to (all: every RPC)"
    )
    parser.add_argument("--p99-ms", type=float, default=100.0, help="the bound on every RPC's p99 (default 100)")
    parser.add_argument("--out", type=Path, default=Path("var/loadtest-sweep"), help="reports folder")
    parser.add_argument("--all", action="store_true", help="run every level, even after one over the bound")
    parser.add_argument(
        "--pid", type=parse_pid, action="append", default=[],
        help="PID or NAME=PID of a process whose CPU use to report (Linux); repeatable",
    )
    parser.add_argument("--suite", type=int, help="the services.local process: report each service's CPU use")
    parser.add_argument("--postgres", action="store_true", help="report PostgreSQL's CPU use (its processes here)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then arguments for python -m loadtest")
    options = parser.parse_args(argv)
    try:
        levels = [int(x) for x in options.levels.split(",") if x.strip()]
    except ValueError:
        parser.error("--levels: whole numbers separated by commas")
    extra = [a for a in options.args if a != "--"]
    pids = dict(options.pid)
    if options.suite:
        pids.update(suite_processes(options.suite))
    meters = process_meters(pids, options.postgres)
    single = len(meters) == 1 and not options.suite and not options.postgres
    best: Level | None = None
    columns = "  cpu%  cpu-s/player-min" if single else "  cpu% of a core per process" if meters else ""
    print(f"{'players':>8} {'calls/s':>9} {'worst p99':>10} {'errors':>8}  within{columns}")
    for players in levels:
        out = options.out / str(players)
        command = [sys.executable, "-m", "loadtest", *extra, "--players", str(players), "--out", str(out)]
        before = {name: meter() for name, meter in meters.items()}
        wall_before = time.monotonic()
        finished = subprocess.run(command, capture_output=True, text=True, check=False)
        wall = time.monotonic() - wall_before
        shares = {name: (meter() - before[name]) / wall for name, meter in meters.items()}
        report_path = out / "report.json"
        if finished.returncode == 2 or not report_path.is_file():
            sys.stderr.write(finished.stdout[-2000:] + finished.stderr[-2000:])
            print(f"loadtest.sweep: the run at {players} players failed", file=sys.stderr)
            return 2
        report = json.loads(report_path.read_text())
        level = level_of(players, report, options.service, options.p99_ms)
        worst = "-" if level.worst_p99_ms is None else f"{level.worst_p99_ms:.1f}ms"
        if single:
            (share,) = shares.values()
            cpu = f"  {share * 100:4.0f}  {share * 60 / players:.4f}"
        else:
            driver_ms = float(report["summary"]["counters"].get("driver_cpu_ms", 0))
            shares["driver"] = driver_ms / 1000 / wall
            cpu = "  " + " ".join(f"{name}={share * 100:.0f}%" for name, share in shares.items())
        print(
            f"{players:>8} {level.calls_per_s:>9} {worst:>10} {level.error_rate * 100:>7.2f}%  "
            f"{'yes' if level.within else 'no':<6}{cpu}",
            flush=True,
        )
        if not level.within:
            if options.all:
                continue
            break
        if best is None or level.players > best.players:
            best = level
    if best is None:
        print(f"loadtest.sweep: {options.service}: no level within p99 < {options.p99_ms:g} ms")
        return 1
    print(f"loadtest.sweep: {options.service}: {best.players} players within p99 < {options.p99_ms:g} ms "
          f"({best.calls_per_s} calls/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
