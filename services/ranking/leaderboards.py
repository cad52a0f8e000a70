"""Leaderboards in SQL: entries, their order, and ranks that cost a few index look-ups
(docs/ranking.md, "Leaderboards").

A leaderboard is named by a key `metric|scope|period|start`:
    metric  `xp`, or `r2` / `r4` (the rating for 2 or 4 players)
    scope   a preset name (one modality) or `*` (global)
    period  `all`, `day`, `week`, `month`, `year`; start: the period's first local date, `-` for all
e.g. `xp|*|week|2026-11-23` or `r4|aberto|all|-`. A new period is a new key: boards reset at the
period boundary without any job running, and past periods stay readable.

Order: higher score first; equal scores by earlier achievement (`achieved_us`), then player id. The
entries table stores minus the score (`order_score`) so that one ascending index on
(board, order_score, achieved_us, player) is that order, for the top, for paging from a key and for
the players around one.

Rank = 1 + the entries strictly ahead. Counting them in the index costs time in proportion to the
rank (about 100 ms for 670,000 rows on PostgreSQL), so the entries ahead are counted from
`ranking_board_counts`, kept in step in the same transaction as the entries, in three levels:
    level 0: entries per score bucket (score // BUCKET_WIDTH): those with a higher bucket;
    level 1: entries per score: those with a higher score in the player's bucket;
    level 2: entries per (score, time slot): those tied on score that reached it in an earlier slot
             (slot = achieved_us // the period's slot length, periods.SLOT_MICROSECONDS);
and the index counts only the entries tied on score in the player's own slot that come first.
Each part reads at most a few hundred rows, whatever the board's size.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, and_, func, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from services.ranking.models import board_counts, board_entries
from services.ranking.periods import SLOT_MICROSECONDS, Period

BUCKET_WIDTH = 1024
GLOBAL_SCOPE = "*"
XP_METRIC = "xp"


def rating_metric(players: int) -> str:
    return f"r{players}"


def board_key(metric: str, scope: str, period: Period, start: str) -> str:
    return f"{metric}|{scope}|{period.value}|{start}"


def period_of(board: str) -> Period:
    return Period(board.split("|")[2])


def rating_score(ordinal: float) -> int:
    """A rating's leaderboard score: its ordinal in hundredths."""
    return round(ordinal * 100)


@dataclass(frozen=True)
class Position:
    """Where an entry stands: its score, when it was reached, and whose it is."""

    score: int
    achieved_us: int
    player: str


@dataclass(frozen=True)
class EntryChange:
    board: str
    player: str
    old: Position | None
    new: Position


def _insert(session: AsyncSession, table: Table) -> Any:
    """An INSERT that knows ON CONFLICT on both databases."""
    bind = session.bind
    name = bind.dialect.name if bind is not None else "sqlite"
    return (postgresql.insert if name == "postgresql" else sqlite.insert)(table)


