"""The ranking service through gRPC: who may call what, request checks naming the field, idempotent
recording, addresses never returned nor stored, ratings and leaderboards as clients see them; and a
real process that survives the fuzz harness with its state still consistent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from buraco.v1 import common_pb2, ranking_pb2, ranking_pb2_grpc
from services.common.auth import Identity, Kind, Minter
from services.common.db import Database
from services.ranking import core
from services.ranking.service import SPEC
from tests.conftest import DatabaseTarget
from tests.services.callers import denied
from tests.services.fuzzing import fuzz_service
from tests.services.harness import bearer, dev_minter, health_status, make_config, running, service_process

SERVICE = ranking_pb2.DESCRIPTOR.services_by_name["RankingService"]

WON, LOST, ABANDONED = common_pb2.OUTCOME_WON, common_pb2.OUTCOME_LOST, common_pb2.OUTCOME_ABANDONED
END = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
IP_ALICE, IP_BOB = "203.0.113.77", "2001:db8::4242"


def stamp(moment: datetime) -> Timestamp:
    value = Timestamp()
    value.FromDatetime(moment)
    return value


def participant(player: str, seat: int, outcome: Any, ip: str = "", score: int = 0, canastras: int = 0) -> Any:
    return ranking_pb2.RecordMatchRequest.Participant(
        player=f"players/{player}", seat=seat, outcome=outcome, score=score, canastras=canastras, client_ip=ip
    )


def record_request(
    match_id: str,
    *participants: Any,
    request_id: str | None = None,
    players: int = 2,
    annulled: bool = False,
    mode: Any = common_pb2.TABLE_MODE_COMPETITIVE,
    end: datetime = END,
) -> ranking_pb2.RecordMatchRequest:
    return ranking_pb2.RecordMatchRequest(
        request_id=request_id or f"rq-{match_id}",
        match_id=match_id,
        options=common_pb2.TableOptions(
            ruleset=common_pb2.RulesetRef(preset="aberto"),
            players=players,
            length=common_pb2.MATCH_LENGTH_POINTS,
            target_points=2000,
            mode=mode,
            bet_chips=100,
        ),
        participants=list(participants),
        annulled=annulled,
        end_time=stamp(end),
    )


def duel(match_id: str, winner: str = "alice", loser: str = "bob", **options: Any) -> ranking_pb2.RecordMatchRequest:
    return record_request(
        match_id, participant(winner, 0, WON, IP_ALICE, 1500, 2), participant(loser, 1, LOST, IP_BOB, 600, 1), **options
    )


@dataclass
class Client:
    stub: ranking_pb2_grpc.RankingServiceStub
    minter: Minter

    def as_(self, kind: Kind, name: str) -> tuple[tuple[str, str], ...]:
        return bearer(self.minter.mint(kind, name))

    async def call(self, method: str, request: Any, kind: Kind = Kind.SERVICE, name: str = "game-session") -> Any:
        return await getattr(self.stub, method)(request, metadata=self.as_(kind, name), timeout=20)

    async def status(
        self, method: str, request: Any, kind: Kind = Kind.SERVICE, name: str = "game-session"
    ) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await self.call(method, request, kind, name)
        return failure.value.code(), failure.value.details() or ""


@pytest.fixture
async def client(db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[Client]:
    config = make_config("ranking", tmp_path, database_url=db_target.url, database_schema=db_target.schema)
    async with running(SPEC, config) as server, grpc.aio.insecure_channel(server.address) as channel:
        yield Client(ranking_pb2_grpc.RankingServiceStub(channel), dev_minter(config.dev_keys_dir))
        async with server.db.transaction() as session:
            assert await core.audit(session) == []


async def test_record_match_is_for_services_and_idempotent_on_the_request_and_the_match(client: Client) -> None:
    # Only the game-session service records matches: players, other services and admins are
    # refused, and their calls record nothing (the first recording below starts from zero XP).
    for kind, name in ((Kind.PLAYER, "alice"), (Kind.SERVICE, "matchmaking"), (Kind.SERVICE, "tournament"),
                       (Kind.ADMIN, "ops")):
        assert await client.status("RecordMatch", duel("m1"), kind, name) == denied(
            Identity(kind, name).principal, "RankingService.RecordMatch", "services/game-session")
    first = await client.call("RecordMatch", duel("m1"))
    assert first.rated
    results = [(r.player, r.xp_gained, r.xp_total, r.level, r.level_up) for r in first.results]
    assert results == [("players/alice", 40, 40, 1, False), ("players/bob", 5, 5, 1, False)]
    alice = first.results[0]
    assert (alice.rating_before.mu, alice.rating_before.matches) == (25.0, 0)
    assert alice.rating_after.mu > 25 and alice.rating_after.match_id == "m1" and alice.rating_after.matches == 1
    assert alice.rating_after.ordinal == pytest.approx(alice.rating_after.mu - 3 * alice.rating_after.sigma)
    # The same request again, and the same match under another request id (an outbox redelivery).
    assert await client.call("RecordMatch", duel("m1")) == first
    assert await client.call("RecordMatch", duel("m1", request_id="other-id")) == first
    # Other content: the same request id, or the same match id.
    code, message = await client.status("RecordMatch", duel("m2", request_id="rq-m1"))
    assert code == grpc.StatusCode.ALREADY_EXISTS and "rq-m1" in message
    code, message = await client.status("RecordMatch", duel("m1", winner="bob", loser="alice", request_id="x"))
    assert code == grpc.StatusCode.ALREADY_EXISTS and message.startswith("match_id:")
    profile = await client.call("GetPlayer", ranking_pb2.GetPlayerRequest(name="players/alice"), Kind.PLAYER, "bob")
    assert (profile.xp, profile.level, profile.next_level_xp, profile.stats.matches, profile.stats.canastras) == (
        40,
        1,
        100,
        1,
        2,
    )


async def test_addresses_decide_the_shared_address_rule_and_are_never_returned(
    client: Client, db_target: DatabaseTarget
) -> None:
    shared = record_request(
        "s1", participant("alice", 0, WON, "198.51.100.9"), participant("bob", 1, LOST, "::ffff:198.51.100.9")
    )
    reply = await client.call("RecordMatch", shared)
    assert not reply.rated and [r.xp_gained for r in reply.results] == [0, 0]
    apart = await client.call("RecordMatch", duel("s2"))
    assert apart.rated
    for message in (reply, apart):
        raw = message.SerializeToString()
        assert b"198.51.100.9" not in raw and IP_ALICE.encode() not in raw and IP_BOB.encode() not in raw
    # Nothing about an address reaches the database: not the address, nor a hash of the request with it.
    stored = await _dump(db_target)
    for address in ("198.51.100.9", IP_ALICE, IP_BOB, "2001:db8"):
        assert address not in stored


async def _dump(target: DatabaseTarget) -> str:
    """Every value of every ranking table, as text."""
    from sqlalchemy import select

    from services.ranking import models

    db: Database = target.database()
    try:
        async with db.transaction() as session:
            parts = []
            for table in models.metadata.sorted_tables:
                for row in await session.execute(select(table)):
                    parts.append(repr(tuple(row)))
        return "\n".join(parts)
    finally:
        await db.dispose()


BAD_REQUESTS: list[tuple[str, Any, str]] = [
    ("no request id", ranking_pb2.RecordMatchRequest(), "request_id: required"),
    ("bad match id", record_request("M 1", participant("a", 0, WON)), "match_id:"),
    (
        "unknown preset",
        ranking_pb2.RecordMatchRequest(
            request_id="r", match_id="m", options=common_pb2.TableOptions(ruleset=common_pb2.RulesetRef(preset="poker"))
        ),
        "options.ruleset.preset: unknown preset",
    ),
    ("three seats", record_request("m", participant("a", 0, WON), players=3), "options.players: must be 2 or 4"),
    ("no one", record_request("m"), "participants: at least one"),
    (
        "seat out of range",
        record_request("m", participant("a", 2, WON)),
        "participants[0].seat: must be between 0 and 1",
    ),
    (
        "twice",
        record_request("m", participant("a", 0, WON), participant("a", 1, LOST)),
        "participants[1].player: listed twice",
    ),
    (
        "same seat",
        record_request("m", participant("a", 0, WON), participant("b", 0, LOST)),
        "participants[1].seat: taken",
    ),
    ("no outcome", record_request("m", participant("a", 0, 0)), "participants[0].outcome: required"),
    (
        "two winners",
        record_request("m", participant("a", 0, WON), participant("b", 1, WON)),
        "participants: players of both sides are marked WON",
    ),
    (
        "void unannulled",
        record_request("m", participant("a", 0, common_pb2.OUTCOME_VOID)),
        "participants[0].outcome: VOID only",
    ),
    (
        "won annulled",
        record_request("m", participant("a", 0, WON), annulled=True),
        "participants[0].outcome: an annulled match",
    ),
    (
        "bad address",
        record_request("m", participant("a", 0, WON, "300.1.1.1")),
        "participants[0].client_ip: not an IP address",
    ),
    ("huge score", record_request("m", participant("a", 0, WON, score=10**12)), "participants[0].score:"),
    (
        "future",
        record_request("m", participant("a", 0, WON), end=datetime.now(UTC) + timedelta(hours=1)),
        "end_time: in the future",
    ),
    ("no mode", record_request("m", participant("a", 0, WON), mode=0), "options.mode: required"),
]


@pytest.mark.parametrize(("case", "request_", "message"), BAD_REQUESTS, ids=[c for c, _, _ in BAD_REQUESTS])
async def test_bad_recordings_name_the_field_and_change_nothing(
    client: Client, case: str, request_: Any, message: str
) -> None:
    code, details = await client.status("RecordMatch", request_)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(message), (case, details)
    profile = await client.call("GetPlayer", ranking_pb2.GetPlayerRequest(name="players/a"), Kind.PLAYER, "a")
    assert profile.xp == 0 and profile.stats.matches == 0


async def test_xp_feed_ratings_and_history_as_clients_read_them(client: Client) -> None:
    for i in range(4):
        await client.call("RecordMatch", duel(f"m{i}", end=END + timedelta(minutes=i)))
    feed = ranking_pb2.ListXpEventsRequest(parent="players/alice", page_size=3)
    code, _ = await client.status("ListXpEvents", feed, Kind.PLAYER, "bob")
    assert code == grpc.StatusCode.PERMISSION_DENIED
    page = await client.call("ListXpEvents", feed, Kind.PLAYER, "alice")
    assert [(e.match_id, e.xp_total, e.level, e.level_up) for e in page.events] == [
        ("m3", 160, 2, False),
        ("m2", 120, 2, True),
        ("m1", 80, 1, False),
    ]
    rest = await client.call(
        "ListXpEvents", ranking_pb2.ListXpEventsRequest(parent="players/alice", page_token=page.next_page_token)
    )
    assert [e.match_id for e in rest.events] == ["m0"] and rest.next_page_token == ""
    code, message = await client.status(
        "ListXpEvents", ranking_pb2.ListXpEventsRequest(parent="players/bob", page_token=page.next_page_token)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("page_token:")

    batch = ranking_pb2.BatchGetRatingsRequest(
        player_names=["players/bob", "players/new", "players/alice"], preset="aberto", players=2
    )
    assert await client.status("BatchGetRatings", batch, Kind.PLAYER, "alice") == denied(
        "players/alice", "RankingService.BatchGetRatings", "any service or admins")
    ratings = (await client.call("BatchGetRatings", batch, Kind.SERVICE, "matchmaking")).ratings
    # ratings are public (GetRating): any service, and admins, read them in batches
    for kind, name in ((Kind.SERVICE, "tournament"), (Kind.SERVICE, "game-session"), (Kind.ADMIN, "ops")):
        assert (await client.call("BatchGetRatings", batch, kind, name)).ratings == ratings
    assert [r.player for r in ratings] == ["players/bob", "players/new", "players/alice"]
    assert ratings[2].ordinal > ratings[1].ordinal == 0 > ratings[0].ordinal
    assert ratings[1].matches == 0 and not ratings[1].HasField("update_time")
    assert ratings[2].update_time.ToDatetime(tzinfo=UTC) == END + timedelta(minutes=3)
    code, message = await client.status(
        "BatchGetRatings",
        ranking_pb2.BatchGetRatingsRequest(player_names=["players/a", "players/a"], preset="aberto", players=2),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "twice" in message

    history = await client.call(
        "ListRatingHistory",
        ranking_pb2.ListRatingHistoryRequest(player="players/alice", preset="aberto", players=2, page_size=3),
        Kind.PLAYER,
        "bob",
    )
    assert [r.match_id for r in history.ratings] == ["m3", "m2", "m1"] and history.ratings[0].mu == ratings[2].mu
    older = await client.call(
        "ListRatingHistory",
        ranking_pb2.ListRatingHistoryRequest(
            player="players/alice", preset="aberto", players=2, page_token=history.next_page_token
        ),
    )
    assert [(r.match_id, r.matches) for r in older.ratings] == [("m0", 1)]
    code, _ = await client.status(
        "ListRatingHistory",
        ranking_pb2.ListRatingHistoryRequest(
            player="players/alice", preset="fechado", players=2, page_token=history.next_page_token
        ),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def board(**fields: Any) -> ranking_pb2.Leaderboard:
    defaults: dict[str, Any] = {
        "scope": ranking_pb2.Leaderboard.SCOPE_GLOBAL,
        "period": ranking_pb2.Leaderboard.PERIOD_ALL_TIME,
        "metric": ranking_pb2.Leaderboard.METRIC_XP,
    }
    return ranking_pb2.Leaderboard(**{**defaults, **fields})


async def test_leaderboards_as_clients_read_them(client: Client) -> None:
    await asyncio.gather(
        *(client.call("RecordMatch", duel(f"m{i}", f"w{i}", f"l{i}", end=END + timedelta(seconds=i))) for i in range(6))
    )
    top = await client.call(
        "ListLeaderboardEntries",
        ranking_pb2.ListLeaderboardEntriesRequest(leaderboard=board(), page_size=4),
        Kind.PLAYER,
        "w0",
    )
    assert [(e.rank, e.player, e.value) for e in top.entries] == [
        (1, "players/w0", 40.0),
        (2, "players/w1", 40.0),
        (3, "players/w2", 40.0),
        (4, "players/w3", 40.0),
    ]
    assert top.entries[1].achieve_time.ToDatetime(tzinfo=UTC) == END + timedelta(seconds=1)
    assert not top.HasField("period_start")
    rest = await client.call(
        "ListLeaderboardEntries",
        ranking_pb2.ListLeaderboardEntriesRequest(leaderboard=board(), page_size=100, page_token=top.next_page_token),
    )
    assert [e.rank for e in rest.entries] == list(range(5, 13)) and rest.next_page_token == ""
    assert [e.player for e in rest.entries[2:4]] == ["players/l0", "players/l1"]

    daily = board(period=ranking_pb2.Leaderboard.PERIOD_DAILY, at=stamp(END))
    today = await client.call("ListLeaderboardEntries", ranking_pb2.ListLeaderboardEntriesRequest(leaderboard=daily))
    assert len(today.entries) == 12
    assert today.period_start.ToDatetime(tzinfo=UTC) <= END < today.period_end.ToDatetime(tzinfo=UTC)

    rating = board(
        metric=ranking_pb2.Leaderboard.METRIC_RATING,
        players=2,
        scope=ranking_pb2.Leaderboard.SCOPE_MODALITY,
        preset="aberto",
    )
    entry = await client.call(
        "GetLeaderboardRank", ranking_pb2.GetLeaderboardRankRequest(leaderboard=rating, player="players/l5")
    )
    assert entry.rank == 12 and entry.value < 0
    window = await client.call(
        "ListLeaderboardNeighbors",
        ranking_pb2.ListLeaderboardNeighborsRequest(leaderboard=board(), player="players/w5", before=2, after=1),
    )
    assert [(e.rank, e.player) for e in window.entries] == [
        (4, "players/w3"),
        (5, "players/w4"),
        (6, "players/w5"),
        (7, "players/l0"),
    ]
    code, _ = await client.status(
        "GetLeaderboardRank", ranking_pb2.GetLeaderboardRankRequest(leaderboard=board(), player="players/nobody")
    )
    assert code == grpc.StatusCode.NOT_FOUND

    bad = [
        (ranking_pb2.Leaderboard(), "leaderboard.scope: required"),
        (board(metric=ranking_pb2.Leaderboard.METRIC_RATING), "leaderboard.players: must be 2 or 4"),
        (board(players=2), "leaderboard.players: must be 0"),
        (board(scope=ranking_pb2.Leaderboard.SCOPE_MODALITY), "leaderboard.preset: required"),
        (board(preset="aberto"), "leaderboard.preset: must be empty"),
        (board(period=9), "leaderboard.period: unknown value 9"),
        (
            board(period=ranking_pb2.Leaderboard.PERIOD_YEARLY, at=stamp(datetime(9999, 6, 1, tzinfo=UTC))),
            "leaderboard.at: after",
        ),
        (board(at=Timestamp(seconds=-(10**12))), "leaderboard.at: not a valid time"),
    ]
    for leaderboard, message in bad:
        code, details = await client.status(
            "ListLeaderboardEntries", ranking_pb2.ListLeaderboardEntriesRequest(leaderboard=leaderboard)
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith(message), details
    forged = "eyJiIjoxfQ"  # {"b":1}
    code, details = await client.status(
        "ListLeaderboardEntries", ranking_pb2.ListLeaderboardEntriesRequest(leaderboard=board(), page_token=forged)
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("page_token:")


@pytest.mark.slow
def test_the_process_serves_survives_fuzzing_and_stops_on_sigterm(tmp_path: Path) -> None:
    """A real process with recorded matches: the fuzz harness's calls (as every kind of caller) end
    in no INTERNAL or UNKNOWN, and afterwards the recorded state is unchanged where it must be and
    consistent everywhere (the audit: XP = its events, ratings = their history, board counts = entries)."""
    with service_process("ranking", tmp_path) as process:
        assert health_status(process.address) == 1
        assert health_status(process.address, SERVICE.full_name) == 1
        minter = dev_minter(tmp_path / "dev-keys")
        metadata = bearer(minter.mint(Kind.SERVICE, "game-session"))
        with grpc.insecure_channel(process.address) as channel:
            stub = ranking_pb2_grpc.RankingServiceStub(channel)
            first = stub.RecordMatch(duel("before-fuzz"), metadata=metadata, timeout=20)

            def invariant() -> None:
                assert stub.RecordMatch(duel("before-fuzz"), metadata=metadata, timeout=20) == first
                profile = stub.GetPlayer(
                    ranking_pb2.GetPlayerRequest(name="players/alice"), metadata=metadata, timeout=20
                )
                assert profile.xp >= 40
                database = Database(f"sqlite+aiosqlite:///{tmp_path / 'ranking.db'}")

                async def audit() -> list[str]:
                    try:
                        async with database.transaction() as session:
                            return await core.audit(session)
                    finally:
                        await database.dispose()

                assert asyncio.run(audit()) == []

            seen = fuzz_service(process, SERVICE, minter, examples=250, invariant=invariant)
        assert "UNAUTHENTICATED" in seen and sum(seen.values()) == 250
        assert process.terminate() == 0
        process.wait_for_log("stopped")


async def test_the_default_period_follows_the_server_clock_in_the_configured_zone(
    db_target: DatabaseTarget, tmp_path: Path
) -> None:
    """With an injected clock: a leaderboard asked for without `at` is the current period in the
    zone (Lisbon here), and it is a new, empty board from the local midnight on."""
    from zoneinfo import ZoneInfo

    from services.ranking.api import RankingApi
    from services.ranking.settings import RankingSettings

    now = [datetime(2026, 11, 29, 23, 59, 59, tzinfo=UTC)]  # Sunday 23:59:59 in Lisbon (UTC+0 in winter)
    settings = RankingSettings(time_zone=ZoneInfo("Europe/Lisbon"))

    def register(server: grpc.aio.Server, deps: Any) -> None:
        ranking_pb2_grpc.add_RankingServiceServicer_to_server(RankingApi(deps, settings, lambda: now[0]), server)

    spec = replace(SPEC, register=register)
    config = make_config("ranking", tmp_path, database_url=db_target.url, database_schema=db_target.schema)
    async with running(spec, config) as server, grpc.aio.insecure_channel(server.address) as channel:
        client = Client(ranking_pb2_grpc.RankingServiceStub(channel), dev_minter(config.dev_keys_dir))
        await client.call("RecordMatch", duel("late", end=now[0] - timedelta(minutes=1)))
        daily = ranking_pb2.ListLeaderboardEntriesRequest(
            leaderboard=board(period=ranking_pb2.Leaderboard.PERIOD_DAILY)
        )
        weekly = ranking_pb2.ListLeaderboardEntriesRequest(
            leaderboard=board(period=ranking_pb2.Leaderboard.PERIOD_WEEKLY)
        )
        sunday = await client.call("ListLeaderboardEntries", daily)
        assert [e.player for e in sunday.entries] == ["players/alice", "players/bob"]
        assert sunday.period_end.ToDatetime(tzinfo=UTC) == datetime(2026, 11, 30, tzinfo=UTC)
        assert len((await client.call("ListLeaderboardEntries", weekly)).entries) == 2
        now[0] = datetime(2026, 11, 30, 0, 0, 0, tzinfo=UTC)  # Monday 00:00 in Lisbon: a new day and week
        monday = await client.call("ListLeaderboardEntries", daily)
        assert list(monday.entries) == [] and monday.period_start.ToDatetime(tzinfo=UTC) == now[0]
        assert list((await client.call("ListLeaderboardEntries", weekly)).entries) == []
        # A page token keeps the period it started in, even after midnight.
        now[0] = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
        first = await client.call(
            "ListLeaderboardEntries",
            ranking_pb2.ListLeaderboardEntriesRequest(leaderboard=daily.leaderboard, page_size=1),
        )
        now[0] = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
        second = await client.call(
            "ListLeaderboardEntries",
            ranking_pb2.ListLeaderboardEntriesRequest(
                leaderboard=daily.leaderboard, page_size=1, page_token=first.next_page_token
            ),
        )
        assert [(e.rank, e.player) for e in [*first.entries, *second.entries]] == [
            (1, "players/alice"),
            (2, "players/bob"),
        ]
