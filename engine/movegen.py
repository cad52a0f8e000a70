"""Move generation: every distinct new meld and addition a hand allows.

Candidates are built from the shape of the hand (runs per suit as bitmasks of slots, ranks for
groups); each is then placed by the very functions ``HandState.apply`` uses (``make_meld``,
``extend_meld``, memoised here) and checked by the state's own rules
(``PlayPosition.meld_result_allowed``), so the generator can never list an action that ``apply``
would refuse, nor place a wild differently. The property tests check the other direction: every
meld or addition ``apply`` accepts is listed. The hand is read through ``engine.position``'s
protocol: this module does not import ``engine.state``, which imports it.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import product
from typing import Any

from engine.actions import Action, AddCards, MeldCards
from engine.cards import ACE, HIGH_ACE, JOKER, TWO
from engine.errors import IllegalActionError
from engine.melds import Meld, extend_meld, make_meld, slot_card
from engine.position import PlayPosition
from engine.rules import Ruleset

# The memo tables below are keyed by a ruleset's number (`ruleset_number`), not by the ruleset:
# a key of numbers only is a tuple Python's collector stops tracking, while one holding the ruleset
# object stays tracked, and every full collection re-scans every tracked entry of every table (the
# tables grow to hundreds of thousands of entries: most of the collector's work during play). For
# the same reason the candidates are kept as two parallel tuples (the actions, the melds they
# make), not as pairs.
_RULESETS: dict[Ruleset, int] = {}
_BY_NUMBER: list[Ruleset] = []


def ruleset_number(rules: Ruleset) -> int:
    """A small number per distinct ruleset, for this process's memo keys."""
    number = _RULESETS.get(rules)
    if number is None:
        number = _RULESETS[rules] = len(_BY_NUMBER)
        _BY_NUMBER.append(rules)
    return number


# Placement is a pure function of (cards, ruleset): memoised, since the same hands are examined
# again and again within a turn and across turns. Failures are cached as None.
@lru_cache(maxsize=1 << 16)
def _placed(cards: tuple[int, ...], rules: int, wild_as: int | None) -> Meld | None:
    try:
        return make_meld(cards, _BY_NUMBER[rules], wild_as)
    except IllegalActionError:
        return None


def placed(cards: tuple[int, ...], rules: Ruleset, wild_as: int | None) -> Meld | None:
    return _placed(cards, ruleset_number(rules), wild_as)


@lru_cache(maxsize=1 << 16)
def _extended(meld: Meld, cards: tuple[int, ...], rules: int) -> Meld | None:
    try:
        return _shared_meld(extend_meld(meld, cards, _BY_NUMBER[rules]))
    except IllegalActionError:
        return None


# Many additions to many melds make the same meld: one object for all of them (see _shared_meld_action).
@lru_cache(maxsize=1 << 15)
def _shared_meld(meld: Meld) -> Meld:
    return meld


def extended(meld: Meld, cards: tuple[int, ...], rules: Ruleset) -> Meld | None:
    return _extended(meld, cards, ruleset_number(rules))


def _fits(counts: list[int], cards: tuple[int, ...]) -> bool:
    prev = -1
    run = 0
    for c in cards:  # sorted: equal cards are adjacent
        run = run + 1 if c == prev else 1
        if counts[c] < run:
            return False
        prev = c
    return True


# --- the hand's possible melds, memoised by the part of the hand each one depends on -------------
#
# A sequence of suit s depends only on the hand's cards of suit s and its wild cards (jokers and
# 2s); a group of rank r on its cards of rank r and its wilds; an addition on the meld and the same
# part of the hand. Those parts change little from one call to the next (a draw or a discard
# touches one suit), so each is computed once and looked up afterwards.

MeldCandidate = tuple[MeldCards, Meld]
AddCandidate = tuple[tuple[int, ...], Meld]
#: (the new melds' actions, the melds they make), index by index
MeldCandidates = tuple[tuple[MeldCards, ...], tuple[Meld, ...]]
#: (the additions' cards, the melds they make), index by index
AddCandidates = tuple[tuple[tuple[int, ...], ...], tuple[Meld, ...]]
_WILD_CODES = (JOKER, 1, 14, 27, 40)


