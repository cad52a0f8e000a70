"""Part 2 of the ranking benchmark: the database at scale, on PostgreSQL: leaderboard reads and
RecordMatch at 1,000,000 players (bench/ranking/__init__.py describes it)."""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy import text

from bench.ranking import emit
from buraco.v1 import common_pb2, ranking_pb2, ranking_pb2_grpc
from services.common import migrations
from services.common.auth import Kind, Minter, ensure_dev_keys, load_private_key
from services.common.db import Database
from services.common.measure import cpu_seconds
from services.ranking import leaderboards, models, ratings
from services.ranking.leaderboards import EntryChange, Position
from services.ranking.periods import SLOT_MICROSECONDS
from services.ranking.progress import level_for
from services.ranking.service import SPEC


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


XP_BOARD = "xp|*|all|-"
RATING_BOARD = "r2|aberto|all|-"
ROOT = Path(__file__).resolve().parents[2]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Synthetic:
    """One loaded player: a career of `matches` matches with `wins` of them won."""

    player: str
    matches: int
    wins: int
    xp: int
    mu: float
    sigma: float
    achieved_us: int


def synthetic_players(count: int, now: datetime, seed: int = 6) -> Iterator[Synthetic]:
    rng = random.Random(seed)
    now_us = leaderboards.micros(now)
    three_years = 3 * 365 * 86400 * 1_000_000
    for index in range(count):
        matches = int(rng.lognormvariate(2.5, 1.3)) + 1  # median about 13; a long tail of regulars
        skill = rng.uniform(0.2, 0.8)
        wins = sum(rng.random() < skill for _ in range(min(matches, 60)))
        if matches > 60:
            wins = round(wins * matches / 60)
        express_wins = wins * 3 // 10
        xp = 40 * (wins - express_wins) + 20 * express_wins + 5 * (matches - wins)
        sigma = max(0.9, ratings.DEFAULT_SIGMA / math.sqrt(1 + matches / 4))
        mu = rng.gauss(25 + 12 * (skill - 0.5), 2.0)
        yield Synthetic(f"p{index:07d}", matches, wins, xp, mu, sigma, now_us - rng.randint(0, three_years))


async def load(db: Database, dsn: str, schema: str, count: int, now: datetime) -> list[str]:
    """COPY `count` players, their ratings and two all-time leaderboards; returns the player ids."""
    people = list(synthetic_players(count, now))
    connection = await asyncpg.connect(dsn)
    try:
        await connection.copy_records_to_table(
            models.players.name,
            schema_name=schema,
            columns=[c.name for c in models.players.columns],
            records=(
                (
                    p.player,
                    p.xp,
                    level_for(p.xp),
                    p.matches,
                    p.wins,
                    p.matches - p.wins,
                    0,
                    p.matches // 3,
                    900 * p.matches,
                    0,
                    now,
                )
                for p in people
            ),
        )
        await connection.copy_records_to_table(
            models.ratings.name,
            schema_name=schema,
            columns=[c.name for c in models.ratings.columns],
            records=((p.player, "aberto", 2, p.mu, p.sigma, 0, now) for p in people),
        )
        entries = [(XP_BOARD, Position(p.xp, p.achieved_us, p.player)) for p in people] + [
            (RATING_BOARD, Position(leaderboards.rating_score(ratings.ordinal(p.mu, p.sigma)), p.achieved_us, p.player))
            for p in people
        ]
        await connection.copy_records_to_table(
            models.board_entries.name,
            schema_name=schema,
            columns=["board", "player", "order_score", "achieved_us"],
            records=((board, pos.player, -pos.score, pos.achieved_us) for board, pos in entries),
        )
        counts = leaderboards.count_deltas(EntryChange(board, pos.player, None, pos) for board, pos in entries)
        await connection.copy_records_to_table(
            models.board_counts.name,
            schema_name=schema,
            columns=["board", "level", "key", "slot", "count"],
            records=((b, level, key, slot, n) for (b, level, key, slot), n in counts.items()),
        )
        await connection.execute(f'ANALYZE "{schema}".ranking_board_entries, "{schema}".ranking_board_counts')
        await connection.execute(f'ANALYZE "{schema}".ranking_players, "{schema}".ranking_ratings')
    finally:
        await connection.close()
    return [p.player for p in people]


