"""The ranking service's domain logic: plain functions over explicit dependencies (a database
session, the time zone, the clock), returning results or raising the errors of `errors.py`.
No grpc here; api.py checks requests and builds replies. docs/ranking.md has the rules.

    record_match      XP, levels, statistics, ratings and leaderboards from one finished match
    get_profile       a player's XP, level and statistics
    list_xp_events    a player's XP awards and level-ups, newest first
    get_ratings       ratings of players for a preset and table size (defaults for the unrated)
    rating_history    a player's rating after each rated match, newest first
    leaderboard_page  a leaderboard from the top or from a page token's position
    leaderboard_rank  a player's entry and rank
    neighbours        the entries around a player
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from services.ranking import leaderboards, models
from services.ranking.errors import MatchConflictError, NotOnLeaderboardError
from services.ranking.leaderboards import GLOBAL_SCOPE, XP_METRIC, EntryChange, Position
from services.ranking.periods import Period, PeriodBounds, bounds
from services.ranking.progress import Outcome, level_for, level_start, xp_for
from services.ranking.ratings import Skill, ordinal, rate_sides

# -- what comes in ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeatResult:
    """One human player of a finished match."""

    player: str
    seat: int
    outcome: Outcome
    #: The side's final match score.
    score: int
    canastras: int
    #: Seats with the same group number came from the same address; None: address unknown.
    address_group: int | None = None

    @property
    def side(self) -> int:
        return self.seat % 2


@dataclass(frozen=True)
class FinishedMatch:
    match_id: str
    preset: str
    players: int
    express: bool
    competitive: bool
    annulled: bool
    end_time: datetime
    seats: tuple[SeatResult, ...]
    #: SHA-256 of the request as the caller sent it (without request id and addresses).
    content_hash: str

    @property
    def shared_address(self) -> bool:
        groups = [s.address_group for s in self.seats if s.address_group is not None]
        return len(groups) != len(set(groups))

    @property
    def awards(self) -> bool:
        """XP, ratings and leaderboard points: competitive, not annulled, no shared address."""
        return self.competitive and not self.annulled and not self.shared_address

    @property
    def winning_side(self) -> int | None:
        """The side that won, from the outcomes of the players who stayed; None if nobody did."""
        for seat in self.seats:
            if seat.outcome is Outcome.WON:
                return seat.side
            if seat.outcome is Outcome.LOST:
                return 1 - seat.side
        return None

    @property
    def rated(self) -> bool:
        """Ratings move only when the match awards, every seat was a human and a side won."""
        return self.awards and len(self.seats) == self.players and self.winning_side is not None


# -- what goes out ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RatingView:
    player: str
    preset: str
    players: int
    mu: float
    sigma: float
    matches: int
    updated_at: datetime | None = None
    match_id: str = ""

    @property
    def ordinal(self) -> float:
        return ordinal(self.mu, self.sigma)

    def to_json(self) -> dict[str, Any]:
        return {
            "player": self.player,
            "preset": self.preset,
            "players": self.players,
            "mu": self.mu,
            "sigma": self.sigma,
            "matches": self.matches,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "match_id": self.match_id,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> RatingView:
        updated = data["updated_at"]
        return RatingView(
            player=data["player"],
            preset=data["preset"],
            players=data["players"],
            mu=data["mu"],
            sigma=data["sigma"],
            matches=data["matches"],
            updated_at=datetime.fromisoformat(updated) if updated else None,
            match_id=data["match_id"],
        )


@dataclass(frozen=True)
class PlayerAward:
    player: str
    xp_gained: int
    xp_total: int
    level: int
    level_up: bool
    rating_before: RatingView | None = None
    rating_after: RatingView | None = None


@dataclass(frozen=True)
class MatchRecorded:
    results: tuple[PlayerAward, ...]
    rated: bool

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "rated": self.rated,
                "results": [
                    {
                        "player": r.player,
                        "xp_gained": r.xp_gained,
                        "xp_total": r.xp_total,
                        "level": r.level,
                        "level_up": r.level_up,
                        "rating_before": r.rating_before.to_json() if r.rating_before else None,
                        "rating_after": r.rating_after.to_json() if r.rating_after else None,
                    }
                    for r in self.results
                ],
            },
            separators=(",", ":"),
        ).encode()

    @staticmethod
    def from_json(raw: bytes) -> MatchRecorded:
        data = json.loads(raw)
        return MatchRecorded(
            rated=data["rated"],
            results=tuple(
                PlayerAward(
                    player=r["player"],
                    xp_gained=r["xp_gained"],
                    xp_total=r["xp_total"],
                    level=r["level"],
                    level_up=r["level_up"],
                    rating_before=RatingView.from_json(r["rating_before"]) if r["rating_before"] else None,
                    rating_after=RatingView.from_json(r["rating_after"]) if r["rating_after"] else None,
                )
                for r in data["results"]
            ),
        )


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


@dataclass(frozen=True)
class Ranked:
    rank: int
    position: Position


# -- recording ----------------------------------------------------------------------------------


def _aware(moment: datetime) -> datetime:
    """SQLite gives naive datetimes back; they were stored as UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def micros(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=value)