def _partial_counts(cards: tuple[int, ...], first: int, step: int, wild_counts: tuple[int, ...]) -> list[int]:
    counts = [0] * 53
    for i, n in enumerate(cards):
        counts[first + i * step] = n
    for code, n in zip(_WILD_CODES, wild_counts, strict=True):
        counts[code] = n
    return counts


def _present_wilds(counts: list[int]) -> list[int]:
    return [c for c in _WILD_CODES if counts[c]]


def _split(candidates: dict[Any, tuple[Any, Meld]]) -> tuple[tuple[Any, ...], tuple[Meld, ...]]:
    values = list(candidates.values())
    return tuple(v[0] for v in values), tuple(v[1] for v in values)


@lru_cache(maxsize=1 << 14)
def suit_melds(rules_number: int, suit: int, suit_counts: tuple[int, ...],
               wild_counts: tuple[int, ...]) -> MeldCandidates:
    """Every new sequence of ``suit`` these cards allow (an interval of slots, natural everywhere but
    at most one slot, the wild's), each with the meld it makes."""
    rules = _BY_NUMBER[rules_number]
    counts = _partial_counts(suit_counts, suit * 13, 1, wild_counts)
    wilds = _present_wilds(counts)
    avail = 0
    for rank, n in enumerate(suit_counts, start=1):
        if n:
            avail |= (1 << ACE | 1 << HIGH_ACE) if rank == ACE else 1 << rank
    out: dict[tuple[tuple[int, ...], int | None], MeldCandidate] = {}
    two_aces = suit_counts[0] >= 2
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
                _add_meld_candidate(out, counts, rules, cards, 0, suit)
                holes = range(lo, hi + 1)
            else:
                holes = range(missing, missing + 1)
            for hole in holes if wilds else ():
                naturals = cards[:hole - lo] + cards[hole - lo + 1:]
                for w in wilds:
                    _add_meld_candidate(out, counts, rules, [*naturals, w], hole, suit)
    return _split(out)


@lru_cache(maxsize=1 << 14)
def rank_melds(rules_number: int, rank: int, rank_counts: tuple[int, ...],
               wild_counts: tuple[int, ...]) -> MeldCandidates:
    """Every new group of ``rank``: any multiset of it (two naturals at least), at most one wild."""
    rules = _BY_NUMBER[rules_number]
    counts = _partial_counts(rank_counts, rank - 1, 13, wild_counts)
    wilds = ([JOKER] if counts[JOKER] else []) if rank == TWO else _present_wilds(counts)
    out: dict[tuple[tuple[int, ...], int | None], MeldCandidate] = {}
    for pick in product(*(range(n + 1) for n in rank_counts)):
        k = sum(pick)
        if k < 2:
            continue
        naturals = [s * 13 + rank - 1 for s in range(4) for _ in range(pick[s])]
        if k >= 3:
            _add_meld_candidate(out, counts, rules, naturals, 0, -1)
        for w in wilds:
            _add_meld_candidate(out, counts, rules, [*naturals, w], 0, -1)
    return _split(out)


def _add_meld_candidate(out: dict[tuple[tuple[int, ...], int | None], MeldCandidate], counts: list[int],
                        rules: Ruleset, cards: list[int], wild_slot: int, suit: int) -> None:
    """Record the meld these cards make, with the wild at ``wild_slot`` (0: where the rules put it)."""
    cards_t = tuple(sorted(cards))
    if not _fits(counts, cards_t):
        return
    meld = placed(cards_t, rules, None)
    if meld is None:
        return
    wild_as: int | None = None
    if wild_slot and meld.wild_slot != wild_slot:
        wild_as = slot_card(suit, wild_slot)
        meld = placed(cards_t, rules, wild_as)
        if meld is None or meld.wild_slot != wild_slot:
            return
    key = (cards_t, wild_as)
    if key not in out:
        out[key] = (_shared_meld_action(cards_t, wild_as), meld)


