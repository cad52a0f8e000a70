"""EraseLoadTestRun on the ranking service (services/ranking/erasure.py), through gRPC on SQLite and
PostgreSQL: admins only, checked and idempotent; exactly the run's players (`lt1-{n}`, never
`lt1-5-3`, `lt1-5a` or `lt10-1`) and their matches erased; every other player's profile, XP feed,
ratings, leaderboard entries, ranks, pages and neighbours afterwards exactly those of a database
where only the other players' matches were recorded; a match shared with the run refused with
nothing changed; a dry run that counts what the erasure then erases. On PostgreSQL, the batched
recorder recording other players while an erasure holds its locks, and racing erasures: no
deadlock, no failed batch, counts exact."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf.message import Message
from sqlalchemy import func, select

from buraco.v1 import common_pb2, ranking_pb2, ranking_pb2_grpc
from services.common import migrations
from services.common.auth import Kind, Minter
from services.common.db import Database, LazyPool
from services.common.loadtest_runs import is_run_player
from services.common.server import Server
from services.ranking import core, erasure
from services.ranking.erasure import KINDS
from services.ranking.errors import RunNotErasableError
from services.ranking.matches import FinishedMatch
from services.ranking.progress import Outcome
from services.ranking.recorder import BATCHES_IN_FLIGHT, PG_SESSION, Call, Recorder
from services.ranking.service import SPEC
from tests.conftest import DatabaseTarget
from tests.services.harness import bearer, dev_minter, make_config, running
from tests.services.ranking.conftest import NOW, ZONE, match, seat
from tests.services.ranking.conftest import duel as duel_of
from tests.services.ranking.rows import dump, nonzero
from tests.services.ranking.test_api import participant, record_request, stamp

WON, LOST, ABANDONED = common_pb2.OUTCOME_WON, common_pb2.OUTCOME_LOST, common_pb2.OUTCOME_ABANDONED
END = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
RUN = "lt1"
RUN_PLAYERS = ["lt1-1", "lt1-2", "lt1-3", "lt1-4", "lt1-10"]
#: Outside the run: normal players, and ids that start like the run's but are not `lt1-{n}`.
OTHERS = ["alice", "bob", "carol", "dave", "lt1-5-3", "lt1-5a", "lt10-1"]


# -- servers ------------------------------------------------------------------------------------


@dataclass
class Ranking:
    server: Server
    stub: ranking_pb2_grpc.RankingServiceStub
    minter: Minter

    @property
    def db(self) -> Database:
        return self.server.db

    async def call(self, method: str, request: Any, kind: Kind = Kind.ADMIN, name: str = "ops") -> Any:
        metadata = bearer(self.minter.mint(kind, name))
        return await getattr(self.stub, method)(request, metadata=metadata, timeout=30)

    async def status(self, method: str, request: Any, kind: Kind = Kind.ADMIN, name: str = "ops") -> tuple[Any, str]:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await self.call(method, request, kind, name)
        return failure.value.code(), failure.value.details() or ""

    async def record(self, request: ranking_pb2.RecordMatchRequest) -> None:
        await self.call("RecordMatch", request, Kind.SERVICE, "game-session")

    async def erase(self, request_id: str, run: str = RUN, dry_run: bool = False) -> dict[str, int]:
        answer = await self.call(
            "EraseLoadTestRun",
            common_pb2.EraseLoadTestRunRequest(request_id=request_id, run_id=run, dry_run=dry_run),
        )
        assert answer.run_id == run and answer.dry_run == dry_run
        assert [record.kind for record in answer.erased] == list(KINDS)  # every kind, in order
        return {record.kind: record.count for record in answer.erased}


async def _execute(url: str, statement: str) -> None:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1), timeout=5)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@pytest.fixture
def fresh_target(db_target: DatabaseTarget, tmp_path: Path) -> Iterator[DatabaseTarget]:
    """A second database of the same kind: the other players' matches alone, for comparison."""
    if db_target.kind == "sqlite":
        yield DatabaseTarget("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}")
        return
    schema = f"test_fresh_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    asyncio.run(_execute(db_target.url, f'CREATE SCHEMA "{schema}"'))
    try:
        yield DatabaseTarget("postgresql", db_target.url, schema)
    finally:
        asyncio.run(_execute(db_target.url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


@pytest.fixture
async def servers(
    db_target: DatabaseTarget, fresh_target: DatabaseTarget, tmp_path: Path
) -> AsyncIterator[tuple[Ranking, Ranking]]:
    """The ranking service twice: on the test's database, and on a fresh one; audited afterwards."""
    configs = [
        make_config("ranking", tmp_path / name, database_url=target.url, database_schema=target.schema)
        for name, target in (("main", db_target), ("fresh", fresh_target))
    ]
    async with running(SPEC, configs[0]) as first, running(SPEC, configs[1]) as second, \
            grpc.aio.insecure_channel(first.address) as first_channel, \
            grpc.aio.insecure_channel(second.address) as second_channel:
        pair = (
            Ranking(first, ranking_pb2_grpc.RankingServiceStub(first_channel), dev_minter(configs[0].dev_keys_dir)),
            Ranking(second, ranking_pb2_grpc.RankingServiceStub(second_channel), dev_minter(configs[1].dev_keys_dir)),
        )
        yield pair
        for ranking in pair:
            async with ranking.db.transaction() as session:
                assert await core.audit(session) == []


# -- what is recorded ---------------------------------------------------------------------------


def _duel(match_id: str, winner: str, loser: str, when: datetime, **options: Any) -> ranking_pb2.RecordMatchRequest:
    return record_request(
        match_id, participant(winner, 0, WON, "", 1500, 2), participant(loser, 1, LOST, "", 600, 1), end=when, **options
    )


def _four(
    match_id: str, seats: list[tuple[str, Any]], when: datetime, **options: Any
) -> ranking_pb2.RecordMatchRequest:
    return record_request(
        match_id,
        *(participant(player, n, outcome, "", 1200 - 300 * (n % 2), n) for n, (player, outcome) in enumerate(seats)),
        players=4,
        end=when,
        **options,
    )


def scenario() -> list[ranking_pb2.RecordMatchRequest]:
    """The run's matches among the other players' ones, on the same boards, their times
    interleaved (so that ties on XP rank by time across both); every kind of match: points and
    4 players rated, practice, annulled, a shared address, abandonment, a bot's seat, yesterday's."""
    at = [END + timedelta(seconds=n) for n in range(40)]
    yesterday = END - timedelta(days=1)
    return [
        _duel("o1", "alice", "bob", at[0]),
        _duel("lt1-m1", "lt1-1", "lt1-2", at[1]),
        _four("lt1-m2", [("lt1-1", WON), ("lt1-3", LOST), ("lt1-2", WON), ("lt1-4", LOST)], at[2]),
        _duel("o2", "carol", "lt1-5-3", at[3]),
        _duel("lt1-m3", "lt1-10", "lt1-3", at[4], mode=common_pb2.TABLE_MODE_PRACTICE),
        record_request("lt1-m4", participant("lt1-2", 0, common_pb2.OUTCOME_VOID),
                       participant("lt1-4", 1, common_pb2.OUTCOME_VOID), annulled=True, end=at[5]),
        _four("o3", [("alice", WON), ("bob", LOST), ("carol", WON), ("dave", LOST)], at[6]),
        record_request("lt1-m5", participant("lt1-3", 0, WON, "203.0.113.9", 900),
                       participant("lt1-1", 1, LOST, "203.0.113.9", 300), end=at[7]),
        _duel("o4", "lt10-1", "lt1-5a", at[8]),
        _duel("lt1-m6", "lt1-4", "lt1-10", at[9]),
        _duel("o5", "dave", "alice", at[10]),
        record_request("lt1-m7", participant("lt1-1", 0, WON, "", 800), participant("lt1-2", 1, LOST, "", 100),
                       participant("lt1-3", 2, ABANDONED, "", 800), players=4, end=at[11]),  # a bot in seat 3
        _duel("lt1-m8", "lt1-10", "lt1-1", yesterday),  # a day only the run played in
        _four("o6", [("bob", WON), ("lt1-5-3", LOST), ("dave", WON), ("lt1-5a", ABANDONED)], at[12]),
        _duel("lt1-m9", "lt1-2", "lt1-10", at[13]),
        _duel("o7", "lt1-5-3", "lt10-1", at[14]),
    ]


def _others_only(request: ranking_pb2.RecordMatchRequest) -> bool:
    return not any(is_run_player(RUN, p.player.removeprefix("players/")) for p in request.participants)


def run_rows(rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, int]:
    """What the run owns in a dump: each kind's rows of run players; the matches whose every
    participant is one (the player ids in each match's stored result)."""
    column = {"players": 0, "xp_events": 0, "ratings": 0, "rating_history": 0, "leaderboard_entries": 1}
    owned = {kind: sum(is_run_player(RUN, row[index]) for row in rows[kind]) for kind, index in column.items()}
    owned["matches"] = sum(
        all(is_run_player(RUN, r["player"]) for r in json.loads(row[-1])["results"]) for row in rows["matches"]
    )
    return owned


# -- what clients read --------------------------------------------------------------------------


def boards() -> list[ranking_pb2.Leaderboard]:
    """Every leaderboard the scenario writes on: every period of today's matches, and yesterday's
    day and week (yesterday only the run played)."""
    result = []
    every = (ranking_pb2.Leaderboard.PERIOD_ALL_TIME, ranking_pb2.Leaderboard.PERIOD_DAILY,
             ranking_pb2.Leaderboard.PERIOD_WEEKLY, ranking_pb2.Leaderboard.PERIOD_MONTHLY,
             ranking_pb2.Leaderboard.PERIOD_YEARLY)
    for at, periods in ((END, every), (END - timedelta(days=1), every[1:3])):
        for period in periods:
            for scope, preset in ((ranking_pb2.Leaderboard.SCOPE_GLOBAL, ""),
                                  (ranking_pb2.Leaderboard.SCOPE_MODALITY, "aberto")):
                for metric, players in ((ranking_pb2.Leaderboard.METRIC_XP, 0),
                                        (ranking_pb2.Leaderboard.METRIC_RATING, 2),
                                        (ranking_pb2.Leaderboard.METRIC_RATING, 4)):
                    result.append(ranking_pb2.Leaderboard(scope=scope, preset=preset, period=period, metric=metric,
                                                          players=players, at=stamp(at)))
    return result


async def _answer(ranking: Ranking, method: str, request: Any) -> Message | Any:
    """The reply, or the status code of the error."""
    try:
        reply = await ranking.call(method, request, Kind.PLAYER, "alice")
    except grpc.aio.AioRpcError as error:
        return error.code()
    assert isinstance(reply, Message)
    return reply


async def reads(ranking: Ranking, players: list[str]) -> list[Any]:
    """What clients read of `players` and of every board: each board's pages (3 entries a page, so
    page tokens and the ranks of later pages are used), each player's rank and neighbours on it;
    their profiles, XP feeds, ratings and rating histories."""
    seen: list[Any] = []
    for leaderboard in boards():
        token = ""
        while True:
            page = await ranking.call(
                "ListLeaderboardEntries",
                ranking_pb2.ListLeaderboardEntriesRequest(leaderboard=leaderboard, page_size=3, page_token=token),
            )
            seen.append([(e.rank, e.player, e.value, e.achieve_time.ToMicroseconds()) for e in page.entries])
            token = page.next_page_token
            if not token:
                break
        for player in players:
            name = f"players/{player}"
            seen.append(await _answer(ranking, "GetLeaderboardRank",
                                      ranking_pb2.GetLeaderboardRankRequest(leaderboard=leaderboard, player=name)))
            seen.append(await _answer(ranking, "ListLeaderboardNeighbors", ranking_pb2.ListLeaderboardNeighborsRequest(
                leaderboard=leaderboard, player=name, before=2, after=2)))
    for player in players:
        name = f"players/{player}"
        seen.append(await _answer(ranking, "GetPlayer", ranking_pb2.GetPlayerRequest(name=name)))
        seen.append(await ranking.call("ListXpEvents", ranking_pb2.ListXpEventsRequest(parent=name)))
        for size in (2, 4):
            for preset in ("aberto", "*"):
                seen.append(await _answer(ranking, "GetRating",
                                          ranking_pb2.GetRatingRequest(player=name, preset=preset, players=size)))
                seen.append(await _answer(ranking, "ListRatingHistory", ranking_pb2.ListRatingHistoryRequest(
                    player=name, preset=preset, players=size)))
        seen.append(await ranking.call("BatchGetRatings", ranking_pb2.BatchGetRatingsRequest(
            player_names=[name], preset="aberto", players=2)))
    return seen


# -- tests --------------------------------------------------------------------------------------


async def test_the_run_is_erased_as_if_it_had_never_played(servers: tuple[Ranking, Ranking]) -> None:
    ranking, fresh = servers
    matches = scenario()
    for request in matches:
        await ranking.record(request)
        if _others_only(request):
            await fresh.record(request)
    before = await dump(ranking.db)
    owned = run_rows(before)
    assert all(owned[kind] > 0 for kind in KINDS), owned
    assert owned["players"] == len(RUN_PLAYERS) and owned["matches"] == 9

    assert await reads(ranking, OTHERS) != await reads(fresh, OTHERS)  # the run's entries count

    counted = await ranking.erase("dry", dry_run=True)
    assert counted == owned
    assert await dump(ranking.db) == before  # a dry run erases nothing

    erased = await ranking.erase("erase-1")
    assert erased == owned
    after = await dump(ranking.db)
    expected = await dump(fresh.db)
    # Row for row what the other players' matches alone leave; count rows at zero aside (recording
    # keeps those its players' moves leave, the erasure deletes those its removals leave: a zero
    # adds nothing to a rank).
    assert nonzero(after) == nonzero(expected)
    assert run_rows(after) == dict.fromkeys(KINDS, 0)
    assert {row[0] for row in after["players"]} == set(OTHERS)

    # Every other player's ranks, pages, neighbours, profile, feed and ratings: as if the run had
    # never played; the run's players are on no board and read as never recorded.
    assert await reads(ranking, OTHERS) == await reads(fresh, OTHERS)
    assert await reads(ranking, RUN_PLAYERS) == await reads(fresh, RUN_PLAYERS)
    for leaderboard in boards():
        code, _ = await ranking.status("GetLeaderboardRank", ranking_pb2.GetLeaderboardRankRequest(
            leaderboard=leaderboard, player="players/lt1-1"))
        assert code == grpc.StatusCode.NOT_FOUND
    profile = await ranking.call("GetPlayer", ranking_pb2.GetPlayerRequest(name="players/lt1-1"))
    assert profile.xp == 0 and profile.stats.matches == 0

    # The same request again: the first answer; a new one: nothing left to erase.
    assert await ranking.erase("erase-1") == erased
    assert await ranking.erase("erase-2") == dict.fromkeys(KINDS, 0)
    assert await ranking.erase("dry-2", dry_run=True) == dict.fromkeys(KINDS, 0)

    # The service goes on recording for everyone, the run's ids included (a new run of that name).
    await ranking.record(_duel("o8", "bob", "alice", END + timedelta(minutes=5)))
    await fresh.record(_duel("o8", "bob", "alice", END + timedelta(minutes=5)))
    assert await reads(ranking, ["alice", "bob"]) == await reads(fresh, ["alice", "bob"])
    await ranking.record(_duel("lt1-m10", "lt1-1", "lt1-2", END + timedelta(minutes=6)))
    assert (await ranking.call("GetPlayer", ranking_pb2.GetPlayerRequest(name="players/lt1-1"))).xp == 40


async def test_a_match_shared_with_the_run_refuses_the_erasure_and_changes_nothing(
    servers: tuple[Ranking, Ranking],
) -> None:
    ranking, _ = servers
    for request in scenario():
        await ranking.record(request)
    await ranking.record(_duel("mixed-1", "lt1-2", "alice", END + timedelta(minutes=1)))
    await ranking.record(_four("mixed-2", [("lt1-3", WON), ("bob", LOST), ("lt1-4", WON), ("carol", LOST)],
                               END + timedelta(minutes=2)))
    before = await dump(ranking.db)
    for dry_run in (True, False):
        code, details = await ranking.status(
            "EraseLoadTestRun", common_pb2.EraseLoadTestRunRequest(request_id="x", run_id=RUN, dry_run=dry_run)
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert "2 recorded match(es) had players from inside and outside the run" in details, details
        assert "mixed-1, mixed-2" in details
        assert await dump(ranking.db) == before
    # Another run, whose players share nothing with anyone, is erased meanwhile; the refused request
    # id is refused again (a refusal is not stored as an answer).
    await ranking.record(_duel("lt2-m1", "lt2-1", "lt2-2", END))
    erased = await ranking.erase("lt2", run="lt2")
    assert erased == {"players": 2, "xp_events": 2, "ratings": 4, "rating_history": 4,
                      "leaderboard_entries": 40, "matches": 1}
    code, _ = await ranking.status("EraseLoadTestRun", common_pb2.EraseLoadTestRunRequest(request_id="x", run_id=RUN))
    assert code == grpc.StatusCode.FAILED_PRECONDITION


async def test_only_admins_erase_with_a_checked_request(
    servers: tuple[Ranking, Ranking], caplog: pytest.LogCaptureFixture
) -> None:
    ranking, _ = servers
    await ranking.record(_duel("lt1-m1", "lt1-1", "lt1-2", END))
    request = common_pb2.EraseLoadTestRunRequest(request_id="r1", run_id=RUN)
    for kind, name in ((Kind.PLAYER, "lt1-1"), (Kind.SERVICE, "game-session")):
        code, _ = await ranking.status("EraseLoadTestRun", request, kind, name)
        assert code == grpc.StatusCode.PERMISSION_DENIED
    for bad, field in (
        (common_pb2.EraseLoadTestRunRequest(run_id=RUN), "request_id"),
        (common_pb2.EraseLoadTestRunRequest(run_id=RUN, dry_run=True), "request_id"),
        (common_pb2.EraseLoadTestRunRequest(request_id="r0"), "run_id"),
        (common_pb2.EraseLoadTestRunRequest(request_id="r0", run_id="LT1"), "run_id"),
        (common_pb2.EraseLoadTestRunRequest(request_id="r0", run_id="l_1"), "run_id"),
        (common_pb2.EraseLoadTestRunRequest(request_id="r0", run_id="-lt"), "run_id"),
    ):
        code, details = await ranking.status("EraseLoadTestRun", bad)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(field), details
    profile = await ranking.call("GetPlayer", ranking_pb2.GetPlayerRequest(name="players/lt1-1"))
    assert profile.xp == 40  # nothing erased by the refused calls

    with caplog.at_level(logging.INFO, logger="services.ranking.api"):
        first = await ranking.erase("r1")
    assert first["players"] == 2 and first["matches"] == 1
    (line,) = [r for r in caplog.records if r.getMessage() == "load-test run erased"]
    assert line.__dict__["fields"] == {"run_id": RUN, "dry_run": False, "erased": first, "admin": "admins/ops"}
    assert await ranking.erase("r1") == first  # a retry: the first answer
    other = common_pb2.EraseLoadTestRunRequest(request_id="r1", run_id="lt2")
    code, _ = await ranking.status("EraseLoadTestRun", other)
    assert code == grpc.StatusCode.ALREADY_EXISTS


async def test_a_run_player_recorded_after_the_players_were_locked_refuses_the_erasure(db: Database) -> None:
    """The matches are read after the run's players are locked; a match of a run player missing
    from the locked set (their first match committed in between) means the run is still being
    recorded: refused, nothing erased."""
    async with db.transaction() as session:
        await core.record_match(session, duel_of("lt1-m1", "lt1-1", "lt1-2"), zone=ZONE, now=NOW)
    async with db.transaction() as session:
        with pytest.raises(RunNotErasableError, match="1 run player\\(s\\) had their first match recorded"):
            await erasure._run_matches(session, RUN, ["lt1-1"])
        assert await erasure._run_matches(session, RUN, ["lt1-1", "lt1-2"]) == ["lt1-m1"]


# -- concurrency (PostgreSQL: the batched recorder) ---------------------------------------------


def _call(finished: FinishedMatch, request_id: str) -> Call:
    def respond(_: Any) -> Message:
        return ranking_pb2.RecordMatchResponse()

    async def slow() -> Message:
        raise AssertionError(f"{finished.match_id}: a batch failed (a deadlock?) and fell back to one by one")

    return Call("game-session", request_id, finished.content_hash, finished, NOW, respond=respond, slow=slow)


def _matches(rng: random.Random, prefix: str, players: list[str], count: int) -> list[FinishedMatch]:
    """4-player rated matches among `players`, ending within two days of NOW (shared boards)."""
    result = []
    for index in range(count):
        a, b, c, d = rng.sample(players, 4)
        result.append(match(f"{prefix}-{index}", seat(a, 0, Outcome.WON, 900), seat(b, 1, Outcome.LOST, 300),
                            seat(c, 2, Outcome.WON, 900), seat(d, 3, Outcome.LOST, 300),
                            end_time=NOW - timedelta(minutes=rng.randrange(0, 3000))))
    return result


@dataclass
class _Database:
    db: Database
    recorder: Recorder


async def _open(url: str, schema: str) -> _Database:
    await _execute(url, f'CREATE SCHEMA "{schema}"')
    db = Database(url, schema=schema)
    await migrations.upgrade("ranking", SPEC.migrations, db)
    pool = LazyPool(db, f"recorder-{schema}", max_size=BATCHES_IN_FLIGHT, server_settings=PG_SESSION)
    return _Database(db, Recorder(pool, zone=ZONE, retention=timedelta(hours=1), batch_size=4))


async def _close(url: str, opened: list[_Database]) -> None:
    for item in opened:
        await item.recorder.close()
        schema = item.db.schema
        await item.db.dispose()
        await _execute(url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def _record(target: _Database, matches: list[FinishedMatch], tag: str) -> None:
    await asyncio.gather(*(target.recorder.record(_call(m, f"{tag}-{m.match_id}")) for m in matches))


async def _waiting_on(url: str, pid: int) -> int:
    """How many backends wait for a lock that backend `pid` holds."""
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        return int(await connection.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", pid))
    finally:
        await connection.close()


async def test_recording_waits_for_an_erasure_and_counts_stay_exact(postgres_url: str) -> None:
    """An erasure holds the run players' rows and the count rows it moved until it commits: batches
    recording other players on the same boards wait for it (seen in pg_stat_activity), then record;
    no batch fails, and every row is what the other players' matches alone give."""
    tag = uuid.uuid4().hex[:10]
    opened: list[_Database] = []
    try:
        main = await _open(postgres_url, f"test_erase_{tag}")
        opened.append(main)
        fresh = await _open(postgres_url, f"test_erase_fresh_{tag}")
        opened.append(fresh)
        rng = random.Random(5)
        others = [f"p{n}" for n in range(16)]
        run = [f"{RUN}-{n}" for n in range(1, 9)]
        earlier = _matches(rng, "o", others, 30)
        later = _matches(rng, "late", others, 30)
        for target, matches in ((main, [*earlier, *_matches(rng, "lt1-m", run, 30)]), (fresh, earlier)):
            await _record(target, matches, "a")

        async with main.db.write() as session:
            pid = int((await session.execute(select(func.pg_backend_pid()))).scalar_one())
            counts = dict(await erasure.erase_run(session, RUN, dry_run=False))
            assert counts["players"] == len(run) and counts["matches"] == 30
            recording = asyncio.create_task(_record(main, later, "b"))
            # The batches in flight wait for the erasure's count rows (the buckets every entry of
            # these boards is counted in), and the calls behind them queue in the recorder.
            deadline = asyncio.get_running_loop().time() + 30
            while await _waiting_on(postgres_url, pid) < 1:
                assert asyncio.get_running_loop().time() < deadline, "no recording waited for the erasure"
                await asyncio.sleep(0.01)
            assert not recording.done()
        await recording
        await _record(fresh, later, "b")
        assert main.recorder.slow_calls == 0
        async with main.db.transaction() as session:
            assert await core.audit(session) == []
        assert nonzero(await dump(main.db)) == nonzero(await dump(fresh.db))
    finally:
        await _close(postgres_url, opened)


async def test_erasures_racing_recordings_never_deadlock(postgres_url: str) -> None:
    """Three runs erased one after the other while other players' matches (sharing their boards,
    and their count rows) are recorded by two recorders, as two replicas would: every batch and
    every erasure commits, and the state is the other players' matches alone."""
    tag = uuid.uuid4().hex[:10]
    opened: list[_Database] = []
    try:
        main = await _open(postgres_url, f"test_race_{tag}")
        opened.append(main)
        fresh = await _open(postgres_url, f"test_race_fresh_{tag}")
        opened.append(fresh)
        second = _Database(main.db, Recorder(
            LazyPool(main.db, f"recorder-2-{tag}", max_size=BATCHES_IN_FLIGHT, server_settings=PG_SESSION),
            zone=ZONE, retention=timedelta(hours=1), batch_size=4))
        rng = random.Random(9)
        runs = ["lt1", "lt2", "lt3"]
        for name in runs:
            await _record(main, _matches(rng, f"{name}-m", [f"{name}-{n}" for n in range(1, 7)], 25), "a")
        # Each recorder has players of its own (a player's matches are then recorded in one order
        # in both databases), on the same boards.
        groups = [_matches(rng, f"o{n}", [f"p{n}{m}" for m in range(6)], 60) for n in range(2)]

        async def erase_all() -> list[dict[str, int]]:
            done = []
            for name in runs:
                async with main.db.write() as session:
                    done.append(dict(await erasure.erase_run(session, name, dry_run=False)))
            return done

        try:
            erased, _, _ = await asyncio.gather(
                erase_all(), _record(main, groups[0], "b"), _record(second, groups[1], "b"))
        finally:
            await second.recorder.close()
        assert [e["matches"] for e in erased] == [25, 25, 25] and [e["players"] for e in erased] == [6, 6, 6]
        assert main.recorder.slow_calls == 0 and second.recorder.slow_calls == 0
        await _record(fresh, [*groups[0], *groups[1]], "b")
        async with main.db.transaction() as session:
            assert await core.audit(session) == []
        assert nonzero(await dump(main.db)) == nonzero(await dump(fresh.db))
    finally:
        await _close(postgres_url, opened)
