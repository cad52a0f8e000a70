"""Move generation: every distinct new meld and addition a hand allows.

Candidates are built from the shape of the hand (runs per suit as bitmasks of slots, ranks for
groups), then each is checked by the same functions ``HandState.apply`` uses, so the generator
can never list an action that ``apply`` would refuse, nor place a wild differently.
"""

from __future__ import annotations

from itertools import product
from typing import TYPE_CHECKING

from engine.actions import AddCards, MeldCards
from engine.cards import ACE, HIGH_ACE, JOKER, TWO
from engine.errors import IllegalActionError
from engine.melds import Meld, extend_meld, make_meld, slot_card

if TYPE_CHECKING:
    from engine.state import HandState


_Seen = set[tuple[int, ...]]


def _wild_types(counts: list[int]) -> list[int]:
    out = [JOKER] if counts[JOKER] else []
    out.extend(t * 13 + 1 for t in range(4) if counts[t * 13 + 1])
    return out


def _avail_mask(counts: list[int], suit: int) -> int:
    """Slots (1..14) of ``suit`` the hand can fill with a natural card."""
    base = suit * 13
    mask = 0
    if counts[base]:
        mask |= 1 << ACE | 1 << HIGH_ACE
    for r in range(2, 14):
        if counts[base + r - 1]:
            mask |= 1 << r
    return mask


def _slots_cards(suit: int, slots: list[int]) -> list[int]:
    return [slot_card(suit, s) for s in slots]


def _fits(counts: list[int], cards: list[int]) -> bool:
    need: dict[int, int] = {}
    for c in cards:
        need[c] = need.get(c, 0) + 1
    return all(counts[c] >= n for c, n in need.items())


def _accept(state: HandState, action: MeldCards | AddCards, meld: Meld, index: int) -> bool:
    try:
        state._check_meld_result(action, meld, index)
    except IllegalActionError:
        return False
    return True


def meld_actions(state: HandState, first_only: bool = False) -> list[MeldCards]:
    """Every legal new meld for the seat to act."""
    rules = state.rules
    counts = state.counts[state.to_act]
    wilds = _wild_types(counts)
    seen: set[tuple[tuple[int, ...], int | None]] = set()
    out: list[MeldCards] = []

    def consider(cards: list[int], wild_slot: int, suit: int) -> bool:
        """Record the meld these cards make; True when ``first_only`` is satisfied."""
        if not _fits(counts, cards):
            return False
        cards_t = tuple(sorted(cards))
        try:
            meld = make_meld(cards_t, rules)
        except IllegalActionError:
            return False
        wild_as: int | None = None
        if wild_slot and meld.wild_slot != wild_slot:
            wild_as = slot_card(suit, wild_slot)
            try:
                meld = make_meld(cards_t, rules, wild_as)
            except IllegalActionError:
                return False
            if meld.wild_slot != wild_slot:
                return False
        key = (cards_t, wild_as)
        if key in seen:
            return False
        seen.add(key)
        action = MeldCards(cards_t, wild_as)
        if _accept(state, action, meld, -1):
            out.append(action)
            return first_only
        return False

    # sequences: an interval of slots, naturals everywhere but at most one slot (the wild's)
    for suit in range(4):
        avail = _avail_mask(counts, suit)
        if not avail:
            continue
        for lo in range(1, 13):
            missing = 0
            for hi in range(lo, 15):
                if not avail >> hi & 1 or (hi == HIGH_ACE and lo == ACE and counts[suit * 13] < 2):
                    if missing:
                        break
                    missing = hi
                if hi - lo + 1 < 3:
                    continue
                slots = list(range(lo, hi + 1))
                if not missing and consider(_slots_cards(suit, slots), 0, suit):
                    return out
                holes = [missing] if missing else slots
                for hole in holes:
                    naturals = _slots_cards(suit, [s for s in slots if s != hole])
                    for w in wilds:
                        if consider([*naturals, w], hole, suit):
                            return out
    # groups: any multiset of one rank (2 naturals at least), with at most one wild
    if rules.groups:
        ranks = [ACE, *range(3, 14)] + ([TWO] if rules.groups_of_twos else [])
        for rank in ranks:
            per_suit = [counts[s * 13 + rank - 1] for s in range(4)]
            if sum(per_suit) < 2:
                continue
            group_wilds = [JOKER] if rank == TWO and counts[JOKER] else (
                [] if rank == TWO else wilds)
            for pick in product(*(range(n + 1) for n in per_suit)):
                k = sum(pick)
                if k < 2:
                    continue
                naturals = [s * 13 + rank - 1 for s in range(4) for _ in range(pick[s])]
                if k >= 3 and consider(naturals, 0, -1):
                    return out
                for w in group_wilds:
                    if consider([*naturals, w], 0, -1):
                        return out
    return out