# One action per distinct new meld, shared by every memo entry that lists it: the same few thousand
# melds turn up in tens of thousands of entries, and each object of its own would be one more for
# Python's collector to re-scan.
@lru_cache(maxsize=1 << 16)
def _shared_meld_action(cards: tuple[int, ...], wild_as: int | None) -> MeldCards:
    return MeldCards(cards, wild_as)


@lru_cache(maxsize=1 << 14)
def meld_additions(rules_number: int, meld: Meld, part: tuple[int, ...],
                   wild_counts: tuple[int, ...]) -> AddCandidates:
    """Every addition to ``meld`` from the hand's relevant part (its cards of the sequence's suit, or
    of the group's rank) and its wilds, each with the meld it makes."""
    rules = _BY_NUMBER[rules_number]
    out: dict[tuple[int, ...], AddCandidate] = {}
    if meld.is_sequence:
        counts = _partial_counts(part, meld.suit * 13, 1, wild_counts)
        avail = 0
        for rank, n in enumerate(part, start=1):
            if n:
                avail |= (1 << ACE | 1 << HIGH_ACE) if rank == ACE else 1 << rank
        _sequence_additions(rules, counts, meld, avail, _present_wilds(counts), out)
    else:
        rank = meld.group_rank
        counts = _partial_counts(part, rank - 1, 13, wild_counts)
        wilds = [] if meld.wild >= 0 else (
            ([JOKER] if counts[JOKER] else []) if rank == TWO else _present_wilds(counts))
        for pick in product(*(range(n + 1) for n in part)):
            naturals = [s * 13 + rank - 1 for s in range(4) for _ in range(pick[s])]
            if naturals:
                _add_addition(out, counts, rules, meld, naturals)
            for w in wilds:
                _add_addition(out, counts, rules, meld, [*naturals, w])
    return _split(out)


def _sequence_additions(rules: Ruleset, counts: list[int], meld: Meld, avail: int, wilds: list[int],
                        out: dict[tuple[int, ...], AddCandidate]) -> None:
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
                    if not hole or meld.wild >= 0:
                        _add_addition(out, counts, rules, meld, naturals)
                    if hole:
                        for w in wilds:
                            _add_addition(out, counts, rules, meld, [*naturals, w])


def _add_addition(out: dict[tuple[int, ...], AddCandidate], counts: list[int], rules: Ruleset, meld: Meld,
                  cards: list[int]) -> None:
    if not cards:
        return
    cards_t = tuple(sorted(cards))
    if cards_t in out or not _fits(counts, cards_t):
        return
    result = extended(meld, cards_t, rules)
    if result is not None:
        out[cards_t] = (cards_t, result)


def _sequence_around(suit_counts: tuple[int, ...], any_wild: bool, rank: int) -> bool:
    """Whether a sequence of these cards (of one suit) might hold the card of ``rank``: some three
    slots in a row around it hold three naturals, or two and a wild (a sequence holds at most one
    wild, so every three slots in a row of it do). A necessary condition only."""
    m = 0
    for r, n in enumerate(suit_counts, start=1):
        if n:
            m |= (1 << ACE | 1 << HIGH_ACE) if r == ACE else 1 << r
    need = 2 if any_wild else 3
    for slot in (ACE, HIGH_ACE) if rank == ACE else (rank,):
        for lo in range(max(1, slot - 2), min(slot, HIGH_ACE - 2) + 1):
            if (m >> lo & 7).bit_count() >= need:
                return True
    return False


# --- the legal plays of the moment ------------------------------------------------------------------

def _accept(state: PlayPosition, must: int, simple_from: int, action: MeldCards | AddCards, meld: Meld,
            index: int) -> bool:
    """Whether a candidate is legal in this state (a plain function: a closure would be allocated at
    every call of ``plays``)."""
    if must >= 0 and must not in action.cards:
        return False
    if state.sizes[state.to_act] - len(action.cards) >= simple_from:
        return True
    return state.meld_result_allowed(action, meld, index)


