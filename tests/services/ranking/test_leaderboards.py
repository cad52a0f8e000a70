"""Leaderboards on both databases: periods that reset at local boundaries, global and modality
scopes, XP and rating metrics, the tie rule, paging, windows around a player, and counted ranks that
always equal the entries ahead."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from services.common.db import Database
from services.ranking import core, leaderboards, rating_store
from services.ranking.errors import NotOnLeaderboardError
from services.ranking.leaderboards import BUCKET_WIDTH, EntryChange, Position
from services.ranking.periods import SLOT_MICROSECONDS, Period
from services.ranking.progress import Outcome
from tests.services.ranking.conftest import ZONE, duel, match, record, seat


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def page(db: Database, metric: str, scope: str, period: Period, moment: datetime) -> list[tuple[str, int]]:
    ref = leaderboards.board_ref(metric, scope, period, moment, ZONE)
    async with db.transaction() as session:
        ranked, _ = await leaderboards.leaderboard_page(session, ref.key, after=None, limit=100)
    assert [r.rank for r in ranked] == list(range(1, len(ranked) + 1))
    return [(r.position.player, r.position.score) for r in ranked]


async def test_periods_reset_at_local_midnight_and_late_results_land_in_their_period(db: Database) -> None:
    sunday_night = at("2026-11-30T02:59:59+00:00")  # Sunday 23:59:59 in Sao Paulo
    monday = at("2026-11-30T03:00:00+00:00")  # Monday 00:00:00 there: a new day and a new week
    await record(db, duel("m1", "alice", "bob", end_time=sunday_night))
    await record(db, duel("m2", "bob", "alice", end_time=monday))
    # Recorded last, but it ended on Saturday: it counts in Saturday and in last week.
    await record(db, duel("m0", "carol", "alice", end_time=at("2026-11-28T12:00:00+00:00")))
    assert await page(db, "xp", "*", Period.DAILY, sunday_night) == [("alice", 40), ("bob", 5)]
    assert await page(db, "xp", "*", Period.DAILY, monday) == [("bob", 40), ("alice", 5)]
    assert await page(db, "xp", "*", Period.DAILY, monday + timedelta(days=1)) == []
    assert await page(db, "xp", "*", Period.DAILY, at("2026-11-28T20:00:00+00:00")) == [("carol", 40), ("alice", 5)]
    assert await page(db, "xp", "*", Period.WEEKLY, sunday_night) == [("alice", 45), ("carol", 40), ("bob", 5)]
    assert await page(db, "xp", "*", Period.WEEKLY, monday) == [("bob", 40), ("alice", 5)]
    # November in Sao Paulo ends at 2026-12-01T03:00Z; the year at 2027-01-01T03:00Z.
    assert await page(db, "xp", "*", Period.MONTHLY, monday) == [("alice", 50), ("bob", 45), ("carol", 40)]
    assert await page(db, "xp", "*", Period.MONTHLY, at("2026-12-01T03:00:00+00:00")) == []
    assert await page(db, "xp", "*", Period.YEARLY, at("2027-01-01T02:59:59+00:00")) == [
        ("alice", 50),
        ("bob", 45),
        ("carol", 40),
    ]
    assert await page(db, "xp", "*", Period.YEARLY, at("2027-01-01T03:00:00+00:00")) == []
    assert await page(db, "xp", "*", Period.ALL_TIME, monday + timedelta(days=900)) == [
        ("alice", 50),
        ("bob", 45),
        ("carol", 40),
    ]


async def test_the_configured_zone_decides_the_day(db: Database) -> None:
    utc = ZoneInfo("UTC")
    late = at("2026-11-30T01:00:00+00:00")  # Sunday 22:00 in Sao Paulo, Monday in UTC
    async with db.transaction() as session:
        await core.record_match(session, duel("m1", "alice", "bob", end_time=late), zone=utc, now=late)
    assert await page(db, "xp", "*", Period.DAILY, late) == []  # Sunday in Sao Paulo: not there
    key = leaderboards.board_ref("xp", "*", Period.DAILY, late, utc).key
    assert key == "xp|*|day|2026-11-30"
    async with db.transaction() as session:
        ranked, _ = await leaderboards.leaderboard_page(session, key, after=None, limit=10)
    assert [r.position.player for r in ranked] == ["alice", "bob"]


async def test_global_and_modality_scopes_and_the_rating_boards(db: Database) -> None:
    now = at("2026-11-29T15:00:00+00:00")
    await record(db, duel("m1", "alice", "bob", preset="fechado", end_time=now))
    await record(
        db,
        match(
            "m2",
            seat("carol", 0, Outcome.WON),
            seat("dave", 1, Outcome.LOST),
            seat("erin", 2, Outcome.WON),
            seat("fred", 3, Outcome.LOST),
            end_time=now,
        ),
    )
    assert await page(db, "xp", "fechado", Period.ALL_TIME, now) == [("alice", 40), ("bob", 5)]
    assert [p for p, _ in await page(db, "xp", "aberto", Period.ALL_TIME, now)] == ["carol", "erin", "dave", "fred"]
    assert len(await page(db, "xp", "*", Period.ALL_TIME, now)) == 6
    two = await page(db, "r2", "*", Period.DAILY, now)
    assert [p for p, _ in two] == ["alice", "bob"]
    async with db.transaction() as session:
        (alice,) = await rating_store.get_ratings(session, ["alice"], "fechado", 2)
    assert two[0][1] == round(alice.ordinal * 100)  # the ordinal, in hundredths
    assert [p for p, _ in await page(db, "r4", "aberto", Period.WEEKLY, now)][:2] == ["carol", "erin"]
    assert await page(db, "r4", "fechado", Period.ALL_TIME, now) == []


async def test_ties_rank_by_earlier_achievement_then_player_id(db: Database) -> None:
    base = at("2026-11-29T12:00:00+00:00")
    await record(db, duel("m1", "zoe", "x1", end_time=base))
    await record(db, duel("m2", "bob", "x2", end_time=base + timedelta(minutes=5)))
    await record(db, duel("m3", "amy", "x3", end_time=base + timedelta(minutes=5)))
    await record(db, duel("m4", "cid", "x4", end_time=base - timedelta(minutes=5)))
    ranked = await page(db, "xp", "*", Period.DAILY, base)
    assert ranked[:4] == [("cid", 40), ("zoe", 40), ("amy", 40), ("bob", 40)]
    assert [p for p, _ in ranked[4:]] == ["x4", "x1", "x2", "x3"]  # the 5 XP losers, the same way
    key = leaderboards.board_ref("xp", "*", Period.DAILY, base, ZONE).key
    async with db.transaction() as session:
        assert (await leaderboards.leaderboard_rank(session, key, "amy")).rank == 3
        assert (await leaderboards.leaderboard_rank(session, key, "x3")).rank == 8
        with pytest.raises(NotOnLeaderboardError):
            await leaderboards.leaderboard_rank(session, key, "nobody")


async def _fill(db: Database, board: str, entries: list[Position]) -> None:
    async with db.transaction() as session:
        await leaderboards.apply(session, [EntryChange(board, p.player, None, p) for p in entries])


async def test_paging_and_windows_around_a_player(db: Database) -> None:
    board = "xp|*|all|-"
    t = 1_790_000_000_000_000
    entries = [Position(1000 - 10 * (i // 3), t + i, f"p{i:02d}") for i in range(23)]
    await _fill(db, board, entries)
    seen: list[tuple[int, str]] = []
    after = None
    async with db.transaction() as session:
        while True:
            ranked, more = await leaderboards.leaderboard_page(session, board, after=after, limit=5)
            seen += [(r.rank, r.position.player) for r in ranked]
            if not more:
                break
            after = ranked[-1].position
        assert seen == [(i + 1, f"p{i:02d}") for i in range(23)]

        def window(ranked: list[leaderboards.Ranked]) -> list[tuple[int, str]]:
            return [(r.rank, r.position.player) for r in ranked]

        assert window(await leaderboards.neighbours(session, board, "p10", above=2, below=3)) == [
            (9, "p08"),
            (10, "p09"),
            (11, "p10"),
            (12, "p11"),
            (13, "p12"),
            (14, "p13"),
        ]
        assert window(await leaderboards.neighbours(session, board, "p01", above=5, below=1)) == [
            (1, "p00"),
            (2, "p01"),
            (3, "p02"),
        ]
        assert window(await leaderboards.neighbours(session, board, "p22", above=1, below=5)) == [
            (22, "p21"),
            (23, "p22"),
        ]
        assert window(await leaderboards.neighbours(session, board, "p05", above=0, below=0)) == [(6, "p05")]


@pytest.mark.parametrize("period", [Period.ALL_TIME, Period.DAILY])
async def test_counted_ranks_equal_the_entries_ahead_through_random_changes(db: Database, period: Period) -> None:
    """Scores across buckets (negative ones too, as ratings have), many ties within and across time
    slots, then random updates: every rank equals 1 + the entries ahead in a plain sort."""
    rng = random.Random(6 + len(period.value))
    board = f"r2|*|{period.value}|2026-11-29" if period is not Period.ALL_TIME else "r2|*|all|-"
    slot = SLOT_MICROSECONDS[period]
    t0 = 1_790_000_000_000_000

    def position(player: str) -> Position:
        score = rng.choice([rng.randint(-3 * BUCKET_WIDTH, 3 * BUCKET_WIDTH), rng.choice([0, 5, BUCKET_WIDTH, -1])])
        achieved = t0 + rng.choice([0, slot - 1, slot, 3 * slot + 7, rng.randint(0, 20 * slot)])
        return Position(score, achieved, player)

    current = {f"p{i:03d}": position(f"p{i:03d}") for i in range(160)}
    await _fill(db, board, list(current.values()))
    for _round in range(2):
        order = sorted(current.values(), key=lambda p: (-p.score, p.achieved_us, p.player))
        async with db.transaction() as session:
            for expected, p in enumerate(order, start=1):
                assert await leaderboards.rank_of(session, board, p) == expected, p
                assert await leaderboards.leaderboard_rank(session, board, p.player) == leaderboards.Ranked(expected, p)
            # A position that is nobody's ranks just after everyone ahead of it.
            probe = Position(order[40].score, order[40].achieved_us, order[40].player + "~")
            assert await leaderboards.rank_of(session, board, probe) == 42
        changes = []
        for player in rng.sample(sorted(current), 60):
            new = position(player)
            changes.append(EntryChange(board, player, current[player], new))
            current[player] = new
        async with db.transaction() as session:
            await leaderboards.apply(session, changes)