async def timed(runs: int, call: Callable[[int], Awaitable[Any]]) -> list[float]:
    """Milliseconds of each of `runs` calls."""
    times: list[float] = []
    for index in range(runs):
        started = time.perf_counter()
        await call(index)
        times.append((time.perf_counter() - started) * 1000)
    return times


async def plain_rank(db: Database, board: str, player: str) -> int:
    """The baseline: count the entries ahead in the index."""
    from sqlalchemy import func, select, tuple_

    e = models.board_entries.c
    async with db.transaction() as session:
        own = await leaderboards.entry(session, board, player)
        assert own is not None
        ahead = await session.scalar(
            select(func.count())
            .select_from(models.board_entries)
            .where(
                e.board == board,
                tuple_(e.order_score, e.achieved_us, e.player) < tuple_(-own.score, own.achieved_us, own.player),
            )
        )
    return 1 + int(ahead or 0)


async def measured(samples: dict[str, list[float]], name: str, call: Awaitable[Any]) -> Any:
    """Await `call`, adding its milliseconds to `samples[name]`."""
    started = time.perf_counter()
    value = await call
    samples.setdefault(name, []).append((time.perf_counter() - started) * 1000)
    return value


def positional(sql: str, names: list[str]) -> str:
    """`:name` parameters as asyncpg's `$n`."""
    for index, name in enumerate(names, start=1):
        sql = re.sub(rf":{name}\b", f"${index}", sql)
    return sql


async def bench_reads(db: Database, dsn: str, schema: str, ids: list[str]) -> None:
    """Interleaved, so that the machine's noise falls on every figure alike: per round a `SELECT 1`
    through the same path (the noise floor), a rank through the service's code and as bare SQL,
    and every third round a top-100 (both ways too) and a window around a player."""
    rng = random.Random(60)
    connection = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        top_sql = await connection.prepare(
            "SELECT order_score, achieved_us, player FROM ranking_board_entries WHERE board = $1 "
            "ORDER BY order_score, achieved_us, player LIMIT 100"
        )
        rank_sql = await connection.prepare(
            positional(leaderboards._RANK_OF_ENTRY.text, ["board", "player", "width", "slot_length"])
        )
        for label, board in (("xp", XP_BOARD), ("rating", RATING_BOARD)):
            slot_length = SLOT_MICROSECONDS[leaderboards.period_of(board)]
            samples: dict[str, list[float]] = {}
            measure = functools.partial(measured, samples)

            async def in_transaction(work: Callable[[Any], Awaitable[Any]]) -> Any:
                async with db.transaction() as session:
                    return await work(session)

            for round_ in range(2050):
                player = rng.choice(ids)
                select_one = in_transaction(lambda session: session.execute(text("SELECT 1")))
                await measure("select1", select_one)
                ranked = await measure(
                    "rank", in_transaction(functools.partial(leaderboards.leaderboard_rank, board=board, player=player))
                )
                row = await measure(
                    "rank_sql", rank_sql.fetchrow(board, player, leaderboards.BUCKET_WIDTH, slot_length)
                )
                assert row is not None and int(row["rank"]) == ranked.rank
                if round_ % 3 == 0:
                    page = await measure(
                        "top100",
                        in_transaction(
                            functools.partial(leaderboards.leaderboard_page, board=board, after=None, limit=100)
                        ),
                    )
                    assert len(page[0]) == 100
                    await measure("top100_sql", top_sql.fetch(board))
                    window = await measure(
                        "around",
                        in_transaction(
                            functools.partial(leaderboards.neighbours, board=board, player=player, above=5, below=5)
                        ),
                    )
                    assert len(window) >= 6
                if round_ == 49:  # the first 50 rounds warm the caches
                    samples.clear()
            # The database's own execution time (EXPLAIN ANALYZE), free of the client's scheduling.
            for _ in range(300):
                for name, sql, arguments in (
                    ("rank_pg_execution", rank_sql, (board, rng.choice(ids), leaderboards.BUCKET_WIDTH, slot_length)),
                    ("top100_pg_execution", top_sql, (board,)),
                ):
                    plan = await connection.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql.get_query()}", *arguments)
                    samples.setdefault(name, []).append(float(json.loads(plan)[0]["Execution Time"]))
            for name in (
                "top100",
                "rank",
                "around",
                "top100_sql",
                "rank_sql",
                "top100_pg_execution",
                "rank_pg_execution",
                "select1",
            ):
                emit(f"leaderboard_{label}_{name}_p50", statistics.median(samples[name]), "ms")
                emit(f"leaderboard_{label}_{name}_p99", percentile(samples[name], 0.99), "ms")
            sample = rng.sample(ids, 25)
            plain_ms = await timed(25, functools.partial(plain_sample, db, board, sample))
            emit(f"leaderboard_{label}_rank_plain_count_p50", statistics.median(plain_ms), "ms")
            emit(
                f"leaderboard_{label}_rank_speedup_vs_plain_count",
                statistics.median(plain_ms) / statistics.median(samples["rank"]),
                "ratio",
                1,
            )
            await check_ranks(db, board, sample)
    finally:
        await connection.close()


