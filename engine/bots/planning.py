"""A quick estimate of what a hand can lay down with natural cards.

``plan_naturals`` greedily extends the side's melds, then lays new runs of 3+ natural cards per
suit, then groups of 3+ of one rank (where groups are allowed). It ignores wilds and the order of
the turn: it is an estimate, cheap enough to run a few times a turn (pile decisions, discards),
not a move generator. The moves themselves always come from the engine's legal-action list.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.bots.reading import TableMeld, slot_card
from engine.cards import ACE, HIGH_ACE, JOKER, TWO
from engine.rules import CANASTRA


@dataclass(slots=True)
class Plan:
    used: list[int]  # per card code: how many copies the plan lays down
    count: int  # cards laid down
    value: int  # their point value
    canastras: int  # melds (new or extended) that reach a canastra
    clean_canastras: int  # of which without a wild


def _take(avail: list[int], used: list[int], code: int) -> bool:
    if avail[code]:
        avail[code] -= 1
        used[code] += 1
        return True
    return False


def plan_naturals(counts: list[int], melds: list[TableMeld], groups: bool, values: tuple[int, ...],
                  wilds: bool = False) -> Plan:
    """What ``counts`` (a hand) can lay down with natural cards, on and beside ``melds``.

    With ``wilds``, each wild in ``counts`` then joins two close leftover cards (same suit within
    two ranks, or one rank where groups are allowed) into a new meld.
    """
    avail = counts[:]
    used = [0] * len(counts)
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
                if wild_slot and (lo > ACE or hi < HIGH_ACE) and _take(avail, used, slot_card(suit, wild_slot)):
                    mask |= 1 << wild_slot
                    if hi < HIGH_ACE:
                        hi += 1
                        wild_slot = hi
                    else:
                        lo -= 1
                        wild_slot = lo
                    size += 1
                    progress = True
                if lo > ACE and not mask >> (lo - 1) & 1 and _take(avail, used, slot_card(suit, lo - 1)):
                    lo -= 1
                    mask |= 1 << lo
                    size += 1
                    progress = True
                if hi < HIGH_ACE and not mask >> (hi + 1) & 1 and _take(avail, used, slot_card(suit, hi + 1)):
                    hi += 1
                    mask |= 1 << hi
                    size += 1
                    progress = True
        else:
            for suit in range(4):
                code = suit * 13 + m.rank - 1
                while _take(avail, used, code):
                    size += 1
        if m.size < CANASTRA <= size:
            canastras += 1
            clean += m.wild < 0
    # new runs of natural cards, twice (the second copies of the deck can make a second run)
    for _ in range(2):
        for suit in range(4):
            base = suit * 13
            slots = [False] * 15
            for slot in range(TWO, 14):
                slots[slot] = avail[base + slot - 1] > 0
            slots[ACE] = slots[HIGH_ACE] = avail[base] > 0
            slot = ACE
            while slot <= HIGH_ACE:
                if not slots[slot]:
                    slot += 1
                    continue
                end = slot
                while end + 1 <= HIGH_ACE and slots[end + 1]:
                    end += 1
                if end == HIGH_ACE and slot == ACE and avail[base] < 2:
                    end -= 1  # one ace cannot stand at both ends
                length = end - slot + 1
                if length >= 3:
                    for s in range(slot, end + 1):
                        _take(avail, used, slot_card(suit, s))
                    if length >= CANASTRA:
                        canastras += 1
                        clean += 1
                slot = end + 1
    if groups:
        for rank in (ACE, *range(3, 14)):
            total = sum(avail[s * 13 + rank - 1] for s in range(4))
            if total >= 3:
                for s in range(4):
                    code = s * 13 + rank - 1
                    while _take(avail, used, code):
                        pass
                if total >= CANASTRA:
                    canastras += 1
                    clean += 1
    if wilds:
        spare = [JOKER] * avail[JOKER] + [s * 13 + 1 for s in range(4) for _ in range(avail[s * 13 + 1])]
        if spare:
            left = [c for c in range(JOKER) if c % 13 != 1 for _ in range(avail[c])]
            i = 0
            while spare and i + 1 < len(left):
                c, d = left[i], left[i + 1]
                if (c // 13 == d // 13 and 0 < d - c <= 2) or (groups and c == d):
                    w = spare.pop()
                    for code in (c, d, w):
                        _take(avail, used, code)
                    i += 2
                else:
                    i += 1
    count = 0
    value = 0
    for code, n in enumerate(used):
        if n:
            count += n
            value += n * values[code]
    return Plan(used, count, value, canastras, clean)


__all__ = ["Plan", "plan_naturals"]
