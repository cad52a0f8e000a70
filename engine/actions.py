"""Actions a player takes: commands, named as verbs, in the game record's JSON form.

``Draw``, ``TakePile``, ``MeldCards``, ``AddCards`` and ``Discard`` are immutable and hashable; their
card tuples are sorted, so two actions that move the same cards compare equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, final

from engine.cards import parse, parse_many, to_str
from engine.errors import MalformedError


@dataclass(frozen=True, slots=True)
class Draw:
    """Draw the top card of the stock."""

    def to_json(self) -> dict[str, Any]:
        return {"do": "draw"}


@dataclass(frozen=True, slots=True)
class TakePile:
    """Take the whole discard pile."""

    def to_json(self) -> dict[str, Any]:
        return {"do": "take_discard"}


# MeldCards and AddCards are written out rather than frozen dataclasses: the move generator makes
# thousands a second, and a compiled (mypyc) dataclass still builds itself in interpreted code (the
# generated __init__, object.__setattr__ per field), a cost on every candidate. They are as
# immutable: their fields are Final, which the type checker holds every caller to.
@final
class MeldCards:
    """Lay down a new meld. ``wild_as`` names the card the wild stands for, when not the default."""

    __slots__ = ("_hash", "cards", "wild_as")
    cards: Final[tuple[int, ...]]
    wild_as: Final[int | None]
    #: the hash, computed once (actions key the legal-move memo, and are looked up on every apply)
    _hash: Final[int]

    def __init__(self, cards: tuple[int, ...], wild_as: int | None = None) -> None:
        self.cards = cards
        self.wild_as = wild_as
        self._hash = hash((cards, wild_as))

    def __eq__(self, other: object) -> bool:
        return (self is other or (isinstance(other, MeldCards) and self.cards == other.cards
                and self.wild_as == other.wild_as))

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"MeldCards(cards={self.cards!r}, wild_as={self.wild_as!r})"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"do": "meld", "cards": [to_str(c) for c in self.cards]}
        if self.wild_as is not None:
            out["wild_as"] = to_str(self.wild_as)
        return out


@final
class AddCards:
    """Add cards to the side's meld number ``meld`` (counted from 0 in the order laid down)."""

    __slots__ = ("_hash", "cards", "meld")
    meld: Final[int]
    cards: Final[tuple[int, ...]]
    _hash: Final[int]

    def __init__(self, meld: int, cards: tuple[int, ...]) -> None:
        self.meld = meld
        self.cards = cards
        self._hash = hash((meld, cards))

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, AddCards) and self.meld == other.meld and self.cards == other.cards)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"AddCards(meld={self.meld!r}, cards={self.cards!r})"

    def to_json(self) -> dict[str, Any]:
        return {"do": "add", "meld": self.meld, "cards": [to_str(c) for c in self.cards]}


@dataclass(frozen=True, slots=True)
class Discard:
    """Discard one card; this ends the turn."""

    card: int

    def __hash__(self) -> int:
        return self.card

    def to_json(self) -> dict[str, Any]:
        return {"do": "discard", "card": to_str(self.card)}


Action = Draw | TakePile | MeldCards | AddCards | Discard

DRAW: Final = Draw()
TAKE_PILE: Final = TakePile()


def meld_action(cards: list[int] | tuple[int, ...], wild_as: int | None = None) -> MeldCards:
    return MeldCards(tuple(sorted(cards)), wild_as)


def add_action(meld: int, cards: list[int] | tuple[int, ...]) -> AddCards:
    return AddCards(meld, tuple(sorted(cards)))


def action_from_json(data: object) -> Action:
    """Parse one record action (without its ``seat``); raises ``MalformedError``."""
    if not isinstance(data, dict):
        raise MalformedError(f"an action must be an object, got {data!r}")
    kind = data.get("do")
    if kind == "draw":
        return DRAW
    if kind == "take_discard":
        return TAKE_PILE
    if kind == "meld":
        if "cards" not in data:
            raise MalformedError("a meld action needs 'cards'")
        wild_as = data.get("wild_as")
        return meld_action(parse_many(data["cards"]), None if wild_as is None else parse(wild_as))
    if kind == "add":
        meld = data.get("meld")
        if not isinstance(meld, int) or isinstance(meld, bool):
            raise MalformedError("an add action needs 'meld', the number of the side's meld")
        if "cards" not in data:
            raise MalformedError("an add action needs 'cards'")
        return add_action(meld, parse_many(data["cards"]))
    if kind == "discard":
        if "card" not in data:
            raise MalformedError("a discard action needs 'card'")
        return Discard(parse(data["card"]))
    raise MalformedError(f"unknown action {kind!r}: expected draw, take_discard, meld, add or discard")