def count_deltas(changes: Iterable[EntryChange]) -> dict[tuple[str, int, int, int], int]:
    """How the three count levels move when entries change (zero deltas dropped)."""
    deltas: dict[tuple[str, int, int, int], int] = defaultdict(int)
    for change in changes:
        slot_length = SLOT_MICROSECONDS[period_of(change.board)]
        for position, sign in ((change.old, -1), (change.new, 1)):
            if position is None:
                continue
            deltas[(change.board, 0, position.score // BUCKET_WIDTH, 0)] += sign
            deltas[(change.board, 1, position.score, 0)] += sign
            deltas[(change.board, 2, position.score, position.achieved_us // slot_length)] += sign
    return {key: delta for key, delta in deltas.items() if delta != 0}


async def current(
    session: AsyncSession, boards: Sequence[str], players: Sequence[str]
) -> dict[tuple[str, str], Position]:
    """The entries of `players` on `boards` that exist."""
    if not boards or not players:
        return {}
    e = board_entries.c
    rows = await session.execute(
        select(e.board, e.player, e.order_score, e.achieved_us).where(
            e.board.in_(sorted(set(boards))), e.player.in_(sorted(set(players)))
        )
    )
    return {(r.board, r.player): Position(-r.order_score, r.achieved_us, r.player) for r in rows}


async def apply(session: AsyncSession, changes: Sequence[EntryChange]) -> None:
    """Write entry changes and their counts. Callers hold the lock of every player concerned (their
    `ranking_players` row), so entries never race; count rows are upserted in key order, so two
    transactions never wait for each other's count rows in opposite orders."""
    if not changes:
        return
    ordered = sorted(changes, key=lambda c: (c.board, c.player))
    # One statement executed for many rows (executemany): its SQL is compiled once and cached,
    # where a multi-row VALUES list would be compiled anew for every count of rows.
    insert = _insert(session, board_entries)
    await session.execute(
        insert.on_conflict_do_update(
            index_elements=[board_entries.c.board, board_entries.c.player],
            set_={"order_score": insert.excluded.order_score, "achieved_us": insert.excluded.achieved_us},
        ),
        [
            {"board": c.board, "player": c.player, "order_score": -c.new.score, "achieved_us": c.new.achieved_us}
            for c in ordered
        ],
    )
    deltas = count_deltas(ordered)
    if not deltas:
        return
    insert = _insert(session, board_counts)
    await session.execute(
        insert.on_conflict_do_update(
            index_elements=[board_counts.c.board, board_counts.c.level, board_counts.c.key, board_counts.c.slot],
            set_={"count": board_counts.c.count + insert.excluded.count},
        ),
        [
            {"board": board, "level": level, "key": key, "slot": slot, "count": delta}
            for (board, level, key, slot), delta in sorted(deltas.items())
        ],
    )


async def entry(session: AsyncSession, board: str, player: str) -> Position | None:
    e = board_entries.c
    row = (
        await session.execute(select(e.order_score, e.achieved_us).where(e.board == board, e.player == player))
    ).first()
    return None if row is None else Position(-row.order_score, row.achieved_us, player)


async def rank_of(session: AsyncSession, board: str, position: Position) -> int:
    """1 + the number of entries of `board` strictly ahead of `position` (which need not exist)."""
    c, e = board_counts.c, board_entries.c
    score, bucket = position.score, position.score // BUCKET_WIDTH
    slot_length = SLOT_MICROSECONDS[period_of(board)]
    slot = position.achieved_us // slot_length

    def total(*conditions: Any) -> Any:
        return select(func.coalesce(func.sum(c.count), 0)).where(c.board == board, *conditions).scalar_subquery()

    higher_buckets = total(c.level == 0, c.key > bucket)
    higher_in_bucket = total(c.level == 1, c.key > score, c.key < (bucket + 1) * BUCKET_WIDTH)
    tied_earlier_slots = total(c.level == 2, c.key == score, c.slot < slot)
    tied_same_slot_ahead = (
        select(func.count())
        .select_from(board_entries)
        .where(
            e.board == board,
            e.order_score == -score,
            e.achieved_us >= slot * slot_length,
            tuple_(e.achieved_us, e.player) < tuple_(position.achieved_us, position.player),
        )
        .scalar_subquery()
    )
    ahead = await session.scalar(select(higher_buckets + higher_in_bucket + tied_earlier_slots + tied_same_slot_ahead))
    return 1 + int(ahead or 0)


def _key(position: Position) -> Any:
    return tuple_(-position.score, position.achieved_us, position.player)


async def after(session: AsyncSession, board: str, position: Position | None, limit: int) -> list[Position]:
    """Up to `limit` entries after `position` (from the top when None), in board order."""
    e = board_entries.c
    query = select(e.order_score, e.achieved_us, e.player).where(e.board == board)
    if position is not None:
        query = query.where(tuple_(e.order_score, e.achieved_us, e.player) > _key(position))
    rows = await session.execute(query.order_by(e.order_score, e.achieved_us, e.player).limit(limit))
    return [Position(-r.order_score, r.achieved_us, r.player) for r in rows]


async def before(session: AsyncSession, board: str, position: Position, limit: int) -> list[Position]:
    """Up to `limit` entries just before `position`, in board order."""
    e = board_entries.c
    rows = await session.execute(
        select(e.order_score, e.achieved_us, e.player)
        .where(and_(e.board == board, tuple_(e.order_score, e.achieved_us, e.player) < _key(position)))
        .order_by(e.order_score.desc(), e.achieved_us.desc(), e.player.desc())
        .limit(limit)
    )
    return [Position(-r.order_score, r.achieved_us, r.player) for r in reversed(rows.all())]
