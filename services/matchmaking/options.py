"""Checks of what a ticket or a lobby table is for (the API layer's input checks, also used when
the chief changes a table's options)."""

from __future__ import annotations

import json
from typing import Any

from buraco.v1 import common_pb2, matchmaking_pb2
from engine.errors import RulesetError
from engine.rules import PARAMETERS, PRESETS, ruleset_from_spec
from services.common import validation as check
from services.common.errors import InvalidArgumentError
from services.matchmaking.core import Preferences

#: The largest bet a table takes (the wallet's own limit per stake is far above).
MAX_BET_CHIPS = 10**12


def check_preferences(p: matchmaking_pb2.MatchPreferences, field: str) -> Preferences:
    check.require(p.preset in PRESETS, f"{field}.preset", f"one of {', '.join(PRESETS)}")
    check.require(p.players in (2, 4), f"{field}.players", "must be 2 or 4")
    check.enum(p.length, f"{field}.length", common_pb2.MatchLength.DESCRIPTOR)
    if p.length == common_pb2.MATCH_LENGTH_POINTS:
        check.int_range(p.target_points, f"{field}.target_points", 505, 3005)
    else:
        check.require(p.target_points == 0, f"{field}.target_points", "must be 0 for an express match")
    check.enum(p.mode, f"{field}.mode", common_pb2.TableMode.DESCRIPTOR)
    if p.mode == common_pb2.TABLE_MODE_COMPETITIVE:
        check.int_range(p.bet_chips, f"{field}.bet_chips", 1, MAX_BET_CHIPS)
    else:
        check.require(p.bet_chips == 0, f"{field}.bet_chips", "must be 0 at practice tables (no chips)")
    return Preferences(p.preset, p.players, p.length, p.target_points, p.mode, p.bet_chips)


def check_bot_level(value: int, field: str, *, unset: str) -> None:
    """A `BotLevel` field, as the game-session service checks it: unset (what `unset` says
    applies) or a known level."""
    check.require(
        value in common_pb2.BotLevel.DESCRIPTOR.values_by_number, field,
        f"unknown bot level {value}: BOT_LEVEL_EASY (1), BOT_LEVEL_MEDIUM (2) or BOT_LEVEL_HARD "
        f"(3, the expert bot); unset: {unset}",
    )


def _override(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # a bare word


def check_table_options(options: common_pb2.TableOptions, field: str) -> common_pb2.TableOptions:
    """A lobby table's options, checked as the game-session service checks them."""
    out = common_pb2.TableOptions()
    out.CopyFrom(options)
    preset = options.ruleset.preset
    check.require(preset in PRESETS, f"{field}.ruleset.preset", f"one of {', '.join(PRESETS)}")
    check.require(options.players in (2, 4), f"{field}.players", "must be 2 or 4")
    check.enum(options.length, f"{field}.length", common_pb2.MatchLength.DESCRIPTOR)
    if options.length == common_pb2.MATCH_LENGTH_POINTS:
        check.int_range(options.target_points, f"{field}.target_points", 505, 3005)
    else:
        check.require(options.target_points == 0, f"{field}.target_points", "must be 0 for an express match")
    check.enum(options.mode, f"{field}.mode", common_pb2.TableMode.DESCRIPTOR)
    if options.mode == common_pb2.TABLE_MODE_COMPETITIVE:
        check.int_range(options.bet_chips, f"{field}.bet_chips", 1, MAX_BET_CHIPS)
    else:
        check.require(options.bet_chips == 0, f"{field}.bet_chips", "must be 0 at practice tables (no chips)")
    if options.draw_seconds:
        check.int_range(options.draw_seconds, f"{field}.draw_seconds", 5, 300)
    if options.play_seconds:
        check.int_range(options.play_seconds, f"{field}.play_seconds", 5, 600)
    check_bot_level(options.bot_level, f"{field}.bot_level", unset="MEDIUM")
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
