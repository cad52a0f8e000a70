"""A quick estimate of what a hand can lay down.

``plan_naturals`` greedily extends the side's melds with natural cards, then lays new runs of 3+
natural cards per suit, then groups of 3+ of one rank (where groups are allowed), and finally lets
each wild join two close leftover cards into a new meld. It ignores the order of the turn and the
wild's exact placement: it is an estimate, cheap enough to run a few times a turn (the pile
decision, whether the hand can be emptied now), not a move generator. The moves themselves always
come from the engine's legal-action list.
"""

from __future__ import annotations

from typing import Final

from engine.bots.reading import TableMeld, held_slots, slot_card
from engine.cards import ACE, HIGH_ACE, JOKER, NCODES
from engine.rules import CANASTRA

_GROUP_RANKS: Final[tuple[int, ...]] = (ACE, *range(3, 14))


class Plan:
    """What a hand can lay down, as ``plan_naturals`` estimates it.

    Written out rather than a dataclass (as ``heuristic.Turn``): every call makes one, and a compiled
    dataclass still builds itself in interpreted code."""

    __slots__ = ("canastras", "clean_canastras", "count", "used", "value")

    def __init__(self, used: list[int], count: int, value: int, canastras: int, clean_canastras: int) -> None:
        self.used = used  # per card code: how many copies the plan lays down
        self.count = count  # cards laid down
        self.value = value  # their point value
        self.canastras = canastras  # melds (new or extended) that reach a canastra
        self.clean_canastras = clean_canastras  # of which without a wild


def _take_rank(avail: list[int], used: list[int], values: tuple[int, ...], first: int) -> int:
    """Takes every copy of one rank left in ``avail`` (codes ``first``, +13, +26, +39) into ``used``;
    returns their points (the caller knows how many they are: a tuple would be allocated per call)."""
    points = 0
    for code in range(first, JOKER, 13):
        n = avail[code]
        if n:
            avail[code] = 0
            used[code] = used[code] + n
            points += n * values[code]
    return points


def plan_naturals(counts: list[int], melds: list[TableMeld], groups: bool, values: tuple[int, ...],
                  wilds: bool = True) -> Plan:
    """What ``counts`` (a hand) can lay down on and beside ``melds``.

    Natural cards first; then, with ``wilds``, each wild in ``counts`` joins two close leftover
    cards (same suit within two ranks, or one rank where groups are allowed) into a new meld.

    The heuristic runs this a few times a turn, in every rollout of the expert's search, so it
    counts the cards it lays as it takes them (no last pass over the deck) and scans a suit a second
    time only where it laid a run.
    """
    avail = counts[:]
    used = [0] * NCODES
    count = 0
    value = 0
    canastras = 0
    clean = 0
    for m in melds:
        size = m.size
        if m.is_sequence:
            suit, lo, hi, mask = m.suit, m.lo, m.hi, m.mask
            wild_slot = m.wild_slot if m.wild >= 0 else 0
            progress = True
            while progress:
                progress = False
                if wild_slot and (lo > ACE or hi < HIGH_ACE):
                    code = slot_card(suit, wild_slot)
                    if avail[code]:  # the natural card takes the wild's place; the wild moves to an end
                        avail[code] -= 1
                        used[code] += 1
                        count += 1
                        value += values[code]
                        mask |= 1 << wild_slot
                        if hi < HIGH_ACE:
                            hi += 1
                            wild_slot = hi
                        else:
                            lo -= 1
                            wild_slot = lo
                        size += 1
                        progress = True
                if lo > ACE and not mask >> (lo - 1) & 1:
                    code = slot_card(suit, lo - 1)
                    if avail[code]:
                        avail[code] -= 1
                        used[code] += 1
                        count += 1
                        value += values[code]
                        lo -= 1
                        mask |= 1 << lo
                        size += 1
                        progress = True
                if hi < HIGH_ACE and not mask >> (hi + 1) & 1:
                    code = slot_card(suit, hi + 1)
                    if avail[code]:
                        avail[code] -= 1
                        used[code] += 1
                        count += 1
                        value += values[code]
                        hi += 1
                        mask |= 1 << hi
                        size += 1
                        progress = True
        else:
            code = m.rank - 1
            n = avail[code] + avail[code + 13] + avail[code + 26] + avail[code + 39]
            if n:
                value += _take_rank(avail, used, values, code)
                count += n
                size += n
        if m.size < CANASTRA <= size:
            canastras += 1
            clean += m.wild < 0
    # new runs of natural cards, per suit, twice (the deck's second copies can make a second run;
    # a suit that laid no run the first time has the same cards the second time, and lays none)
    for suit in range(4):
        base = suit * 13
        for _ in range(2):
            mask = held_slots(avail, suit)
            laid = False
            while mask:
                lo = (mask & -mask).bit_length() - 1
                x = mask >> lo
                length = (x ^ (x + 1)).bit_length() - 1
                mask &= ~(((1 << length) - 1) << lo)
                if lo == ACE and lo + length - 1 == HIGH_ACE and avail[base] < 2:
                    length -= 1  # one ace cannot stand at both ends
                if length >= 3:
                    laid = True
                    for s in range(lo, lo + length):
                        code = slot_card(suit, s)
                        avail[code] -= 1
                        used[code] += 1
                        count += 1
                        value += values[code]
                    if length >= CANASTRA:
                        canastras += 1
                        clean += 1
            if not laid:
                break
    if groups:
        for rank in _GROUP_RANKS:
            code = rank - 1  # the rank's four codes: code, code + 13, code + 26, code + 39
            total = avail[code] + avail[code + 13] + avail[code + 26] + avail[code + 39]
            if total >= 3:
                value += _take_rank(avail, used, values, code)
                count += total
                if total >= CANASTRA:
                    canastras += 1
                    clean += 1
    spare = avail[JOKER] + avail[1] + avail[14] + avail[27] + avail[40] if wilds else 0
    if spare:
        # the natural cards left are walked in code order, each copy once: a card and the next one,
        # when close, take a wild and make a meld, and the walk goes on after them; otherwise it goes
        # on from the next card. The 2s of the last suit are spent first, the jokers last
        prev = -1  # the card waiting for a partner
        for d in range(JOKER):
            copies = avail[d]
            if copies == 0 or d % 13 == 1:
                continue
            for _ in range(copies):
                c = prev
                if c >= 0 and ((c // 13 == d // 13 and 0 < d - c <= 2) or (groups and c == d)):
                    w = _spare_wild(avail)
                    for taken in (c, d, w):
                        avail[taken] -= 1
                        used[taken] += 1
                        count += 1
                        value += values[taken]
                    spare -= 1
                    prev = -1
                    if not spare:
                        break
                else:
                    prev = d
            if not spare:
                break
    return Plan(used, count, value, canastras, clean)


def _spare_wild(avail: list[int]) -> int:
    """The wild ``plan_naturals`` spends next: a 2 of the highest suit left, else a joker."""
    for w in (40, 27, 14, 1):
        if avail[w]:
            return w
    return JOKER


__all__ = ["Plan", "plan_naturals"]
