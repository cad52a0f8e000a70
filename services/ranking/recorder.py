"""RecordMatch on PostgreSQL: concurrent calls recorded together, a few set-based statements per
transaction over raw asyncpg (docs/ranking.md, "Recording on PostgreSQL").

What a recorded match changes, and what its caller gets back, is exactly what `core.record_match`
does and answers (the reference, and SQLite's path; tests compare the two row for row); this module
changes how it is written.

Batches. A call waits in a queue while BATCHES_IN_FLIGHT transactions are running, and the calls
waiting then go together, up to BATCH_SIZE in one transaction (an idle service records a call at
once, alone). Two calls that share a player, a match id or a request key (caller, request id) never
share a transaction and never run in two at once: the later one waits for the next batch, and so
does every call queued behind it that shares one of its keys, so calls on one player are recorded
in their order of arrival. A batch is one transaction of four statements whatever its size:
    1. claim: the match rows inserted (ON CONFLICT DO NOTHING, in match id order), for the calls
       whose request key is not stored yet;
    2. players: every player's row created or updated by the match's XP and statistics (one
       INSERT ... ON CONFLICT DO UPDATE, in player id order: the per-player lock every recording
       takes, as `profiles.lock_players` does), returning the new totals;
    3. read: the ratings the matches change (after 2: under the players' locks, on a snapshot taken
       after them), from which the new ratings are computed here;
    4. write: XP events, levels that changed, ratings and their history, each match's result and
       each call's stored answer, and the leaderboards: from one row per player (XP gained, new
       rating scores, the periods' first dates) the statement reads the player's entries on the
       twenty boards, writes their new scores, and writes the count changes they make, summed,
       in key order; one statement of data-modifying CTEs over arrays sent as literals.
Locks are taken in one global order (match rows by id, then players by id, then count rows by key;
entries, ratings and events belong to a locked player), so batches running at once, and the
replicas' batches, never deadlock: the same order as `core.record_match`.

What a batch leaves to `slow` (the reference path in its own transaction, after the batch): a call
whose request key is already stored (a retry: its stored answer, or ALREADY_EXISTS), or whose match
id is already recorded (a replay under a new request id: the first result, or ALREADY_EXISTS). A
batch that fails (any database error, a deadlock included) is rolled back whole, and each of its
calls then runs alone through `slow`, so an error stays with the call that causes it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from google.protobuf.message import Message

from services.common.db import LazyPool
from services.ranking import leaderboards
from services.ranking.leaderboards import BUCKET_WIDTH, GLOBAL_SCOPE, micros, rating_score
from services.ranking.matches import FinishedMatch, MatchRecorded, PlayerAward
from services.ranking.periods import SLOT_MICROSECONDS, Period, first_day
from services.ranking.progress import Outcome, level_for, xp_for
from services.ranking.rating_store import after_match
from services.ranking.ratings import DEFAULT_MU, DEFAULT_SIGMA, RatingView

#: Calls per transaction, and transactions running at once (also the size of the asyncpg pool).
BATCH_SIZE = 32
BATCHES_IN_FLIGHT = 3
#: The session of the recorder's connections: every statement is the same few, with arrays for
#: parameters, and finds its rows by key: one generic plan per connection serves them all, and
#: sequential scans are ruled out (made while a table is small, a generic plan would scan and hash
#: whole tables, whose cost then grows with every match). Behind a transaction pooler these are not
#: passed on (docs/operations.md, "PgBouncer"): the statements then plan as usual.
PG_SESSION = {"plan_cache_mode": "force_generic_plan", "enable_seqscan": "off"}

def _arrays_as_text(sql: str) -> str:
    """The statement with each array parameter `$n::T[]` read from text (`$n::text::T[]`): the
    arrays go as literals (`arrays`)."""
    return re.sub(r"\$(\d+)::(\w+)\[\]", r"$\1::text::\2[]", sql)


_CLAIM = _arrays_as_text("""
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int2[], $5::bool[], $6::bool[], $7::bool[],
                         $8::bool[], $9::timestamptz[], $10::timestamptz[], $11::text[], $12::text[])
        AS i(match_id, content_hash, preset, players, express, competitive, annulled, shared_address,
             end_time, recorded_at, scope, request_id)
),
fresh AS (
    SELECT * FROM input i
    WHERE NOT EXISTS (SELECT 1 FROM ranking_idempotency_keys k WHERE k.scope = i.scope AND k.request_id = i.request_id)
)
INSERT INTO ranking_matches (match_id, content_hash, preset, players, express, competitive, annulled,
                             shared_address, rated, end_time, recorded_at, result)