async def plain_sample(db: Database, board: str, players: list[str], index: int) -> int:
    return await plain_rank(db, board, players[index])


async def check_ranks(db: Database, board: str, players: list[str]) -> None:
    for player in players:
        async with db.transaction() as session:
            counted = (await leaderboards.leaderboard_rank(session, board, player)).rank
        plain = await plain_rank(db, board, player)
        if counted != plain:
            raise AssertionError(f"{board} {player}: counted rank {counted}, plain count {plain}")


def _stamp(moment: datetime) -> Timestamp:
    value = Timestamp()
    value.FromDatetime(moment)
    return value


def record_requests(ids: list[str], count: int, now: datetime, prefix: str) -> list[ranking_pb2.RecordMatchRequest]:
    """`count` competitive 4-player matches between random players (each seat its own address, so
    every match is rated and writes every leaderboard: the most a match does), ending in the last
    `count` seconds."""
    rng = random.Random(61)
    presets = ["aberto", "fechado", "buraco_2005"]
    requests = []
    for index in range(count):
        seated = rng.sample(ids, 4)
        winner = rng.randrange(2)
        express = rng.random() < 0.3
        requests.append(
            ranking_pb2.RecordMatchRequest(
                request_id=f"{prefix}-{index}",
                match_id=f"{prefix}-{index}",
                options=common_pb2.TableOptions(
                    ruleset=common_pb2.RulesetRef(preset=rng.choice(presets)),
                    players=4,
                    length=common_pb2.MATCH_LENGTH_EXPRESS if express else common_pb2.MATCH_LENGTH_POINTS,
                    target_points=0 if express else 2000,
                    mode=common_pb2.TABLE_MODE_COMPETITIVE,
                    bet_chips=50,
                ),
                participants=[
                    ranking_pb2.RecordMatchRequest.Participant(
                        player=f"players/{player}",
                        seat=seat,
                        outcome=common_pb2.OUTCOME_WON if seat % 2 == winner else common_pb2.OUTCOME_LOST,
                        score=rng.randint(-300, 3000),
                        canastras=rng.randint(0, 6),
                        client_ip=f"10.{rng.randrange(256)}.{rng.randrange(256)}.{seat + 1}",
                    )
                    for seat, player in enumerate(seated)
                ],
                end_time=_stamp(now - timedelta(seconds=count - index)),
            )
        )
    return requests


