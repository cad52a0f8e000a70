"""Move generation: every distinct new meld and addition a hand allows.

Candidates are built from the shape of the hand (runs per suit as bitmasks of slots, ranks for
groups); each is then placed by the very functions ``HandState.apply`` uses (``make_meld``,
``extend_meld``, memoised here) and checked by the state's own rules, so the generator can never
list an action that ``apply`` would refuse, nor place a wild differently. The property tests check
the other direction: every meld or addition ``apply`` accepts is listed.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import product
from typing import TYPE_CHECKING

from engine.actions import AddCards, MeldCards
from engine.cards import ACE, HIGH_ACE, JOKER, TWO
from engine.errors import IllegalActionError
from engine.melds import Meld, extend_meld, make_meld, slot_card
from engine.rules import Ruleset

if TYPE_CHECKING:
    from engine.state import HandState

_Seen = set[tuple[int, ...]]


# Placement is a pure function of (cards, ruleset): memoised, since the same hands are examined
# again and again within a turn and across turns. Failures are cached as None.
@lru_cache(maxsize=1 << 16)
def placed(cards: tuple[int, ...], rules: Ruleset, wild_as: int | None) -> Meld | None:
    try:
        return make_meld(cards, rules, wild_as)
    except IllegalActionError:
        return None


@lru_cache(maxsize=1 << 16)
def extended(meld: Meld, cards: tuple[int, ...], rules: Ruleset) -> Meld | None:
    try:
        return extend_meld(meld, cards, rules)
    except IllegalActionError:
        return None


def _wild_types(counts: list[int]) -> list[int]:
    out = [JOKER] if counts[JOKER] else []
    out.extend(t * 13 + 1 for t in range(4) if counts[t * 13 + 1])
    return out


# the slot bits a natural card fills: an ace both ends, any other card its rank
_SLOT_BITS = tuple((1 << ACE | 1 << HIGH_ACE) if c % 13 == 0 else 1 << (c % 13 + 1) for c in range(52))


def _suit_masks(counts: list[int]) -> list[int]:
    """Per suit, the slots (1..14) the hand can fill with a natural card."""
    masks = [0, 0, 0, 0]
    for c in range(52):
        if counts[c]:
            masks[c // 13] |= _SLOT_BITS[c]
    return masks


def _fits(counts: list[int], cards: tuple[int, ...]) -> bool:
    prev = -1
    run = 0
    for c in cards:  # sorted: equal cards are adjacent
        run = run + 1 if c == prev else 1
        if counts[c] < run:
            return False
        prev = c
    return True


class _Context:
    """What every candidate of one call shares: the hand, and the cheap acceptance test."""

    __slots__ = ("counts", "first_only", "masks", "must", "simple_from", "size", "state", "wilds")

    def __init__(self, state: HandState, first_only: bool) -> None:
        self.state = state
        self.counts = state.counts[state.to_act]
        self.size = state.sizes[state.to_act]
        self.must = state.must_meld
        self.first_only = first_only
        # a move that keeps two cards or more always leaves a legal discard, unless a lone card
        # taken from the pile is involved: then ask the state
        self.simple_from = 2 if state.lone < 0 else 10**9
        self.masks = _suit_masks(self.counts)
        self.wilds = _wild_types(self.counts)

    def accept(self, action: MeldCards | AddCards, meld: Meld, index: int) -> bool:
        if self.size - len(action.cards) >= self.simple_from:
            return True
        try:
            self.state._check_meld_result(action, meld, index)
        except IllegalActionError:
            return False
        return True


def plays(state: HandState, first_only: bool = False) -> list[MeldCards | AddCards]:
    """Every legal new meld and addition (or just the first one found, with ``first_only``)."""
    ctx = _Context(state, first_only)
    out: list[MeldCards | AddCards] = []
    out.extend(meld_actions(state, first_only, ctx))
    if out and first_only:
        return out
    out.extend(add_actions(state, first_only, ctx))
    return out


def meld_actions(state: HandState, first_only: bool = False, ctx: _Context | None = None) -> list[MeldCards]:
    """Every legal new meld for the seat to act."""
    out: list[MeldCards] = []
    if state.sizes[state.to_act] < 3:
        return out
    rules = state.rules
    ctx = ctx or _Context(state, first_only)
    counts = ctx.counts
    must = ctx.must
    wilds = ctx.wilds
    seen: set[tuple[tuple[int, ...], int | None]] = set()
    # a natural card that must be melded (closed pile) narrows the search to its suit and rank
    must_natural = must >= 0 and must != JOKER and must % 13 != 1

    def consider(cards: list[int], wild_slot: int, suit: int) -> bool:
        """Record the meld these cards make (the wild at ``wild_slot``); True to stop early."""
        cards_t = tuple(sorted(cards))
        if must >= 0 and must not in cards_t:
            return False
        if not _fits(counts, cards_t):
            return False
        meld = placed(cards_t, rules, None)
        if meld is None:
            return False
        wild_as: int | None = None
        if wild_slot and meld.wild_slot != wild_slot:
            wild_as = slot_card(suit, wild_slot)
            meld = placed(cards_t, rules, wild_as)
            if meld is None or meld.wild_slot != wild_slot:
                return False
        key = (cards_t, wild_as)
        if key in seen:
            return False
        seen.add(key)
        action = MeldCards(cards_t, wild_as)
        if ctx.accept(action, meld, -1):
            out.append(action)
            return first_only
        return False

    # sequences: an interval of slots, natural everywhere but at most one slot (the wild's)
    need = 3 if not wilds else 2  # natural cards a run needs at least
    for suit in range(4):
        avail = ctx.masks[suit]
        if avail.bit_count() < need or (must_natural and must // 13 != suit):
            continue
        two_aces = counts[suit * 13] >= 2
        for lo in range(1, 13):
            if not avail >> lo & 1 and (not wilds or not avail >> (lo + 1) & 1):
                continue  # a run starts with a natural card, or with the wild just before one
            missing = 0
            for hi in range(lo, 15):
                if not avail >> hi & 1 or (hi == HIGH_ACE and lo == ACE and not two_aces):
                    if missing:
                        break
                    missing = hi
                if hi - lo < 2:
                    continue
                cards = [slot_card(suit, x) for x in range(lo, hi + 1)]
                if not missing:
                    if consider(cards, 0, suit):
                        return out
                    holes = range(lo, hi + 1)
                else:
                    holes = range(missing, missing + 1)
                if not wilds:
                    continue
                for hole in holes:
                    naturals = cards[:hole - lo] + cards[hole - lo + 1:]
                    for w in wilds:
                        if consider([*naturals, w], hole, suit):
                            return out
    # groups: any multiset of one rank (2 naturals at least), with at most one wild
    if rules.groups:
        ranks = [ACE, *range(3, 14)] + ([TWO] if rules.groups_of_twos else [])
        if must_natural:
            ranks = [must % 13 + 1]
        for rank in ranks:
            per_suit = [counts[rank - 1], counts[12 + rank], counts[25 + rank], counts[38 + rank]]
            if sum(per_suit) < 2 or (sum(per_suit) < 3 and not wilds):
                continue
            group_wilds = ([JOKER] if counts[JOKER] else []) if rank == TWO else wilds
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


def add_actions(state: HandState, first_only: bool = False, ctx: _Context | None = None) -> list[AddCards]:
    """Every legal addition to the side's melds for the seat to act."""
    out: list[AddCards] = []
    melds = state.melds[state.to_act & 1]
    if not melds:
        return out
    ctx = ctx or _Context(state, first_only)
    counts = ctx.counts
    wilds = ctx.wilds
    must = ctx.must
    must_natural = must >= 0 and must != JOKER and must % 13 != 1
    for index, meld in enumerate(melds):
        seen: _Seen = set()
        if meld.is_sequence:
            avail = ctx.masks[meld.suit]
            if (not avail and not wilds) or (must_natural and must // 13 != meld.suit):
                continue
            if _sequence_additions(ctx, meld, index, avail, wilds, seen, out):
                return out
        else:
            rank = meld.group_rank
            if must_natural and must % 13 + 1 != rank:
                continue
            per_suit = [counts[rank - 1], counts[12 + rank], counts[25 + rank], counts[38 + rank]]
            if not any(per_suit) and (meld.wild >= 0 or not wilds):
                continue
            group_wilds = [] if meld.wild >= 0 else (
                ([JOKER] if counts[JOKER] else []) if rank == TWO else wilds)
            for pick in product(*(range(n + 1) for n in per_suit)):
                naturals = [s * 13 + rank - 1 for s in range(4) for _ in range(pick[s])]
                if naturals and _consider_add(ctx, meld, index, naturals, seen, out):
                    return out
                for w in group_wilds:
                    if _consider_add(ctx, meld, index, [*naturals, w], seen, out):
                        return out
    return out


def _sequence_additions(ctx: _Context, meld: Meld, index: int, avail: int, wilds: list[int], seen: _Seen,
                        out: list[AddCards]) -> bool:
    """Additions to one sequence; True to stop early (``first_only``)."""
    suit = meld.suit
    nat = meld.mask
    nlo = (nat & -nat).bit_length() - 1
    nhi = nat.bit_length() - 1
    # the meld's own wild 2 may drop into its natural place and free the meld for a new wild
    home = meld.wild == slot_card(suit, TWO) and not nat >> TWO & 1
    if home:
        avail |= 1 << TWO
    # the final run spans [lo, hi] around the naturals; every slot of it that is not natural yet is
    # filled from the hand, except at most one: the wild's (and slot 2 when the meld's 2 goes home)
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
            holes = [x for x in fill if not avail >> x & 1] if missing else [0, *fill]
            for hole in holes:
                slots = [x for x in fill if x != hole]
                variants = [slots]
                if home and TWO in slots:
                    variants.append([x for x in slots if x != TWO])  # the meld's own 2 fills it
                for chosen in variants:
                    naturals = [slot_card(suit, x) for x in chosen]
                    if (not hole or meld.wild >= 0) and _consider_add(ctx, meld, index, naturals, seen, out):
                        return True
                    if hole:
                        for w in wilds:
                            if _consider_add(ctx, meld, index, [*naturals, w], seen, out):
                                return True
    return False


def _consider_add(ctx: _Context, meld: Meld, index: int, cards: list[int], seen: _Seen,
                  out: list[AddCards]) -> bool:
    """Record the addition of ``cards`` to meld ``index`` if legal; True to stop early."""
    if not cards:
        return False
    cards_t = tuple(sorted(cards))
    if cards_t in seen:
        return False
    seen.add(cards_t)
    if ctx.must >= 0 and ctx.must not in cards_t:
        return False
    if not _fits(ctx.counts, cards_t):
        return False
    result = extended(meld, cards_t, ctx.state.rules)
    if result is None:
        return False
    action = AddCards(index, cards_t)
    if ctx.accept(action, result, index):
        out.append(action)
        return ctx.first_only
    return False
