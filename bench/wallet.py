"""`make bench-wallet`: hold-and-settle cycles of 4-player matches through the real gRPC server.

For each database (SQLite in a temporary folder; PostgreSQL at BURACO_BENCH_POSTGRES_URL, default
`postgresql://postgres@127.0.0.1:5432/test`, in a schema of its own dropped afterwards) it starts
`python -m services.wallet` as a real process, opens the players' accounts, then with 50
concurrent clients (each with 8 players of its own; every match also credits the one house
account, the hot row):

1. baseline: the plain unary rate of the same server (`grpc.health.v1.Health/Check`, no database);
2. saturation: every client runs cycles back to back (HoldBets of 4 players, then Settle): the
   highest rate, with the p50/p99 of a whole cycle and of single calls;
3. target load: the clients together start 300 cycles per second (open loop, each client on its
   own schedule): the rate sustained and the p99 of a cycle, the figure the target is about
   (PostgreSQL: at least 300 cycles/s with p99 under 100 ms);
4. the ledger's audit on the result.

Each figure is printed as `bench: NAME VALUE UNIT`.

    python -m bench.wallet [--seconds 10] [--clients 50] [--databases sqlite,postgresql]
"""

from __future__ import annotations

from services.common.transport import use_suite_transport

use_suite_transport()  # first: grpc reads its transport once, when imported (services/common/transport.py)
# ruff: noqa: E402  (the imports below come after that call on purpose)

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from buraco.v1 import common_pb2, wallet_pb2, wallet_pb2_grpc
from services.common.auth import Kind, Minter, ensure_dev_keys, load_private_key
from services.common.db import Database
from services.common.measure import cpu_seconds, percentile
from services.wallet.service import run_audit

ROOT = Path(__file__).resolve().parents[1]
PLAYERS_PER_CLIENT = 8
STAKE = 10
TARGET_CYCLES = 300.0
TARGET_P99_MS = 100.0


def report(name: str, value: float, unit: str) -> None:
    print(f"bench: {name} {value:.6g} {unit}", flush=True)


def cpu_seconds_of(pids: list[int]) -> float:
    """User + system CPU time of processes (0 for any that is gone)."""
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue
    return total


async def backend_pids(postgres_url: str, started_after: float) -> list[int]:
    """The PostgreSQL backends of the wallet's pool (application_name `buraco-wallet`) that
    connected during this run."""
    connection = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        rows = await connection.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'buraco-wallet'"
            " AND extract(epoch FROM backend_start) >= $1",
            started_after,
        )
        return [row["pid"] for row in rows]
    finally:
        await connection.close()


@dataclass
class Served:
    process: subprocess.Popen[str]
    address: str
    database: Database
    cleanup: Callable[[], Awaitable[None]]