@dataclass
class Served:
    """The ranking service in a process of its own (`bench.ranking.served`): its address, and the
    SQL it sent so far (`sql_counts()`)."""

    process: subprocess.Popen[str]
    address: str
    counts: asyncio.Queue[dict[str, int]]

    async def sql_counts(self) -> dict[str, int]:
        self.process.send_signal(signal.SIGUSR1)
        return await asyncio.wait_for(self.counts.get(), 30)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid)

    def system_seconds(self) -> float:
        """Its CPU time in the kernel (sockets, mostly)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[12]) / os.sysconf("SC_CLK_TCK")


async def serve(url: str, schema: str, keys: Path) -> Served:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BURACO_ENV": "local",
        "BURACO_PORT": "0",
        "BURACO_HEALTH_PORT": "0",
        "BURACO_METRICS_ENABLED": "false",
        "BURACO_MIGRATE_ON_START": "false",
        "BURACO_DEV_KEYS_DIR": str(keys),
        "BURACO_DATABASE_URL": url,
        "BURACO_DATABASE_SCHEMA": schema,
        "BURACO_RATE_LIMIT_PER_SECOND": "1000000",
        "BURACO_RATE_LIMIT_BURST": "1000000",
        "BURACO_SERVICE_RATE_LIMIT_PER_SECOND": "10000000",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.ranking.served"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    loop = asyncio.get_running_loop()
    counts: asyncio.Queue[dict[str, int]] = asyncio.Queue()
    listening: asyncio.Future[str] = loop.create_future()

    def read() -> None:  # a thread: the server's output, until it exits
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("sql-counts "):
                loop.call_soon_threadsafe(counts.put_nowait, json.loads(line.split(" ", 1)[1]))
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("message") == "listening" and not listening.done():
                loop.call_soon_threadsafe(listening.set_result, str(entry["address"]))
            elif isinstance(entry, dict) and entry.get("level") in ("ERROR", "CRITICAL"):
                print(f"# server: {line.strip()[:300]}", flush=True)
        if not listening.done():
            loop.call_soon_threadsafe(listening.set_exception, RuntimeError(f"the server exited ({process.wait()})"))

    threading.Thread(target=read, daemon=True).start()
    address = await asyncio.wait_for(listening, 120)
    return Served(process, address, counts)


async def drain(calls: list[Callable[[], Awaitable[Any]]], concurrency: int) -> tuple[float, list[float]]:
    """Run `calls` with `concurrency` callers: elapsed seconds, and each call's milliseconds."""
    queue = list(reversed(calls))
    latencies: list[float] = []

    async def worker() -> None:
        while queue:
            call = queue.pop()
            started = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies


async def paced(calls: list[Callable[[], Awaitable[Any]]], rate: float) -> list[float]:
    """Start `calls` at `rate` per second (open loop, whatever the answers' pace); each call's
    milliseconds from its scheduled start, so a late start counts as waiting."""
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    latencies: list[float] = []

    async def one(index: int, call: Callable[[], Awaitable[Any]]) -> None:
        due = start + index / rate
        await asyncio.sleep(max(0.0, due - loop.time()))
        await call()
        latencies.append((loop.time() - due) * 1000)

    await asyncio.gather(*(one(i, call) for i, call in enumerate(calls)))
    return latencies


