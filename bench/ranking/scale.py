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
import statistics
import tempfile
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
from services.common.config import Config
from services.common.db import Database
from services.common.server import Server
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


def record_requests(ids: list[str], count: int, now: datetime) -> list[ranking_pb2.RecordMatchRequest]:
    rng = random.Random(61)
    presets = ["aberto", "fechado", "buraco_2005"]
    requests = []
    for index in range(count):
        size = 4 if index % 3 == 0 else 2
        seated = rng.sample(ids, size)
        winner = rng.randrange(2)
        express = rng.random() < 0.3
        requests.append(
            ranking_pb2.RecordMatchRequest(
                request_id=f"bench-{index}",
                match_id=f"bench-{index}",
                options=common_pb2.TableOptions(
                    ruleset=common_pb2.RulesetRef(preset=rng.choice(presets)),
                    players=size,
                    length=common_pb2.MATCH_LENGTH_EXPRESS if express else common_pb2.MATCH_LENGTH_POINTS,
                    target_points=0 if express else 2000,
                    mode=common_pb2.TABLE_MODE_COMPETITIVE if rng.random() < 0.9 else common_pb2.TABLE_MODE_PRACTICE,
                    bet_chips=50,
                ),
                participants=[
                    ranking_pb2.RecordMatchRequest.Participant(
                        player=f"players/{player}",
                        seat=seat,
                        outcome=common_pb2.OUTCOME_WON if seat % 2 == winner else common_pb2.OUTCOME_LOST,
                        score=rng.randint(-300, 3000),
                        canastras=rng.randint(0, 6),
                        client_ip=f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                    )
                    for seat, player in enumerate(seated)
                ],
                end_time=_stamp(now - timedelta(seconds=count - index)),
            )
        )
    return requests


async def bench_recording(url: str, schema: str, ids: list[str], count: int, now: datetime) -> None:
    keys = Path(tempfile.mkdtemp(prefix="bench-ranking-keys-"))
    private, _ = ensure_dev_keys(keys)
    config = Config(
        service="ranking",
        port=0,
        metrics_enabled=False,
        database_url=url,
        database_schema=schema,
        migrate_on_start=False,
        dev_keys_dir=keys,
        rate_limit_per_second=1e6,
        rate_limit_burst=1_000_000,
        service_rate_limit_per_second=1e7,
    )
    server = Server(SPEC, config)
    await server.start()
    minter = Minter(load_private_key(private), audience="buraco")
    metadata = (("authorization", f"Bearer {minter.mint(Kind.SERVICE, 'game-session')}"),)
    requests = record_requests(ids, count, now)
    concurrency = 16
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = ranking_pb2_grpc.RankingServiceStub(channel)

            async def drain(calls: list[Callable[[], Awaitable[Any]]]) -> float:
                queue = list(reversed(calls))

                async def worker() -> None:
                    while queue:
                        await queue.pop()()

                started = time.perf_counter()
                await asyncio.gather(*(worker() for _ in range(concurrency)))
                return time.perf_counter() - started

            profiles = [ranking_pb2.GetPlayerRequest(name=f"players/{p}") for p in random.Random(62).sample(ids, count)]
            baseline = await drain(
                [functools.partial(stub.GetPlayer, r, metadata=metadata, timeout=60) for r in profiles]
            )
            elapsed = await drain(
                [functools.partial(stub.RecordMatch, r, metadata=metadata, timeout=60) for r in requests]
            )
            emit("record_match_per_s", count / elapsed, "matches/s", 1)
            emit("get_player_per_s_baseline", count / baseline, "calls/s", 1)
            emit("record_match_ratio_to_get_player", (count / elapsed) / (count / baseline), "ratio")
            again = await drain(
                [
                    functools.partial(stub.RecordMatch, replace_id(r), metadata=metadata, timeout=60)
                    for r in requests[:300]
                ]
            )
            emit("record_match_replayed_per_s", 300 / again, "matches/s", 1)
    finally:
        await server.stop(0)
    # The recorded matches moved players on the loaded boards: ranks still equal the plain count.
    db = Database(url, schema=schema)
    try:
        touched = [p.player.split("/")[1] for r in requests[:10] for p in r.participants]
        async with db.transaction() as session:
            on_xp = [p for p in touched if await leaderboards.entry(session, XP_BOARD, p) is not None]
        await check_ranks(db, XP_BOARD, on_xp)
    finally:
        await db.dispose()


def replace_id(request: ranking_pb2.RecordMatchRequest) -> ranking_pb2.RecordMatchRequest:
    """The same match under another request id: an outbox redelivery, answered from the match row."""
    copy = ranking_pb2.RecordMatchRequest()
    copy.CopyFrom(request)
    copy.request_id = "again-" + request.request_id
    return copy


async def bench_database(url: str, players: int, record: int) -> None:
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
        await bench_reads(db, dsn, schema, ids)
        await bench_recording(url, schema, ids, record, now)
    finally:
        await db.dispose()
        connection = await asyncpg.connect(dsn)
        try:
            await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await connection.close()