async def serve(kind: str, workdir: Path, postgres_url: str) -> Served:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BURACO_ENV": "local",
        "BURACO_PORT": "0",
        "BURACO_HEALTH_PORT": "0",
        "BURACO_METRICS_ENABLED": "false",
        "BURACO_DEV_KEYS_DIR": str(workdir / "keys"),
        "BURACO_SERVICE_RATE_LIMIT_PER_SECOND": "1000000",
        "BURACO_WALLET_STARTING_GRANT_CHIPS": "1000000",
    }
    schema = None
    if kind == "sqlite":
        url = f"sqlite+aiosqlite:///{workdir / 'wallet.db'}"
    else:
        url = postgres_url
        schema = f"bench_{uuid.uuid4().hex[:12]}"
        env["BURACO_DATABASE_SCHEMA"] = schema
    env["BURACO_DATABASE_URL"] = url
    process = subprocess.Popen(
        [sys.executable, "-m", "services.wallet"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    address = ""
    loop = asyncio.get_running_loop()
    while not address:
        line = await loop.run_in_executor(None, process.stdout.readline)
        if not line:
            raise RuntimeError(f"the wallet exited ({process.wait()}) before listening")
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("message") == "listening":
            address = str(entry["address"])
    # Keep draining its output so the process never blocks on a full pipe.
    loop.run_in_executor(None, lambda: [None for _ in process.stdout or ()])
    database = Database(url, schema=schema)

    async def cleanup() -> None:
        process.send_signal(signal.SIGTERM)
        await loop.run_in_executor(None, process.wait)
        await database.dispose()
        if schema is not None:
            connection = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://"))
            await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            await connection.close()

    return Served(process, address, database, cleanup)


@dataclass
class Samples:
    cycles: list[float] = field(default_factory=list)
    calls: list[float] = field(default_factory=list)
    errors: int = 0


class Tokens(NamedTuple):
    """The identities the clients call as, those of the services whose calls they stand in for:
    the wallet takes each call that moves chips from those services only (docs/contracts.md, "Who
    may call what"); and an admin's, to open the players' accounts before the run."""

    holder: tuple[tuple[str, str], ...]  # matchmaking: holds stakes
    settler: tuple[tuple[str, str], ...]  # the game-session service: settles matches
    opener: tuple[tuple[str, str], ...]  # an admin: opens the players' accounts (no service may)


class Client:
    """One of the concurrent clients: its own players, its own matches."""

    def __init__(
        self, index: int, stub: wallet_pb2_grpc.WalletServiceAsyncStub, tokens: Tokens
    ) -> None:
        self.index = index
        self.stub = stub
        self.tokens = tokens
        self.players = [f"b{index}x{k}" for k in range(PLAYERS_PER_CLIENT)]
        self.rng = random.Random(index)
        self.matches = 0

    async def open_accounts(self) -> None:
        for name in self.players:
            request = wallet_pb2.CreateAccountRequest(request_id=f"open-{name}", player=f"players/{name}")
            try:
                await self.stub.CreateAccount(request, metadata=self.tokens.opener)
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.ALREADY_EXISTS:
                    raise

    async def cycle(self, run: str, samples: Samples) -> None:
        self.matches += 1
        match = f"{run}-c{self.index}-{self.matches}"
        seated = self.rng.sample(self.players, 4)
        started = time.perf_counter()
        try:
            await self.stub.HoldBets(
                wallet_pb2.HoldBetsRequest(
                    request_id=f"{match}-hold",
                    match_id=match,
                    stakes=[wallet_pb2.Stake(player=f"players/{p}", amount_chips=STAKE) for p in seated],
                ),
                metadata=self.tokens.holder,
            )
            held = time.perf_counter()
            side = self.rng.randint(0, 1)
            await self.stub.Settle(
                wallet_pb2.SettleRequest(
                    request_id=f"{match}-settle",
                    match_id=match,
                    first_seat=self.rng.randint(0, 3),
                    outcomes=[
                        common_pb2.PlayerOutcome(
                            player=f"players/{p}",
                            seat=seat,
                            outcome=common_pb2.OUTCOME_WON if seat % 2 == side else common_pb2.OUTCOME_LOST,
                        )
                        for seat, p in enumerate(seated)
                    ],
                ),
                metadata=self.tokens.settler,
            )
        except grpc.aio.AioRpcError as error:
            samples.errors += 1
            print(f"bench: error {error.code().name}: {error.details()}", file=sys.stderr)
            return
        done = time.perf_counter()
        samples.calls += [held - started, done - held]
        samples.cycles.append(done - started)


async def saturate(clients: list[Client], run: str, seconds: float) -> tuple[float, Samples]:
    samples = Samples()
    deadline = time.perf_counter() + seconds

    async def loop(client: Client) -> int:
        count = 0
        while time.perf_counter() < deadline:
            await client.cycle(run, samples)
            count += 1
        return count

    started = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in clients))
    elapsed = time.perf_counter() - started
    return len(samples.cycles) / elapsed, samples


async def paced(clients: list[Client], run: str, seconds: float, rate: float) -> tuple[float, Samples]:
    """Open loop: each client starts a cycle every len(clients)/rate seconds (random phase),
    without waiting for its previous one, so a slow server shows as latency, not a lower rate."""
    samples = Samples()
    interval = len(clients) / rate
    tasks: list[asyncio.Task[None]] = []
    started = time.perf_counter()

    async def schedule(client: Client) -> None:
        next_start = started + client.rng.uniform(0, interval)
        while next_start < started + seconds:
            await asyncio.sleep(max(0.0, next_start - time.perf_counter()))
            tasks.append(asyncio.ensure_future(client.cycle(run, samples)))
            next_start += interval

    await asyncio.gather(*(schedule(c) for c in clients))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    return len(samples.cycles) / elapsed, samples


async def health_rate(address: str, concurrency: int, seconds: float) -> float:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        deadline = time.perf_counter() + seconds
        count = 0

        async def loop() -> None:
            nonlocal count
            while time.perf_counter() < deadline:
                await stub.Check(health_pb2.HealthCheckRequest())
                count += 1

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        return count / (time.perf_counter() - started)