def plays(state: PlayPosition, first_only: bool = False,
          plans: dict[Action, Meld | None] | None = None) -> list[MeldCards | AddCards]:
    """Every legal new meld and addition for the seat to act (or the first found, ``first_only``).

    The memoised candidates are structurally valid; what depends on the whole state (the closed
    pile's top card, a hand emptied or nearly emptied, the lone-discard card) is checked here.
    ``plans`` receives the meld each listed action makes.
    """
    seat = state.to_act
    rules = state.rules
    number = ruleset_number(rules)
    counts = state.counts[seat]
    size = state.sizes[seat]
    must = state.must_meld
    must_natural = must >= 0 and must != JOKER and must % 13 != 1
    # a move that keeps two cards or more always leaves a legal discard, unless a lone card taken
    # from the pile is involved: then the state decides
    simple_from = 2 if state.lone < 0 else 1 << 30
    wild_counts = (counts[JOKER], counts[1], counts[14], counts[27], counts[40])
    any_wild = any(wild_counts)
    out: list[MeldCards | AddCards] = []

    suits = [tuple(counts[0:13]), tuple(counts[13:26]), tuple(counts[26:39]), tuple(counts[39:52])]
    if size >= 3:
        for suit in range(4):
            if must_natural and must // 13 != suit:
                continue
            suit_counts = suits[suit]
            if sum(suit_counts) + any_wild < 3:
                continue
            if must_natural and not _sequence_around(suit_counts, any_wild, must % 13 + 1):
                continue  # no sequence of this suit could hold the card that must be melded
            actions, melds = suit_melds(number, suit, suit_counts, wild_counts)
            for i in range(len(actions)):
                action, meld = actions[i], melds[i]
                if ((must < 0 and size - len(action.cards) >= simple_from)
                        or _accept(state, must, simple_from, action, meld, -1)):
                    out.append(action)
                    if plans is not None:
                        plans[action] = meld
                    if first_only:
                        return out
        if rules.groups:
            need = 3 - any_wild
            ranks = [must % 13 + 1] if must_natural else _GROUP_RANKS[rules.groups_of_twos]
            for rank in ranks:
                rank_counts = (counts[rank - 1], counts[12 + rank], counts[25 + rank], counts[38 + rank])
                if sum(rank_counts) < need:
                    continue
                actions, melds = rank_melds(number, rank, rank_counts, wild_counts)
                for i in range(len(actions)):
                    action, meld = actions[i], melds[i]
                    if ((must < 0 and size - len(action.cards) >= simple_from)
                        or _accept(state, must, simple_from, action, meld, -1)):
                        out.append(action)
                        if plans is not None:
                            plans[action] = meld
                        if first_only:
                            return out
    held = int.from_bytes(bytes(counts), "little")  # a byte per card: its count
    for index, meld in enumerate(state.melds[seat & 1]):
        takes_wild, touch_bytes = meld._touch or meld.touch()
        if not held & touch_bytes and not (any_wild and takes_wild):
            continue  # the hand holds nothing this meld could take
        if meld.is_sequence:
            if must_natural and must // 13 != meld.suit:
                continue
            part = suits[meld.suit]
        else:
            rank = meld.group_rank
            if must_natural and must % 13 + 1 != rank:
                continue
            part = (counts[rank - 1], counts[12 + rank], counts[25 + rank], counts[38 + rank])
        if not any_wild and not any(part):
            continue
        additions, results = meld_additions(number, meld, part, wild_counts)
        for i in range(len(additions)):
            cards_t, result = additions[i], results[i]
            addition = AddCards(index, cards_t)
            if ((must < 0 and size - len(cards_t) >= simple_from)
                    or _accept(state, must, simple_from, addition, result, index)):
                out.append(addition)
                if plans is not None:
                    plans[addition] = result
                if first_only:
                    return out
    return out


_GROUP_RANKS = {False: [ACE, *range(3, 14)], True: [ACE, TWO, *range(3, 14)]}