async def record_match(session: AsyncSession, match: FinishedMatch, *, zone: ZoneInfo, now: datetime) -> MatchRecorded:
    """Record `match` once: a second call with the same content returns the first result; with
    other content it fails with MatchConflictError (ALREADY_EXISTS)."""
    earlier = await _claim(session, match, now)
    if earlier is not None:
        return earlier

    ids = sorted(s.player for s in match.seats)
    profiles = await _lock_players(session, ids, now)
    gained = {s.player: (xp_for(s.outcome, express=match.express) if match.awards else 0) for s in match.seats}

    ratings_before: dict[str, RatingView] = {}
    ratings_after: dict[str, RatingView] = {}
    overall_after: dict[str, RatingView] = {}
    if match.rated:
        changed = await _rate(session, match, [match.preset, GLOBAL_SCOPE])
        ratings_before, ratings_after = changed[match.preset]
        overall_after = changed[GLOBAL_SCOPE][1]

    awards = await _update_players(session, match, profiles, gained, now)

    await _update_boards(session, match, gained, ratings_after, overall_after, zone)

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


async def _lock_players(session: AsyncSession, ids: list[str], now: datetime) -> dict[str, dict[str, Any]]:
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


def _rated(match: FinishedMatch, before: dict[str, RatingView]) -> dict[str, RatingView]:
    """Every seat's rating after the match, from their ratings before it (one preset)."""
    winner = match.winning_side
    assert winner is not None
    seats_by_side = [sorted((s for s in match.seats if s.side == side), key=lambda s: s.seat) for side in (0, 1)]
    sides = [[Skill(before[s.player].mu, before[s.player].sigma) for s in side] for side in seats_by_side]
    result = rate_sides(sides, winner)
    as_loss = rate_sides(sides, 1 - winner)  # for players who abandoned a side that went on to win
    after: dict[str, RatingView] = {}
    for side, seats in enumerate(seats_by_side):
        for index, seat in enumerate(seats):
            abandoned_a_winner = seat.outcome is Outcome.ABANDONED and side == winner
            skill = as_loss[side][index] if abandoned_a_winner else result[side][index]
            old = before[seat.player]
            after[seat.player] = replace(
                old,
                mu=skill.mu,
                sigma=skill.sigma,
                matches=old.matches + 1,
                updated_at=match.end_time,
                match_id=match.match_id,
            )
    return after


async def _rate(
    session: AsyncSession, match: FinishedMatch, presets: Sequence[str]
) -> dict[str, tuple[dict[str, RatingView], dict[str, RatingView]]]:
    """Update every seat's ratings for each of `presets` and the table size, and append their
    history (one read, one upsert and one insert for all of them); per preset, before and after."""
    ids = [s.player for s in match.seats]
    befores = await _ratings(session, ids, presets, match.players)
    changes = {preset: (befores[preset], _rated(match, befores[preset])) for preset in presets}
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


async def _update_players(
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


async def _update_boards(
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
    rating_metric = leaderboards.rating_metric(match.players)
    for period, start in starts.items():
        for scope in (GLOBAL_SCOPE, match.preset):
            xp_board = leaderboards.board_key(XP_METRIC, scope, period, start)
            for player, xp in gained.items():
                if xp > 0:
                    additions[(xp_board, player)] = xp
            rating_board = leaderboards.board_key(rating_metric, scope, period, start)
            source = overall_after if scope == GLOBAL_SCOPE else ratings_after
            for player, rating in source.items():
                replacements[(rating_board, player)] = leaderboards.rating_score(rating.ordinal)
    keys = [*additions, *replacements]
    if not keys:
        return
    existing = await leaderboards.current(session, [b for b, _ in keys], [p for _, p in keys])
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
    await leaderboards.apply(session, changes)


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
        XpEvent(r.seq, r.match_id, r.xp_gained, r.xp_total, r.level, r.level_up, _aware(r.time)) for r in rows[:limit]
    ]
    return events, (events[-1].seq if len(rows) > limit else None)


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
            row.player, row.preset, players, row.mu, row.sigma, row.matches, _aware(row.updated_at)
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
        RatingView(player, preset, players, r.mu, r.sigma, r.seq, _aware(r.time), r.match_id) for r in rows[:limit]
    ]
    return views, (views[-1].matches if len(rows) > limit else None)


@dataclass(frozen=True)
class BoardRef:
    """Which leaderboard a request names, resolved to a key for the period that contains `at`."""

    metric: str
    scope: str
    bounds: PeriodBounds

    @property
    def key(self) -> str:
        return leaderboards.board_key(self.metric, self.scope, self.bounds.period, self.bounds.start_name)


def board_ref(metric: str, scope: str, period: Period, at: datetime, zone: ZoneInfo) -> BoardRef:
    return BoardRef(metric, scope, bounds(period, at, zone))


async def leaderboard_page(
    session: AsyncSession, board: str, *, after: Position | None, limit: int
) -> tuple[list[Ranked], bool]:
    """Up to `limit` entries after `after` (from the top when None), ranked; and whether more follow."""
    positions = await leaderboards.after(session, board, after, limit + 1)
    more = len(positions) > limit
    positions = positions[:limit]
    if not positions:
        return [], False
    first = 1 if after is None else await leaderboards.rank_of(session, board, positions[0])
    return [Ranked(first + i, p) for i, p in enumerate(positions)], more


async def leaderboard_rank(session: AsyncSession, board: str, player: str) -> Ranked:
    found = await leaderboards.rank_of_player(session, board, player)
    if found is None:
        raise NotOnLeaderboardError(player)
    position, rank = found
    return Ranked(rank, position)


async def neighbours(session: AsyncSession, board: str, player: str, *, above: int, below: int) -> list[Ranked]:
    """`above` entries before the player, the player, `below` entries after, with their ranks."""
    own = await leaderboard_rank(session, board, player)
    earlier = await leaderboards.before(session, board, own.position, above) if above else []
    later = await leaderboards.after(session, board, own.position, below) if below else []
    first = own.rank - len(earlier)
    return [Ranked(first + i, p) for i, p in enumerate([*earlier, own.position, *later])]


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
