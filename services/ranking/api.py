"""The ranking service's gRPC API: a thin servicer (read the caller, check the input, call the
domain modules: core, profiles, rating_store, leaderboards; build the reply; errors are mapped by
the server pipeline).

Who may call what: RecordMatch and RecordMatches, the game-session service only, and
BatchGetRatings, any service and admins (`CALLERS`, docs/contracts.md "Who may call what");
ListXpEvents, a player for themselves, services and admins for anyone; profiles, ratings, rating
histories and leaderboards, any authenticated caller (they are public on the platform);
EraseLoadTestRun, admins only.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeAlias, cast

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from buraco.v1 import common_pb2, ranking_pb2, ranking_pb2_grpc
from engine.rules import PRESETS
from services.common import loadtest_runs
from services.common import validation as check
from services.common.auth import ANY_SERVICE, Callers, allow, current_identity
from services.common.db import Database, LazyPool
from services.common.errors import InvalidArgumentError
from services.common.idempotency import IdempotencyStore, request_hash
from services.common.server import Deps, Hooks
from services.ranking import core, erasure, leaderboards, matches, models, profiles, rating_store, ratings
from services.ranking.batches import Alone, record_matches
from services.ranking.leaderboards import GLOBAL_SCOPE, XP_METRIC, Position
from services.ranking.periods import Period, PeriodBounds, bounds, local_midnight
from services.ranking.progress import Outcome
from services.ranking.recorder import BATCHES_IN_FLIGHT, PG_SESSION, Call, Recorder
from services.ranking.settings import RankingSettings

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Clock = Callable[[], datetime]

_OUTCOMES: dict[int, Outcome] = {
    common_pb2.OUTCOME_WON: Outcome.WON,
    common_pb2.OUTCOME_LOST: Outcome.LOST,
    common_pb2.OUTCOME_ABANDONED: Outcome.ABANDONED,
    common_pb2.OUTCOME_VOID: Outcome.VOID,
}
_PERIODS: dict[int, Period] = {
    ranking_pb2.Leaderboard.PERIOD_ALL_TIME: Period.ALL_TIME,
    ranking_pb2.Leaderboard.PERIOD_DAILY: Period.DAILY,
    ranking_pb2.Leaderboard.PERIOD_WEEKLY: Period.WEEKLY,
    ranking_pb2.Leaderboard.PERIOD_MONTHLY: Period.MONTHLY,
    ranking_pb2.Leaderboard.PERIOD_YEARLY: Period.YEARLY,
}
#: Earliest end time accepted, and how far in the future (clock skew between services).
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
#: Latest instant accepted anywhere (a period must have an end that dates can express).
LATEST = datetime(3000, 1, 1, tzinfo=UTC)
FUTURE_SKEW = timedelta(minutes=5)
MAX_SCORE = 1_000_000
MAX_CANASTRAS = 1000
MAX_BATCH = 1000

log = logging.getLogger(__name__)

#: Who may call each method that service identities call. Only the game-session service records
#: matches (its outbox, at a match's end): a rating moves only on a match a table really played.
#: Ratings are public (GetRating), so any service (matchmaking and tournaments seed with them) and
#: admins read them in batches. A new method is one line here.
CALLERS = Callers("RankingService", {
    "RecordMatch": allow("game-session"),
    "RecordMatches": allow("game-session"),
    "BatchGetRatings": allow(ANY_SERVICE, admins=True),
})


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _timestamp(moment: datetime) -> Timestamp:
    """`Timestamp.FromDatetime` (a naive time read as UTC), computed in a few integer operations."""
    delta = (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)) - _EPOCH
    return Timestamp(seconds=delta.days * 86400 + delta.seconds, nanos=delta.microseconds * 1000)


def _instant(stamp: Timestamp, field: str) -> datetime:
    check.require(0 <= stamp.nanos < 1_000_000_000, field, "nanos out of range")
    try:
        moment = stamp.ToDatetime(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        raise InvalidArgumentError(field, "not a valid time") from None
    check.require(moment >= EARLIEST, field, "before 2000-01-01")
    check.require(moment < LATEST, field, "after 2999-12-31")
    return moment


def _preset(value: str, field: str) -> str:
    check.require(value != "", field, "required")
    check.require(value in PRESETS, field, f"unknown preset {value[:40]!r}; presets are {', '.join(PRESETS)}")
    return value


def _table_size(value: int, field: str) -> int:
    check.require(value in (2, 4), field, "must be 2 or 4")
    return value


def _address(value: str, field: str) -> str | None:
    """A seat's address, normalised (an IPv4-mapped IPv6 address is its IPv4 address); None if empty."""
    if value == "":
        return None
    try:  # a dotted IPv4 address (most seats), read and written back in its canonical form
        return socket.inet_ntop(socket.AF_INET, socket.inet_pton(socket.AF_INET, value))
    except OSError:
        pass
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        raise InvalidArgumentError(field, "not an IP address") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.compressed