async def bench(kind: str, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder)
        begun = time.time()
        served = await serve(kind, workdir, args.postgres_url)
        figures: dict[str, float] = {}
        try:
            private, _ = ensure_dev_keys(workdir / "keys")
            minter = Minter(load_private_key(private), audience="buraco")
            tokens = Tokens(*(
                (("authorization", f"Bearer {minter.mint(role, name, ttl=3600)}"),)
                for role, name in ((Kind.SERVICE, "matchmaking"), (Kind.SERVICE, "game-session"), (Kind.ADMIN, "bench"))
            ))
            async with grpc.aio.insecure_channel(served.address) as channel:
                stub: wallet_pb2_grpc.WalletServiceAsyncStub = wallet_pb2_grpc.WalletServiceStub(channel)
                clients = [Client(i, stub, tokens) for i in range(args.clients)]
                await asyncio.gather(*(c.open_accounts() for c in clients))
                name = f"wallet_{kind}"
                baseline = await health_rate(served.address, args.clients, min(3.0, args.seconds))
                report(f"{name}_health_check_baseline", baseline, "calls/s")
                await saturate(clients, "warm", 2.0)
                backends = await backend_pids(args.postgres_url, begun) if kind == "postgresql" else []
                wallet_cpu, database_cpu, client_cpu = (
                    cpu_seconds_of([served.process.pid]),
                    cpu_seconds_of(backends),
                    time.process_time(),
                )
                rate, samples = await saturate(clients, "max", args.seconds)
                cycles = max(1, len(samples.cycles))
                wallet_cpu = (cpu_seconds_of([served.process.pid]) - wallet_cpu) / cycles * 1000
                database_cpu = (cpu_seconds_of(backends) - database_cpu) / cycles * 1000
                client_cpu = (time.process_time() - client_cpu) / cycles * 1000
                report(f"{name}_max_cycles_per_s", rate, "cycles/s")
                report(f"{name}_max_cycle_p50", percentile(samples.cycles, 0.5) * 1000, "ms")
                report(f"{name}_max_cycle_p99", percentile(samples.cycles, 0.99) * 1000, "ms")
                report(f"{name}_max_call_p99", percentile(samples.calls, 0.99) * 1000, "ms")
                report(f"{name}_calls_per_s_vs_health_check", 2 * rate / baseline, "ratio")
                # What a cycle costs, whatever else the machine is doing: CPU time of the wallet
                # process, of its PostgreSQL backends, and of this client; and the cycles per
                # second one core would do for the server side (wallet + database).
                report(f"{name}_wallet_cpu_per_cycle", wallet_cpu, "ms")
                if kind == "postgresql":
                    report(f"{name}_postgres_cpu_per_cycle", database_cpu, "ms")
                report(f"{name}_client_cpu_per_cycle", client_cpu, "ms")
                report(f"{name}_server_cycles_per_core_s", 1000 / max(1e-9, wallet_cpu + database_cpu), "cycles/s")
                target = min(args.target, rate * 1.5)
                paced_rate, paced_samples = await paced(clients, "paced", args.seconds, target)
                report(f"{name}_paced_offered", target, "cycles/s")
                report(f"{name}_paced_cycles_per_s", paced_rate, "cycles/s")
                report(f"{name}_paced_cycle_p50", percentile(paced_samples.cycles, 0.5) * 1000, "ms")
                report(f"{name}_paced_cycle_p99", percentile(paced_samples.cycles, 0.99) * 1000, "ms")
                report(f"{name}_paced_call_p99", percentile(paced_samples.calls, 0.99) * 1000, "ms")
                report(f"{name}_errors", samples.errors + paced_samples.errors, "calls")
                figures = {
                    "max": rate,
                    "paced": paced_rate,
                    "paced_p99": percentile(paced_samples.cycles, 0.99) * 1000,
                    "offered": target,
                }
            audit = await run_audit(served.database)
            report(f"{name}_audit_ok", 1.0 if audit.ok else 0.0, "bool")
            report(f"{name}_transfers", audit.transfers, "rows")
        finally:
            await served.cleanup()
        return figures


async def main(args: argparse.Namespace) -> int:
    results = {}
    for kind in args.databases.split(","):
        results[kind] = await bench(kind, args)
    if "postgresql" in results:
        pg = results["postgresql"]
        met = pg["offered"] >= args.target and pg["paced"] >= 0.97 * args.target and pg["paced_p99"] < TARGET_P99_MS
        print(
            f"target (PostgreSQL: {args.target:.0f} cycles/s with p99 < {TARGET_P99_MS:.0f} ms): "
            f"{'met' if met else 'NOT met'} ({pg['paced']:.0f} cycles/s sustained, p99 {pg['paced_p99']:.1f} ms;"
            f" {pg['max']:.0f} cycles/s at saturation)",
            flush=True,
        )
    return 0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.wallet")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured phase")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--target", type=float, default=TARGET_CYCLES, help="cycles/s offered in the paced phase")
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("BURACO_BENCH_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"),
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(parse())))
