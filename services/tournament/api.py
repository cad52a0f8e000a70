"""The tournament service's gRPC API: a thin servicer (read the caller, check the input, call
core or registration, build the reply; errors are mapped by the server pipeline).

Who may call what: admins create and cancel tournaments; players (or a service or admin acting
for one) register and unregister themselves; only the game-session service reports results;
everyone authenticated reads.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, TypeAlias

import grpc

from buraco.v1 import common_pb2, tournament_pb2, tournament_pb2_grpc
from engine.errors import RulesetError
from engine.rules import PARAMETERS, PRESETS, ruleset_from_spec
from services.common import validation as check
from services.common.auth import Callers, Kind, allow, current_identity
from services.common.errors import InvalidArgumentError, UnavailableError
from services.common.server import Deps
from services.tournament import records
from services.tournament.core import Tournaments, TournamentSpec
from services.tournament.registration import Registrations
from services.tournament.views import STATES

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

#: Tournament ids are shorter than other ids so that every id derived from them fits (match ids
#: and request ids, docs/tournaments.md).
MAX_TOURNAMENT_ID = 40
#: The wallet takes at most 1,024 stakes in one pot.
MAX_PLAYERS = 1024
MAX_CHIPS = 10**12
MAX_SWISS_ROUNDS = 15
DEFAULT_NO_SHOW_SECONDS = 300
#: Who may call each method that service identities call: only the game-session service reports
#: table results (its outbox, at a match's end; services.client.channels names it `game-session`),
#: so no other caller can decide a tournament's round (docs/contracts.md, "Who may call what").
CALLERS = Callers("TournamentService", {
    "ReportMatchResult": allow("game-session"),
})

_FORMATS = {
    tournament_pb2.Tournament.FORMAT_SINGLE_ELIMINATION: records.SINGLE_ELIMINATION,
    tournament_pb2.Tournament.FORMAT_SWISS: records.SWISS,
}
_STATE_NAMES = {number: name for name, number in STATES.items()}


def _tournament_id(name: str, field: str) -> str:
    tournament = check.resource_id(name, field, "tournaments")
    check.require(
        len(tournament) <= MAX_TOURNAMENT_ID, field, f"a tournament id has at most {MAX_TOURNAMENT_ID} characters"
    )
    return tournament


def _time(message: Any, name: str, field: str) -> datetime:
    check.require(message.HasField(name), field, "required")
    stamp = getattr(message, name)
    check.require(0 <= stamp.nanos < 1_000_000_000, field, "nanos must be between 0 and 999999999")
    check.require(946_684_800 <= stamp.seconds <= 4_102_444_800, field, "must be between 2000 and 2100")
    return datetime.fromtimestamp(stamp.seconds + stamp.nanos / 1e9, UTC)


def _override(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # a bare word, e.g. `end` for stock_out


def _table_options(options: common_pb2.TableOptions, field: str) -> common_pb2.TableOptions:
    """The tables' options, checked as the game-session service checks them; always competitive,
    without a bet (the buy-in is the stake), never private."""
    out = common_pb2.TableOptions()
    out.CopyFrom(options)
    check.require(options.players in (2, 4), f"{field}.players", "must be 2 or 4 (4: entrants are pairs)")
    if options.length == common_pb2.MATCH_LENGTH_EXPRESS:
        check.require(options.target_points == 0, f"{field}.target_points", "must be 0 for an express match")
    elif options.length == common_pb2.MATCH_LENGTH_POINTS:
        check.int_range(options.target_points, f"{field}.target_points", 505, 3005)
    else:
        raise InvalidArgumentError(f"{field}.length", "required: EXPRESS or POINTS")
    check.require(
        options.mode in (common_pb2.TABLE_MODE_UNSPECIFIED, common_pb2.TABLE_MODE_COMPETITIVE),
        f"{field}.mode",
        "tournament tables are competitive",
    )
    out.mode = common_pb2.TABLE_MODE_COMPETITIVE
    out.bet_chips = 0
    out.private = False
    if options.draw_seconds:
        check.int_range(options.draw_seconds, f"{field}.draw_seconds", 5, 300)
    if options.play_seconds:
        check.int_range(options.play_seconds, f"{field}.play_seconds", 5, 600)
    preset = options.ruleset.preset
    check.require(preset in PRESETS, f"{field}.ruleset.preset", f"one of {', '.join(PRESETS)}")
    spec: dict[str, Any] = {"preset": preset}
    for key in sorted(options.ruleset.overrides):
        path = f"{field}.ruleset.overrides[{key[:40]!r}]"
        check.require(key in PARAMETERS and key != "name", path, "not a ruleset parameter")
        check.require(key != "target", path, "set the match length with length and target_points")
        spec[key] = _override(options.ruleset.overrides[key])
    spec["target"] = options.target_points if options.length == common_pb2.MATCH_LENGTH_POINTS else 0
    try:
        ruleset_from_spec(spec)
    except (RulesetError, TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{field}.ruleset", str(error)[:200]) from None
    return out


def _spec(t: tournament_pb2.Tournament) -> TournamentSpec:
    field = "tournament"
    display_name = check.text(t.display_name, f"{field}.display_name", max_length=100)
    check.require(t.HasField("table_options"), f"{field}.table_options", "required")
    options = _table_options(t.table_options, f"{field}.table_options")
    check.enum(t.format, f"{field}.format", tournament_pb2.Tournament.Format.DESCRIPTOR)
    format_ = _FORMATS[t.format]
    if format_ == records.SWISS:
        check.int_range(t.swiss_rounds, f"{field}.swiss_rounds", 1, MAX_SWISS_ROUNDS)
    else:
        check.require(t.swiss_rounds == 0, f"{field}.swiss_rounds", "only for Swiss tournaments")
    check.int_range(t.buy_in_chips, f"{field}.buy_in_chips", 0, MAX_CHIPS)
    per_entry = 2 if options.players == 4 else 1
    max_entries = MAX_PLAYERS // per_entry
    check.int_range(t.min_entrants, f"{field}.min_entrants", 2, max_entries)
    check.int_range(t.max_entrants, f"{field}.max_entrants", t.min_entrants, max_entries)
    prizes: list[tuple[int, int]] = []
    if t.buy_in_chips == 0:
        check.require(len(t.prizes) == 0, f"{field}.prizes", "a free tournament has no prizes")
    else:
        check.require(len(t.prizes) > 0, f"{field}.prizes", "required when there is a buy-in")
        check.require(len(t.prizes) <= t.min_entrants, f"{field}.prizes", "more paid places than min_entrants")
        for i, prize in enumerate(t.prizes):
            check.int_range(prize.place, f"{field}.prizes[{i}].place", 1, t.min_entrants)
            check.int_range(prize.share_bp, f"{field}.prizes[{i}].share_bp", 1, 10_000)
            check.require(
                all(prize.place != other for other, _ in prizes), f"{field}.prizes[{i}].place", "appears twice"
            )
            prizes.append((prize.place, prize.share_bp))
        total = sum(share for _, share in prizes)
        check.require(total == 10_000, f"{field}.prizes", f"the shares must add up to 10000 basis points, not {total}")
    opens = _time(t, "registration_open_time", f"{field}.registration_open_time")
    closes = _time(t, "registration_close_time", f"{field}.registration_close_time")
    starts = _time(t, "start_time", f"{field}.start_time")
    check.require(opens < closes, f"{field}.registration_close_time", "must be after registration_open_time")
    check.require(closes <= starts, f"{field}.start_time", "must not be before registration_close_time")
    no_show = DEFAULT_NO_SHOW_SECONDS
    if t.HasField("no_show_timeout"):
        check.require(
            t.no_show_timeout.nanos == 0 and 10 <= t.no_show_timeout.seconds <= 3600,
            f"{field}.no_show_timeout",
            "whole seconds between 10 and 3600",
        )
        no_show = t.no_show_timeout.seconds
    return TournamentSpec(
        display_name=display_name,
        table_options=options.SerializeToString(deterministic=True),
        seats=options.players,
        format=format_,
        swiss_rounds=t.swiss_rounds,
        buy_in=t.buy_in_chips,
        prizes=tuple(sorted(prizes)),
        registration_open_at=opens,
        registration_close_at=closes,
        start_at=starts,
        min_entrants=t.min_entrants,
        max_entrants=t.max_entrants,
        no_show_seconds=no_show,
    )


def _int_position(position: dict[str, Any], key: str, field: str) -> int:
    value = position.get(key, 0)
    check.require(
        isinstance(value, int) and not isinstance(value, bool) and value >= 0, field, "not a page token of this service"
    )
    return int(value)


class TournamentApi(tournament_pb2_grpc.TournamentServiceServicer):
    def __init__(
        self, deps: Deps, core: Tournaments | None = None, registrations: Registrations | None = None
    ) -> None:
        self.deps = deps
        self._core = core
        self._registrations = registrations

    @property
    def core(self) -> Tournaments:
        if self._core is None:  # a servicer built without its core (tests of the server frame)
            raise UnavailableError("the tournament service is not ready")
        return self._core

    @property
    def registrations(self) -> Registrations:
        if self._registrations is None:  # a servicer built without its core, as above
            raise UnavailableError("the tournament service is not ready")
        return self._registrations

    async def CreateTournament(
        self, request: tournament_pb2.CreateTournamentRequest, context: Context
    ) -> tournament_pb2.Tournament:
        identity = current_identity()
        identity.require_kind(Kind.ADMIN, method="TournamentService.CreateTournament")
        check.request_id(request.request_id)
        if request.tournament_id:
            tournament = check.identifier(request.tournament_id, "tournament_id")
            check.require(
                len(tournament) <= MAX_TOURNAMENT_ID, "tournament_id", f"at most {MAX_TOURNAMENT_ID} characters"
            )
        else:
            tournament = f"t{uuid.uuid4().hex[:16]}"
        check.require(request.HasField("tournament"), "tournament", "required")
        spec = _spec(request.tournament)
        return await self.core.create(identity.principal, request, tournament, spec)

    async def GetTournament(
        self, request: tournament_pb2.GetTournamentRequest, context: Context
    ) -> tournament_pb2.Tournament:
        current_identity()
        return await self.core.get(_tournament_id(request.name, "name"))

    async def ListTournaments(
        self, request: tournament_pb2.ListTournamentsRequest, context: Context
    ) -> tournament_pb2.ListTournamentsResponse:
        current_identity()
        size = check.page_size(request.page_size, default=20, maximum=100)
        position = check.page_token(request.page_token)
        if position:
            check.require(
                isinstance(position.get("c"), str) and isinstance(position.get("i"), str),
                "page_token",
                "not a page token of this service",
            )
            try:
                datetime.fromisoformat(position["c"])
            except ValueError:
                raise InvalidArgumentError("page_token", "not a page token of this service") from None
        check.enum(request.state, "state", tournament_pb2.Tournament.State.DESCRIPTOR, required=False)
        state = _STATE_NAMES.get(request.state) if request.state else None
        return await self.core.list_tournaments(size, position, state)

    async def CancelTournament(
        self, request: tournament_pb2.CancelTournamentRequest, context: Context
    ) -> tournament_pb2.Tournament:
        identity = current_identity()
        identity.require_kind(Kind.ADMIN, method="TournamentService.CancelTournament")
        tournament = _tournament_id(request.name, "name")
        check.request_id(request.request_id)
        reason = check.text(request.reason, "reason", max_length=500)
        return await self.core.cancel(identity.principal, request, tournament, reason)

    async def Register(self, request: tournament_pb2.RegisterRequest, context: Context) -> tournament_pb2.Entrant:
        identity = current_identity()
        player = identity.require_player()
        tournament = _tournament_id(request.tournament, "tournament")
        check.request_id(request.request_id)
        partner = check.player(request.partner, "partner") if request.partner else None
        return await self.registrations.register(identity.principal, request, tournament, player, partner)

    async def Unregister(self, request: tournament_pb2.UnregisterRequest, context: Context) -> tournament_pb2.Entrant:
        identity = current_identity()
        player = identity.require_player()
        tournament = _tournament_id(request.tournament, "tournament")
        check.request_id(request.request_id)
        return await self.registrations.unregister(identity.principal, request, tournament, player)

    async def ListEntrants(
        self, request: tournament_pb2.ListEntrantsRequest, context: Context
    ) -> tournament_pb2.ListEntrantsResponse:
        current_identity()
        tournament = _tournament_id(request.parent, "parent")
        size = check.page_size(request.page_size, default=50, maximum=500)
        after = _int_position(check.page_token(request.page_token), "after", "page_token")
        return await self.core.entrants(tournament, size, after)

    async def ListStandings(
        self, request: tournament_pb2.ListStandingsRequest, context: Context
    ) -> tournament_pb2.ListStandingsResponse:
        current_identity()
        tournament = _tournament_id(request.parent, "parent")
        size = check.page_size(request.page_size, default=50, maximum=500)
        offset = _int_position(check.page_token(request.page_token), "offset", "page_token")
        return await self.core.standings(tournament, size, offset)

    async def GetBracket(self, request: tournament_pb2.GetBracketRequest, context: Context) -> tournament_pb2.Bracket:
        current_identity()
        return await self.core.bracket(_tournament_id(request.tournament, "tournament"))

    async def ReportMatchResult(
        self, request: tournament_pb2.ReportMatchResultRequest, context: Context
    ) -> tournament_pb2.ReportMatchResultResponse:
        identity = CALLERS.require("ReportMatchResult")
        check.request_id(request.request_id)
        tournament = _tournament_id(request.tournament, "tournament")
        check.identifier(request.match_id, "match_id")
        check.require(len(request.outcomes) in (2, 4), "outcomes", "one per seat: 2 or 4")
        outcomes: list[tuple[str, int]] = []
        for i, item in enumerate(request.outcomes):
            player = check.player(item.player, f"outcomes[{i}].player")
            check.require(all(player != p for p, _ in outcomes), f"outcomes[{i}].player", "appears twice")
            check.enum(item.outcome, f"outcomes[{i}].outcome", common_pb2.Outcome.DESCRIPTOR)
            outcomes.append((player, item.outcome))
        check.require(len(request.match_scores) == 2, "match_scores", "one per side: 2")
        scores = (int(request.match_scores[0]), int(request.match_scores[1]))
        return await self.core.report(identity.principal, request, tournament, outcomes, scores)

    async def WatchTournament(
        self, request: tournament_pb2.WatchTournamentRequest, context: Context
    ) -> AsyncIterator[tournament_pb2.TournamentUpdate]:
        current_identity()
        tournament = _tournament_id(request.name, "name")
        async for update in self.core.watch(tournament):
            yield update
