"""The ranking service's domain logic: recording a finished match, once, into every store it
changes, and the audit of their consistency. Plain functions over explicit dependencies (a
database session, the time zone, the clock), returning results or raising the errors of
`errors.py`. No grpc here; api.py checks requests and builds replies. docs/ranking.md has the
rules.

    record_match      XP, levels, statistics, ratings and leaderboards from one finished match
    audit             every stored total checked against what it adds up

The stores, each with its reads:

    profiles.py       players' XP, levels, statistics and XP events (get_profile, list_xp_events)
    rating_store.py   players' ratings and their history (get_ratings, rating_history)
    leaderboards.py   the leaderboards, their entries and ranks (leaderboard_page,
                      leaderboard_rank, neighbours)

and `erasure.py`: a load-test run's players and matches erased from all of them (erase_run).
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from services.ranking import leaderboards, models
from services.ranking.errors import MatchConflictError
from services.ranking.leaderboards import GLOBAL_SCOPE, EntryChange, Position, update_boards
from services.ranking.matches import FinishedMatch, MatchRecorded, PlayerAward
from services.ranking.profiles import lock_players, update_players
from services.ranking.progress import level_for, xp_for
from services.ranking.rating_store import rate
from services.ranking.ratings import RatingView


async def record_match(session: AsyncSession, match: FinishedMatch, *, zone: ZoneInfo, now: datetime) -> MatchRecorded:
    """Record `match` once: a second call with the same content returns the first result; with
    other content it fails with MatchConflictError (ALREADY_EXISTS)."""
    earlier = await _claim(session, match, now)
    if earlier is not None:
        return earlier

    ids = sorted(s.player for s in match.seats)
    profiles = await lock_players(session, ids, now)
    gained = {s.player: (xp_for(s.outcome, express=match.express) if match.awards else 0) for s in match.seats}

    ratings_before: dict[str, RatingView] = {}
    ratings_after: dict[str, RatingView] = {}
    overall_after: dict[str, RatingView] = {}
    if match.rated:
        changed = await rate(session, match, [match.preset, GLOBAL_SCOPE])
        ratings_before, ratings_after = changed[match.preset]
        overall_after = changed[GLOBAL_SCOPE][1]

    awards = await update_players(session, match, profiles, gained, now)

    await update_boards(session, match, gained, ratings_after, overall_after, zone)

    result = MatchRecorded(
        results=tuple(
            PlayerAward(
                player=a.player,
                xp_gained=a.xp_gained,
                xp_total=a.xp_total,
                level=a.level,
                level_up=a.level_up,
                rating_before=ratings_before.get(a.player),
                rating_after=ratings_after.get(a.player),
            )
            for a in awards
        ),
        rated=match.rated,
    )
    await session.execute(
        update(models.matches)
        .where(models.matches.c.match_id == match.match_id)
        .values(result=result.to_json(), rated=match.rated)
    )
    return result


async def _claim(session: AsyncSession, match: FinishedMatch, now: datetime) -> MatchRecorded | None:
    """Insert the match's row, or return the first result when it was recorded before. A concurrent
    first call for the same match id makes this wait until it commits (PostgreSQL) and then see it."""
    insert = leaderboards.insert_statement(session, models.matches)
    claimed = await session.execute(
        insert.values(
            match_id=match.match_id,
            content_hash=match.content_hash,
            preset=match.preset,
            players=match.players,
            express=match.express,
            competitive=match.competitive,
            annulled=match.annulled,
            shared_address=match.shared_address,
            rated=False,
            end_time=match.end_time,
            recorded_at=now,
            result=b"",
        )
        .on_conflict_do_nothing(index_elements=[models.matches.c.match_id])
        .returning(models.matches.c.match_id)
    )
    if claimed.first() is not None:
        return None
    row = (
        await session.execute(
            select(models.matches.c.content_hash, models.matches.c.result).where(
                models.matches.c.match_id == match.match_id
            )
        )
    ).one()
    if row.content_hash != match.content_hash:
        raise MatchConflictError(match.match_id)
    return MatchRecorded.from_json(row.result)


# -- audit --------------------------------------------------------------------------------------


async def audit(session: AsyncSession) -> list[str]:
    """Consistency checks over the whole state (tests, and ops after an incident); [] when sound:
    every player's XP is the sum of their XP events and their level follows from it; every rating's
    match count is its history's length; every leaderboard count equals what its entries add up to."""
    problems: list[str] = []
    x, p = models.xp_events, models.players
    sums = {
        r.player: (int(r.total), int(r.events))
        for r in await session.execute(
            select(x.c.player, func.sum(x.c.xp_gained).label("total"), func.count().label("events")).group_by(
                x.c.player
            )
        )
    }
    for row in await session.execute(select(p.c.player, p.c.xp, p.c.level, p.c.xp_events)):
        total, events = sums.get(row.player, (0, 0))
        if (row.xp, row.xp_events) != (total, events):
            problems.append(
                f"players/{row.player}: xp {row.xp} in {row.xp_events} events, events add {total} in {events}"
            )
        if row.level != level_for(row.xp):
            problems.append(f"players/{row.player}: level {row.level} for {row.xp} XP")
    r, h = models.ratings, models.rating_history
    lengths = {
        (row.player, row.preset, row.players): int(row.n)
        for row in await session.execute(
            select(h.c.player, h.c.preset, h.c.players, func.count().label("n")).group_by(
                h.c.player, h.c.preset, h.c.players
            )
        )
    }
    for row in await session.execute(select(r.c.player, r.c.preset, r.c.players, r.c.matches)):
        if lengths.get((row.player, row.preset, row.players), 0) != row.matches:
            problems.append(f"rating {row.player}/{row.preset}/{row.players}: {row.matches} matches, other history")
    e, c = models.board_entries, models.board_counts
    entries = [
        EntryChange(row.board, row.player, None, Position(-row.order_score, row.achieved_us, row.player))
        for row in await session.execute(select(e.c.board, e.c.player, e.c.order_score, e.c.achieved_us))
    ]
    expected = leaderboards.count_deltas(entries)
    stored = {
        (row.board, row.level, row.key, row.slot): int(row.n)
        for row in await session.execute(select(c.c.board, c.c.level, c.c.key, c.c.slot, c.c.count.label("n")))
        if row.n != 0
    }
    if stored != expected:
        wrong = sorted(set(stored.items()) ^ set(expected.items()))[:5]
        problems.append(f"leaderboard counts differ from the entries: {wrong}")
    return problems