SELECT match_id, content_hash, preset, players, express, competitive, annulled, shared_address, false,
       end_time, recorded_at, '\\x'::bytea
FROM fresh ORDER BY match_id
ON CONFLICT (match_id) DO NOTHING
RETURNING match_id
""")

_PLAYERS = _arrays_as_text("""
INSERT INTO ranking_players AS p (player, xp, level, matches, wins, losses, abandonments, canastras,
                                  score_sum, xp_events, updated_at)
SELECT player, xp, 1, matches, wins, losses, abandonments, canastras, score_sum, xp_events, updated_at
FROM unnest($1::text[], $2::int8[], $3::int8[], $4::int8[], $5::int8[], $6::int8[], $7::int8[], $8::int8[],
            $9::int8[], $10::timestamptz[])
    AS d(player, xp, matches, wins, losses, abandonments, canastras, score_sum, xp_events, updated_at)
ORDER BY player
ON CONFLICT (player) DO UPDATE SET
    xp = p.xp + excluded.xp, matches = p.matches + excluded.matches, wins = p.wins + excluded.wins,
    losses = p.losses + excluded.losses, abandonments = p.abandonments + excluded.abandonments,
    canastras = p.canastras + excluded.canastras, score_sum = p.score_sum + excluded.score_sum,
    xp_events = p.xp_events + excluded.xp_events, updated_at = excluded.updated_at
