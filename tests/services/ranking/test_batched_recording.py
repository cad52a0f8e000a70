"""RecordMatch on PostgreSQL (services/ranking/recorder.py): batches of concurrent calls, and the
records of RecordMatches calls, give, call for call and row for row, what the reference path
(`core.record_match`, SQLite's, one RecordMatch call after the other) gives; and the
recorder's scheduling: no two calls sharing a player, match or request key in one batch or in two
at once, their order kept, at most `in_flight` batches, a failed batch's calls run again alone."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message
from sqlalchemy import func, select

from buraco.v1 import common_pb2, ranking_pb2, ranking_pb2_grpc
from services.common import migrations
from services.common.auth import Kind
from services.common.db import Database, LazyPool
from services.ranking import core, models
from services.ranking.matches import FinishedMatch
from services.ranking.progress import Outcome
from services.ranking.recorder import BATCHES_IN_FLIGHT, PG_SESSION, Call, Recorder, arrays
from services.ranking.service import SPEC
from tests.conftest import DatabaseTarget
from tests.services.harness import bearer, dev_minter, make_config, running
from tests.services.ranking.conftest import NOW, ZONE, duel, match, seat
from tests.services.ranking.rows import dump, nonzero

PRESETS = ("aberto", "fechado")


def _stamp(moment: datetime) -> Any:
    request = ranking_pb2.RecordMatchRequest()
    request.end_time.FromDatetime(moment)
    return request.end_time


def random_match(rng: random.Random, index: int, players: list[str], now: datetime) -> ranking_pb2.RecordMatchRequest:
    """A match between `players` (2 or 4) with what varies in real ones: practice, annulment, a shared
    address, abandonment, a bot in a seat, express or points, an end time within 40 days."""
    size = len(players)
    annulled = rng.random() < 0.05
    winner = rng.randrange(2)
    seated = list(enumerate(players))
    if size == 4 and rng.random() < 0.1:
        seated = seated[:3]  # a bot in the last seat: recorded, never rated
    participants = []
    for position, player in seated:
        if annulled:
            outcome = common_pb2.OUTCOME_VOID
        elif rng.random() < 0.1:
            outcome = common_pb2.OUTCOME_ABANDONED
        else:
            outcome = common_pb2.OUTCOME_WON if position % 2 == winner else common_pb2.OUTCOME_LOST
        address = "203.0.113.1" if rng.random() < 0.05 else f"10.0.{index % 250}.{position + 1}"
        participants.append(
            ranking_pb2.RecordMatchRequest.Participant(
                player=f"players/{player}", seat=position, outcome=outcome, score=rng.randint(-400, 3000),
                canastras=rng.randint(0, 5), client_ip=address,
            )
        )
    express = rng.random() < 0.4
    return ranking_pb2.RecordMatchRequest(
        request_id=f"rq-{index}",
        match_id=f"m-{index}",
        options=common_pb2.TableOptions(
            ruleset=common_pb2.RulesetRef(preset=rng.choice(PRESETS)),
            players=size,
            length=common_pb2.MATCH_LENGTH_EXPRESS if express else common_pb2.MATCH_LENGTH_POINTS,
            target_points=0 if express else 1500,
            mode=common_pb2.TABLE_MODE_COMPETITIVE if rng.random() < 0.85 else common_pb2.TABLE_MODE_PRACTICE,
        ),
        participants=participants,
        annulled=annulled,
        end_time=_stamp(now - timedelta(seconds=rng.randint(60, 40 * 86400))),
    )


def waves(rng: random.Random, count: int, now: datetime) -> list[list[ranking_pb2.RecordMatchRequest]]:
    """Matches in waves; the matches of a wave share no player (so any order of arrival within a
    wave ends in the same state), consecutive waves do."""
    pool = [f"pl{n:02d}" for n in range(40)]
    result: list[list[ranking_pb2.RecordMatchRequest]] = []
    index = 0
    while index < count:
        free = rng.sample(pool, len(pool))
        wave = []
        while len(free) >= 4 and index < count:
            size = rng.choice((2, 4))
            players, free = free[:size], free[size:]
            wave.append(random_match(rng, index, players, now))
            index += 1
        result.append(wave)
    return result


async def _dump(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the recording writes but count rows at zero (they add nothing to a rank), without
    the columns that hold the recording's own clock, and the stored answers."""
    rows = nonzero(await dump(db))
    keys = models.idempotency_keys.c
    async with db.transaction() as session:
        rows["answers"] = sorted(
            tuple(row) for row in (await session.execute(
                select(keys.scope, keys.request_id, keys.method, keys.request_hash, keys.response))).all()
        )
    return rows


