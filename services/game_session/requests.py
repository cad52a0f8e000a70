"""What the game-session service's requests must be, and what they ask of a table: the table a
`CreateTable` describes (checked field by field, `INVALID_ARGUMENT` naming the field), a move's
cards, and the change a move makes (`move`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from buraco.v1 import common_pb2, game_session_pb2
from engine.actions import DRAW, TAKE_PILE, Action, Discard, add_action, meld_action
from engine.cards import parse, parse_many
from engine.errors import EngineError, IllegalActionError, MalformedError
from services.common import validation as check
from services.common.errors import FailedPreconditionError, InvalidArgumentError
from services.common.idempotency import request_hash
from services.game_session import social
from services.game_session.actor import RequestKey, Work
from services.game_session.log import Entry
from services.game_session.table import BOTS_BY_LEVEL, LiveTable, State, ruleset_for

SERVICE = "buraco.v1.GameSessionService"
SERVICE_PATH = f"/{SERVICE}/"
#: Trailer of a refusal for a stale view: the table's seq now.
CURRENT_SEQ_HEADER = "buraco-current-seq"


def checked_table(given: game_session_pb2.Table) -> game_session_pb2.Table:
    """The table a `CreateTable` describes, checked, its output-only fields cleared."""
    table = game_session_pb2.Table()
    table.CopyFrom(given)
    for output_only in ("name", "state", "seq", "match_scores", "create_time", "owner_address"):
        table.ClearField(output_only)
    check.identifier(table.match_id, "table.match_id")
    check.message(table, "options", "table.options")
    options = table.options
    check.message(options, "ruleset", "table.options.ruleset")
    check.require(options.players in (2, 4), "table.options.players", "must be 2 or 4")
    check.enum(options.length, "table.options.length", common_pb2.MatchLength.DESCRIPTOR)
    if options.length == common_pb2.MATCH_LENGTH_POINTS:
        check.int_range(options.target_points, "table.options.target_points", 505, 3005)
    else:
        check.require(options.target_points == 0, "table.options.target_points", "must be 0 for an express match")
    check.enum(options.mode, "table.options.mode", common_pb2.TableMode.DESCRIPTOR)
    practice = options.mode == common_pb2.TABLE_MODE_PRACTICE
    if practice:
        check.require(options.bet_chips == 0, "table.options.bet_chips", "must be 0 at a practice table")
    else:
        check.require(options.bet_chips >= 0, "table.options.bet_chips", "must not be negative")
    if options.draw_seconds:
        check.int_range(options.draw_seconds, "table.options.draw_seconds", 5, 300)
    if options.play_seconds:
        check.int_range(options.play_seconds, "table.options.play_seconds", 5, 600)
    bot_level(options.bot_level, "table.options.bot_level", unset="MEDIUM")
    try:
        ruleset_for(options)
    except (EngineError, ValueError, TypeError) as error:
        raise InvalidArgumentError("table.options.ruleset", str(error)) from None
    check.require(len(table.seats) == options.players, "table.seats", f"one per seat ({options.players})")
    seen: set[str] = set()
    for index, seat in enumerate(table.seats):
        field = f"table.seats[{index}]"
        check.require(seat.seat == index, f"{field}.seat", f"must be {index} (seats in order)")
        seat.bot_controlled = False
        seat.connected = False
        kind = seat.participant.WhichOneof("kind")
        check.require(kind is not None, f"{field}.participant", "a player or a bot is required")
        if kind == "player":
            player = check.player(seat.participant.player, f"{field}.participant.player")
            check.require(player not in seen, f"{field}.participant.player", "sits at another seat already")
            seen.add(player)
        else:
            check.require(practice, f"{field}.participant.bot", "bots sit at practice tables only")
            bot_level(seat.participant.bot, f"{field}.participant.bot", unset="the table's options.bot_level")
    if table.tournament:
        check.resource_id(table.tournament, "table.tournament", "tournaments")
    if table.lobby_table:
        check.resource_id(table.lobby_table, "table.lobby_table", "lobbyTables")
    return table


def bot_level(value: int, field: str, *, unset: str) -> None:
    """A `BotLevel` field: unset (what `unset` says applies) or a known level."""
    check.require(
        value == common_pb2.BOT_LEVEL_UNSPECIFIED or value in BOTS_BY_LEVEL, field,
        f"unknown bot level {value}: BOT_LEVEL_EASY (1), BOT_LEVEL_MEDIUM (2) or BOT_LEVEL_HARD "
        f"(3, the expert bot); unset: {unset}",
    )


# -- moves -----------------------------------------------------------------------------------------
def card(value: str, field: str) -> int:
    try:
        return parse(value)
    except MalformedError as error:
        raise InvalidArgumentError(field, str(error)) from None


def cards(values: Any, field: str, minimum: int) -> list[int]:
    check.require(len(values) >= minimum, field, f"at least {minimum} card(s)")
    check.require(len(values) <= 60, field, "at most 60 cards")
    try:
        return parse_many(list(values))
    except MalformedError as error:
        raise InvalidArgumentError(field, str(error)) from None


def _draw(request: Any) -> Action:
    return DRAW


def _take_pile(request: Any) -> Action:
    return TAKE_PILE


def _meld(request: game_session_pb2.MeldRequest) -> Action:
    wild_as = card(request.wild_as, "wild_as") if request.wild_as else None
    return meld_action(cards(request.cards, "cards", 3), wild_as)


def _add(request: game_session_pb2.AddToMeldRequest) -> Action:
    check.require(request.meld >= 0, "meld", "must not be negative")
    return add_action(request.meld, cards(request.cards, "cards", 1))


def _discard(request: game_session_pb2.DiscardRequest) -> Action:
    return Discard(card(request.card, "card"))


#: How each move's request makes its action (None: leaving the table).
Maker = Callable[[Any], Action] | None
#: A `Play` request's body -> (the unary method it stands for, how it makes its action).
PLAY_ACTIONS: dict[str, tuple[str, Maker]] = {
    "draw": ("Draw", _draw),
    "take_discard": ("TakeDiscard", _take_pile),
    "meld": ("Meld", _meld),
    "add_to_meld": ("AddToMeld", _add),
    "discard": ("Discard", _discard),
    "leave": ("LeaveTable", None),
}
MAKERS: dict[str, Maker] = dict(PLAY_ACTIONS.values())
#: The move methods' full names (their requests' digests), and a Play stream's move as a call in
#: the metrics, written once rather than at every move.
METHOD_NAMES = {method: f"{SERVICE}/{method}" for method, _ in PLAY_ACTIONS.values()}
PLAY_METRIC_NAMES = {method: f"{SERVICE_PATH}Play/{method}" for method, _ in PLAY_ACTIONS.values()}


def move(method: str, request: Any, seat: int, scope: str, now_ms: Callable[[], int]) -> tuple[Work[None], RequestKey]:
    """The change a move's request asks of the table (checked first: `INVALID_ARGUMENT` for a bad
    request) and its idempotency key. The change refuses a stale view (`expected_seq` is not the
    table's seq: `FAILED_PRECONDITION` with the current seq in a trailer), a table not being
    played, a seat a bot plays, and any move the rules refuse (the engine's code first)."""
    check.request_id(request.request_id)
    make = MAKERS[method]
    action = make(request) if make is not None else None
    key = RequestKey(scope, request.request_id, request_hash(METHOD_NAMES[method], request))
    expected = getattr(request, "expected_seq", None)

    def work(table: LiveTable, out: list[Entry]) -> None:
        if expected is not None and expected != table.seq:
            raise FailedPreconditionError(
                f"stale view: the table is at seq {table.seq}, not {expected}; resume from your stream",
                metadata=((CURRENT_SEQ_HEADER, str(table.seq)),),
            )
        if table.state != State.STATE_PLAYING:
            raise FailedPreconditionError(f"{table.name}: the match is not being played")
        if action is None:
            social.leave(table, seat, now_ms(), out)
            return
        if table.seats[seat].bot_controlled:
            raise FailedPreconditionError(f"a bot plays seat {seat} now ({table.seats[seat].takeover_reason})")
        try:
            table.apply_action(action, seat, "player", now_ms(), out)
        except IllegalActionError as error:
            raise FailedPreconditionError(f"{error.code}: {error.message}") from None
        except MalformedError as error:
            raise InvalidArgumentError("cards", str(error)) from None

    return work, key
