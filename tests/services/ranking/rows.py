"""The rows the ranking service keeps for players and matches, as comparable values: what the
equivalence tests (batched against reference recording) and the erasure tests compare."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from services.common.db import Database
from services.ranking import models


async def dump(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the service keeps for players and matches, but the columns that hold the
    recording's clock (and the stored answers of calls, which are not the players' records)."""
    aware = models.aware
    p, x, r, h = models.players.c, models.xp_events.c, models.ratings.c, models.rating_history.c
    e, c, m = models.board_entries.c, models.board_counts.c, models.matches.c
    tables = {
        "players": select(p.player, p.xp, p.level, p.matches, p.wins, p.losses, p.abandonments, p.canastras,
                          p.score_sum, p.xp_events),
        "xp_events": select(x.player, x.seq, x.match_id, x.xp_gained, x.xp_total, x.level, x.level_up, x.time),
        "ratings": select(r.player, r.preset, r.players, r.mu, r.sigma, r.matches, r.updated_at),
        "rating_history": select(h.player, h.preset, h.players, h.seq, h.match_id, h.mu, h.sigma, h.time),
        "leaderboard_entries": select(e.board, e.player, e.order_score, e.achieved_us),
        "counts": select(c.board, c.level, c.key, c.slot, c.count),
        "matches": select(m.match_id, m.content_hash, m.preset, m.players, m.express, m.competitive, m.annulled,
                          m.shared_address, m.rated, m.end_time, m.result),
    }
    result = {}
    async with db.transaction() as session:
        for name, query in tables.items():
            rows = (await session.execute(query)).all()
            result[name] = sorted(tuple(aware(v) if isinstance(v, datetime) else v for v in row) for row in rows)
    return result


def nonzero(rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """A dump without its count rows at zero."""
    return {**rows, "counts": [row for row in rows["counts"] if row[-1] != 0]}
