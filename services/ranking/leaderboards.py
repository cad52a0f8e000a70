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
rank (far over the 10 ms target deep in a large board: docs/ranking.md), so the entries ahead are
counted from `ranking_board_counts`, kept in step in the same transaction as the entries, in three
levels:
    level 0: entries per score bucket (score // BUCKET_WIDTH): those with a higher bucket;
    level 1: entries per score: those with a higher score in the player's bucket;
    level 2: entries per (score, time slot): those tied on score that reached it in an earlier slot
             (slot = achieved_us // the period's slot length, periods.SLOT_MICROSECONDS);
and the index counts only the entries tied on score in the player's own slot that come first.
Each part reads at most a few hundred rows, whatever the board's size.

On top of the entries and counts, what the service asks of its boards: the changes a recorded
match makes (`update_boards`), a request's board resolved to the key of its period (`board_ref`),
and entries read with their ranks (`leaderboard_page`, `leaderboard_rank`, `neighbours`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Table, and_, select, text, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from services.ranking.errors import NotOnLeaderboardError
from services.ranking.matches import FinishedMatch
from services.ranking.models import board_counts, board_entries
from services.ranking.periods import SLOT_MICROSECONDS, Period, PeriodBounds, bounds
from services.ranking.ratings import RatingView

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


def insert_statement(session: AsyncSession, table: Table) -> Any:
    """An INSERT that knows ON CONFLICT on both databases."""
    bind = session.bind
    name = bind.dialect.name if bind is not None else "sqlite"
    return (postgresql.insert if name == "postgresql" else sqlite.insert)(table)


#: A count row's key: (board, level, key, slot).
CountKey = tuple[str, int, int, int]


def _count(deltas: dict[CountKey, int], board: str, position: Position, sign: int) -> None:
    """The three count rows an entry at `position` is counted in, moved by `sign`."""
    slot_length = SLOT_MICROSECONDS[period_of(board)]
    deltas[(board, 0, position.score // BUCKET_WIDTH, 0)] += sign
    deltas[(board, 1, position.score, 0)] += sign
    deltas[(board, 2, position.score, position.achieved_us // slot_length)] += sign


def count_deltas(changes: Iterable[EntryChange]) -> dict[CountKey, int]:
    """How the three count levels move when entries change (zero deltas dropped)."""
    deltas: dict[CountKey, int] = defaultdict(int)
    for change in changes:
        for position, sign in ((change.old, -1), (change.new, 1)):
            if position is not None:
                _count(deltas, change.board, position, sign)
    return {key: delta for key, delta in deltas.items() if delta != 0}


def removal_deltas(entries: Iterable[tuple[str, Position]]) -> dict[CountKey, int]:
    """How the counts move when the entries (board, position) are removed from their boards."""
    deltas: dict[CountKey, int] = defaultdict(int)
    for board, position in entries:
        _count(deltas, board, position, -1)
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
    insert = insert_statement(session, board_entries)
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
    await write_counts(session, count_deltas(ordered))


async def write_counts(session: AsyncSession, deltas: dict[CountKey, int]) -> None:
    """Add `deltas` to the count rows, one row after the other in key order (the byte order of the
    board, then level, key and slot: the order the batched recorder takes them in too), so that two
    transactions writing counts never wait for each other's rows in opposite orders."""
    if not deltas:
        return
    insert = insert_statement(session, board_counts)
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


def _floor_division(value: str, divisor: str) -> str:
    """SQL for value // divisor rounded down for negative values too, the same on both databases
    (their `/` and `%` truncate towards zero)."""
    return f"(({value}) - (((({value}) % {divisor}) + {divisor}) % {divisor})) / {divisor}"


#: The rank in one statement: the target position (an entry, or a position given by value) is
#: placed in its bucket and slot, and the four parts of the count are added up (module docstring).
_RANK = """
WITH target AS ({target}),
placed AS (
    SELECT -order_score AS score, achieved_us, player,
           {bucket} AS bucket, {slot} AS slot
    FROM target
)
SELECT placed.score AS score, placed.achieved_us AS achieved_us, 1
    + (SELECT coalesce(sum(c."count"), 0) FROM ranking_board_counts c
       WHERE c.board = :board AND c."level" = 0 AND c."key" > placed.bucket)
    + (SELECT coalesce(sum(c."count"), 0) FROM ranking_board_counts c
       WHERE c.board = :board AND c."level" = 1 AND c."key" > placed.score
         AND c."key" < (placed.bucket + 1) * CAST(:width AS BIGINT))
    + (SELECT coalesce(sum(c."count"), 0) FROM ranking_board_counts c
       WHERE c.board = :board AND c."level" = 2 AND c."key" = placed.score AND c.slot < placed.slot)
    + (SELECT count(*) FROM ranking_board_entries e
       WHERE e.board = :board AND e.order_score = -placed.score
         AND e.achieved_us >= placed.slot * CAST(:slot_length AS BIGINT)
         AND (e.achieved_us, e.player) < (placed.achieved_us, placed.player))
    AS rank
FROM placed
""".replace("{bucket}", _floor_division("-order_score", "CAST(:width AS BIGINT)")).replace(
    "{slot}", _floor_division("achieved_us", "CAST(:slot_length AS BIGINT)")
)

_RANK_OF_ENTRY = text(
    _RANK.replace(
        "{target}",
        "SELECT order_score, achieved_us, player FROM ranking_board_entries WHERE board = :board AND player = :player",
    )
)
_RANK_OF_POSITION = text(
    _RANK.replace(
        "{target}",
        "SELECT CAST(:order_score AS BIGINT) AS order_score, CAST(:achieved_us AS BIGINT) AS achieved_us, "
        "CAST(:player AS VARCHAR(63)) AS player",
    )
)


def _rank_parameters(board: str) -> dict[str, Any]:
    return {"board": board, "width": BUCKET_WIDTH, "slot_length": SLOT_MICROSECONDS[period_of(board)]}


async def rank_of(session: AsyncSession, board: str, position: Position) -> int:
    """1 + the number of entries of `board` strictly ahead of `position` (which need not exist)."""
    row = (
        await session.execute(
            _RANK_OF_POSITION,
            {
                **_rank_parameters(board),
                "order_score": -position.score,
                "achieved_us": position.achieved_us,
                "player": position.player,
            },
        )
    ).one()
    return int(row.rank)


async def rank_of_player(session: AsyncSession, board: str, player: str) -> tuple[Position, int] | None:
    """The player's entry and rank in one statement; None when the player is not on the board."""
    row = (await session.execute(_RANK_OF_ENTRY, {**_rank_parameters(board), "player": player})).first()
    return None if row is None else (Position(int(row.score), int(row.achieved_us), player), int(row.rank))


def _key(position: Position) -> Any:
    return tuple_(-position.score, position.achieved_us, position.player)


async def entries_after(session: AsyncSession, board: str, position: Position | None, limit: int) -> list[Position]:
    """Up to `limit` entries after `position` (from the top when None), in board order."""
    e = board_entries.c
    query = select(e.order_score, e.achieved_us, e.player).where(e.board == board)
    if position is not None:
        query = query.where(tuple_(e.order_score, e.achieved_us, e.player) > _key(position))
    rows = await session.execute(query.order_by(e.order_score, e.achieved_us, e.player).limit(limit))
    return [Position(-r.order_score, r.achieved_us, r.player) for r in rows]


async def entries_before(session: AsyncSession, board: str, position: Position, limit: int) -> list[Position]:
    """Up to `limit` entries just before `position`, in board order."""
    e = board_entries.c
    rows = await session.execute(
        select(e.order_score, e.achieved_us, e.player)
        .where(and_(e.board == board, tuple_(e.order_score, e.achieved_us, e.player) < _key(position)))
        .order_by(e.order_score.desc(), e.achieved_us.desc(), e.player.desc())
        .limit(limit)
    )
    return [Position(-r.order_score, r.achieved_us, r.player) for r in reversed(rows.all())]


# -- times --------------------------------------------------------------------------------------


def micros(moment: datetime) -> int:
    """An aware datetime as microseconds since the epoch (`achieved_us`)."""
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    """`micros` undone: the aware (UTC) datetime."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=value)


# -- what a match changes -----------------------------------------------------------------------


async def update_boards(
    session: AsyncSession,
    match: FinishedMatch,
    gained: dict[str, int],
    ratings_after: dict[str, RatingView],
    overall_after: dict[str, RatingView],
    zone: ZoneInfo,
) -> None:
    """XP boards (global and the modality) gain each player's XP; rating boards take each rated
    player's new ordinal; in every period that contains the match's end time."""
    end_us = micros(match.end_time)
    starts = {period: bounds(period, match.end_time, zone).start_name for period in Period}
    # (board, player) -> XP to add (XP boards), or the score that replaces the old one (ratings).
    additions: dict[tuple[str, str], int] = {}
    replacements: dict[tuple[str, str], int] = {}
    metric = rating_metric(match.players)
    for period, start in starts.items():
        for scope in (GLOBAL_SCOPE, match.preset):
            xp_board = board_key(XP_METRIC, scope, period, start)
            for player, xp in gained.items():
                if xp > 0:
                    additions[(xp_board, player)] = xp
            rating_board = board_key(metric, scope, period, start)
            source = overall_after if scope == GLOBAL_SCOPE else ratings_after
            for player, rating in source.items():
                replacements[(rating_board, player)] = rating_score(rating.ordinal)
    keys = [*additions, *replacements]
    if not keys:
        return
    existing = await current(session, [b for b, _ in keys], [p for _, p in keys])
    changes: list[EntryChange] = []
    for key, xp in additions.items():
        old = existing.get(key)
        new_score = (old.score if old else 0) + xp
        changes.append(
            EntryChange(
                key[0], key[1], old, Position(new_score, max(end_us, old.achieved_us if old else end_us), key[1])
            )
        )
    for key, score in replacements.items():
        old = existing.get(key)
        if old is not None and old.score == score and old.achieved_us >= end_us:
            continue
        changes.append(
            EntryChange(key[0], key[1], old, Position(score, max(end_us, old.achieved_us if old else end_us), key[1]))
        )
    await apply(session, changes)


# -- reading, ranked ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Ranked:
    rank: int
    position: Position


@dataclass(frozen=True)
class BoardRef:
    """Which leaderboard a request names, resolved to a key for the period that contains `at`."""

    metric: str
    scope: str
    bounds: PeriodBounds

    @property
    def key(self) -> str:
        return board_key(self.metric, self.scope, self.bounds.period, self.bounds.start_name)


def board_ref(metric: str, scope: str, period: Period, at: datetime, zone: ZoneInfo) -> BoardRef:
    return BoardRef(metric, scope, bounds(period, at, zone))


async def leaderboard_page(
    session: AsyncSession, board: str, *, after: Position | None, limit: int
) -> tuple[list[Ranked], bool]:
    """Up to `limit` entries after `after` (from the top when None), ranked; and whether more follow."""
    positions = await entries_after(session, board, after, limit + 1)
    more = len(positions) > limit
    positions = positions[:limit]
    if not positions:
        return [], False
    first = 1 if after is None else await rank_of(session, board, positions[0])
    return [Ranked(first + i, p) for i, p in enumerate(positions)], more


async def leaderboard_rank(session: AsyncSession, board: str, player: str) -> Ranked:
    found = await rank_of_player(session, board, player)
    if found is None:
        raise NotOnLeaderboardError(player)
    position, rank = found
    return Ranked(rank, position)


async def neighbours(session: AsyncSession, board: str, player: str, *, above: int, below: int) -> list[Ranked]:
    """`above` entries before the player, the player, `below` entries after, with their ranks."""
    own = await leaderboard_rank(session, board, player)
    earlier = await entries_before(session, board, own.position, above) if above else []
    later = await entries_after(session, board, own.position, below) if below else []
    first = own.rank - len(earlier)
    return [Ranked(first + i, p) for i, p in enumerate([*earlier, own.position, *later])]
