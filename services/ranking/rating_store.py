"""Players' ratings in the database: the current rating per (player, preset, table size), preset
`*` for every modality together, and the rating after each rated match (its history). The model
that moves them is in `ratings.py` (docs/ranking.md, "Ratings").
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from services.ranking import leaderboards, models
from services.ranking.matches import FinishedMatch
from services.ranking.models import aware
from services.ranking.progress import Outcome
from services.ranking.ratings import RatingView, Skill, rate_sides

# -- recording ----------------------------------------------------------------------------------


def after_match(match: FinishedMatch, before: dict[str, RatingView]) -> dict[str, RatingView]:
    """Every seat's rating after the match, from their ratings before it (one preset)."""
    winner = match.winning_side
    assert winner is not None
    seats_by_side = [sorted((s for s in match.seats if s.side == side), key=lambda s: s.seat) for side in (0, 1)]
    sides = [[Skill(before[s.player].mu, before[s.player].sigma) for s in side] for side in seats_by_side]
    result = rate_sides(sides, winner)
    # For players who abandoned a side that went on to win: computed only when there is one.
    abandoned = any(s.outcome is Outcome.ABANDONED for s in seats_by_side[winner])
    as_loss = rate_sides(sides, 1 - winner) if abandoned else result
    after: dict[str, RatingView] = {}
    for side, seats in enumerate(seats_by_side):
        for index, seat in enumerate(seats):
            abandoned_a_winner = seat.outcome is Outcome.ABANDONED and side == winner
            skill = as_loss[side][index] if abandoned_a_winner else result[side][index]
            old = before[seat.player]
            after[seat.player] = RatingView(
                old.player, old.preset, old.players, skill.mu, skill.sigma, old.matches + 1, match.end_time,
                match.match_id,
            )
    return after


async def rate(
    session: AsyncSession, match: FinishedMatch, presets: Sequence[str]
) -> dict[str, tuple[dict[str, RatingView], dict[str, RatingView]]]:
    """Update every seat's ratings for each of `presets` and the table size, and append their
    history (one read, one upsert and one insert for all of them); per preset, before and after."""
    ids = [s.player for s in match.seats]
    befores = await _ratings(session, ids, presets, match.players)
    changes = {preset: (befores[preset], after_match(match, befores[preset])) for preset in presets}
    after = sorted(
        (view for _, rated in changes.values() for view in rated.values()), key=lambda v: (v.player, v.preset)
    )
    r = models.ratings
    insert = leaderboards.insert_statement(session, r)
    await session.execute(
        insert.on_conflict_do_update(
            index_elements=[r.c.player, r.c.preset, r.c.players],
            set_={
                "mu": insert.excluded.mu,
                "sigma": insert.excluded.sigma,
                "matches": insert.excluded.matches,
                "updated_at": insert.excluded.updated_at,
            },
        ),
        [
            {
                "player": v.player,
                "preset": v.preset,
                "players": v.players,
                "mu": v.mu,
                "sigma": v.sigma,
                "matches": v.matches,
                "updated_at": match.end_time,
            }
            for v in after
        ],
    )
    await session.execute(
        models.rating_history.insert(),
        [
            {
                "player": v.player,
                "preset": v.preset,
                "players": v.players,
                "seq": v.matches,
                "match_id": match.match_id,
                "mu": v.mu,
                "sigma": v.sigma,
                "time": match.end_time,
            }
            for v in after
        ],
    )
    return changes


# -- reading ------------------------------------------------------------------------------------


async def _ratings(
    session: AsyncSession, ids: Sequence[str], presets: Sequence[str], players: int
) -> dict[str, dict[str, RatingView]]:
    """preset -> player -> rating, with the default rating for players never rated."""
    r = models.ratings
    rows = await session.execute(
        select(r).where(r.c.player.in_(sorted(set(ids))), r.c.preset.in_(presets), r.c.players == players)
    )
    found = {
        (row.preset, row.player): RatingView(
            row.player, row.preset, players, row.mu, row.sigma, row.matches, aware(row.updated_at)
        )
        for row in rows
    }
    default = Skill()
    return {
        preset: {
            player: found.get((preset, player)) or RatingView(player, preset, players, default.mu, default.sigma, 0)
            for player in ids
        }
        for preset in presets
    }


async def get_ratings(session: AsyncSession, ids: Sequence[str], preset: str, players: int) -> list[RatingView]:
    """One rating per id, in order: the default rating (mu 25, sigma 25/3) for players never rated."""
    found = (await _ratings(session, ids, [preset], players))[preset]
    return [found[player] for player in ids]


async def rating_history(
    session: AsyncSession, player: str, preset: str, players: int, *, limit: int, before_seq: int | None = None
) -> tuple[list[RatingView], int | None]:
    """The rating after each rated match, newest first, and where to continue (None: done)."""
    h = models.rating_history
    query = select(h).where(h.c.player == player, h.c.preset == preset, h.c.players == players)
    if before_seq is not None:
        query = query.where(h.c.seq < before_seq)
    rows = (await session.execute(query.order_by(h.c.seq.desc()).limit(limit + 1))).all()
    views = [
        RatingView(player, preset, players, r.mu, r.sigma, r.seq, aware(r.time), r.match_id) for r in rows[:limit]
    ]
    return views, (views[-1].matches if len(rows) > limit else None)
