"""Players' profiles in the database: XP, level and statistics (one row per player, the lock every
update of a player takes) and their XP events; the XP and level rules themselves are in
`progress.py` (docs/ranking.md, "XP" and "Levels").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from services.ranking import leaderboards, models
from services.ranking.matches import FinishedMatch, PlayerAward
from services.ranking.models import aware
from services.ranking.progress import Outcome, level_for, level_start


@dataclass(frozen=True)
class Stats:
    matches: int = 0
    wins: int = 0
    losses: int = 0
    abandonments: int = 0
    canastras: int = 0
    average_score: int = 0


@dataclass(frozen=True)
class Profile:
    player: str
    xp: int
    level: int
    level_start_xp: int
    next_level_xp: int
    stats: Stats = field(default_factory=Stats)


@dataclass(frozen=True)
class XpEvent:
    seq: int
    match_id: str
    xp_gained: int
    xp_total: int
    level: int
    level_up: bool
    time: datetime


# -- recording ----------------------------------------------------------------------------------


async def lock_players(session: AsyncSession, ids: list[str], now: datetime) -> dict[str, dict[str, Any]]:
    """Create missing player rows and lock all of them, in id order (no deadlocks between matches)."""
    p = models.players
    insert = leaderboards.insert_statement(session, p)
    await session.execute(
        insert.on_conflict_do_nothing(index_elements=[p.c.player]),
        [
            {
                "player": player,
                "xp": 0,
                "level": 1,
                "matches": 0,
                "wins": 0,
                "losses": 0,
                "abandonments": 0,
                "canastras": 0,
                "score_sum": 0,
                "xp_events": 0,
                "updated_at": now,
            }
            for player in ids
        ],
    )
    rows = await session.execute(select(p).where(p.c.player.in_(ids)).order_by(p.c.player).with_for_update())
    return {row.player: dict(row._mapping) for row in rows}


async def update_players(
    session: AsyncSession, match: FinishedMatch, rows: dict[str, dict[str, Any]], gained: dict[str, int], now: datetime
) -> list[PlayerAward]:
    """New XP, level and statistics of every seat's player, and their XP events (one statement
    each, executed for all the players)."""
    awards: list[PlayerAward] = []
    updates: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    counted = match.competitive and not match.annulled  # statistics: every competitive match that counted
    for seat in match.seats:
        row, xp_gained = rows[seat.player], gained[seat.player]
        xp = row["xp"] + xp_gained
        level = level_for(xp)
        level_up = level > row["level"]
        values = dict(row, xp=xp, level=level, updated_at=now, key=seat.player)
        if counted:
            values.update(
                matches=row["matches"] + 1,
                wins=row["wins"] + (seat.outcome is Outcome.WON),
                losses=row["losses"] + (seat.outcome is Outcome.LOST),
                abandonments=row["abandonments"] + (seat.outcome is Outcome.ABANDONED),
                canastras=row["canastras"] + seat.canastras,
                score_sum=row["score_sum"] + seat.score,
            )
        if xp_gained > 0:
            values["xp_events"] = row["xp_events"] + 1
            events.append(
                {
                    "player": seat.player,
                    "seq": values["xp_events"],
                    "match_id": match.match_id,
                    "xp_gained": xp_gained,
                    "xp_total": xp,
                    "level": level,
                    "level_up": level_up,
                    "time": match.end_time,
                }
            )
        del values["player"]
        updates.append(values)
        awards.append(PlayerAward(seat.player, xp_gained, xp, level, level_up))
    p = models.players
    columns = [c.name for c in p.columns if c.name != "player"]
    await session.execute(
        update(p).where(p.c.player == bindparam("key")).values({name: bindparam(name) for name in columns}),
        updates,
    )
    if events:
        await session.execute(models.xp_events.insert(), events)
    return awards


# -- reading ------------------------------------------------------------------------------------


async def get_profile(session: AsyncSession, player: str) -> Profile:
    """A player's XP, level and statistics; a player never recorded is at level 1 with nothing."""
    row = (await session.execute(select(models.players).where(models.players.c.player == player))).first()
    xp = int(row.xp) if row else 0
    level = level_for(xp)
    stats = Stats()
    if row is not None:
        stats = Stats(
            matches=row.matches,
            wins=row.wins,
            losses=row.losses,
            abandonments=row.abandonments,
            canastras=row.canastras,
            average_score=row.score_sum // row.matches if row.matches else 0,
        )
    return Profile(player, xp, level, level_start(level), level_start(level + 1), stats)


async def list_xp_events(
    session: AsyncSession, player: str, *, limit: int, before_seq: int | None = None
) -> tuple[list[XpEvent], int | None]:
    """Newest first; returns the events and the sequence number to continue before (None: done)."""
    x = models.xp_events
    query = select(x).where(x.c.player == player)
    if before_seq is not None:
        query = query.where(x.c.seq < before_seq)
    rows = (await session.execute(query.order_by(x.c.seq.desc()).limit(limit + 1))).all()
    events = [
        XpEvent(r.seq, r.match_id, r.xp_gained, r.xp_total, r.level, r.level_up, aware(r.time)) for r in rows[:limit]
    ]
    return events, (events[-1].seq if len(rows) > limit else None)