RETURNING player, xp, level, xp_events
""")

_READ = _arrays_as_text("""
SELECT r.player, r.preset, r.mu, r.sigma, r.matches, r.updated_at
FROM unnest($1::text[], $2::text[], $3::int2[]) AS k(player, preset, players)
JOIN ranking_ratings r ON r.player = k.player AND r.preset = k.preset AND r.players = k.players
""")


def _board_targets() -> str:
    """The VALUES list of the twenty leaderboards of one (match, player) row of `input`: XP and rating,
    global and the modality, five periods; the board key (`leaderboards.board_key`), its period's
    slot length, and the value (XP to add, a rating score to set; NULL: not on that board)."""
    periods = [(Period.ALL_TIME, "'-'"), (Period.DAILY, "i.day"), (Period.WEEKLY, "i.week"),
               (Period.MONTHLY, "i.month"), (Period.YEARLY, "i.year")]
    rows = []
    for scope, rating in (("'*'", "i.r_global"), ("i.preset", "i.r_preset")):
        for period, start in periods:
            slot = SLOT_MICROSECONDS[period]
            rows.append(f"(true, 'xp|' || {scope} || '|{period.value}|' || {start}, {slot}::int8, nullif(i.xp, 0))")
            rows.append(f"(false, i.metric || '|' || {scope} || '|{period.value}|' || {start}, {slot}::int8, {rating})")
    return ",\n            ".join(rows)


_WRITE = _arrays_as_text("""
WITH levels AS (
    UPDATE ranking_players p SET level = d.level
    FROM unnest($1::text[], $2::int4[]) AS d(player, level) WHERE p.player = d.player
),
events AS (
    INSERT INTO ranking_xp_events (player, seq, match_id, xp_gained, xp_total, level, level_up, time)
    SELECT * FROM unnest($3::text[], $4::int8[], $5::text[], $6::int8[], $7::int8[], $8::int4[], $9::bool[],
                         $10::timestamptz[])
),
ratings AS (
    INSERT INTO ranking_ratings AS r (player, preset, players, mu, sigma, matches, updated_at)
    SELECT * FROM unnest($11::text[], $12::text[], $13::int2[], $14::float8[], $15::float8[], $16::int8[],
                         $17::timestamptz[])
    ON CONFLICT (player, preset, players) DO UPDATE SET
        mu = excluded.mu, sigma = excluded.sigma, matches = excluded.matches, updated_at = excluded.updated_at
),
history AS (
    INSERT INTO ranking_rating_history (player, preset, players, seq, match_id, mu, sigma, time)
    SELECT * FROM unnest($11::text[], $12::text[], $13::int2[], $16::int8[], $18::text[], $14::float8[],
                         $15::float8[], $17::timestamptz[])
),
input AS (
    SELECT * FROM unnest($19::text[], $20::text[], $21::text[], $22::int8[], $23::int8[], $24::int8[], $25::int8[],
                         $26::text[], $27::text[], $28::text[], $29::text[])
        AS i(player, preset, metric, xp, r_global, r_preset, end_us, day, week, month, year)
),
targets AS (
    SELECT i.player, b.board, b.slot_length, b.is_xp, b.value, i.end_us
    FROM input i CROSS JOIN LATERAL (VALUES
            {targets}
        ) AS b(is_xp, board, slot_length, value)
    WHERE b.value IS NOT NULL
),
-- `leaderboards.update_boards`: XP added to the entry (or to 0), a rating score set unless the entry
-- already has it from a match that ended no earlier; the time reached is the later of the two.
changes AS (
    SELECT t.board, t.player, -e.order_score AS old_score, e.achieved_us AS old_achieved,
           CASE WHEN t.is_xp THEN coalesce(-e.order_score, 0) + t.value ELSE t.value END AS score,
           greatest(t.end_us, e.achieved_us) AS achieved, t.slot_length
    FROM targets t LEFT JOIN LATERAL (  -- one index look-up per target, never a scan of the boards
        SELECT e.player, e.order_score, e.achieved_us FROM ranking_board_entries e
        WHERE e.board = t.board AND e.player = t.player
    ) AS e ON true
    WHERE t.is_xp OR e.player IS NULL OR e.order_score <> -t.value OR e.achieved_us < t.end_us
),
entries AS (
    INSERT INTO ranking_board_entries (board, player, order_score, achieved_us)
    SELECT board, player, -score, achieved FROM changes
    ON CONFLICT (board, player) DO UPDATE SET order_score = excluded.order_score, achieved_us = excluded.achieved_us
),
counts AS (
    INSERT INTO ranking_board_counts AS c (board, "level", "key", slot, "count")
    SELECT board, "level", "key", slot, sum(delta) FROM (
        SELECT d.board, v.* FROM changes d CROSS JOIN LATERAL (VALUES
            (0::int2, (d.score - ((d.score % $30::int8) + $30::int8) % $30::int8) / $30::int8, 0::int8, 1),
            (1::int2, d.score, 0::int8, 1),
            (2::int2, d.score, d.achieved / d.slot_length, 1),
            (0::int2, (d.old_score - ((d.old_score % $30::int8) + $30::int8) % $30::int8) / $30::int8, 0::int8, -1),
            (1::int2, d.old_score, 0::int8, -1),
            (2::int2, d.old_score, d.old_achieved / d.slot_length, -1)
        ) AS v("level", "key", slot, delta)
        WHERE v."key" IS NOT NULL
    ) AS moves
    GROUP BY board, "level", "key", slot
    HAVING sum(delta) <> 0
    ORDER BY board COLLATE "C", "level", "key", slot  -- Python's sorted(), as the reference path
    ON CONFLICT (board, "level", "key", slot) DO UPDATE SET "count" = c."count" + excluded."count"
),
results AS (
    UPDATE ranking_matches m SET result = d.result, rated = d.rated
    FROM unnest($31::text[], $32::bytea[], $33::bool[]) AS d(match_id, result, rated) WHERE m.match_id = d.match_id
)
INSERT INTO ranking_idempotency_keys (scope, request_id, method, request_hash, response, created_at, expires_at)
SELECT * FROM unnest($34::text[], $35::text[], $36::text[], $37::text[], $38::bytea[], $39::timestamptz[],
                     $40::timestamptz[])