async def postgres_backends(dsn: str, pid: int) -> list[int]:
    """The PostgreSQL backends serving process `pid` (its connections carry its pid in their name)."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1", f"%-{pid}"
        )
    finally:
        await connection.close()
    return [int(r["pid"]) for r in rows]


def cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except OSError:
            continue
    return total


async def bench_recording(
    url: str, schema: str, ids: list[str], count: int, now: datetime, *, paced_rate: float = 50.0,
    paced_count: int = 500, batch_records: int = 50, batch_callers: int = 4
) -> None:
    """RecordMatch of 4-player matches through gRPC against the service in its own process, 16
    callers; GetPlayer in the same process and run as the baseline. Printed: the rates, RecordMatch
    p50/p99, the server's CPU per match (its process's user + system time over the phase, client
    excluded) and the matches per second one core of it would serve, PostgreSQL's CPU per match
    (the server's backends), and the SQL round trips and statements per match; then `paced_count`
    matches started at `paced_rate` per second (open loop): their p50/p99."""
    keys = Path(tempfile.mkdtemp(prefix="bench-ranking-keys-"))
    private, _ = ensure_dev_keys(keys)
    dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    served = await serve(url, schema, keys)
    minter = Minter(load_private_key(private), audience="buraco")
    metadata = (("authorization", f"Bearer {minter.mint(Kind.SERVICE, 'game-session')}"),)
    concurrency = 16
    warm = record_requests(ids, 100, now, "warm")
    requests = record_requests(ids[::-1], count, now, "bench")
    try:
        async with grpc.aio.insecure_channel(served.address) as channel:
            stub = ranking_pb2_grpc.RankingServiceStub(channel)
            # Warm-up (connections opened, statements prepared), not measured.
            await drain(
                [functools.partial(stub.RecordMatch, r, metadata=metadata, timeout=60) for r in warm], concurrency
            )
            backends = await postgres_backends(dsn, served.process.pid)

            profiles = [ranking_pb2.GetPlayerRequest(name=f"players/{p}") for p in random.Random(62).sample(ids, count)]
            cpu = served.cpu_seconds()
            baseline, _ = await drain(
                [functools.partial(stub.GetPlayer, r, metadata=metadata, timeout=60) for r in profiles], concurrency
            )
            get_player_cpu = (served.cpu_seconds() - cpu) / count

            before = await served.sql_counts()
            cpu, database_cpu, system = served.cpu_seconds(), cpu_of(backends), served.system_seconds()
            elapsed, latencies = await drain(
                [functools.partial(stub.RecordMatch, r, metadata=metadata, timeout=60) for r in requests], concurrency
            )
            server_cpu = (served.cpu_seconds() - cpu) / count
            system = (served.system_seconds() - system) / count
            database_cpu = (cpu_of(backends) - database_cpu) / count
            after = await served.sql_counts()
            emit("record_match_4p_per_s", count / elapsed, "matches/s", 1)
            emit("record_match_4p_p50", statistics.median(latencies), "ms", 1)
            emit("record_match_4p_p99", percentile(latencies, 0.99), "ms", 1)
            emit("record_match_4p_server_cpu_per_match", server_cpu * 1000, "ms")
            emit("record_match_4p_server_system_cpu_per_match", system * 1000, "ms")
            emit("record_match_4p_per_core_s", 1 / server_cpu, "matches/s", 0)
            emit("record_match_4p_postgres_cpu_per_match", database_cpu * 1000, "ms")
            for name in ("round_trips", "statements"):
                emit(f"record_match_4p_sql_{name}_per_match", (after.get(name, 0) - before.get(name, 0)) / count, name)
            emit("get_player_per_s_baseline", count / baseline, "calls/s", 1)
            emit("get_player_server_cpu_per_call", get_player_cpu * 1000, "ms")
            emit("record_match_ratio_to_get_player", (count / elapsed) / (count / baseline), "ratio")
            # Open loop at a steady rate (below saturation on a shared machine): the latency a caller
            # sees when the service is not the queue.
            steady = record_requests(ids[1::2], paced_count, now, "paced")
            steady_ms = await paced(
                [functools.partial(stub.RecordMatch, r, metadata=metadata, timeout=60) for r in steady], paced_rate
            )
            emit("record_match_4p_paced_rate", paced_rate, "matches/s", 0)
            emit("record_match_4p_paced_p50", statistics.median(steady_ms), "ms", 1)
            emit("record_match_4p_paced_p99", percentile(steady_ms, 0.99), "ms", 1)
            again, _ = await drain(
                [
                    functools.partial(stub.RecordMatch, replace_id(r), metadata=metadata, timeout=60)
                    for r in requests[:300]
                ],
                concurrency,
            )
            emit("record_match_replayed_per_s", min(300, count) / again, "matches/s", 1)
            await bench_batches(served, stub, metadata, backends, ids, count, now, paced_rate=paced_rate,
                                paced_count=paced_count, records=batch_records, callers=batch_callers)
    finally:
        served.process.send_signal(signal.SIGTERM)
        await asyncio.get_running_loop().run_in_executor(None, served.process.wait)
    # The recorded matches moved players on the loaded boards: ranks still equal the plain count.
    db = Database(url, schema=schema)
    try:
        touched = [p.player.split("/")[1] for r in requests[:10] for p in r.participants]
        async with db.transaction() as session:
            on_xp = [p for p in touched if await leaderboards.entry(session, XP_BOARD, p) is not None]
        await check_ranks(db, XP_BOARD, on_xp)
    finally:
        await db.dispose()


async def bench_batches(
    served: Served, stub: Any, metadata: Any, backends: list[int], ids: list[str], count: int, now: datetime, *,
    paced_rate: float, paced_count: int, records: int, callers: int
) -> None:
    """The same kind of matches through RecordMatches, `records` per call (as the game-session
    outbox delivers them), `callers` calls at once: matches per second, each call's p50/p99, the
    server's CPU per match and the matches per second one core of it would serve, PostgreSQL's CPU
    per match, SQL per match; then `paced_count` matches at `paced_rate` per second in calls of
    `paced_rate / 10` records started every 100 ms (open loop): each call's p50/p99 from its start."""
    requests = record_requests(ids[::3], count, now, "batch")
    calls = [
        ranking_pb2.RecordMatchesRequest(records=requests[start:start + records])
        for start in range(0, len(requests), records)
    ]

    async def call(request: ranking_pb2.RecordMatchesRequest) -> None:
        reply = await stub.RecordMatches(request, metadata=metadata, timeout=60)
        assert all(result.HasField("recorded") for result in reply.results), reply

    before = await served.sql_counts()
    cpu, database_cpu = served.cpu_seconds(), cpu_of(backends)
    elapsed, latencies = await drain([functools.partial(call, r) for r in calls], callers)
    server_cpu = (served.cpu_seconds() - cpu) / count
    database_cpu = (cpu_of(backends) - database_cpu) / count
    after = await served.sql_counts()
    emit("record_matches_4p_records_per_call", records, "records", 0)
    emit("record_matches_4p_per_s", count / elapsed, "matches/s", 1)
    emit("record_matches_4p_call_p50", statistics.median(latencies), "ms", 1)
    emit("record_matches_4p_call_p99", percentile(latencies, 0.99), "ms", 1)
    emit("record_matches_4p_server_cpu_per_match", server_cpu * 1000, "ms")
    emit("record_matches_4p_per_core_s", 1 / server_cpu, "matches/s", 0)
    emit("record_matches_4p_postgres_cpu_per_match", database_cpu * 1000, "ms")
    for name in ("round_trips", "statements"):
        emit(f"record_matches_4p_sql_{name}_per_match", (after.get(name, 0) - before.get(name, 0)) / count, name)
    per_call = max(1, round(paced_rate / 10))
    steady = record_requests(ids[2::3], paced_count, now, "batch-paced")
    steady_calls = [
        ranking_pb2.RecordMatchesRequest(records=steady[start:start + per_call])
        for start in range(0, len(steady), per_call)
    ]
    steady_ms = await paced([functools.partial(call, r) for r in steady_calls], paced_rate / per_call)
    emit("record_matches_4p_paced_rate", paced_rate, "matches/s", 0)
    emit("record_matches_4p_paced_records_per_call", per_call, "records", 0)
    emit("record_matches_4p_paced_p50", statistics.median(steady_ms), "ms", 1)
    emit("record_matches_4p_paced_p99", percentile(steady_ms, 0.99), "ms", 1)


def replace_id(request: ranking_pb2.RecordMatchRequest) -> ranking_pb2.RecordMatchRequest:
    """The same match under another request id: an outbox redelivery, answered from the match row."""
    copy = ranking_pb2.RecordMatchRequest()
    copy.CopyFrom(request)
    copy.request_id = "again-" + request.request_id
    return copy


async def bench_database(
    url: str, players: int, record: int, *, reads: bool = True, paced_rate: float = 50.0, batch_records: int = 50,
    batch_callers: int = 4
) -> None:
    schema = f"bench_ranking_{os.getpid()}"
    dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    db = Database(url, schema=schema)
    now = datetime.now(UTC)
    try:
        await migrations.upgrade("ranking", SPEC.migrations, db)
        started = time.perf_counter()
        ids = await load(db, dsn, schema, players, now)
        emit("load_players", len(ids), "players", 0)
        emit("load_seconds", time.perf_counter() - started, "s", 1)
        if reads:
            await bench_reads(db, dsn, schema, ids)
        await bench_recording(url, schema, ids, record, now, paced_rate=paced_rate, batch_records=batch_records,
                              batch_callers=batch_callers)
    finally:
        await db.dispose()
        connection = await asyncpg.connect(dsn)
        try:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await connection.close()
