"""Cards as small integers.

A card is an ``int``: ``suit * 13 + (rank - 1)`` for the 52 suited cards (ranks ``A=1 .. K=13``,
suits in the order ``S H D C``), and ``JOKER = 52``. Sorting codes therefore sorts by suit, then
rank with the ace low, jokers last: exactly the order of the game-record contract.

Both decks' copies of a card are the same code; a hand is a multiset, kept as a list of 53 counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from engine.errors import MalformedError

SUITS: Final = "SHDC"
RANKS: Final = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K")
JOKER: Final = 52
NCODES: Final = 53

ACE: Final = 1
TWO: Final = 2
KING: Final = 13
HIGH_ACE: Final = 14  # the slot an ace takes at the top of a sequence (Q-K-A)


def card(rank: int, suit: int) -> int:
    """The code of the card of ``rank`` (1..13) and ``suit`` (0..3)."""
    return suit * 13 + rank - 1


def rank_of(code: int) -> int:
    """Rank 1..13 of a suited card (0 for the joker)."""
    return 0 if code == JOKER else code % 13 + 1


def suit_of(code: int) -> int:
    """Suit 0..3 of a suited card (-1 for the joker)."""
    return -1 if code == JOKER else code // 13


def is_two(code: int) -> bool:
    return code != JOKER and code % 13 == 1


def is_wild_capable(code: int) -> bool:
    """Jokers and 2s can stand for another card."""
    return code == JOKER or code % 13 == 1


CARD_STR: Final[tuple[str, ...]] = (*(RANKS[c % 13] + SUITS[c // 13] for c in range(52)), "JK")


def to_str(code: int) -> str:
    return CARD_STR[code]


_PARSE: Final[dict[str, int]] = {}
for _s, _suit in enumerate(SUITS):
    for _r, _rank in enumerate(RANKS):
        _PARSE[_rank + _suit] = _s * 13 + _r
_PARSE["JK"] = JOKER


def parse(text: object) -> int:
    """Parse ``"4H"``, ``"10s"``, ``"jk"`` (case-insensitive) into a card code."""
    if not isinstance(text, str):
        raise MalformedError(f"a card must be a string like '4H', got {text!r}")
    code = _PARSE.get(text.upper())
    if code is None:
        raise MalformedError(f"unknown card {text!r}")
    return code


def parse_many(items: object) -> list[int]:
    if not isinstance(items, list):
        raise MalformedError(f"a list of cards was expected, got {items!r}")
    return [parse(x) for x in items]


def format_many(codes: Iterable[int]) -> list[str]:
    return [CARD_STR[c] for c in codes]


def deck(jokers: int) -> list[int]:
    """Two 52-card decks plus ``jokers`` jokers, in canonical order."""
    return [c for c in range(52) for _ in range(2)] + [JOKER] * jokers


def counts_of(codes: Iterable[int]) -> list[int]:
    counts = [0] * NCODES
    for c in codes:
        counts[c] = counts[c] + 1
    return counts


def cards_of(counts: list[int]) -> list[int]:
    """The sorted multiset a count vector holds."""
    out: list[int] = []
    for code in range(NCODES):
        n = counts[code]
        if n:
            out.extend([code] * n)
    return out