async def _outcome(stub: Any, request: ranking_pb2.RecordMatchRequest,
                   metadata: Any) -> Any:
    try:
        return await stub.RecordMatch(request, metadata=metadata, timeout=30)
    except grpc.aio.AioRpcError as error:
        return error.code()


async def _outcomes(stub: Any, requests: list[ranking_pb2.RecordMatchRequest], metadata: Any) -> list[Any]:
    """The requests as the records of one RecordMatches call: each one's answer or status code."""
    reply = await stub.RecordMatches(ranking_pb2.RecordMatchesRequest(records=requests), metadata=metadata, timeout=30)
    return [
        result.recorded if result.HasField("recorded")
        else next(code for code in grpc.StatusCode if code.value[0] == result.error.code)
        for result in reply.results
    ]


async def test_batches_on_postgresql_record_what_the_reference_path_records(
    postgres_url: str, tmp_path: Path
) -> None:
    target = DatabaseTarget("postgresql", postgres_url, f"test_batched_{random.randrange(10**9)}")
    reference_config = make_config("ranking", tmp_path / "reference")
    batched_config = make_config("ranking", tmp_path / "batched", database_url=target.url,
                                 database_schema=target.schema)
    now = datetime.now(UTC)
    rng = random.Random(7)
    matches = waves(rng, 200, now)
    flat = [request for wave in matches for request in wave]
    # Redeliveries (new request ids), retries (same request id), and other content for a known
    # request id or match id: the calls the batches leave to the reference path.
    again = []
    for request in rng.sample(flat, 12):
        copy = ranking_pb2.RecordMatchRequest()
        copy.CopyFrom(request)
        copy.request_id = "again-" + request.request_id
        again.append(copy)
    again += rng.sample(flat, 6)
    other = ranking_pb2.RecordMatchRequest()
    other.CopyFrom(flat[0])
    other.match_id = "m-new"
    again.append(other)
    changed = ranking_pb2.RecordMatchRequest()
    changed.CopyFrom(flat[1])
    changed.request_id = "changed"
    changed.participants[0].canastras += 1
    again.append(changed)
    await _execute_schema(postgres_url, f'CREATE SCHEMA "{target.schema}"')
    try:
        async with running(SPEC, reference_config) as reference, running(SPEC, batched_config) as batched, \
                grpc.aio.insecure_channel(reference.address) as reference_channel, \
                grpc.aio.insecure_channel(batched.address) as batched_channel:
            reference_stub = ranking_pb2_grpc.RankingServiceStub(reference_channel)
            batched_stub = ranking_pb2_grpc.RankingServiceStub(batched_channel)
            reference_auth = bearer(dev_minter(reference_config.dev_keys_dir).mint(Kind.SERVICE, "game-session"))
            batched_auth = bearer(dev_minter(batched_config.dev_keys_dir).mint(Kind.SERVICE, "game-session"))
            for number, wave in enumerate([*matches, again]):
                expected = [await _outcome(reference_stub, request, reference_auth) for request in wave]
                if number % 2 or wave is again:  # the wave as one RecordMatches call
                    got = await _outcomes(batched_stub, wave, batched_auth)
                else:  # the wave as concurrent RecordMatch calls
                    got = await asyncio.gather(*(_outcome(batched_stub, request, batched_auth) for request in wave))
                assert list(got) == expected
            assert any(isinstance(answer, grpc.StatusCode) for answer in got)  # the conflicts were refused
            assert await _dump(batched.db) == await _dump(reference.db)
            async with batched.db.transaction() as session:
                assert await core.audit(session) == []
    finally:
        await _execute_schema(postgres_url, f'DROP SCHEMA IF EXISTS "{target.schema}" CASCADE')


