"""Melds: sequences and groups, the wild's place, canastra kinds.

A sequence keeps its natural cards as a bitmask of *slots* 1..14 (slot 1 is the low ace, slot 14
the high ace, slot 2 the 2 of the meld's suit standing in its natural place) plus at most one wild
(a joker, or a 2 that is not in its natural place) and the slot the wild stands for. A group keeps
its rank, its natural cards and at most one wild.

Where the wild goes is decided here, once, for new melds and additions alike (docs/rules.md,
"The wild's place"): among every valid arrangement of the cards, prefer (1) fewer wilds, i.e. a 2
of the suit drops into its natural place when it can; (2) on an addition, the wild stays where it
stood if that is still valid; (3) an ace at the high end; (4) the wild at the high end, then the low
end. A gap can only be filled by the wild, so a wild covering a gap never has a choice.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final

from engine.cards import ACE, CARD_STR, HIGH_ACE, JOKER, TWO, is_two, rank_of, suit_of, to_str
from engine.errors import IllegalActionError
from engine.rules import CANASTRA, MIN_MELD, Ruleset

CANASTRA_KINDS: Final = ("none", "dirty", "clean", "royal", "ace_to_ace")


@lru_cache(maxsize=64)
def card_values(rules: Ruleset) -> tuple[int, ...]:
    """Point value of every card code under ``rules``."""
    values = []
    for code in range(53):
        if code == JOKER:
            values.append(rules.joker_value)
            continue
        rank = code % 13 + 1
        if rank == ACE:
            values.append(rules.ace_value)
        elif rank == TWO:
            values.append(rules.two_value)
        elif rank >= 8:
            values.append(rules.high_value)
        else:
            values.append(rules.low_value)
    return tuple(values)


def slot_card(suit: int, slot: int) -> int:
    """The natural card of ``suit`` that stands in ``slot`` (1..14)."""
    return suit * 13 + (0 if slot == HIGH_ACE else slot - 1)


def _popcount(x: int) -> int:
    return x.bit_count()


def _span(mask: int) -> tuple[int, int]:
    return (mask & -mask).bit_length() - 1, mask.bit_length() - 1


def wild_slots(mask: int) -> list[int]:
    """Slots where one wild makes ``mask`` (naturals) a run, best first: the gap, else high, low end."""
    lo = (mask & -mask).bit_length() - 1
    hi = mask.bit_length() - 1
    count = mask.bit_count()
    width = hi - lo + 1
    if count == width:
        out = []
        if hi < HIGH_ACE:
            out.append(hi + 1)
        if lo > ACE:
            out.append(lo - 1)
        return out
    if count == width - 1:
        hole = ((1 << (hi + 1)) - (1 << lo)) & ~mask
        return [hole.bit_length() - 1]
    return []


def is_run(mask: int) -> bool:
    return mask.bit_count() == mask.bit_length() - (mask & -mask).bit_length() + 1


class Meld:
    """A meld on the table. Immutable: an addition makes a new ``Meld``."""

    __slots__ = ("_facts", "_hash", "_rules", "_touch", "cards", "group_rank", "is_sequence", "mask", "suit", "wild",
                 "wild_slot")

    def __init__(self, is_sequence: bool, suit: int, mask: int, group_rank: int,
                 cards: tuple[int, ...], wild: int, wild_slot: int) -> None:
        self.is_sequence = is_sequence
        self.suit = suit  # sequences: 0..3; groups: -1
        self.mask = mask  # sequences: natural slots; groups: 0
        self.group_rank = group_rank  # groups: 1..13; sequences: 0
        self.cards = cards  # the cards in output order (sequence: low to high, wild in its place)
        self.wild = wild  # card code of the wild, or -1
        self.wild_slot = wild_slot  # sequences: slot the wild stands for; groups: 0
        self._rules: Ruleset | None = None  # the ruleset ``_facts`` were computed for
        self._facts: tuple[str, int, int, tuple[str, ...]] = ("", 0, 0, ())
        self._touch: tuple[bool, int] | None = None
        self._hash = hash((cards, wild_slot))  # melds key the move generator's memo tables

    def touch(self) -> tuple[bool, int]:
        """(takes a wild, touch cards as a byte mask over a hand's counts read as one integer).

        Every addition holds a wild (when the meld can take one) or one of the touch cards: a natural
        next to the naturals' ends; with a wild, also one further (the wild moves into the gap) and the
        card the wild stands for. Move generation skips a meld the hand cannot touch.
        """
        if self._touch is not None:
            return self._touch
        if self.is_sequence:
            lo, hi = _span(self.mask)
            w = self.wild_slot
            near = (lo - 1, hi + 1, lo - 2, hi + 2, w) if self.wild >= 0 else (lo - 1, hi + 1)
            cards = [slot_card(self.suit, x) for x in near if 1 <= x <= HIGH_ACE]
            takes_wild = self.wild < 0 or (self.wild == self.suit * 13 + 1 and not self.mask >> TWO & 1)
        else:
            cards = [x * 13 + self.group_rank - 1 for x in range(4)]
            takes_wild = self.wild < 0
        touch_bytes = 0
        for c in cards:
            touch_bytes |= 0xFF << (8 * c)
        self._touch = (takes_wild, touch_bytes)
        return self._touch

    # construction -------------------------------------------------------------------------------
    @staticmethod
    def sequence(suit: int, mask: int, wild: int = -1, wild_slot: int = 0) -> Meld:
        cards: list[int] = []
        full = mask | (1 << wild_slot if wild >= 0 else 0)
        first = suit * 13  # slot s's card: first + s - 1 (slot_card), the high ace's first
        for slot in range((full & -full).bit_length() - 1, full.bit_length()):
            if mask >> slot & 1:
                cards.append(first + slot - 1 if slot != HIGH_ACE else first)
            else:
                cards.append(wild)
        return Meld(True, suit, mask, 0, tuple(cards), wild, wild_slot if wild >= 0 else 0)

    @staticmethod
    def group(rank: int, naturals: tuple[int, ...], wild: int = -1) -> Meld:
        cards = tuple(sorted(naturals)) + ((wild,) if wild >= 0 else ())
        return Meld(False, -1, 0, rank, cards, wild, 0)

    # facts ----------------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.cards)

    def _facts_for(self, rules: Ruleset) -> tuple[str, int, int, tuple[str, ...]]:
        """(canastra kind, bonus, card value, card strings), computed once per meld and ruleset."""
        if self._rules is rules:
            return self._facts
        n = len(self.cards)
        kind = "none"
        bonus = 0
        if n >= CANASTRA:
            if self.wild >= 0:
                kind, bonus = "dirty", rules.bonus_dirty
            elif self.is_sequence and n == 14 and rules.bonus_ace_to_ace is not None:
                kind, bonus = "ace_to_ace", rules.bonus_ace_to_ace
            elif self.is_sequence and n == 13 and rules.bonus_royal is not None:
                kind, bonus = "royal", rules.bonus_royal
            else:
                kind, bonus = "clean", rules.bonus_clean
        values = card_values(rules)
        value = 0
        names: list[str] = []
        for c in self.cards:
            value += values[c]
            names.append(CARD_STR[c])
        facts = (kind, bonus, value, tuple(names))
        self._rules = rules
        self._facts = facts
        return facts

    def canastra(self, rules: Ruleset) -> str:
        return self._facts_for(rules)[0]

    def bonus(self, rules: Ruleset) -> int:
        return self._facts_for(rules)[1]

    def value(self, rules: Ruleset) -> int:
        return self._facts_for(rules)[2]

    def is_clean_canastra(self) -> bool:
        return len(self.cards) >= CANASTRA and self.wild < 0

    def to_json(self, rules: Ruleset) -> dict[str, Any]:
        facts = self._facts if self._rules is rules else self._facts_for(rules)
        return {"kind": "sequence" if self.is_sequence else "group", "cards": list(facts[3]), "canastra": facts[0]}

    def state_json(self) -> dict[str, Any]:
        """Lossless form, for snapshots."""
        if self.is_sequence:
            return {"suit": self.suit, "mask": self.mask, "wild": self.wild, "wild_slot": self.wild_slot}
        naturals = self.cards[:-1] if self.wild >= 0 else self.cards
        return {"rank": self.group_rank, "naturals": list(naturals), "wild": self.wild}

    @staticmethod
    def from_state_json(data: dict[str, Any]) -> Meld:
        if "suit" in data:
            return Meld.sequence(int(data["suit"]), int(data["mask"]), int(data["wild"]), int(data["wild_slot"]))
        return Meld.group(int(data["rank"]), tuple(int(c) for c in data["naturals"]), int(data["wild"]))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Meld) and self.cards == other.cards and self.wild_slot == other.wild_slot
                and self.is_sequence == other.is_sequence)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        kind = "seq" if self.is_sequence else "group"
        return f"Meld({kind} {' '.join(to_str(c) for c in self.cards)})"


def _invalid(message: str, code: str = "INVALID_MELD") -> IllegalActionError:
    return IllegalActionError(code, message)


# new melds ----------------------------------------------------------------------------------------

def make_meld(cards: list[int] | tuple[int, ...], rules: Ruleset, wild_as: int | None = None) -> Meld:
    """The meld these cards make, with the wild placed by the rules (or where ``wild_as`` says)."""
    if len(cards) < MIN_MELD:
        raise _invalid(f"a meld needs at least {MIN_MELD} cards")
    naturals = 0  # the cards neither 2s nor jokers
    rank = -1  # their rank, when they share one
    for c in cards:
        if c != JOKER and c % 13 != 1:
            naturals += 1
            if naturals == 1:
                rank = c % 13
            elif c % 13 != rank:
                rank = -1
    if naturals >= 2 and rank >= 0:
        # the non-wild cards share a rank: only a group can hold them
        return make_group(cards, rules, wild_as)
    if not naturals and rules.groups:
        return make_group(cards, rules, wild_as)  # nothing but 2s and jokers: a group of 2s at best
    return make_sequence(cards, rules, wild_as)


def make_group(cards: list[int] | tuple[int, ...], rules: Ruleset, wild_as: int | None = None) -> Meld:
    if not rules.groups:
        raise _invalid("this ruleset allows sequences only, not groups of one rank")
    non_two = [c for c in cards if c != JOKER and not is_two(c)]
    if non_two:
        rank = rank_of(non_two[0])
        if any(rank_of(c) != rank for c in non_two):
            raise _invalid("a group is made of cards of one rank")
        naturals = non_two
        wilds = [c for c in cards if c == JOKER or is_two(c)]
    else:
        rank = TWO
        if not rules.groups_of_twos:
            raise _invalid("this ruleset does not allow a group of 2s")
        naturals = [c for c in cards if c != JOKER]
        wilds = [c for c in cards if c == JOKER]
    if len(wilds) > 1:
        raise _invalid("a meld can hold at most one wild (a 2 or a joker)")
    if len(naturals) < 2:
        raise _invalid("a group needs at least two natural cards of its rank")
    if wild_as is not None and (wild_as == JOKER or rank_of(wild_as) != rank or not wilds):
        raise _invalid("wild_as must name a card of the group's rank, and the group must hold a wild")
    return Meld.group(rank, tuple(naturals), wilds[0] if wilds else -1)


def make_sequence(cards: list[int] | tuple[int, ...], rules: Ruleset, wild_as: int | None = None) -> Meld:
    others: list[int] = []
    for c in cards:
        if c != JOKER and c % 13 != 1:
            others.append(c)
    if not others:
        raise _invalid("a sequence needs cards other than wilds")
    suit = others[0] // 13
    for c in others:
        if c // 13 != suit:
            raise _invalid("a sequence is made of cards of one suit (and at most one wild)")
    base = 0
    aces = 0
    for c in others:
        r = rank_of(c)
        if r == ACE:
            aces += 1
            continue
        if base >> r & 1:
            raise _invalid(f"a sequence cannot hold two {to_str(c)}")
        base |= 1 << r
    if aces > 2:
        raise _invalid("a sequence holds at most two aces (one at each end)")
    suit_twos: list[int] = []
    foreign_wilds: list[int] = []
    for c in cards:
        if c == JOKER:
            foreign_wilds.append(c)
        elif c % 13 == 1:
            if c // 13 == suit:
                suit_twos.append(c)
            else:
                foreign_wilds.append(c)
    want_slot = _wild_as_slots(wild_as, suit)

    best: tuple[tuple[int, int, int], int, int, int] | None = None  # (preference, mask, wild, slot)
    problem = "the cards do not form a run: a sequence has no gaps, except one a wild fills"
    for natural_two in ((True, False) if suit_twos else (False,)):
        wilds = foreign_wilds + suit_twos[1 if natural_two else 0:]
        if len(wilds) > 1:
            problem = "a meld can hold at most one wild (a 2 or a joker)"
            continue
        mask0 = base | (1 << TWO if natural_two else 0)
        if aces == 0:
            placements = [(mask0, 0)]
        elif aces == 1:
            placements = [(mask0 | 1 << HIGH_ACE, 0), (mask0 | 1 << ACE, 1)]
        else:
            placements = [(mask0 | 1 << ACE | 1 << HIGH_ACE, 0)]
        for mask, ace_low in placements:
            if mask >> ACE & 1 and mask >> HIGH_ACE & 1 and not rules.ace_to_ace:
                problem = "this ruleset does not allow a sequence from ace to ace"
                continue
            if not wilds:
                if want_slot:
                    continue
                if _popcount(mask) >= MIN_MELD and is_run(mask):
                    key = (0, ace_low, 0)
                    if best is None or key < best[0]:
                        best = (key, mask, -1, 0)
                continue
            wild = wilds[0]
            for rank_pref, slot in enumerate(wild_slots(mask)):
                if slot == TWO and is_two(wild) and suit_of(wild) == suit:
                    continue  # that is the natural arrangement, tried separately
                if want_slot and slot not in want_slot:
                    continue
                key = (1, ace_low, rank_pref)
                if best is None or key < best[0]:
                    best = (key, mask, wild, slot)
    if best is None:
        if want_slot and not suit_twos and not foreign_wilds:
            raise _invalid("wild_as was given but the meld has no wild")
        if want_slot:
            raise _invalid("the wild cannot stand for the card wild_as names in this sequence")
        raise _invalid(problem)
    return Meld.sequence(suit, best[1], best[2], best[3])


def _wild_as_slots(wild_as: int | None, suit: int) -> tuple[int, ...]:
    if wild_as is None:
        return ()
    if wild_as == JOKER or suit_of(wild_as) != suit:
        raise _invalid("wild_as must name a card of the sequence's suit")
    r = rank_of(wild_as)
    return (HIGH_ACE, ACE) if r == ACE else (r,)


# additions ----------------------------------------------------------------------------------------

def extend_meld(meld: Meld, cards: list[int] | tuple[int, ...], rules: Ruleset) -> Meld:
    """The meld after adding ``cards``; raises ``INVALID_ADD`` when they do not fit."""
    made = extended_or_problem(meld, cards, rules)
    if isinstance(made, str):
        raise _invalid(made, "INVALID_ADD")
    return made


def extended_or_problem(meld: Meld, cards: list[int] | tuple[int, ...], rules: Ruleset) -> Meld | str:
    """``extend_meld`` without raising: the meld, or why the cards do not fit (``INVALID_ADD``'s
    message). The move generator tries many additions that do not fit, and an exception per
    failure costs more than the check."""
    if not cards:
        return "an addition needs at least one card"
    if meld.is_sequence:
        return _extend_sequence(meld, cards, rules)
    return _extend_group(meld, cards, rules)


def _extend_group(meld: Meld, cards: list[int] | tuple[int, ...], rules: Ruleset) -> Meld | str:
    rank = meld.group_rank
    naturals = list(meld.cards[:-1] if meld.wild >= 0 else meld.cards)
    wild = meld.wild
    for c in cards:
        if c != JOKER and c % 13 + 1 == rank:
            naturals.append(c)
        elif c == JOKER or c % 13 == 1:
            if wild >= 0:
                return "a meld can hold at most one wild (a 2 or a joker)"
            wild = c
        else:
            return f"{to_str(c)} does not belong in a group of rank {to_str(rank - 1)[:-1]}"
    return Meld.group(rank, tuple(naturals), wild)


def _extend_sequence(meld: Meld, cards: list[int] | tuple[int, ...], rules: Ruleset) -> Meld | str:
    suit = meld.suit
    base = meld.mask
    added_aces = 0
    suit_twos: list[int] = []
    new_wilds: list[int] = []
    for c in cards:
        if c == JOKER:
            new_wilds.append(c)
            continue
        if c // 13 != suit:
            if c % 13 == 1:
                new_wilds.append(c)
                continue
            return f"{to_str(c)} is not of the sequence's suit"
        r = c % 13 + 1
        if r == TWO:
            suit_twos.append(c)
        elif r == ACE:
            added_aces += 1
        else:
            if base >> r & 1:
                return f"the sequence already holds {to_str(c)}"
            base |= 1 << r
    free_aces: list[int] = []
    if not base >> HIGH_ACE & 1:
        free_aces.append(HIGH_ACE)
    if not base >> ACE & 1:
        free_aces.append(ACE)
    if added_aces > len(free_aces):
        return "the sequence has no room for another ace"
    if added_aces == 1:
        ace_options = [(1 << s, int(s == ACE)) for s in free_aces]
    elif added_aces == 2:
        ace_options = [(1 << ACE | 1 << HIGH_ACE, 0)]
    else:
        ace_options = [(0, 0)]

    old_wild = meld.wild
    old_slot = meld.wild_slot
    slot_two_free = not base >> TWO & 1
    best: tuple[tuple[int, ...], int, int, int] | None = None  # (preference, mask, wild, slot)
    problem = "the cards do not extend the sequence into a run"
    # who fills the natural 2 slot: nobody, an added 2 of the suit, or the meld's own wild 2 going home
    two_options: list[tuple[int, bool]] = [(0, False)]
    if slot_two_free and suit_twos:
        two_options.append((1, False))
    if slot_two_free and old_wild >= 0 and is_two(old_wild) and suit_of(old_wild) == suit:
        two_options.append((0, True))
    for natural_added, old_goes_home in two_options:
        wilds = new_wilds + suit_twos[natural_added:]
        if old_wild >= 0 and not old_goes_home:
            wilds = [old_wild, *wilds]
        if len(wilds) > 1:
            problem = "a meld can hold at most one wild (a 2 or a joker)"
            continue
        mask0 = base | (1 << TWO if natural_added or old_goes_home else 0)
        for ace_bits, ace_low in ace_options:
            mask = mask0 | ace_bits
            if mask >> ACE & 1 and mask >> HIGH_ACE & 1 and not rules.ace_to_ace:
                problem = "this ruleset does not allow a sequence from ace to ace"
                continue
            if not wilds:
                if is_run(mask):
                    key = (0, 0, ace_low, 0)
                    if best is None or key < best[0]:
                        best = (key, mask, -1, 0)
                continue
            wild = wilds[0]
            slots = wild_slots(mask)
            for rank_pref, slot in enumerate(slots):
                if slot == TWO and is_two(wild) and suit_of(wild) == suit:
                    continue
                moved = 0 if (wild == old_wild and slot == old_slot) else 1
                key = (1, moved, ace_low, rank_pref)
                if best is None or key < best[0]:
                    best = (key, mask, wild, slot)
    if best is None:
        if old_wild >= 0 and _popcount(meld.mask) == 13:
            problem = "a complete ace-to-ace sequence cannot take a replacement for its wild"
        return problem
    return Meld.sequence(suit, best[1], best[2], best[3])