def add_actions(state: HandState, first_only: bool = False) -> list[AddCards]:
    """Every legal addition to the side's melds for the seat to act."""
    counts = state.counts[state.to_act]
    wilds = _wild_types(counts)
    side_melds = state.melds[state.to_act & 1]
    out: list[AddCards] = []
    for index, meld in enumerate(side_melds):
        seen: set[tuple[int, ...]] = set()

        def consider(cards: list[int], index: int = index, meld: Meld = meld, seen: _Seen = seen) -> bool:
            return _consider_add(state, counts, meld, index, cards, seen, out) and first_only

        if meld.is_sequence:
            suit = meld.suit
            avail = _avail_mask(counts, suit)
            nat = meld.mask
            nlo = (nat & -nat).bit_length() - 1
            nhi = nat.bit_length() - 1
            # the meld's own wild 2 may drop into its natural place and free the meld for a new wild
            home = meld.wild == slot_card(suit, TWO) and not nat >> TWO & 1
            if home:
                avail |= 1 << TWO
            # the final run spans [lo, hi] around the naturals; every slot of it that is not natural
            # yet is filled from the hand, except at most one: the wild's (and slot 2 when it goes home)
            inner = [s for s in range(nlo, nhi + 1) if not nat >> s & 1]
            inner_missing = sum(1 for s in inner if not avail >> s & 1)
            low: list[int] = []
            low_missing = 0
            for lo in range(nlo, 0, -1):
                if lo < nlo:
                    low.append(lo)
                    low_missing += not avail >> lo & 1
                if low_missing + inner_missing > 1:
                    break
                high: list[int] = []
                high_missing = 0
                for hi in range(nhi, min(14, lo + 13) + 1):
                    if hi > nhi:
                        high.append(hi)
                        high_missing += not avail >> hi & 1
                    missing = low_missing + inner_missing + high_missing
                    if missing > 1:
                        break
                    fill = low + inner + high
                    if not fill:
                        continue
                    holes: list[int] = [x for x in fill if not avail >> x & 1] if missing else [0, *fill]
                    for hole in holes:
                        slots = [x for x in fill if x != hole]
                        variants = [slots]
                        if home and TWO in slots:
                            variants.append([x for x in slots if x != TWO])  # the meld's 2 fills it
                        for chosen in variants:
                            naturals = _slots_cards(suit, chosen)
                            if (not hole or meld.wild >= 0) and consider(naturals):
                                return out
                            if hole:
                                for w in wilds:
                                    if consider([*naturals, w]):
                                        return out
        else:
            rank = meld.group_rank
            per_suit = [counts[s * 13 + rank - 1] for s in range(4)]
            group_wilds = [] if meld.wild >= 0 else ([JOKER] if rank == TWO and counts[JOKER] else (
                [] if rank == TWO else wilds))
            for pick in product(*(range(n + 1) for n in per_suit)):
                naturals = [s * 13 + rank - 1 for s in range(4) for _ in range(pick[s])]
                if naturals and consider(naturals):
                    return out
                for w in group_wilds:
                    if consider([*naturals, w]):
                        return out
    return out



def _consider_add(state: HandState, counts: list[int], meld: Meld, index: int, cards: list[int],
                  seen: set[tuple[int, ...]], out: list[AddCards]) -> bool:
    """Record the addition of ``cards`` to meld ``index`` if legal; True when it was recorded."""
    if not cards or not _fits(counts, cards):
        return False
    cards_t = tuple(sorted(cards))
    if cards_t in seen:
        return False
    seen.add(cards_t)
    try:
        result = extend_meld(meld, cards_t, state.rules)
    except IllegalActionError:
        return False
    action = AddCards(index, cards_t)
    if _accept(state, action, result, index):
        out.append(action)
        return True
    return False
