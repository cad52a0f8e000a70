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
    3. read: the ratings and leaderboard entries the matches change (read after 2, so under the
       players' locks and on a snapshot taken after them);
    4. write: XP events, levels that changed, ratings and their history, leaderboard entries, the
       summed count changes (in key order), each match's result and each call's stored answer,
       all in one statement of data-modifying CTEs over arrays (unnest).
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
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from google.protobuf.message import Message

from services.common.db import LazyPool
from services.ranking import leaderboards
from services.ranking.leaderboards import BUCKET_WIDTH, GLOBAL_SCOPE, XP_METRIC, board_key, micros, rating_score
from services.ranking.matches import FinishedMatch, MatchRecorded, PlayerAward
from services.ranking.periods import SLOT_MICROSECONDS, Period, bounds
from services.ranking.progress import Outcome, level_for, xp_for
from services.ranking.rating_store import after_match
from services.ranking.ratings import DEFAULT_MU, DEFAULT_SIGMA, RatingView

#: Calls per transaction, and transactions running at once (also the size of the asyncpg pool).
BATCH_SIZE = 32
BATCHES_IN_FLIGHT = 3
#: The session of the recorder's connections: every statement is the same few, with arrays for
#: parameters; one generic plan per connection serves them all.
PG_SESSION = {"plan_cache_mode": "force_generic_plan"}

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
SELECT 0 AS kind, r.player, r.preset AS key, r.mu, r.sigma, r.matches AS a, 0::int8 AS b, r.updated_at AS t
FROM unnest($1::text[], $2::text[], $3::int2[]) AS k(player, preset, players)
JOIN ranking_ratings r ON r.player = k.player AND r.preset = k.preset AND r.players = k.players
UNION ALL
SELECT 1, e.player, e.board, 0, 0, e.order_score, e.achieved_us, NULL
FROM unnest($4::text[], $5::text[]) AS k(board, player)
JOIN ranking_board_entries e ON e.board = k.board AND e.player = k.player
""")

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
changes AS (
    SELECT * FROM unnest($19::text[], $20::text[], $21::int8[], $22::int8[],
                         $23::int8[], $24::int8[], $25::int8[])
        AS d(board, player, old_score, old_achieved, score, achieved, slot_length)
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
            (0::int2, (d.score - ((d.score % $26::int8) + $26::int8) % $26::int8) / $26::int8, 0::int8, 1),
            (1::int2, d.score, 0::int8, 1),
            (2::int2, d.score, d.achieved / d.slot_length, 1),
            (0::int2, (d.old_score - ((d.old_score % $26::int8) + $26::int8) % $26::int8) / $26::int8, 0::int8, -1),
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
    FROM unnest($27::text[], $28::bytea[], $29::bool[]) AS d(match_id, result, rated) WHERE m.match_id = d.match_id
)
INSERT INTO ranking_idempotency_keys (scope, request_id, method, request_hash, response, created_at, expires_at)
SELECT * FROM unnest($30::text[], $31::text[], $32::text[], $33::text[], $34::bytea[], $35::timestamptz[],
                     $36::timestamptz[])
""")

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
    """The leaderboards a match's end time falls in: per (metric, scope), the ten keys (five periods)
    with their slot lengths, kept per local date (a few entries a day)."""

    def __init__(self, zone: ZoneInfo) -> None:
        self.zone = zone
        self._starts: dict[object, dict[Period, str]] = {}
        self._keys: dict[tuple[object, str, str], list[tuple[str, int]]] = {}

    def keys(self, end_time: datetime, metric: str, scope: str) -> list[tuple[str, int]]:
        day = end_time.astimezone(self.zone).date()
        found = self._keys.get((day, metric, scope))
        if found is None:
            if len(self._keys) > 4096:
                self._keys.clear()
                self._starts.clear()
            starts = self._starts.get(day)
            if starts is None:
                starts = self._starts[day] = {p: bounds(p, end_time, self.zone).start_name for p in Period}
            found = self._keys[(day, metric, scope)] = [
                (board_key(metric, scope, period, start), SLOT_MICROSECONDS[period]) for period, start in starts.items()
            ]
        return found