""").replace("{targets}", _board_targets())


METHOD = "RecordMatch"

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Call:
    """One RecordMatch call: its request key and hash (of the canonical request), the match, and
    how its answer is made (`respond`) and, off the fast path, obtained (`slow`)."""

    scope: str
    request_id: str
    request_hash: str
    match: FinishedMatch
    now: datetime
    respond: Callable[[MatchRecorded], Message]
    slow: Callable[[], Awaitable[Message]]
    future: asyncio.Future[Message] | None = None
    keys: frozenset[str] = field(default=frozenset())

    def __post_init__(self) -> None:
        players = (f"p:{s.player}" for s in self.match.seats)
        self.keys = frozenset((*players, f"m:{self.match.match_id}", f"r:{self.scope}\0{self.request_id}"))


class _Boards:
    """The first local dates of the day, week, month and year a match's end time falls in, kept per
    local date (forgotten past 4,096): a period's first date depends on nothing but the local date
    of the instant (`periods.bounds`), and the matches of a day share it."""

    def __init__(self, zone: ZoneInfo) -> None:
        self.zone = zone
        self._starts: dict[date, tuple[str, str, str, str]] = {}

    def starts(self, end_time: datetime) -> tuple[str, str, str, str]:
        day = end_time.astimezone(self.zone).date()
        found = self._starts.get(day)
        if found is None:
            if len(self._starts) > 4096:
                self._starts.clear()
            first, week, month, year = (
                first_day(period, day).isoformat()
                for period in (Period.DAILY, Period.WEEKLY, Period.MONTHLY, Period.YEARLY)
            )
            found = self._starts[day] = (first, week, month, year)
        return found


@dataclass
class _Writes:
    """The batch's fourth statement's arrays."""

    level_players: list[str] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)
    events: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(8)])
    ratings: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(8)])
    #: Per player of a match that awards: player, preset, rating metric, XP gained, new rating
    #: scores (global, modality; None: unrated), end time (microseconds), the day's, week's, month's
    #: and year's first dates (the statement derives the entries and counts from them).
    boards: list[tuple[Any, ...]] = field(default_factory=list)
    results: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(3)])
    answers: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(7)])

    def arguments(self) -> list[Any]:
        boards: list[tuple[Any, ...]] = list(zip(*self.boards, strict=True)) if self.boards else [()] * 11
        return [*arrays(self.level_players, self.levels, *self.events, *self.ratings, *boards), BUCKET_WIDTH,
                *arrays(*self.results, *self.answers)]


def _element(value: Any) -> str:
    """One element of a PostgreSQL array literal: NULL, a number, t/f, or a quoted string (a text,
    a time in ISO 8601, bytes in hex), which the server reads back exactly (floats: Python's
    shortest round-tripping form)."""
    if value is None:
        return "NULL"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, datetime):
        return '"' + value.isoformat() + '"'
    if isinstance(value, bytes):
        return '"\\\\x' + value.hex() + '"'
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _array(column: Sequence[Any]) -> str:
    """A column as a PostgreSQL array literal (`_element` for each value), the columns of one type
    (strings needing no escape; integers, floats or booleans, with NULLs; times) joined at C speed.
    A column holds one type: a stray value fails the statement (and the batch: its calls then run
    through the reference path), it is never written as something else."""
    if not column:
        return "{}"
    kind: type = type(next((v for v in column if v is not None), None))
    if kind is str:
        try:
            joined = '","'.join(column)
        except TypeError:  # a NULL among the strings
            return "{" + ",".join(map(_element, column)) + "}"
        if joined.count('"') == 2 * (len(column) - 1) and "\\" not in joined:  # only the separators' quotes
            return '{"' + joined + '"}'
    elif kind in (int, float, bool, type(None)):
        # str() of each ("True" and "False" read as booleans), None written as NULL
        return "{" + ",".join(map(str, column)).replace("None", "NULL") + "}"
    elif kind is datetime and None not in column:
        return '{"' + '","'.join(map(datetime.isoformat, column)) + '"}'
    return "{" + ",".join(map(_element, column)) + "}"


def arrays(*columns: Sequence[Any]) -> list[str]:
    """Each column as a PostgreSQL array literal: every statement here takes its arrays as text
    (`$1::text::int8[]`), which the server parses; asyncpg's array encoder costs several times more
    per element, and a batch sends thousands."""
    return [_array(column) for column in columns]


class Recorder:
    """The batching recorder of one process (module docstring), on its own asyncpg pool."""

    def __init__(self, pool: LazyPool, *, zone: ZoneInfo, retention: timedelta,
                 batch_size: int = BATCH_SIZE, in_flight: int = BATCHES_IN_FLIGHT) -> None:
        self.pool = pool
        self.retention = retention
        self.batch_size = batch_size
        self.in_flight = in_flight
        self._boards = _Boards(zone)
        self._queue: deque[Call] = deque()
        self._running = 0
        self._busy: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: Transactions run, the calls they recorded, and the calls left to `slow` (tests, logs).
        self.batches = 0
        self.recorded = 0
        self.slow_calls = 0

    async def record(self, call: Call) -> Message:
        (future,) = self.submit(call)
        return await future

    def submit(self, *calls: Call) -> list[asyncio.Future[Message]]:
        """Queue `calls`, in their order, before any batch is formed from them (so that the calls of
        one RecordMatches fill batches together rather than the first few going alone); each one's
        answer (or error) comes in its future."""
        loop = asyncio.get_running_loop()
        for call in calls:
            call.future = loop.create_future()
            self._queue.append(call)
        self._dispatch()
        return [call.future for call in calls if call.future is not None]

    async def close(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.pool.close()

    def _dispatch(self) -> None:
        while self._running < self.in_flight and self._queue:
            batch: list[Call] = []
            waiting: deque[Call] = deque()
            blocked = set(self._busy)
            for call in self._queue:
                if len(batch) < self.batch_size and blocked.isdisjoint(call.keys):
                    batch.append(call)
                else:
                    waiting.append(call)
                blocked.update(call.keys)  # whoever shares a key with a call ahead waits behind it
            if not batch:
                return
            self._queue = waiting
            for call in batch:
                self._busy.update(call.keys)
            self._running += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[Call]) -> None:
        answers: dict[Call, Message] = {}
        try:
            answers = await self._write(batch)
        except Exception:  # every call of a failed batch runs again alone (module docstring)
            log.warning("a batch of %d matches failed; its calls run again one by one", len(batch), exc_info=True)
            answers = {}
        finally:
            self._running -= 1
            for call in batch:
                self._busy.difference_update(call.keys)
            self._dispatch()
        for call in batch:
            answer = answers.get(call)
            if answer is not None:
                assert call.future is not None
                if not call.future.done():
                    call.future.set_result(answer)
        rest = [call for call in batch if call not in answers]
        self.slow_calls += len(rest)
        await asyncio.gather(*(self._slow(call) for call in rest))

    @staticmethod
    async def _slow(call: Call) -> None:
        assert call.future is not None
        try:
            answer = await call.slow()
        except BaseException as error:  # handed to the caller's future
            if not call.future.done():
                call.future.set_exception(error)
            if not isinstance(error, Exception):
                raise
            return
        if not call.future.done():
            call.future.set_result(answer)

    # -- one transaction ------------------------------------------------------------------------

    async def _write(self, batch: list[Call]) -> dict[Call, Message]:
        pool = await self.pool.get()
        async with pool.acquire() as connection, connection.transaction():
            claimed = await self._claim(connection, batch)
            calls = [call for call in batch if call.match.match_id in claimed]
            if not calls:
                return {}
            totals = await self._update_players(connection, calls)
            ratings = await self._read(connection, calls)
            writes = _Writes()
            answers = {call: self._plan(call, totals, ratings, writes) for call in calls}
            await connection.execute(_WRITE, *writes.arguments())
        self.batches += 1
        self.recorded += len(calls)
        return answers

    @staticmethod
    async def _claim(connection: Any, batch: Sequence[Call]) -> set[str]:
        matches = [call.match for call in batch]
        rows = await connection.fetch(_CLAIM, *arrays(
            [m.match_id for m in matches],
            [m.content_hash for m in matches],
            [m.preset for m in matches],
            [m.players for m in matches],
            [m.express for m in matches],
            [m.competitive for m in matches],
            [m.annulled for m in matches],
            [m.shared_address for m in matches],
            [m.end_time for m in matches],
            [call.now for call in batch],
            [call.scope for call in batch],
            [call.request_id for call in batch],
        ))
        return {row[0] for row in rows}

    @staticmethod
    async def _update_players(connection: Any, calls: Sequence[Call]) -> dict[str, tuple[int, int, int]]:
        """Every player's XP and statistics moved by their match; player -> (XP, level before,
        XP events), the XP and events after the match."""
        columns: list[list[Any]] = [[] for _ in range(10)]
        for call in sorted(calls, key=lambda c: c.match.match_id):
            match = call.match
            counted = match.competitive and not match.annulled
            awards = match.awards
            for seat in match.seats:
                xp = xp_for(seat.outcome, express=match.express) if awards else 0
                outcome = seat.outcome
                for column, value in zip(
                    columns,
                    (
                        seat.player,
                        xp,
                        int(counted),
                        int(counted and outcome is Outcome.WON),
                        int(counted and outcome is Outcome.LOST),
                        int(counted and outcome is Outcome.ABANDONED),
                        seat.canastras if counted else 0,
                        seat.score if counted else 0,
                        int(xp > 0),
                        call.now,
                    ),
                    strict=True,
                ):
                    column.append(value)
        rows = await connection.fetch(_PLAYERS, *arrays(*columns))
        return {row[0]: (int(row[1]), int(row[2]), int(row[3])) for row in rows}

    @staticmethod
    async def _read(connection: Any, calls: Sequence[Call]) -> dict[tuple[str, str], RatingView]:
        """The ratings the rated matches change, by (player, preset); the unrated are missing."""
        keys: list[list[Any]] = [[], [], []]
        for call in calls:
            match = call.match
            if match.rated:
                for seat in match.seats:
                    for scope in (match.preset, GLOBAL_SCOPE):
                        keys[0].append(seat.player)
                        keys[1].append(scope)
                        keys[2].append(match.players)
        if not keys[0]:
            return {}
        sizes = dict(zip(zip(keys[0], keys[1], strict=True), keys[2], strict=True))
        return {
            (row[0], row[1]): RatingView(row[0], row[1], sizes[(row[0], row[1])], row[2], row[3], int(row[4]), row[5])
            for row in await connection.fetch(_READ, *arrays(*keys))
        }

    def _plan(
        self,
        call: Call,
        totals: dict[str, tuple[int, int, int]],
        ratings: dict[tuple[str, str], RatingView],
        writes: _Writes,
    ) -> Message:
        """What `core.record_match` writes and answers for this call's match, added to `writes`."""
        match = call.match
        awards_points = match.awards
        awards: list[PlayerAward] = []
        gained: dict[str, int] = {}
        for seat in match.seats:
            xp_gained = xp_for(seat.outcome, express=match.express) if awards_points else 0
            gained[seat.player] = xp_gained
            xp, level_before, events = totals[seat.player]
            level = level_for(xp)
            level_up = level > level_before
            if level != level_before:
                writes.level_players.append(seat.player)
                writes.levels.append(level)
            if xp_gained > 0:
                for column, value in zip(
                    writes.events,
                    (seat.player, events, match.match_id, xp_gained, xp, level, level_up, match.end_time),
                    strict=True,
                ):
                    column.append(value)
            awards.append(PlayerAward(seat.player, xp_gained, xp, level, level_up))

        ratings_before: dict[str, RatingView] = {}
        ratings_after: dict[str, RatingView] = {}
        overall_after: dict[str, RatingView] = {}
        if match.rated:
            for preset in (match.preset, GLOBAL_SCOPE):
                before = {
                    s.player: ratings.get((s.player, preset))
                    or RatingView(s.player, preset, match.players, DEFAULT_MU, DEFAULT_SIGMA, 0)
                    for s in match.seats
                }
                after = after_match(match, before)
                for view in after.values():
                    for column, value in zip(
                        writes.ratings,
                        (view.player, view.preset, view.players, view.mu, view.sigma, view.matches, match.end_time,
                         match.match_id),
                        strict=True,
                    ):
                        column.append(value)
                if preset == GLOBAL_SCOPE:
                    overall_after = after
                else:
                    ratings_before, ratings_after = before, after
        if awards_points:
            self._plan_boards(match, gained, ratings_after, overall_after, writes)

        result = MatchRecorded(
            results=tuple(
                PlayerAward(a.player, a.xp_gained, a.xp_total, a.level, a.level_up,
                            ratings_before.get(a.player), ratings_after.get(a.player))
                for a in awards
            ),
            rated=match.rated,
        )
        writes.results[0].append(match.match_id)
        writes.results[1].append(result.to_json())
        writes.results[2].append(match.rated)
        answer = call.respond(result)
        for column, value in zip(
            writes.answers,
            (call.scope, call.request_id, METHOD, call.request_hash, answer.SerializeToString(deterministic=True),
             call.now, call.now + self.retention),
            strict=True,
        ):
            column.append(value)
        return answer

    def _plan_boards(
        self,
        match: FinishedMatch,
        gained: dict[str, int],
        ratings_after: dict[str, RatingView],
        overall_after: dict[str, RatingView],
        writes: _Writes,
    ) -> None:
        """What `leaderboards.update_boards` needs, one row per player, into `writes` (the
        statement's `input`)."""
        starts = self._boards.starts(match.end_time)
        end_us = micros(match.end_time)
        metric = leaderboards.rating_metric(match.players)
        for player, xp in gained.items():
            overall = overall_after.get(player)
            modality = ratings_after.get(player)
            writes.boards.append((
                player, match.preset, metric, xp,
                None if overall is None else rating_score(overall.ordinal),
                None if modality is None else rating_score(modality.ordinal),
                end_us, *starts,
            ))
