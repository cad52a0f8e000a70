"""Replay a game record: ``python -m engine.replay RECORD.json``.

The black-box contract of ``shared/spec/game-record.md``: prints one JSON object on stdout and
exits 0 when every action was legal, 3 at the first illegal action (the state is the one just
before it), 2 when the record is malformed (a one-line reason on stderr, nothing on stdout).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from engine.actions import Action, action_from_json
from engine.deal import Deal
from engine.errors import EngineError, IllegalActionError, MalformedError
from engine.rules import ruleset_from_spec
from engine.state import HandState

EXIT_OK = 0
EXIT_MALFORMED = 2
EXIT_ILLEGAL = 3


@dataclass(frozen=True, slots=True)
class Record:
    state: HandState  # the state after the deal, before any action
    actions: list[tuple[int, Action]]


def parse_record(data: object) -> Record:
    """Check a record completely (ruleset, seats, deal, every action); raises ``EngineError``."""
    if not isinstance(data, dict):
        raise MalformedError("a record must be a JSON object")
    for key in ("ruleset", "players", "deal", "actions"):
        if key not in data:
            raise MalformedError(f"the record has no {key!r}")
    rules = ruleset_from_spec(data["ruleset"])
    players = data["players"]
    if players not in (2, 4) or isinstance(players, bool):
        raise MalformedError(f"players must be 2 or 4, not {players!r}")
    dealer = data.get("dealer", players - 1)
    if not isinstance(dealer, int) or isinstance(dealer, bool) or not 0 <= dealer < players:
        raise MalformedError(f"dealer must be a seat 0..{players - 1}, not {dealer!r}")
    deal = Deal.from_json(data["deal"], rules, players)
    raw_actions = data["actions"]
    if not isinstance(raw_actions, list):
        raise MalformedError("actions must be a list")
    actions: list[tuple[int, Action]] = []
    for i, raw in enumerate(raw_actions):
        if not isinstance(raw, dict):
            raise MalformedError(f"actions[{i}] must be an object")
        seat = raw.get("seat")
        if not isinstance(seat, int) or isinstance(seat, bool) or not 0 <= seat < players:
            raise MalformedError(f"actions[{i}].seat must be a seat 0..{players - 1}, not {seat!r}")
        try:
            actions.append((seat, action_from_json(raw)))
        except MalformedError as e:
            raise MalformedError(f"actions[{i}]: {e}") from None
    return Record(HandState(rules, players, deal, dealer), actions)


def replay(record: Record) -> tuple[dict[str, Any], int]:
    """Apply the record's actions; returns the output object and the exit status."""
    state = record.state
    error: dict[str, Any] | None = None
    for index, (seat, action) in enumerate(record.actions):
        try:
            state.apply(action, seat)
        except IllegalActionError as e:
            error = {"index": index, "code": e.code, "message": e.message}
            break
    out = {
        "ok": error is None,
        "error": error,
        "state": state.record_state(),
        "score": {"sides": state.score()},
    }
    return out, EXIT_OK if error is None else EXIT_ILLEGAL


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m engine.replay RECORD.json", file=sys.stderr)
        return EXIT_MALFORMED
    try:
        with open(args[0], encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        print(f"cannot read {args[0]}: {e.strerror}", file=sys.stderr)
        return EXIT_MALFORMED
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        print(f"not JSON: {e}", file=sys.stderr)
        return EXIT_MALFORMED
    try:
        record = parse_record(data)
    except EngineError as e:
        print(str(e).replace("\n", " "), file=sys.stderr)
        return EXIT_MALFORMED
    out, status = replay(record)
    sys.stdout.write(json.dumps(out) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
