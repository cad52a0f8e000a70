"""Reading a seat's view: cards back to codes, melds back to their shape, what fits where.

Bots get ``HandState.view(seat)`` (cards as strings, melds as ordered card lists) and nothing else.
This module turns that into what a bot reasons with: card codes, and for each meld on the table its
shape (a sequence's suit, span of slots, natural slots and wild; a group's rank) and the natural
cards that would fit it, so that "does this card fit that meld" is a set lookup. Shapes are cached
per meld (a meld's cards decide its shape). It reads only the view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from engine.cards import ACE, HIGH_ACE, JOKER, NCODES, TWO, to_str
from engine.movegen import Ring, remember

CODE: Final[dict[str, int]] = {to_str(c): c for c in range(NCODES)}


def codes(cards: list[str]) -> list[int]:
    return [CODE[c] for c in cards]


def slot_card(suit: int, slot: int) -> int:
    return suit * 13 + (0 if slot == HIGH_ACE else slot - 1)


def held_slots(counts: list[int], suit: int) -> int:
    """The slots (1..14) of ``suit`` whose card ``counts`` holds, as a bit mask: an ace holds both 1
    and 14."""
    base = 13 * suit
    held = 0
    for r in range(13):
        if counts[base + r]:
            held |= 1 << (r + 1)
    if held & 1 << ACE:
        held |= 1 << HIGH_ACE
    return held


def is_wild_card(code: int) -> bool:
    """A joker or any 2 (whether it ends up natural depends on the meld)."""
    return code == JOKER or code % 13 == 1


@dataclass(frozen=True, slots=True)
class TableMeld:
    """A meld on the table as a bot reads it from the view."""

    is_sequence: bool
    suit: int  # sequences: 0..3; groups: -1
    rank: int  # groups: 1..13; sequences: 0
    lo: int  # sequences: lowest slot, the wild's included (slot 1 = low ace, 14 = high ace)
    hi: int  # sequences: highest slot
    mask: int  # sequences: slots held by natural cards
    wild: int  # the wild's card code, or -1
    wild_slot: int  # sequences: the slot the wild stands for; 0 otherwise
    size: int
    canastra: str  # none, dirty, clean, royal, ace_to_ace
    cards: tuple[int, ...]  # the cards, in table order
    fits: frozenset[int]  # the natural cards that can be added on their own (an ace closing an A..A
    # run is counted in; whether the ruleset allows it is the engine's to say)
    fits_bits: int  # ``fits`` as a bit mask: bit c for card c

    def __copy__(self) -> TableMeld:
        return self  # immutable: a copy of a bot's memory shares its readings

    def __deepcopy__(self, memo: dict[int, Any]) -> TableMeld:
        return self

    def fits_bits_with(self, extra: list[int]) -> int:
        """``fits_bits`` once the run is stretched with the cards ``extra`` holds."""
        if not self.is_sequence:
            return self.fits_bits
        lo, hi, mask = self.lo, self.hi, self.mask
        while lo > ACE and extra[slot_card(self.suit, lo - 1)] and not mask >> (lo - 1) & 1:
            lo -= 1
            mask |= 1 << lo
        while hi < HIGH_ACE and extra[slot_card(self.suit, hi + 1)] and not mask >> (hi + 1) & 1:
            hi += 1
            mask |= 1 << hi
        if lo == self.lo and hi == self.hi:
            return self.fits_bits
        out = self.fits_bits
        for s in (lo - 1, hi + 1):
            if ACE <= s <= HIGH_ACE and not mask >> s & 1:
                out |= 1 << slot_card(self.suit, s)
        return out


def _bits(cards: frozenset[int]) -> int:
    out = 0
    for c in cards:
        out |= 1 << c
    return out


#: ``read_meld``'s memo: a dict bounded by a ring (``movegen.remember``; an lru_cache is a call through
#: the interpreter's machinery at every look-up from compiled code, and the bots read every meld at
#: every decision)
_READ: Final[dict[tuple[str, tuple[str, ...], str], TableMeld]] = {}
_READ_RING: Final = Ring(8192)


def read_meld(kind: str, cards: tuple[str, ...], canastra: str) -> TableMeld:
    """The shape of a meld from its view form (``cards`` in table order, low to high)."""
    key = (kind, cards, canastra)
    found = _READ.get(key)
    if found is None:
        found = _read_meld(kind, cards, canastra)
        remember(_READ, _READ_RING, key, found)
    return found


def _read_meld(kind: str, cards: tuple[str, ...], canastra: str) -> TableMeld:
    cs = [CODE[c] for c in cards]
    n = len(cs)
    if kind == "group":
        naturals = [c for c in cs if c != JOKER and c % 13 != 1]
        if naturals:
            rank = naturals[0] % 13 + 1
            wilds = [c for c in cs if c == JOKER or c % 13 == 1]
        else:  # a group of 2s: its wild can only be a joker
            rank = TWO
            wilds = [c for c in cs if c == JOKER]
        fits = frozenset(s * 13 + rank - 1 for s in range(4))
        return TableMeld(False, -1, rank, 0, 0, 0, wilds[0] if wilds else -1, 0, n, canastra, tuple(cs), fits,
                         _bits(fits))
    # a sequence: anchor the slots on a card that can only stand for itself (3..K)
    lo = ACE
    suit = -1
    for i, c in enumerate(cs):
        if c != JOKER and c % 13 >= 2:
            lo = c % 13 + 1 - i
            suit = c // 13
            break
    if suit < 0:  # only aces, 2s and a joker: A-2 at the bottom
        suit = next(c // 13 for c in cs if c != JOKER and c % 13 == 0)
    mask = 0
    wild = -1
    wild_slot = 0
    for i, c in enumerate(cs):
        slot = lo + i
        if c == slot_card(suit, slot):
            mask |= 1 << slot
        else:
            wild, wild_slot = c, slot
    hi = lo + n - 1
    slots = {lo - 1, hi + 1}
    if wild >= 0 and (lo > ACE or hi < HIGH_ACE):
        slots.add(wild_slot)  # the natural card takes the wild's place; the wild moves to an end
    fits = frozenset(slot_card(suit, s) for s in slots if ACE <= s <= HIGH_ACE and not mask >> s & 1)
    return TableMeld(True, suit, 0, lo, hi, mask, wild, wild_slot, n, canastra, tuple(cs), fits, _bits(fits))


class TypedView(Mapping[str, Any]):
    """A view that also hands a bot its readings directly, as card codes and ``TableMeld`` s.

    For views of positions a bot builds itself (the expert's rollouts), where printing the cards as
    strings for the bot to parse back would be most of a decision's reading. Every method must
    return exactly what reading the mapping's fields gives (``hand_counts``: the counts of
    ``codes(view["hand"])``; ``pile_codes``: ``codes(view["discard"])``; ``table_melds``:
    ``melds_of`` of the mapping), as new lists the caller may change."""

    __slots__ = ()

    def hand_counts(self) -> list[int]:
        raise NotImplementedError

    def pile_codes(self) -> list[int]:
        raise NotImplementedError

    def table_melds(self) -> list[list[TableMeld]]:
        raise NotImplementedError


def hand_counts(view: Mapping[str, Any]) -> list[int]:
    """The seat's own hand as counts per card code."""
    if isinstance(view, TypedView):
        return view.hand_counts()
    hand = [0] * NCODES
    held: list[str] = view["hand"]  # typed (a list, as every view gives it): compiled, typed reads
    for c in held:
        code = CODE[c]
        hand[code] = hand[code] + 1
    return hand


def pile_codes(view: Mapping[str, Any]) -> list[int]:
    """The discard pile as card codes, bottom first."""
    if isinstance(view, TypedView):
        return view.pile_codes()
    return codes(view["discard"])


def melds_of(view: Mapping[str, Any]) -> list[list[TableMeld]]:
    """Each side's melds as ``TableMeld`` s, in table order."""
    if isinstance(view, TypedView):
        return view.table_melds()
    # the view's values typed (lists and dicts, as every view gives them): compiled, typed reads
    sides: list[list[dict[str, Any]]] = view["melds"]
    out: list[list[TableMeld]] = []
    for side in sides:
        row: list[TableMeld] = []
        for m in side:
            cards: list[str] = m["cards"]
            row.append(read_meld(m["kind"], tuple(cards), m["canastra"]))
        out.append(row)
    return out


__all__ = ["CODE", "TableMeld", "TypedView", "codes", "hand_counts", "held_slots", "is_wild_card", "melds_of",
           "pile_codes", "read_meld", "slot_card"]
