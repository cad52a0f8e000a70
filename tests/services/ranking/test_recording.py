"""RecordMatch in the core, on both databases: every XP rule and exclusion, statistics, levels and
their events, ratings and their history, idempotency on the match id, concurrent recording."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from services.common.db import Database
from services.ranking import leaderboards, models, profiles, rating_store
from services.ranking.errors import MatchConflictError
from services.ranking.progress import Outcome
from services.ranking.ratings import DEFAULT_MU, DEFAULT_SIGMA
from tests.services.ranking.conftest import NOW, duel, match, record, seat

W, L, A, V = Outcome.WON, Outcome.LOST, Outcome.ABANDONED, Outcome.VOID


async def profile(db: Database, player: str) -> profiles.Profile:
    async with db.transaction() as session:
        return await profiles.get_profile(session, player)


async def board(db: Database, key: str) -> list[tuple[int, str, int]]:
    async with db.transaction() as session:
        ranked, _ = await leaderboards.leaderboard_page(session, key, after=None, limit=100)
    return [(r.rank, r.position.player, r.position.score) for r in ranked]


async def row_count(db: Database, table: object) -> int:
    async with db.transaction() as session:
        return int(await session.scalar(select(func.count()).select_from(table)) or 0)  # type: ignore[arg-type]


async def test_xp_for_points_and_express_wins_and_losses_with_statistics(db: Database) -> None:
    points = await record(db, duel("m1", "alice", "bob"))
    assert [(r.player, r.xp_gained, r.xp_total) for r in points.results] == [("alice", 40, 40), ("bob", 5, 5)]
    assert points.rated
    express = await record(
        db,
        match("m2", seat("bob", 0, W, 300, canastras=2), seat("alice", 1, L, -100, canastras=1), express=True),
    )
    assert [(r.player, r.xp_gained, r.xp_total) for r in express.results] == [("bob", 20, 25), ("alice", 5, 45)]
    alice = await profile(db, "alice")
    assert (alice.xp, alice.level, alice.level_start_xp, alice.next_level_xp) == (45, 1, 0, 100)
    assert alice.stats == profiles.Stats(matches=2, wins=1, losses=1, abandonments=0, canastras=1, average_score=700)
    bob = await profile(db, "bob")
    assert bob.stats == profiles.Stats(matches=2, wins=1, losses=1, abandonments=0, canastras=2, average_score=500)
    assert await board(db, "xp|*|all|-") == [(1, "alice", 45), (2, "bob", 25)]
    assert await board(db, "xp|aberto|day|2026-11-29") == [(1, "alice", 45), (2, "bob", 25)]
    # A player never recorded: level 1, nothing.
    assert await profile(db, "carol") == profiles.Profile("carol", 0, 1, 0, 100)


async def test_practice_and_annulled_matches_give_nothing(db: Database) -> None:
    practice = await record(db, duel("p1", "alice", "bob", competitive=False))
    annulled = await record(db, match("a1", seat("alice", 0, V), seat("bob", 1, A), annulled=True))
    for result in (practice, annulled):
        assert not result.rated
        assert [(r.xp_gained, r.xp_total, r.level_up, r.rating_after) for r in result.results] == [
            (0, 0, False, None)
        ] * 2
    for player in ("alice", "bob"):
        assert await profile(db, player) == profiles.Profile(player, 0, 1, 0, 100)  # no statistics either
    assert await row_count(db, models.xp_events) == 0
    assert await row_count(db, models.ratings) == 0
    assert await row_count(db, models.board_entries) == 0
    assert await row_count(db, models.matches) == 2  # recorded, so a retry answers the same


async def test_a_shared_address_cancels_xp_ratings_and_points_but_the_match_counts_in_statistics(
    db: Database,
) -> None:
    shared = match(
        "s1",
        seat("alice", 0, W, 900, group=0),
        seat("bob", 1, L, 400, group=1),
        seat("carol", 2, W, 900, group=0),
        seat("dave", 3, L, 400, group=2),
    )
    assert shared.shared_address
    result = await record(db, shared)
    assert not result.rated
    assert all(r.xp_gained == 0 and r.rating_after is None for r in result.results)
    assert (await profile(db, "alice")).stats.matches == 1
    assert (await profile(db, "alice")).stats.wins == 1
    assert await row_count(db, models.board_entries) == 0
    assert await row_count(db, models.ratings) == 0
    # Distinct addresses (or unknown ones) do not cancel anything.
    apart = match("s2", seat("alice", 0, W, group=0), seat("bob", 1, L, group=None))
    assert (await record(db, apart)).rated


async def test_an_abandoning_player_gets_no_xp_counts_an_abandonment_and_is_rated_as_a_loss(db: Database) -> None:
    # alice abandoned; her partner carol and a bot in her seat went on to win.
    result = await record(
        db,
        match(
            "x1", seat("alice", 0, A, 1200), seat("bob", 1, L, 800), seat("carol", 2, W, 1200), seat("dave", 3, L, 800)
        ),
    )
    gained = {r.player: r.xp_gained for r in result.results}
    assert gained == {"alice": 0, "bob": 5, "carol": 40, "dave": 5}
    assert result.rated
    after = {r.player: r.rating_after for r in result.results}
    assert after["alice"] is not None and after["alice"].mu < DEFAULT_MU  # a loss for her
    assert after["carol"] is not None and after["carol"].mu > DEFAULT_MU
    assert after["bob"] is not None and after["bob"].mu < DEFAULT_MU
    alice = await profile(db, "alice")
    assert alice.stats == profiles.Stats(matches=1, wins=0, losses=0, abandonments=1, canastras=0, average_score=1200)
    # She is on no XP board (nothing gained), but on the rating boards with her lower rating.
    assert [p for _, p, _ in await board(db, "xp|*|all|-")] == ["carol", "bob", "dave"]
    assert next(p for _, p, _ in await board(db, "r4|aberto|all|-")) == "carol"


async def test_a_match_where_everyone_abandoned_or_a_seat_had_a_bot_is_not_rated(db: Database) -> None:
    gone = await record(db, match("g1", seat("alice", 0, A), seat("bob", 1, A)))
    assert not gone.rated and [r.xp_gained for r in gone.results] == [0, 0]
    with_bot = await record(db, match("b1", seat("alice", 0, W), seat("bob", 1, L), seat("carol", 2, W), players=4))
    assert not with_bot.rated
    assert [r.xp_gained for r in with_bot.results] == [40, 5, 40]


async def test_recording_again_returns_the_first_result_and_other_content_is_refused(db: Database) -> None:
    first = await record(db, duel("m1", "alice", "bob"))
    again = await record(db, duel("m1", "alice", "bob"), now=NOW + timedelta(hours=1))
    assert again == first
    assert (await profile(db, "alice")).xp == 40
    assert await row_count(db, models.rating_history) == 4  # 2 players x (aberto, overall), once
    other = replace(duel("m1", "bob", "alice"), match_id="m1")
    with pytest.raises(MatchConflictError, match="m1"):
        await record(db, other)
    assert (await profile(db, "bob")).xp == 5


async def test_level_ups_are_in_the_result_and_in_the_players_feed(db: Database) -> None:
    results = [
        await record(db, duel(f"m{i}", "alice", f"rival{i}", end_time=NOW + timedelta(minutes=i))) for i in range(8)
    ]
    mine = [next(r for r in result.results if r.player == "alice") for result in results]
    assert [r.xp_total for r in mine] == [40, 80, 120, 160, 200, 240, 280, 320]
    assert [r.level for r in mine] == [1, 1, 2, 2, 2, 2, 2, 3]
    assert [r.level_up for r in mine] == [False, False, True, False, False, False, False, True]
    async with db.transaction() as session:
        page, before = await profiles.list_xp_events(session, "alice", limit=3)
        assert [(e.match_id, e.xp_total, e.level_up) for e in page] == [
            ("m7", 320, True),
            ("m6", 280, False),
            ("m5", 240, False),
        ]
        assert page[0].time == NOW + timedelta(minutes=7)
        rest, end = await profiles.list_xp_events(session, "alice", limit=10, before_seq=before)
    assert [e.match_id for e in rest] == ["m4", "m3", "m2", "m1", "m0"] and end is None
    assert [e.level_up for e in rest] == [False, False, True, False, False]


async def test_ratings_per_modality_and_table_size_with_history(db: Database) -> None:
    for i in range(3):
        await record(db, duel(f"m{i}", "alice", "bob", end_time=NOW + timedelta(minutes=i)))
    await record(db, duel("f1", "bob", "alice", preset="fechado"))
    async with db.transaction() as session:
        aberto = await rating_store.get_ratings(session, ["alice", "bob", "nobody"], "aberto", 2)
        fechado = await rating_store.get_ratings(session, ["alice"], "fechado", 2)
        pairs = await rating_store.get_ratings(session, ["alice"], "aberto", 4)
        overall = await rating_store.get_ratings(session, ["alice"], "*", 2)
        history, before = await rating_store.rating_history(session, "alice", "aberto", 2, limit=2)
        older, end = await rating_store.rating_history(session, "alice", "aberto", 2, limit=2, before_seq=before)
    alice, bob, nobody = aberto
    assert alice.matches == 3 and alice.ordinal > 0 > bob.ordinal
    assert (nobody.mu, nobody.sigma, nobody.matches, nobody.updated_at) == (DEFAULT_MU, DEFAULT_SIGMA, 0, None)
    assert fechado[0].matches == 1 and fechado[0].mu < DEFAULT_MU
    assert pairs[0].matches == 0
    assert overall[0].matches == 4  # every modality together
    assert [h.match_id for h in history + older] == ["m2", "m1", "m0"] and end is None
    assert (history[0].mu, history[0].sigma) == (alice.mu, alice.sigma)
    assert history[0].sigma < history[1].sigma < older[0].sigma  # more matches, more certainty


async def test_concurrent_recording_applies_each_match_once(db: Database) -> None:
    same = [record(db, duel("c0", "alice", "bob")) for _ in range(3)]
    others = [record(db, duel(f"c{i}", "alice", f"p{i}", end_time=NOW + timedelta(seconds=i))) for i in range(1, 6)]
    results = await asyncio.gather(*same, *others)
    assert results[0] == results[1] == results[2]
    alice = await profile(db, "alice")
    assert alice.xp == 6 * 40 and alice.stats.matches == 6
    async with db.transaction() as session:
        (rating,) = await rating_store.get_ratings(session, ["alice"], "aberto", 2)
    assert rating.matches == 6