async def _execute_schema(url: str, statement: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


# -- scheduling ---------------------------------------------------------------------------------


class _Scripted(Recorder):
    """A recorder whose transactions are scripted: each batch waits for the test to release it, is
    recorded, and answers with its match ids (or fails, for batches the test marks)."""

    def __init__(self, in_flight: int, batch_size: int) -> None:
        super().__init__(pool=None, zone=None, retention=timedelta(hours=1),  # type: ignore[arg-type]
                         batch_size=batch_size, in_flight=in_flight)
        self.started: list[list[str]] = []
        self.running_now = 0
        self.most_running = 0
        self.release = asyncio.Event()
        self.failing: set[str] = set()

    async def _write(self, batch: list[Call]) -> dict[Call, Message]:
        ids = [call.match.match_id for call in batch]
        self.started.append(ids)
        self.running_now += 1
        self.most_running = max(self.most_running, self.running_now)
        await self.release.wait()
        self.running_now -= 1
        if self.failing & set(ids):
            raise RuntimeError("a database error")
        return {call: ranking_pb2.RecordMatchResponse(results=[
            ranking_pb2.RecordMatchResponse.PlayerResult(player=call.match.match_id)]) for call in batch}


def _response(answer: Message) -> ranking_pb2.RecordMatchResponse:
    assert isinstance(answer, ranking_pb2.RecordMatchResponse)
    return answer


def _call(match: FinishedMatch, request_id: str, slow_calls: list[str]) -> Call:
    async def slow() -> Message:
        slow_calls.append(match.match_id)
        return ranking_pb2.RecordMatchResponse(rated=True)

    return Call("game-session", request_id, "hash", match, datetime.now(UTC),
                respond=lambda _: ranking_pb2.RecordMatchResponse(), slow=slow)


async def test_calls_sharing_a_key_never_share_or_overlap_a_batch_and_keep_their_order() -> None:
    recorder = _Scripted(in_flight=2, batch_size=3)
    slow: list[str] = []
    calls = [
        _call(duel("a1", "ann", "bea"), "r1", slow),   # first batch, alone (the recorder was idle)
        _call(duel("a2", "cid", "dan"), "r2", slow),   # second batch
        _call(duel("a3", "ann", "eve"), "r3", slow),   # shares ann with a1: waits for a1's batch
        _call(duel("a4", "fay", "gus"), "r4", slow),
        _call(duel("a5", "eve", "hal"), "r5", slow),   # shares eve with a3, queued behind it
        _call(duel("a6", "ivy", "jon"), "r6", slow),
        _call(duel("a7", "kim", "lou"), "r7", slow),
    ]
    tasks = [asyncio.create_task(recorder.record(call)) for call in calls]
    for _ in range(5):
        await asyncio.sleep(0)
    assert recorder.started == [["a1"], ["a2"]]  # two in flight; the rest wait
    recorder.release.set()
    answers = [_response(a) for a in await asyncio.gather(*tasks)]
    assert [a.results[0].player for a in answers] == ["a1", "a2", "a3", "a4", "a5", "a6", "a7"]
    assert recorder.most_running <= 2
    position = {match: (n, batch) for n, batch in enumerate(recorder.started) for match in batch}
    for earlier, later in (("a1", "a3"), ("a3", "a5")):
        assert position[earlier][0] < position[later][0]
    assert all(len(batch) <= 3 for batch in recorder.started)
    assert sorted(m for batch in recorder.started for m in batch) == [f"a{n}" for n in range(1, 8)]
    assert slow == []


async def test_calls_submitted_together_fill_batches_together_in_their_order() -> None:
    """The records of one RecordMatches call are queued at once: an idle recorder makes full
    batches of them (not a first few alone), and a record sharing a player with an earlier one of
    the call waits for that one's batch to end."""
    recorder = _Scripted(in_flight=3, batch_size=4)
    recorder.release.set()
    slow: list[str] = []
    calls = [_call(duel(f"c{n}", f"x{n}", f"y{n}"), f"r{n}", slow) for n in range(1, 7)]
    calls.insert(2, _call(duel("c-ann", "x1", "ann"), "r-ann", slow))  # shares x1 with c1
    answers = [_response(a) for a in await asyncio.gather(*recorder.submit(*calls))]
    assert recorder.started == [["c1", "c2", "c3", "c4"], ["c5", "c6"], ["c-ann"]]
    assert [a.results[0].player for a in answers] == [call.match.match_id for call in calls]
    assert slow == []


async def test_a_failed_batch_s_calls_run_again_one_by_one() -> None:
    recorder = _Scripted(in_flight=1, batch_size=8)
    recorder.failing = {"b2"}
    recorder.release.set()
    slow: list[str] = []
    first = asyncio.create_task(recorder.record(_call(duel("b1", "ann", "bea"), "r1", slow)))
    rest = [asyncio.create_task(recorder.record(_call(duel(f"b{n}", f"x{n}", f"y{n}"), f"r{n}", slow)))
            for n in (2, 3, 4)]
    answers = [_response(a) for a in await asyncio.gather(first, *rest)]
    assert recorder.started == [["b1"], ["b2", "b3", "b4"]]
    assert answers[0].results[0].player == "b1"
    assert [a.rated for a in answers[1:]] == [True, True, True]  # the reference path's answers
    assert sorted(slow) == ["b2", "b3", "b4"] and recorder.slow_calls == 3



async def test_two_replicas_batching_on_shared_players_never_deadlock(postgres_url: str) -> None:
    """Two recorders (two replicas) on one database record matches among six players at once:
    their batches wait on each other's player and count rows, and none fails (a deadlock would fail
    a batch and send its calls to the reference path)."""
    schema = f"test_replicas_{random.randrange(10**9)}"
    await _execute_schema(postgres_url, f'CREATE SCHEMA "{schema}"')
    db = Database(postgres_url, schema=schema)
    recorders: list[Recorder] = []
    try:
        await migrations.upgrade("ranking", SPEC.migrations, db)
        recorders = [
            Recorder(LazyPool(db, f"recorder-{n}", max_size=BATCHES_IN_FLIGHT, server_settings=PG_SESSION),
                     zone=ZONE, retention=timedelta(hours=1), batch_size=4)
            for n in range(2)
        ]
        rng = random.Random(11)
        players = [f"q{n}" for n in range(6)]
        slow: list[str] = []
        calls = []
        for index in range(120):
            a, b, c, d = rng.sample(players, 4)
            finished = match(f"r-{index}", seat(a, 0, Outcome.WON, 900), seat(b, 1, Outcome.LOST, 300),
                             seat(c, 2, Outcome.WON, 900), seat(d, 3, Outcome.LOST, 300),
                             end_time=NOW - timedelta(minutes=rng.randrange(0, 3000)))
            calls.append(_call(finished, f"rq-{index}", slow))
        answers = await asyncio.gather(*(recorders[n % 2].record(call) for n, call in enumerate(calls)))
        assert slow == [] and all(not a.rated or len(a.results) == 4 for a in map(_response, answers))
        assert sum(r.recorded for r in recorders) == 120
        async with db.transaction() as session:
            assert await core.audit(session) == []
            total = await session.scalar(select(func.sum(models.players.c.xp)))
        assert total == 120 * (2 * 40 + 2 * 5)
    finally:
        for recorder in recorders:
            await recorder.close()
        await db.dispose()
        await _execute_schema(postgres_url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def test_array_literals_read_back_as_the_values_sent(postgres_url: str) -> None:
    """The recorder's statements take arrays as text literals: every kind of value comes back as
    it was (quotes, backslashes, braces, commas, the word NULL, NULLs, floats, times, bytes)."""
    import asyncpg

    columns: list[tuple[str, list[Any]]] = [
        ("text", ['a"b', "c\\d", "{e,f}", "NULL", " g ", "", "xp|*|day|2026-11-29", None]),
        ("text", ["plain", "p0000001"]),
        ("int8", [0, -5, 2**62, None]),
        ("float8", [25.0, 1 / 3, -0.1, 8.333333333333334]),
        ("bool", [True, False, None]),
        ("timestamptz", [datetime(2026, 11, 29, 15, 0, 0, 123456, tzinfo=UTC), datetime(2000, 1, 1, tzinfo=UTC)]),
        ("bytea", [b"", b'{"rated":true}', b"\x00\\\xff"]),
    ]
    connection = await asyncpg.connect(postgres_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        for kind, values in columns:
            (literal,) = arrays(values)
            assert await connection.fetchval(f"SELECT $1::text::{kind}[]", literal) == values, kind
    finally:
        await connection.close()