@dataclass
class _Writes:
    """The batch's fourth statement's arrays."""

    level_players: list[str] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)
    events: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(8)])
    ratings: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(8)])
    #: Per changed entry: board, player, old score and time (None: new), new score and time, the
    #: board's slot length (the statement derives the count changes from them).
    entries: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(7)])
    results: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(3)])
    answers: list[list[Any]] = field(default_factory=lambda: [[] for _ in range(7)])

    def arguments(self) -> list[Any]:
        return [*arrays(self.level_players, self.levels, *self.events, *self.ratings, *self.entries), BUCKET_WIDTH,
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
    """A column as a PostgreSQL array literal (`_element` for each value), the common columns (all
    strings needing no escape, all integers, all floats) joined at C speed."""
    if not column:
        return "{}"
    first = column[0]
    if type(first) is str:
        joined = '","'.join(column)
        if '"' not in joined and "\\" not in joined and all(type(v) is str for v in column):
            return '{"' + joined + '"}'
    elif (type(first) is int or type(first) is float) and None not in column:
        return "{" + ",".join(map(repr, column)) + "}"
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
        call.future = asyncio.get_running_loop().create_future()
        self._queue.append(call)
        self._dispatch()
        return await call.future

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
            ratings, entries = await self._read(connection, calls)
            writes = _Writes()
            answers = {call: self._plan(call, totals, ratings, entries, writes) for call in calls}
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

    def _read(self, connection: Any, calls: Sequence[Call]) -> Awaitable[tuple[
            dict[tuple[str, str], RatingView], dict[tuple[str, str], tuple[int, int]]]]:
        rating_keys: list[list[Any]] = [[], [], []]
        entry_keys: list[list[str]] = [[], []]
        for call in calls:
            match = call.match
            if not match.awards:
                continue
            for seat in match.seats:
                if xp_for(seat.outcome, express=match.express) > 0:
                    for scope in (GLOBAL_SCOPE, match.preset):
                        for board, _ in self._boards.keys(match.end_time, XP_METRIC, scope):
                            entry_keys[0].append(board)
                            entry_keys[1].append(seat.player)
            if match.rated:
                metric = leaderboards.rating_metric(match.players)
                for seat in match.seats:
                    for scope in (match.preset, GLOBAL_SCOPE):
                        rating_keys[0].append(seat.player)
                        rating_keys[1].append(scope)
                        rating_keys[2].append(match.players)
                        for board, _ in self._boards.keys(match.end_time, metric, scope):
                            entry_keys[0].append(board)
                            entry_keys[1].append(seat.player)
        return self._fetch_read(connection, rating_keys, entry_keys)

    @staticmethod
    async def _fetch_read(connection: Any, rating_keys: list[list[Any]], entry_keys: list[list[str]]) -> tuple[
            dict[tuple[str, str], RatingView], dict[tuple[str, str], tuple[int, int]]]:
        ratings: dict[tuple[str, str], RatingView] = {}
        entries: dict[tuple[str, str], tuple[int, int]] = {}
        if not rating_keys[0] and not entry_keys[0]:
            return ratings, entries
        sizes = dict(zip(zip(rating_keys[0], rating_keys[1], strict=True), rating_keys[2], strict=True))
        for row in await connection.fetch(_READ, *arrays(*rating_keys, *entry_keys)):
            if row[0] == 0:
                player, preset = row[1], row[2]
                ratings[(player, preset)] = RatingView(
                    player, preset, sizes[(player, preset)], row[3], row[4], int(row[5]), row[7]
                )
            else:
                entries[(row[2], row[1])] = (-int(row[5]), int(row[6]))
        return ratings, entries

    def _plan(
        self,
        call: Call,
        totals: dict[str, tuple[int, int, int]],
        ratings: dict[tuple[str, str], RatingView],
        entries: dict[tuple[str, str], tuple[int, int]],
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
            self._plan_boards(match, gained, ratings_after, overall_after, entries, writes)

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
        entries: dict[tuple[str, str], tuple[int, int]],
        writes: _Writes,
    ) -> None:
        """`leaderboards.update_boards`, into `writes` (the statement makes `leaderboards.count_deltas`
        of them)."""
        end_us = micros(match.end_time)
        boards, players, old_scores, old_achieved, scores, achieved, slots = writes.entries
        metric = leaderboards.rating_metric(match.players)

        def change(board: str, slot_length: int, player: str, old: tuple[int, int] | None, score: int) -> None:
            boards.append(board)
            players.append(player)
            slots.append(slot_length)
            scores.append(score)
            if old is None:
                old_scores.append(None)
                old_achieved.append(None)
                achieved.append(end_us)
            else:
                old_scores.append(old[0])
                old_achieved.append(old[1])
                achieved.append(end_us if old[1] < end_us else old[1])

        for scope in (GLOBAL_SCOPE, match.preset):
            for player, xp in gained.items():
                if xp > 0:
                    for board, slot_length in self._boards.keys(match.end_time, XP_METRIC, scope):
                        old = entries.get((board, player))
                        change(board, slot_length, player, old, (old[0] if old else 0) + xp)
            source = overall_after if scope == GLOBAL_SCOPE else ratings_after
            for player, view in source.items():
                score = rating_score(view.ordinal)
                for board, slot_length in self._boards.keys(match.end_time, metric, scope):
                    old = entries.get((board, player))
                    if old is None or old[0] != score or old[1] < end_us:
                        change(board, slot_length, player, old, score)