def _rating(view: ratings.RatingView) -> ranking_pb2.Rating:
    return ranking_pb2.Rating(
        player=f"players/{view.player}",
        preset=view.preset,
        players=view.players,
        mu=view.mu,
        sigma=view.sigma,
        ordinal=view.ordinal,
        matches=view.matches,
        match_id=view.match_id,
        update_time=None if view.updated_at is None else _timestamp(view.updated_at),
    )


def _recorded(recorded: matches.MatchRecorded) -> ranking_pb2.RecordMatchResponse:
    return ranking_pb2.RecordMatchResponse(
        rated=recorded.rated,
        results=[
            ranking_pb2.RecordMatchResponse.PlayerResult(
                player=f"players/{r.player}",
                xp_gained=r.xp_gained,
                xp_total=r.xp_total,
                level=r.level,
                level_up=r.level_up,
                rating_before=_rating(r.rating_before) if r.rating_before else None,
                rating_after=_rating(r.rating_after) if r.rating_after else None,
            )
            for r in recorded.results
        ],
    )


class RankingApi(ranking_pb2_grpc.RankingServiceServicer):
    def __init__(self, deps: Deps, settings: RankingSettings | None = None, clock: Clock | None = None) -> None:
        self.deps = deps
        self.settings = settings or RankingSettings.load()
        self.clock: Clock = clock or (lambda: datetime.now(UTC))
        retention = timedelta(hours=deps.config.idempotency_retention_hours)
        self.idempotency = IdempotencyStore(models.idempotency_keys, retention=retention, clock=self.clock)
        #: Erasures read, then write: on SQLite they take the file's write lock from their first
        #: statement (`Database.write`), so no writer commits between their reads and their writes.
        self.erasures = IdempotencyStore(
            models.idempotency_keys, retention=retention, clock=self.clock, writes=Database.write
        )
        #: PostgreSQL: RecordMatch calls recorded together on raw asyncpg (recorder.py); SQLite:
        #: each in its own transaction through `core.record_match`.
        self.recorder: Recorder | None = None
        if deps.db.dialect == "postgresql":
            pool = LazyPool(deps.db, "recorder", max_size=BATCHES_IN_FLIGHT, server_settings=PG_SESSION,
                            stateless=True)
            self.recorder = Recorder(pool, zone=self.settings.time_zone, retention=retention)

    async def close(self) -> None:
        """Ends the recorder's batches and closes its pool (the engine is the server's to dispose)."""
        if self.recorder is not None:
            await self.recorder.close()

    # -- recording ------------------------------------------------------------------------------

    async def RecordMatch(
        self, request: ranking_pb2.RecordMatchRequest, context: Context
    ) -> ranking_pb2.RecordMatchResponse:
        identity = CALLERS.require("RecordMatch")
        call, alone = self._recording(identity.principal, request)
        if call is None or self.recorder is None:
            return await alone()
        return cast(ranking_pb2.RecordMatchResponse, await self.recorder.record(call))

    async def RecordMatches(
        self, request: ranking_pb2.RecordMatchesRequest, context: Context
    ) -> ranking_pb2.RecordMatchesResponse:
        identity = CALLERS.require("RecordMatches")
        return await record_matches(functools.partial(self._recording, identity.principal), request, self.recorder)

    def _recording(self, scope: str, request: ranking_pb2.RecordMatchRequest) -> tuple[Call | None, Alone]:
        """A RecordMatch request of caller `scope`, checked (errors raised here): the recorder's call
        (PostgreSQL; None on SQLite), and the reference path that records it alone (SQLite's, and
        the recorder's for what its batches leave)."""
        check.request_id(request.request_id)
        now = self.clock()
        canonical, match = self._finished_match(request, now)

        async def work(session: Any) -> ranking_pb2.RecordMatchResponse:
            return _recorded(await core.record_match(session, match, zone=self.settings.time_zone, now=now))

        def alone() -> Awaitable[ranking_pb2.RecordMatchResponse]:
            # The stored request hash is of the canonical request: no address reaches the database.
            return self.idempotency.run(
                self.deps.db,
                scope=scope,
                method="RecordMatch",
                request=canonical,
                response_type=ranking_pb2.RecordMatchResponse,
                work=work,
            )

        if self.recorder is None:
            return None, alone
        # The match's content hash is the canonical request's hash (without its request id).
        return Call(scope, request.request_id, match.content_hash, match, now, respond=_recorded, slow=alone), alone

    def _finished_match(
        self, request: ranking_pb2.RecordMatchRequest, now: datetime
    ) -> tuple[ranking_pb2.RecordMatchRequest, matches.FinishedMatch]:
        """Check a RecordMatch request; return its canonical form (each address replaced by the
        number of its group of equal addresses) and the match it describes."""
        match_id = check.identifier(request.match_id, "match_id")
        check.message(request, "options")
        options = request.options
        check.message(options, "ruleset", "options.ruleset")
        preset = _preset(options.ruleset.preset, "options.ruleset.preset")
        players = _table_size(options.players, "options.players")
        length = check.enum(options.length, "options.length", common_pb2.MatchLength.DESCRIPTOR)
        if length == common_pb2.MATCH_LENGTH_EXPRESS:
            check.require(options.target_points == 0, "options.target_points", "must be 0 for an express match")
        else:
            check.int_range(options.target_points, "options.target_points", 505, 3005)
        mode = check.enum(options.mode, "options.mode", common_pb2.TableMode.DESCRIPTOR)
        check.message(request, "end_time")
        end_time = _instant(request.end_time, "end_time")
        check.require(end_time <= now + FUTURE_SKEW, "end_time", "in the future")
        count = len(request.participants)
        check.require(count >= 1, "participants", "at least one player")
        check.require(count <= players, "participants", f"at most {players} (options.players)")

        canonical = ranking_pb2.RecordMatchRequest()
        canonical.CopyFrom(request)
        groups: dict[str, int] = {}
        seats: list[matches.SeatResult] = []
        seen_players: set[str] = set()
        seen_seats: set[int] = set()
        for index, participant in enumerate(request.participants):
            field = f"participants[{index}]"
            player = check.player(participant.player, f"{field}.player")
            check.require(player not in seen_players, f"{field}.player", "listed twice")
            seat = check.int_range(participant.seat, f"{field}.seat", 0, players - 1)
            check.require(seat not in seen_seats, f"{field}.seat", "taken by another participant")
            seen_players.add(player)
            seen_seats.add(seat)
            outcome = _OUTCOMES[check.enum(participant.outcome, f"{field}.outcome", common_pb2.Outcome.DESCRIPTOR)]
            if request.annulled:
                check.require(
                    outcome in (Outcome.VOID, Outcome.ABANDONED),
                    f"{field}.outcome",
                    "an annulled match has only VOID or ABANDONED outcomes",
                )
            else:
                check.require(outcome is not Outcome.VOID, f"{field}.outcome", "VOID only when `annulled` is set")
            check.int_range(participant.score, f"{field}.score", -MAX_SCORE, MAX_SCORE)
            check.int_range(participant.canastras, f"{field}.canastras", 0, MAX_CANASTRAS)
            address = _address(participant.client_ip, f"{field}.client_ip")
            group = None if address is None else groups.setdefault(address, len(groups))
            canonical.participants[index].client_ip = "" if group is None else f"address-{group}"
            seats.append(matches.SeatResult(player, seat, outcome, participant.score, participant.canastras, group))
        self._check_sides(seats)
        match = matches.FinishedMatch(
            match_id=match_id,
            preset=preset,
            players=players,
            express=length == common_pb2.MATCH_LENGTH_EXPRESS,
            competitive=mode == common_pb2.TABLE_MODE_COMPETITIVE,
            annulled=request.annulled,
            end_time=end_time,
            seats=tuple(seats),
            content_hash=request_hash("RecordMatch", canonical),
        )
        return canonical, match

    @staticmethod
    def _check_sides(seats: list[matches.SeatResult]) -> None:
        """One side wins: the WON players all on one side, the LOST players all on the other."""
        sides: dict[Outcome, set[int]] = {Outcome.WON: set(), Outcome.LOST: set()}
        for seat in seats:
            if seat.outcome in sides:
                sides[seat.outcome].add(seat.side)
        won, lost = sides[Outcome.WON], sides[Outcome.LOST]
        check.require(len(won) <= 1, "participants", "players of both sides are marked WON")
        check.require(len(lost) <= 1, "participants", "players of both sides are marked LOST")
        check.require(not (won & lost), "participants", "one side has players marked WON and LOST")

    # -- players and XP -------------------------------------------------------------------------

    async def GetPlayer(self, request: ranking_pb2.GetPlayerRequest, context: Context) -> ranking_pb2.PlayerProfile:
        current_identity()
        player = check.player(request.name, "name")
        async with self.deps.db.transaction() as session:
            profile = await profiles.get_profile(session, player)
        s = profile.stats
        return ranking_pb2.PlayerProfile(
            name=f"players/{player}",
            xp=profile.xp,
            level=profile.level,
            level_start_xp=profile.level_start_xp,
            next_level_xp=profile.next_level_xp,
            stats=ranking_pb2.PlayerProfile.Stats(
                matches=s.matches,
                wins=s.wins,
                losses=s.losses,
                abandonments=s.abandonments,
                canastras=s.canastras,
                average_score=s.average_score,
            ),
        )

    async def ListXpEvents(
        self, request: ranking_pb2.ListXpEventsRequest, context: Context
    ) -> ranking_pb2.ListXpEventsResponse:
        identity = current_identity()
        player = check.player(request.parent, "parent")
        identity.check_may_act_for(player)
        size = check.page_size(request.page_size, default=20, maximum=100)
        before = self._sequence_token(request.page_token, player)
        async with self.deps.db.transaction() as session:
            events, next_before = await profiles.list_xp_events(session, player, limit=size, before_seq=before)
        return ranking_pb2.ListXpEventsResponse(
            events=[
                ranking_pb2.XpEvent(
                    match_id=e.match_id,
                    xp_gained=e.xp_gained,
                    xp_total=e.xp_total,
                    level=e.level,
                    level_up=e.level_up,
                    time=_timestamp(e.time),
                )
                for e in events
            ],
            next_page_token=""
            if next_before is None
            else check.encode_page_token({"p": player, "before": next_before}),
        )

    @staticmethod
    def _sequence_token(token: str, owner: str, extra: str = "") -> int | None:
        position = check.page_token(token)
        if not position:
            return None
        before = position.get("before")
        check.require(
            position.get("p") == owner and position.get("k", "") == extra and isinstance(before, int) and before > 0,
            "page_token",
            "not a page token of this list",
        )
        assert isinstance(before, int)
        return before

    # -- ratings --------------------------------------------------------------------------------

    async def GetRating(self, request: ranking_pb2.GetRatingRequest, context: Context) -> ranking_pb2.Rating:
        current_identity()
        player = check.player(request.player, "player")
        preset = _preset(request.preset, "preset")
        players = _table_size(request.players, "players")
        async with self.deps.db.transaction() as session:
            (view,) = await rating_store.get_ratings(session, [player], preset, players)
        return _rating(view)

    async def BatchGetRatings(
        self, request: ranking_pb2.BatchGetRatingsRequest, context: Context
    ) -> ranking_pb2.BatchGetRatingsResponse:
        CALLERS.require("BatchGetRatings")
        ids = check.batch(request.player_names, "player_names", noun="player", maximum=MAX_BATCH, parse=check.player)
        preset = _preset(request.preset, "preset")
        players = _table_size(request.players, "players")
        async with self.deps.db.transaction() as session:
            views = await rating_store.get_ratings(session, ids, preset, players)
        return ranking_pb2.BatchGetRatingsResponse(ratings=[_rating(v) for v in views])

    async def ListRatingHistory(
        self, request: ranking_pb2.ListRatingHistoryRequest, context: Context
    ) -> ranking_pb2.ListRatingHistoryResponse:
        current_identity()
        player = check.player(request.player, "player")
        preset = _preset(request.preset, "preset")
        players = _table_size(request.players, "players")
        size = check.page_size(request.page_size, default=20, maximum=100)
        kind = f"{preset}/{players}"
        before = self._sequence_token(request.page_token, player, kind)
        async with self.deps.db.transaction() as session:
            views, next_before = await rating_store.rating_history(
                session, player, preset, players, limit=size, before_seq=before
            )
        token = "" if next_before is None else check.encode_page_token({"p": player, "k": kind, "before": next_before})
        return ranking_pb2.ListRatingHistoryResponse(ratings=[_rating(v) for v in views], next_page_token=token)

    # -- leaderboards ---------------------------------------------------------------------------

    def _board(self, request: Any) -> leaderboards.BoardRef:
        check.message(request, "leaderboard")
        board = request.leaderboard
        scope = check.enum(board.scope, "leaderboard.scope", ranking_pb2.Leaderboard.Scope.DESCRIPTOR)
        if scope == ranking_pb2.Leaderboard.SCOPE_MODALITY:
            scope_name = _preset(board.preset, "leaderboard.preset")
        else:
            check.require(board.preset == "", "leaderboard.preset", "must be empty for the global scope")
            scope_name = GLOBAL_SCOPE
        period = _PERIODS[check.enum(board.period, "leaderboard.period", ranking_pb2.Leaderboard.Period.DESCRIPTOR)]
        metric = check.enum(board.metric, "leaderboard.metric", ranking_pb2.Leaderboard.Metric.DESCRIPTOR)
        if metric == ranking_pb2.Leaderboard.METRIC_RATING:
            metric_name = leaderboards.rating_metric(_table_size(board.players, "leaderboard.players"))
        else:
            check.require(board.players == 0, "leaderboard.players", "must be 0 for XP leaderboards")
            metric_name = XP_METRIC
        at = _instant(board.at, "leaderboard.at") if board.HasField("at") else self.clock()
        return leaderboards.board_ref(metric_name, scope_name, period, at, self.settings.time_zone)

    @staticmethod
    def _entry(board: leaderboards.BoardRef, ranked: leaderboards.Ranked) -> ranking_pb2.LeaderboardEntry:
        score = ranked.position.score
        return ranking_pb2.LeaderboardEntry(
            rank=ranked.rank,
            player=f"players/{ranked.position.player}",
            value=float(score) if board.metric == XP_METRIC else score / 100,
            achieve_time=_timestamp(leaderboards.from_micros(ranked.position.achieved_us)),
        )

    async def ListLeaderboardEntries(
        self, request: ranking_pb2.ListLeaderboardEntriesRequest, context: Context
    ) -> ranking_pb2.ListLeaderboardEntriesResponse:
        current_identity()
        board = self._board(request)
        size = check.page_size(request.page_size, default=100, maximum=500)
        after = None
        position = check.page_token(request.page_token)
        if position:
            # The token pins the period it started in, so a page never jumps to the next day.
            board, after = self._board_position(board, position)
        async with self.deps.db.transaction() as session:
            ranked, more = await leaderboards.leaderboard_page(session, board.key, after=after, limit=size)
        reply = ranking_pb2.ListLeaderboardEntriesResponse(entries=[self._entry(board, r) for r in ranked])
        if more:
            last = ranked[-1].position
            reply.next_page_token = check.encode_page_token(
                {"b": board.bounds.start_name, "s": last.score, "a": last.achieved_us, "p": last.player}
            )
        if board.bounds.start is not None and board.bounds.end is not None:
            reply.period_start.CopyFrom(_timestamp(board.bounds.start))
            reply.period_end.CopyFrom(_timestamp(board.bounds.end))
        return reply

    def _board_position(self, board: leaderboards.BoardRef, token: dict[str, Any]) -> tuple[leaderboards.BoardRef, Position]:
        start, score, achieved, player = (token.get(k) for k in ("b", "s", "a", "p"))
        valid = (
            isinstance(start, str)
            and isinstance(score, int)
            and isinstance(achieved, int)
            and isinstance(player, str)
            and abs(score) < 2**62
            and abs(achieved) < 2**62
        )
        check.require(valid, "page_token", "not a page token of this leaderboard")
        assert isinstance(start, str) and isinstance(score, int) and isinstance(achieved, int)
        assert isinstance(player, str)
        pinned = self._period_named(board.bounds, start)
        check.require(pinned is not None, "page_token", "not a page token of this leaderboard")
        assert pinned is not None
        return leaderboards.BoardRef(board.metric, board.scope, pinned), Position(score, achieved, player)

    def _period_named(self, current: PeriodBounds, start: str) -> PeriodBounds | None:
        """The bounds of the period of the same kind that starts on local date `start`."""
        if current.period is Period.ALL_TIME:
            return current if start == current.start_name else None
        try:
            first = date.fromisoformat(start)
        except ValueError:
            return None
        pinned = bounds(current.period, local_midnight(first, self.settings.time_zone), self.settings.time_zone)
        return pinned if pinned.start_name == start else None

    async def GetLeaderboardRank(
        self, request: ranking_pb2.GetLeaderboardRankRequest, context: Context
    ) -> ranking_pb2.LeaderboardEntry:
        current_identity()
        board = self._board(request)
        player = check.player(request.player, "player")
        async with self.deps.db.transaction() as session:
            ranked = await leaderboards.leaderboard_rank(session, board.key, player)
        return self._entry(board, ranked)

    async def ListLeaderboardNeighbors(
        self, request: ranking_pb2.ListLeaderboardNeighborsRequest, context: Context
    ) -> ranking_pb2.ListLeaderboardNeighborsResponse:
        current_identity()
        board = self._board(request)
        player = check.player(request.player, "player")
        above = check.page_size(request.before, "before", default=5, maximum=50)
        below = check.page_size(request.after, "after", default=5, maximum=50)
        async with self.deps.db.transaction() as session:
            ranked = await leaderboards.neighbours(session, board.key, player, above=above, below=below)
        return ranking_pb2.ListLeaderboardNeighborsResponse(entries=[self._entry(board, r) for r in ranked])

    # -- load-test runs -------------------------------------------------------------------------

    async def EraseLoadTestRun(
        self, request: common_pb2.EraseLoadTestRunRequest, context: Context
    ) -> common_pb2.EraseLoadTestRunResponse:
        identity, run = loadtest_runs.admitted(request, "RankingService")
        dry_run = request.dry_run

        async def work(session: Any) -> common_pb2.EraseLoadTestRunResponse:
            counts = await erasure.erase_run(session, run, dry_run=dry_run)
            return loadtest_runs.response(run, dry_run, counts)

        if dry_run:  # erases nothing: one consistent snapshot, no stored answer
            async with self.deps.db.read() as session:
                answer = await work(session)
        else:
            answer = await self.erasures.run(
                self.deps.db,
                scope=identity.principal,
                method="EraseLoadTestRun",
                request=request,
                response_type=common_pb2.EraseLoadTestRunResponse,
                work=work,
            )
        log.info(
            "load-test run counted" if dry_run else "load-test run erased",
            extra={"fields": {
                "run_id": run,
                "dry_run": dry_run,
                "erased": {record.kind: record.count for record in answer.erased},
                "admin": identity.principal,
            }},
        )
        return answer


def register(server: grpc.aio.Server, deps: Deps) -> Hooks:
    api = RankingApi(deps)
    ranking_pb2_grpc.add_RankingServiceServicer_to_server(api, server)
    return Hooks(on_stop=api.close)
