"""Errors raised by the engine.

::

    EngineError                 root of every engine error
    ├── MalformedError          input that is not a card, an action or a ruleset at all
    ├── RulesetError            a ruleset whose parameters are unknown or inconsistent
    ├── IllegalActionError      a well-formed action the rules forbid now; carries a stable ``code``
    └── StaleViewError          a view's field read for the first time after the state changed

An illegal action never changes the state: every check runs before the first mutation.
"""

from __future__ import annotations


class EngineError(Exception):
    """Root of the engine's errors."""


class MalformedError(EngineError, ValueError):
    """Input that cannot be understood (unknown card, missing field, wrong type)."""


class RulesetError(EngineError, ValueError):
    """A ruleset that is unknown or whose parameters contradict each other."""


class IllegalActionError(EngineError):
    """An action the rules do not allow in the current state.

    ``code`` is one upper-case word, stable across versions (see ``CODES``); ``message`` says in
    plain words which rule the action broke.
    """

    def __init__(self, code: str, message: str) -> None:
        assert code in CODES, code
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"IllegalActionError({self.code!r}, {self.message!r})"


#: Every code an ``IllegalActionError`` can carry, with what it means.
CODES: dict[str, str] = {
    "HAND_OVER": "the hand (or the match) is over; no more actions",
    "NOT_YOUR_TURN": "the seat is not the one to act",
    "WRONG_PHASE": "the action does not fit the phase (draw first, then meld, add and discard)",
    "EMPTY_PILE": "there is no discard pile to take",
    "NOT_IN_HAND": "the player does not hold those cards",
    "INVALID_MELD": "the cards do not form a meld the ruleset allows",
    "UNKNOWN_MELD": "the side has no meld with that number",
    "INVALID_ADD": "the cards cannot be added to that meld",
    "PILE_TOP_REQUIRED": "a closed pile was taken: its top card must be melded at once",
    "CANNOT_GO_OUT": "the move would empty the hand (or leave no legal way to end the turn) "
    "when the side may not go out that way",
    "LONE_DISCARD": "the single card taken from the pile cannot be discarded in the same turn",
    "WILD_DISCARD": "a player may not go out by discarding a wild that could still be played",
}


class StaleViewError(EngineError, RuntimeError):
    """A field of a view was read for the first time after the state had changed (``engine.view``,
    which exports it too; defined here since mypyc compiles engine/view.py and cannot compile a class
    with two built-in bases)."""
