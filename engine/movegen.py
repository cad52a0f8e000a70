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

from bisect import bisect_left
from typing import Any, Final

from engine.actions import Action, AddCards, Discard, MeldCards
from engine.cards import ACE, HIGH_ACE, JOKER, TWO
from engine.errors import IllegalActionError
from engine.melds import Meld, extended_or_problem, make_meld, slot_card
from engine.position import PlayPosition
from engine.rules import Ruleset

# The memo tables below are keyed by a ruleset's number (`ruleset_number`), not by the ruleset:
# a key of numbers only is a tuple Python's collector stops tracking, while one holding the ruleset
# object stays tracked, and every full collection re-scans every tracked entry of every table (the
# tables grow to hundreds of thousands of entries: most of the collector's work during play). For
# the same reason the candidates are kept as two parallel tuples (the actions, the melds they
# make), not as pairs.
_RULESETS: Final[dict[Ruleset, int]] = {}
_BY_NUMBER: Final[list[Ruleset]] = []


def ruleset_number(rules: Ruleset) -> int:
    """A small number per distinct ruleset, for this process's memo keys."""
    number = _RULESETS.get(rules)
    if number is None:
        number = _RULESETS[rules] = len(_BY_NUMBER)
        _BY_NUMBER.append(rules)
    return number


# The memo tables are plain dicts bounded by a ``Ring`` each: once a table is full, every new entry
# evicts the oldest one. A table emptied at its bound instead would let every entry the hands of the
# moment add count towards Python's collector's thresholds (the objects freed by the emptying do
# not count back), and each entry survives into the oldest generation, which every full
# collection re-scans: evicting one entry per entry added keeps the collector's counts level. An
# ``lru_cache`` costs a call through the interpreter's machinery at every look-up from compiled code,
# and keeps a linked entry per key that the collector re-scans too.
_NOT_A_MELD: Final = Meld(False, -1, 0, 0, (), -1, 0)  # a failure, as memoised (None: not looked up yet)


class Ring:
    """The keys of one memo table in the order they were stored, at most ``bound`` of them."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.keys: list[Any] = []
        self.next = 0  # once full: the slot of the oldest key, the next to evict


def remember(table: dict[Any, Any], ring: Ring, key: Any, value: Any) -> None:
    """Stores ``value`` under ``key`` (not in ``table``) in a memo table bounded by ``ring``: a full
    table first drops its oldest entry."""
    keys = ring.keys
    if len(keys) < ring.bound:
        keys.append(key)
    else:
        slot = ring.next
        table.pop(keys[slot], None)
        keys[slot] = key
        slot += 1
        ring.next = 0 if slot == ring.bound else slot
    table[key] = value


# Placement is a pure function of (cards, ruleset): memoised, since the same hands are examined
# again and again within a turn and across turns. Failures are memoised too.
_PLACED: Final[dict[tuple[tuple[int, ...], int, int | None], Meld]] = {}
_PLACED_RING: Final = Ring(1 << 16)


def _placed(cards: tuple[int, ...], rules: int, wild_as: int | None) -> Meld | None:
    key = (cards, rules, wild_as)
    found = _PLACED.get(key)
    if found is None:
        try:
            found = make_meld(cards, _BY_NUMBER[rules], wild_as)
        except IllegalActionError:
            found = _NOT_A_MELD
        remember(_PLACED, _PLACED_RING, key, found)
    return None if found is _NOT_A_MELD else found


def placed(cards: tuple[int, ...], rules: Ruleset, wild_as: int | None) -> Meld | None:
    return _placed(cards, ruleset_number(rules), wild_as)


# The two tables below key a meld by what makes it equal to another (``Meld.__eq__``: its cards, its
# wild's slot, its kind) rather than by the object: a key of numbers and tuples of numbers only is
# one the collector stops tracking, and these tables hold most of the memo entries.
_EXTENDED: Final[dict[tuple[tuple[int, ...], int, bool, tuple[int, ...], int], Meld]] = {}
_EXTENDED_RING: Final = Ring(1 << 16)


def _extended(meld: Meld, cards: tuple[int, ...], rules: int) -> Meld | None:
    key = (meld.cards, meld.wild_slot, meld.is_sequence, cards, rules)
    found = _EXTENDED.get(key)
    if found is None:
        made = extended_or_problem(meld, cards, _BY_NUMBER[rules])
        found = _NOT_A_MELD if isinstance(made, str) else _shared_meld(made)
        remember(_EXTENDED, _EXTENDED_RING, key, found)
    return None if found is _NOT_A_MELD else found


# Many additions to many melds make the same meld: one object for all of them (see _shared_meld_action).
_SHARED_MELDS: Final[dict[Meld, Meld]] = {}
_SHARED_MELDS_RING: Final = Ring(1 << 15)


def _shared_meld(meld: Meld) -> Meld:
    found = _SHARED_MELDS.get(meld)
    if found is None:
        found = meld
        remember(_SHARED_MELDS, _SHARED_MELDS_RING, meld, found)
    return found


def extended(meld: Meld, cards: tuple[int, ...], rules: Ruleset) -> Meld | None:
    return _extended(meld, cards, ruleset_number(rules))


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
#: (the additions' cards, the melds they make), index by index; a meld not made yet is ``None``
#: (``made_meld`` makes it): a group's additions all fit by construction, and their melds are
#: needed only for the few candidates a move goes on to apply or check
AddCandidates = tuple[tuple[tuple[int, ...], ...], tuple[Meld | None, ...]]
_WILD_CODES: Final = (JOKER, 1, 14, 27, 40)


class _Counts:
    """A suit's part of a hand and its wild key, read as counts by card code when a candidate must be
    checked against them (``fits``): most are held by construction, and the 53 counts are not built."""

    def __init__(self, part: bytes, first: int, wild_counts: int) -> None:
        self.part = part
        self.first = first
        self.wild_counts = wild_counts

    def fits(self, cards: tuple[int, ...]) -> bool:
        """Whether the counts hold ``cards`` (sorted: equal cards are adjacent)."""
        prev = -1
        run = 0
        for c in cards:
            run = run + 1 if c == prev else 1
            if self.first <= c < self.first + 13:
                held = self.part[c - self.first]
            elif c == JOKER:
                held = self.wild_counts & 15
            elif c % 13 == 1:
                held = self.wild_counts >> (4 + 4 * (c // 13)) & 15
            else:
                held = 0
            if held < run:
                return False
            prev = c
        return True


#: ``_avail_slots`` by the counts (bytes and small integers only: entries Python's collector does not track)
_AVAIL: Final[dict[bytes, int]] = {}


def _avail_slots(suit_counts: bytes) -> int:
    """The slots (1..14) a suit's 13 counts hold, as a bit mask: an ace holds both 1 and 14."""
    found = _AVAIL.get(suit_counts)
    if found is not None:
        return found
    if len(_AVAIL) >= 1 << 16:
        _AVAIL.clear()
    avail = 0
    for i in range(13):
        if suit_counts[i]:
            avail |= (1 << ACE | 1 << HIGH_ACE) if i == 0 else 1 << (i + 1)
    _AVAIL[suit_counts] = avail
    return avail


def _group_picks(rank: int, rank_counts: bytes) -> list[list[int]]:
    """Every multiset of the rank's four cards the counts allow, as ``itertools.product`` over the
    four suits' counts orders them (the last suit's count varying fastest), each as its cards."""
    a, b, c, d = rank - 1, 12 + rank, 25 + rank, 38 + rank  # the rank's card in each suit
    out: list[list[int]] = []
    for i in range(rank_counts[0] + 1):
        for j in range(rank_counts[1] + 1):
            for k in range(rank_counts[2] + 1):
                for m in range(rank_counts[3] + 1):
                    out.append([a] * i + [b] * j + [c] * k + [d] * m)
    return out


def wild_key(counts: list[int]) -> int:
    """The hand's counts of the wild codes (``_WILD_CODES``) as one small integer, four bits each (a
    memo key's part: a code is held twice at most, the joker as often as the deck has jokers)."""
    return counts[JOKER] | counts[1] << 4 | counts[14] << 8 | counts[27] << 12 | counts[40] << 16


def _wilds_of(wild_counts: int) -> tuple[int, ...]:
    """The wild codes a ``wild_key`` holds, in ``_WILD_CODES``' order."""
    found = _PRESENT_WILDS.get(wild_counts)
    if found is None:
        found = _PRESENT_WILDS[wild_counts] = tuple(
            [_WILD_CODES[i] for i in range(5) if wild_counts >> (4 * i) & 15])
    return found


#: ``_wilds_of`` by ``wild_key`` (a few hundred keys at most: never emptied)
_PRESENT_WILDS: Final[dict[int, tuple[int, ...]]] = {}


def _split(candidates: dict[Any, tuple[Any, Meld]]) -> tuple[tuple[Any, ...], tuple[Meld, ...]]:
    firsts: list[Any] = []
    melds: list[Meld] = []
    for first, meld in candidates.values():
        firsts.append(first)
        melds.append(meld)
    return tuple(firsts), tuple(melds)


def _suit_melds(rules_number: int, suit: int, suit_counts: bytes, wild_counts: int) -> MeldCandidates:
    """Every new sequence of ``suit`` these cards allow (an interval of slots, natural everywhere but
    at most one slot, the wild's), each with the meld it makes."""
    avail = _avail_slots(suit_counts)
    if not _run_starts(avail, wild_counts != 0):
        return (), ()
    wilds = _wilds_of(wild_counts)
    out: dict[tuple[tuple[int, ...], int | None], MeldCandidate] = {}
    two_aces = suit_counts[0] >= 2
    own_two = 13 * suit + 1
    two_twos = suit_counts[1] >= 2  # the suit's own 2 both natural and the wild
    for lo in range(1, 13):
        if not avail >> lo & 1 and (not wilds or not avail >> (lo + 1) & 1):
            continue  # a run starts with a natural card, or with the wild just before one
        missing = 0
        cards: list[int] = []  # the run's cards, slot lo to hi (the callees copy it)
        for hi in range(lo, 15):
            if not avail >> hi & 1 or (hi == HIGH_ACE and lo == ACE and not two_aces):
                if missing:
                    break
                missing = hi
            cards.append(13 * suit + hi - 1 if hi != HIGH_ACE else 13 * suit)  # slot_card
            if hi - lo < 2:
                continue
            # the naturals are held (``avail``; both aces only with two: ``two_aces``), and so is the
            # wild: only the suit's own 2 as the wild beside its natural 2 needs two of it
            if not missing:
                _add_meld_candidate(out, rules_number, cards, 0, suit)
                first_hole, last_hole = lo, hi
            else:
                first_hole = last_hole = missing
            if not wilds:
                continue
            for hole in range(first_hole, last_hole + 1):
                naturals = cards[:hole - lo] + cards[hole - lo + 1:]
                for w in wilds:
                    if w == own_two and lo <= TWO <= hi and hole != TWO and not two_twos:
                        continue  # one 2 of the suit held, and it stands as the natural
                    _add_meld_candidate(out, rules_number, [*naturals, w], hole, suit)
    return _split(out)


def _rank_melds(rules_number: int, rank: int, rank_counts: bytes, wild_counts: int) -> MeldCandidates:
    """Every new group of ``rank``: any multiset of it (two naturals at least), at most one wild."""
    wilds = ((JOKER,) if wild_counts & 15 else ()) if rank == TWO else _wilds_of(wild_counts)
    out: dict[tuple[tuple[int, ...], int | None], MeldCandidate] = {}
    for naturals in _group_picks(rank, rank_counts):
        k = len(naturals)
        if k < 2:
            continue
        # held by construction: a pick takes no more of a card than held, a wild is never of the
        # rank's cards (a group of 2s takes only a joker)
        if k >= 3:
            _add_meld_candidate(out, rules_number, naturals, 0, -1)
        for w in wilds:
            _add_meld_candidate(out, rules_number, [*naturals, w], 0, -1)
    return _split(out)


def _add_meld_candidate(out: dict[tuple[tuple[int, ...], int | None], MeldCandidate], rules_number: int,
                        cards: list[int], wild_slot: int, suit: int) -> None:
    """Record the meld these cards make, with the wild at ``wild_slot`` (0: where the rules put it);
    the caller built them from cards held."""
    cards_t = tuple(sorted(cards))
    meld = _placed(cards_t, rules_number, None)
    if meld is None:
        return
    wild_as: int | None = None
    if wild_slot and meld.wild_slot != wild_slot:
        wild_as = slot_card(suit, wild_slot)
        meld = _placed(cards_t, rules_number, wild_as)
        if meld is None or meld.wild_slot != wild_slot:
            return
    key = (cards_t, wild_as)
    if key not in out:
        out[key] = (_shared_meld_action(cards_t, wild_as), meld)


# One action per distinct new meld, shared by every memo entry that lists it: the same few thousand
# melds turn up in tens of thousands of entries, and each object of its own would be one more for
# Python's collector to re-scan.
_SHARED_MELD_ACTIONS: Final[dict[tuple[tuple[int, ...], int | None], MeldCards]] = {}
_SHARED_MELD_ACTIONS_RING: Final = Ring(1 << 16)


def _shared_meld_action(cards: tuple[int, ...], wild_as: int | None) -> MeldCards:
    key = (cards, wild_as)
    found = _SHARED_MELD_ACTIONS.get(key)
    if found is None:
        found = MeldCards(cards, wild_as)
        remember(_SHARED_MELD_ACTIONS, _SHARED_MELD_ACTIONS_RING, key, found)
    return found


_ADDITIONS: Final[dict[tuple[int, tuple[int, ...], int, bytes, int], AddCandidates]] = {}
_ADDITIONS_RING: Final = Ring(1 << 14)
#: a group's additions by (its rank, the hand's cards of that rank, the wilds it may take): they do
#: not depend on the group's own cards (see _group_additions), so groups of a rank share entries
_GROUP_ADDITIONS: Final[dict[tuple[int, bytes, int], AddCandidates]] = {}
_GROUP_ADDITIONS_RING: Final = Ring(1 << 12)


def meld_additions(rules_number: int, meld: Meld, part: bytes, wild_counts: int) -> AddCandidates:
    """Every addition to ``meld`` from the hand's relevant part (its cards of the sequence's suit, or
    of the group's rank) and its wilds, each with the meld it makes (or ``None``: see AddCandidates)."""
    if not meld.is_sequence:
        rank = meld.group_rank
        # the wild codes the group may take, one bit per code held (``wild_key``'s nibbles): none
        # when it holds a wild, only the joker for a group of 2s
        takes = 0
        if meld.wild < 0:
            held = wild_counts | wild_counts >> 1 | wild_counts >> 2 | wild_counts >> 3
            takes = held & (1 if rank == TWO else 0x11111)
        group_key = (rank, part, takes)
        found = _GROUP_ADDITIONS.get(group_key)
        if found is None:
            found = _group_additions(rank, part, takes)
            remember(_GROUP_ADDITIONS, _GROUP_ADDITIONS_RING, group_key, found)
        return found
    key = (rules_number, meld.cards, meld.wild_slot, part, wild_counts)
    found = _ADDITIONS.get(key)
    if found is None:
        out: dict[tuple[int, ...], AddCandidate] = {}
        counts = _Counts(part, meld.suit * 13, wild_counts)
        _sequence_additions(rules_number, counts, meld, _avail_slots(part), _wilds_of(wild_counts), out)
        found = _split(out)
        remember(_ADDITIONS, _ADDITIONS_RING, key, found)
    return found


def _group_additions(rank: int, part: bytes, takes: int) -> AddCandidates:
    """The additions to a group of ``rank``: every multiset of its rank's cards held (``_group_picks``'
    order), each alone (when not empty), then with each wild it may take (``takes``: the wild codes
    held, as ``wild_key``'s nibbles, when the group has none; only the joker for a group of 2s).
    Every such addition is held and distinct by construction (a pick takes no more of a card than
    held; a wild is never of the rank's cards), so none is checked against the counts; and every one
    fits the group (``extended_or_problem`` refuses a card of another rank, or a second wild: the
    picks hold the rank's cards only, and a wild only when the group has none). So they depend on
    the group's rank alone, not on its cards, and the melds they make are left to ``made_meld``,
    for the candidates that need one."""
    wilds = _wilds_of(takes) if takes else ()
    firsts: list[tuple[int, ...]] = []
    for naturals in _group_picks(rank, part):
        if naturals:
            firsts.append(tuple(naturals))  # sorted: the suits' cards of one rank in suit order
        for w in wilds:
            firsts.append(tuple(sorted([*naturals, w])))
    return tuple(firsts), (None,) * len(firsts)


def made_meld(meld: Meld, cards: tuple[int, ...], rules_number: int) -> Meld:
    """The meld an addition listed by ``meld_additions`` makes (whose result it left ``None``)."""
    result = _extended(meld, cards, rules_number)
    assert result is not None, "a listed addition fits its meld"
    return result


def _sequence_additions(rules_number: int, counts: _Counts, meld: Meld, avail: int, wilds: tuple[int, ...],
                        out: dict[tuple[int, ...], AddCandidate]) -> None:
    suit = meld.suit
    nat = meld.mask
    nlo = (nat & -nat).bit_length() - 1
    nhi = nat.bit_length() - 1
    first = 13 * suit  # slot x's card: first + x - 1, the high ace's first
    # the meld's own wild 2 (the card first + 1) may drop into its natural place and free the meld
    # for a new wild
    home = meld.wild == first + 1 and not nat >> TWO & 1
    if home:
        avail |= 1 << TWO
    # the final run spans [lo, hi] around the naturals; every slot of it that is not natural yet is
    # filled from the hand, except at most one: the wild's (and slot 2 when the meld's 2 goes home).
    # The slots to fill are listed low ones first (downwards), then inner and high ones (upwards),
    # each with its card
    inner: list[int] = []
    inner_cards: list[int] = []
    inner_missing = 0
    gaps = ((1 << (nhi + 1)) - (1 << nlo)) & ~nat  # the slots between the naturals, lowest first
    while gaps:
        bit = gaps & -gaps
        gaps ^= bit
        x = bit.bit_length() - 1
        inner.append(x)
        inner_cards.append(first + x - 1 if x != HIGH_ACE else first)
        if not avail & bit:
            inner_missing += 1
    # whether a slot of the run may stand empty of a natural: a wild held, or the meld's own wild
    # moving into it; without either, only runs of naturals held are additions
    most_missing = 1 if wilds or meld.wild >= 0 else 0
    moved = meld.wild >= 0  # the meld's wild may move into the slot left empty
    keeps_wild = moved and not home  # the meld's wild stays a wild, wherever it moves
    low: list[int] = []
    low_cards: list[int] = []
    low_missing = 0
    for lo in range(nlo, 0, -1):
        if lo < nlo:
            low.append(lo)
            low_cards.append(first + lo - 1)
            low_missing += not avail >> lo & 1
        if low_missing + inner_missing > most_missing:
            break
        high: list[int] = []
        high_cards: list[int] = []
        high_missing = 0
        for hi in range(nhi, min(14, lo + 13) + 1):
            if hi > nhi:
                high.append(hi)
                high_cards.append(first + hi - 1 if hi != HIGH_ACE else first)
                high_missing += not avail >> hi & 1
            missing = low_missing + inner_missing + high_missing
            if missing > most_missing:
                break
            fill = low + inner + high
            if not fill:
                continue
            fill_cards = low_cards + inner_cards + high_cards
            # the naturals of ``fill`` but the hole are held (``avail``), and so is a wild; the hand
            # might lack them only when the meld's 2 goes home (slot 2 counted as held), when both
            # aces are laid down, or the suit's own 2 stands as the wild beside its natural 2
            check = home or (lo == ACE and hi == HIGH_ACE)
            two_natural = TWO in fill
            if not missing:
                _add_addition(out, counts, rules_number, meld, fill_cards, check)  # the hole 0: every slot natural
                if home and two_natural:
                    _add_addition(out, counts, rules_number, meld, [c for c in fill_cards if c != first + 1], True)
                if not most_missing:
                    continue
            # each slot that may take the wild (the one lacking its natural, or any when none does),
            # in the order of ``fill``
            for i in range(len(fill)):
                hole = fill[i]
                if missing and avail >> hole & 1:
                    continue
                naturals = fill_cards[:i] + fill_cards[i + 1:]
                if home and two_natural and hole != TWO:
                    variants = [naturals, [c for c in naturals if c != first + 1]]  # the meld's own 2 fills it
                else:
                    variants = [naturals]
                for chosen in variants:
                    if moved:
                        _add_addition(out, counts, rules_number, meld, chosen, check)
                    for w in wilds:
                        if keeps_wild and w != first + 1:
                            continue  # a second wild: extend_meld refuses it (only the suit's 2 may be natural)
                        _add_addition(out, counts, rules_number, meld, [*chosen, w],
                                      check or (w == first + 1 and two_natural))


def _add_addition(out: dict[tuple[int, ...], AddCandidate], counts: _Counts, rules_number: int, meld: Meld,
                  cards: list[int], check: bool) -> None:
    """Record the addition of these cards, if it fits the meld; ``check``: whether the hand might not
    hold them (else the caller built them from cards held)."""
    if not cards:
        return
    cards_t = tuple(sorted(cards))
    if cards_t in out or (check and not counts.fits(cards_t)):
        return
    result = _extended(meld, cards_t, rules_number)
    if result is not None:
        out[cards_t] = (cards_t, result)


def _run_starts(avail: int, any_wild: bool) -> int:
    """Bit lo: the three slots from lo hold three naturals at ``avail`` (two, with a wild held). Every
    sequence holds such three slots (it has at most one wild), so a suit without one has none."""
    second = avail >> 1
    third = avail >> 2
    return avail & second | avail & third | second & third if any_wild else avail & second & third


def _sequence_around(suit_counts: bytes, any_wild: bool, rank: int) -> bool:
    """Whether a sequence of these cards (of one suit) might hold the card of ``rank``: some three
    slots in a row around it hold three naturals, or two and a wild (``_run_starts``). A necessary
    condition only."""
    return _run_starts(_avail_slots(suit_counts), any_wild) & _WINDOWS[rank] != 0


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
    hand = bytes(counts)  # a byte per card: its count
    wild_counts = wild_key(counts)
    any_wild = wild_counts != 0
    out: list[MeldCards | AddCards] = []

    if size >= 3:
        for suit in range(4):
            if must_natural and must // 13 != suit:
                continue
            suit_counts = hand[13 * suit:13 * suit + 13]
            if sum(suit_counts) + any_wild < 3:
                continue
            if must_natural and not _sequence_around(suit_counts, any_wild, must % 13 + 1):
                continue  # no sequence of this suit could hold the card that must be melded
            segment = suit_segment(number, suit, suit_counts, wild_counts)
            actions, melds = segment.actions, segment.melds
            for i in range(len(actions)):
                action, meld = actions[i], melds[i]
                assert meld is not None  # a new meld's segment holds every meld it makes
                if must >= 0 and must not in action.cards:
                    continue  # refused by _accept
                if size - len(action.cards) >= simple_from or _accept(state, must, simple_from, action, meld, -1):
                    out.append(action)
                    if plans is not None:
                        plans[action] = meld
                    if first_only:
                        return out
        if rules.groups:
            need = 3 - any_wild
            ranks = [must % 13 + 1] if must_natural else _GROUP_RANKS[rules.groups_of_twos]
            for rank in ranks:
                rank_counts = hand[rank - 1:rank + 39:13]  # the rank's card in each suit
                if sum(rank_counts) < need:
                    continue
                segment = rank_segment(number, rank, rank_counts, wild_counts)
                actions, melds = segment.actions, segment.melds
                for i in range(len(actions)):
                    action, meld = actions[i], melds[i]
                    assert meld is not None  # a new meld's segment holds every meld it makes
                    if must >= 0 and must not in action.cards:
                        continue  # refused by _accept
                    if size - len(action.cards) >= simple_from or _accept(state, must, simple_from, action, meld, -1):
                        out.append(action)
                        if plans is not None:
                            plans[action] = meld
                        if first_only:
                            return out
    held = int.from_bytes(hand, "little")
    must_slots = [ACE, HIGH_ACE] if must % 13 == 0 else [must % 13 + 1]
    for index, meld in enumerate(state.melds[seat & 1]):
        takes_wild, touch_bytes = meld._touch or meld.touch()
        if not held & touch_bytes and not (any_wild and takes_wild):
            continue  # the hand holds nothing this meld could take
        if meld.is_sequence:
            if must_natural and must // 13 != meld.suit:
                continue
            part = hand[13 * meld.suit:13 * meld.suit + 13]
            if must_natural and not _may_reach(meld.mask, _avail_slots(part), must_slots):
                continue  # no addition to it can hold the card that must be melded
        else:
            rank = meld.group_rank
            if must_natural and must % 13 + 1 != rank:
                continue
            part = hand[rank - 1:rank + 39:13]
        if not any_wild and not any(part):
            continue
        additions, results = meld_additions(number, meld, part, wild_counts)
        for i in range(len(additions)):
            cards_t, result = additions[i], results[i]
            if must >= 0 and must not in cards_t:
                continue  # refused by _accept: no action made for it
            addition = AddCards(index, cards_t)
            if size - len(cards_t) < simple_from:
                if result is None:
                    result = made_meld(meld, cards_t, number)
                if not _accept(state, must, simple_from, addition, result, index):
                    continue
            out.append(addition)
            if plans is not None:
                plans[addition] = result if result is not None else made_meld(meld, cards_t, number)
            if first_only:
                return out
    return out


_GROUP_RANKS: Final[dict[bool, list[int]]] = {False: [ACE, *range(3, 14)], True: [ACE, TWO, *range(3, 14)]}


# --- the legal plays kept up to date move by move ---------------------------------------------------
#
# ``plays`` rebuilds the whole list at every call, though a move changes little of it: a meld or an
# addition touches one suit (or one rank) of the hand and one meld of the table, a draw one card.
# The list is a concatenation of segments, in ``plays``' order: the new sequences of each suit, the
# new groups of each rank, the additions to each of the side's melds. Each segment depends on a few
# of the hand's card counts (its suit or its rank, and the wilds) and, for an addition, on the meld;
# ``SeatPlays`` keeps the segments of one seat with the hand they were made for, and at the next call
# remakes only those whose counts or meld changed (found by comparing the hand, read as bytes, with
# the one kept: no bookkeeping in the transitions, so a state changed by hand, then ``touch``-ed, is
# read right too).
#
# Within a turn the hand only shrinks (melds and additions lay cards down), and a segment of a
# smaller hand is the segment of the larger one less the candidates the smaller hand cannot pay
# for, in the same order (each generator walks the same runs and picks in the same order, and skips
# exactly the candidates whose cards are not held). So a segment remade within a turn is filtered
# from the one made at the turn's largest hand (``base``) rather than generated again: a test of an
# integer per candidate (``Segment.needs``: the cards it lays down, a byte per card code, against
# the hand read the same way). What depends on the whole state (a hand nearly emptied) is still
# checked at every call, exactly as ``plays`` checks it, for the candidates it concerns only.

#: the top bit of every card code's byte, in a hand read as one integer: subtracting a candidate's
#: needs from the hand with these bits set clears one exactly where the hand lacks a card
_GUARD: Final = int.from_bytes(bytes([0x80] * 53), "little")
#: by card code: what a change of its count changes, as bits: its suit s (bit s), its rank r (bit
#: 4 + r), the wilds (``_WILD_PART``, for a 2 or a joker; a joker has no suit nor rank here)
_WILD_PART: Final = 1 << 18
_CODE_PARTS: Final[list[int]] = [
    _WILD_PART if code == JOKER else
    1 << (code // 13) | 16 << (code % 13 + 1) | (_WILD_PART if code % 13 + 1 == TWO else 0)
    for code in range(53)]


def _part_bit(meld: Meld) -> int:
    """The part of the hand a meld's additions depend on besides the wilds, as in ``_CODE_PARTS``."""
    return 1 << meld.suit if meld.is_sequence else 16 << meld.group_rank


#: by card code: the bits of the codes below it, in a hand read as one integer
_BELOW: Final[list[int]] = [(1 << (code << 3)) - 1 for code in range(53)]


class Segment:
    """The candidates of one part of the hand, in ``plays``' order, with the meld each makes, the
    cards each lays down as one integer (a byte per card code), and the most cards any lays down.

    An addition's meld may be ``None`` (see ``AddCandidates``): ``meld_at`` makes it from ``extends``,
    the meld the segment's additions extend."""

    def __init__(self, actions: tuple[MeldCards | AddCards, ...], melds: tuple[Meld | None, ...],
                 needs: tuple[int, ...] | None = None, extends: Meld | None = None, rules_number: int = -1) -> None:
        self.actions = actions
        self.melds = melds
        self.extends = extends
        self.rules_number = rules_number
        most = 0
        for action in actions:
            n = len(action.cards)
            if n > most:
                most = n
        self.most = most
        self.needs = needs  # made when first filtered

    def held(self, guarded_hand: int) -> Segment:
        """The candidates a hand pays for (``guarded_hand``: the hand as one integer, ``| _GUARD``)."""
        actions = self.actions
        needs = self.needs
        if needs is None:
            made: list[int] = []
            for action in actions:
                need = 0
                for c in action.cards:
                    need += 1 << (c << 3)
                made.append(need)
            needs = self.needs = tuple(made)
        keep: list[int] = []
        for i in range(len(needs)):
            if (guarded_hand - needs[i]) & _GUARD == _GUARD:
                keep.append(i)
        if len(keep) == len(needs):
            return self
        if not keep:
            return EMPTY_SEGMENT
        melds = self.melds
        kept_actions: list[MeldCards | AddCards] = []
        kept_melds: list[Meld | None] = []
        kept_needs: list[int] = []
        for i in keep:
            kept_actions.append(actions[i])
            kept_melds.append(melds[i])
            kept_needs.append(needs[i])
        return Segment(tuple(kept_actions), tuple(kept_melds), tuple(kept_needs), self.extends, self.rules_number)

    def meld_at(self, i: int) -> Meld:
        """The meld candidate ``i`` makes."""
        meld = self.melds[i]
        if meld is not None:
            return meld
        extends = self.extends
        assert extends is not None, "only additions leave their melds to be made"
        return made_meld(extends, self.actions[i].cards, self.rules_number)

    def plan(self, action: MeldCards | AddCards) -> Meld | None:
        """The meld ``action`` makes, if it is one of this segment's candidates."""
        actions = self.actions
        for i in range(len(actions)):
            if actions[i] is action:
                return self.meld_at(i)
        for i in range(len(actions)):
            if actions[i] == action:
                return self.meld_at(i)
        return None


EMPTY_SEGMENT: Final = Segment((), ())


_SUIT_SEGMENTS: Final[dict[tuple[int, int, bytes, int], Segment]] = {}
_RANK_SEGMENTS: Final[dict[tuple[int, int, bytes, int], Segment]] = {}
_SUIT_SEGMENTS_RING: Final = Ring(1 << 14)
_RANK_SEGMENTS_RING: Final = Ring(1 << 14)


def suit_segment(rules_number: int, suit: int, suit_counts: bytes, wild_counts: int) -> Segment:
    """``_suit_melds`` as a segment, memoised (``plays`` and ``SeatPlays`` share the table)."""
    key = (rules_number, suit, suit_counts, wild_counts)
    found = _SUIT_SEGMENTS.get(key)
    if found is None:
        actions, melds = _suit_melds(rules_number, suit, suit_counts, wild_counts)
        found = Segment(actions, melds) if actions else EMPTY_SEGMENT
        remember(_SUIT_SEGMENTS, _SUIT_SEGMENTS_RING, key, found)
    return found


def rank_segment(rules_number: int, rank: int, rank_counts: bytes, wild_counts: int) -> Segment:
    """``_rank_melds`` as a segment, memoised (``plays`` and ``SeatPlays`` share the table)."""
    key = (rules_number, rank, rank_counts, wild_counts)
    found = _RANK_SEGMENTS.get(key)
    if found is None:
        actions, melds = _rank_melds(rules_number, rank, rank_counts, wild_counts)
        found = Segment(actions, melds) if actions else EMPTY_SEGMENT
        remember(_RANK_SEGMENTS, _RANK_SEGMENTS_RING, key, found)
    return found


#: one ``Discard`` per card code, shared (``HandState`` lists these)
ALL_DISCARDS: Final = tuple(Discard(code) for code in range(53))
#: where ``legal_plays`` puts the plans of each segment when it had to check some candidates: the
#: suits' new sequences at 0..3, the ranks' new groups at ``RANK_PLANS + rank``, the additions to
#: meld i at ``ADD_PLANS + i``
RANK_PLANS: Final = 4
ADD_PLANS: Final = 18


class SeatPlays:
    """One seat's segments, for the hand ``hand`` (its counts as bytes) and the melds ``meld_of``;
    ``base`` the largest hand of the turn (as one integer) and the segments made for it."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.hand = b""
        self.hand_value = 0  # ``hand`` as one integer
        self.suits: list[Segment] = [EMPTY_SEGMENT] * 4
        self.ranks: list[Segment] = [EMPTY_SEGMENT] * 14  # by rank, 1..13
        #: every card held as a ``Discard``, in card order, and the codes held (the same order)
        self.discards: list[Discard] = []
        self.held_codes: list[int] = []
        self.meld_of: list[Meld | None] = []  # the meld each addition segment was made for
        #: by meld: the part of the hand its additions depend on besides the wilds, as in
        #: ``_CODE_PARTS`` (a sequence of suit s: bit s; a group of rank r: bit 4 + r)
        self.part_bits: list[int] = []
        self.adds: list[Segment] = []
        self.base = -1  # ``| _GUARD`` (see Segment.held)
        self.base_suits: list[Segment] = [EMPTY_SEGMENT] * 4
        self.base_ranks: list[Segment] = [EMPTY_SEGMENT] * 14
        self.base_meld_of: list[Meld | None] = []
        self.base_adds: list[Segment] = []
        #: bit r: rank r makes groups under this ruleset
        self.group_mask = 0
        for rank in _GROUP_RANKS[_BY_NUMBER[number].groups_of_twos]:
            self.group_mask |= 1 << rank
        #: whether the last ``legal_plays`` listed new melds (a hand of three cards or more)
        self.new_melds = False
        #: bit r: ``ranks[r]`` lists a group (``legal_plays`` visits those only)
        self.rank_bits = 0

    def update(self, counts: list[int], groups: bool, group_ranks: list[int], melds: list[Meld]) -> None:
        """Bring the segments up to this hand and these melds."""
        hand = bytes(counts)
        prev = self.hand
        number = self.number
        wilds_changed = False
        changed_parts = 0  # the parts of the hand that changed (see _CODE_PARTS)
        wild_counts = -1  # wild_key(counts), once needed
        value = int.from_bytes(hand, "little")
        guarded = value | _GUARD
        # within the turn's largest hand (the hand only shrank since): filter that hand's segments
        base = self.base
        shrunk = base >= 0 and (base - value) & _GUARD == _GUARD
        if hand != prev:
            self.hand = hand
            if len(prev) != len(hand):
                changed_parts = -1  # every part
                self.held_codes = [code for code in range(len(counts)) if counts[code]]
                self.discards = [ALL_DISCARDS[code] for code in self.held_codes]
            else:
                changed = value ^ self.hand_value  # the hand last seen, as one integer
                held_codes = self.held_codes
                while changed:
                    code = (changed.bit_length() - 1) >> 3
                    changed &= _BELOW[code]
                    if not counts[code]:  # no longer held
                        at = bisect_left(held_codes, code)
                        del held_codes[at]
                        del self.discards[at]
                    elif not prev[code]:  # held again
                        at = bisect_left(held_codes, code)
                        held_codes.insert(at, code)
                        self.discards.insert(at, ALL_DISCARDS[code])
                    changed_parts |= _CODE_PARTS[code]
            changed_suits = changed_parts & 0xF  # bit s: a card of suit s changed (its count)
            changed_ranks = changed_parts >> 4 & 0x3FFE  # bit r: a card of rank r changed
            wilds_changed = changed_parts & _WILD_PART != 0
            self.hand_value = value
            if not shrunk:
                self.base = guarded
            wild_counts = wild_key(counts)
            any_wild = wild_counts != 0
            suits = self.suits
            remake = 0xF if wilds_changed else changed_suits  # the suits to remake, in any order
            while remake:
                suit = remake.bit_length() - 1
                remake ^= 1 << suit
                if shrunk:
                    suits[suit] = self.base_suits[suit].held(guarded)
                else:
                    first = 13 * suit
                    part = hand[first:first + 13]
                    if sum(part) + (1 if any_wild else 0) < 3:
                        suits[suit] = EMPTY_SEGMENT
                    else:
                        suits[suit] = suit_segment(number, suit, part, wild_counts)
            if not shrunk:  # a new base: the segments of this hand
                self.base_suits[:] = suits
            if groups:
                need = 2 if any_wild else 3
                ranks = self.ranks
                base_ranks = self.base_ranks
                # the group ranks to remake (their order does not matter: each is a segment of its own)
                remake = self.group_mask if wilds_changed else changed_ranks & self.group_mask
                rank_bits = self.rank_bits & ~remake
                while remake:
                    rank = remake.bit_length() - 1
                    remake ^= 1 << rank
                    if shrunk:
                        segment = ranks[rank] = base_ranks[rank].held(guarded)
                    else:
                        a = counts[rank - 1]
                        b = counts[12 + rank]
                        c = counts[25 + rank]
                        d = counts[38 + rank]
                        if a + b + c + d < need:
                            ranks[rank] = EMPTY_SEGMENT
                            continue
                        segment = ranks[rank] = rank_segment(number, rank, hand[rank - 1:rank + 39:13], wild_counts)
                    if segment.actions:
                        rank_bits |= 1 << rank
                self.rank_bits = rank_bits
                if not shrunk:
                    base_ranks[:] = ranks
        # additions: remade for a meld that changed, or whose part of the hand (or the wilds) did
        meld_of = self.meld_of
        adds = self.adds
        base_meld_of = self.base_meld_of
        base_adds = self.base_adds
        if wilds_changed:
            changed_parts = -1
        part_bits = self.part_bits
        known = len(meld_of)  # the melds seen before (those after are appended in order)
        for index in range(len(melds)):
            meld = melds[index]
            if index < known:
                if meld_of[index] is meld:
                    if not changed_parts & part_bits[index]:
                        continue
                else:
                    meld_of[index] = meld
                    part_bits[index] = _part_bit(meld)
            else:
                meld_of.append(meld)
                part_bits.append(_part_bit(meld))
                adds.append(EMPTY_SEGMENT)
                base_meld_of.append(None)
                base_adds.append(EMPTY_SEGMENT)
            if shrunk and base_meld_of[index] is meld:
                adds[index] = base_adds[index].held(guarded)
            else:
                if wild_counts < 0:
                    wild_counts = wild_key(counts)
                adds[index] = _addition_segment(number, index, meld, hand, wild_counts, value)
        if len(meld_of) > len(melds):  # fewer melds than before (a state set up by hand)
            del meld_of[len(melds):]
            del part_bits[len(melds):]
            del adds[len(melds):]
            del base_meld_of[len(melds):]
            del base_adds[len(melds):]
        if not shrunk:  # a new base: the additions of this hand
            base_meld_of[:] = meld_of
            base_adds[:] = adds

    def plan(self, action: MeldCards | AddCards) -> Meld | None:
        """The meld ``action`` makes if the last ``legal_plays`` listed it whole from these segments."""
        if isinstance(action, AddCards):
            index = action.meld
            if 0 <= index < len(self.adds):
                return self.adds[index].plan(action)
            return None
        if not self.new_melds:
            return None
        natural = -1
        for c in action.cards:
            if c != JOKER and c % 13 != 1:
                natural = c
                break
        if natural < 0:  # 2s and a joker: a group of 2s
            return self.ranks[TWO].plan(action)
        meld = self.suits[natural // 13].plan(action)
        if meld is not None:
            return meld
        return self.ranks[natural % 13 + 1].plan(action)


def _addition_segment(number: int, index: int, meld: Meld, hand: bytes, wilds: int, held: int) -> Segment:
    """The additions to meld ``index`` (after ``plays``' filters), as ``AddCards``: ``hand`` the
    counts as bytes, ``wilds`` the wild codes' (``wild_key``), ``held`` the hand as one integer."""
    any_wild = wilds != 0
    takes_wild, touch_bytes = meld._touch or meld.touch()
    if not held & touch_bytes and not (any_wild and takes_wild):
        return EMPTY_SEGMENT
    if meld.is_sequence:
        first = 13 * meld.suit
        part = hand[first:first + 13]
    else:
        rank = meld.group_rank
        part = hand[rank - 1:rank + 39:13]
    if not any_wild and not any(part):
        return EMPTY_SEGMENT
    additions, results = meld_additions(number, meld, part, wilds)
    if not additions:
        return EMPTY_SEGMENT
    made: list[MeldCards | AddCards] = []
    for cards in additions:
        made.append(AddCards(index, cards))
    return Segment(tuple(made), results, None, meld, number)


PlanSlots = list[Segment | None]


def _add_checked(out: list[Action], plans: PlanSlots, slot: int, state: PlayPosition, segment: Segment,
                 size: int, index: int) -> None:
    """Append the segment's legal candidates to ``out`` (``plays``' check, for the candidates that leave
    under two cards only), and them with their plans to ``plans[slot]``."""
    actions = segment.actions
    if not actions:
        return
    if size - segment.most >= 2:
        out.extend(actions)
        plans[slot] = segment
        return
    melds = segment.melds
    kept: list[MeldCards | AddCards] = []
    kept_melds: list[Meld | None] = []
    for i in range(len(actions)):
        action = actions[i]
        if size - len(action.cards) >= 2 or state.meld_result_allowed(action, segment.meld_at(i), index):
            out.append(action)
            kept.append(action)
            kept_melds.append(melds[i])
    plans[slot] = Segment(tuple(kept), tuple(kept_melds), None, segment.extends, segment.rules_number)


def legal_plays(state: PlayPosition, seat_plays: SeatPlays, out: list[Action], rules: Ruleset, counts: list[int],
                size: int, melds: list[Meld]) -> PlanSlots | None:
    """``plays(state)`` appended to ``out`` (the same actions in the same order), from ``seat_plays``
    brought up to date, when no card must be melded and no lone card was taken (``plays`` itself
    otherwise). Returns ``None`` when every segment was listed whole (``seat_plays.plan`` then finds an
    action's meld), else the plans by segment (see ``RANK_PLANS``; ``plan_of`` finds an action's).

    ``rules``, ``counts``, ``size`` and ``melds`` are the state's ruleset, the hand of the seat to act,
    its size and its side's melds, passed by the state (its fields read through the protocol are
    generic attribute look-ups in compiled code)."""
    groups = rules.groups
    group_ranks = _GROUP_RANKS[rules.groups_of_twos]
    seat_plays.update(counts, groups, group_ranks, melds)
    start = len(out)
    new_melds = size >= 3
    seat_plays.new_melds = new_melds
    whole = True
    most = size - 2  # a candidate laying down more cards leaves under two: the state's to check
    if new_melds:
        for segment in seat_plays.suits:
            if segment.actions:
                if segment.most > most:
                    whole = False
                    break
                out.extend(segment.actions)
        if whole and groups:
            # the ranks that list groups, in the group ranks' order (lowest first)
            ranks = seat_plays.ranks
            bits = seat_plays.rank_bits
            while bits:
                low = bits & -bits
                bits ^= low
                segment = ranks[low.bit_length() - 1]
                if segment.most > most:
                    whole = False
                    break
                out.extend(segment.actions)
    if whole:
        for segment in seat_plays.adds:
            if segment.actions:
                if segment.most > most:
                    whole = False
                    break
                out.extend(segment.actions)
    if whole:
        return None
    # a hand nearly emptied: the candidates that leave under two cards are the state's to check
    del out[start:]
    plans: PlanSlots = [None] * (ADD_PLANS + len(melds))
    if new_melds:
        suits = seat_plays.suits
        for suit in range(4):
            _add_checked(out, plans, suit, state, suits[suit], size, -1)
        if groups:
            ranks = seat_plays.ranks
            for rank in group_ranks:
                _add_checked(out, plans, RANK_PLANS + rank, state, ranks[rank], size, -1)
    adds = seat_plays.adds
    for index in range(len(melds)):
        _add_checked(out, plans, ADD_PLANS + index, state, adds[index], size, index)
    return plans


def plan_of(plans: PlanSlots, action: MeldCards | AddCards) -> Meld | None:
    """The meld ``action`` makes, if ``legal_plays`` listed it (``None`` otherwise)."""
    if isinstance(action, AddCards):
        slot = ADD_PLANS + action.meld
        if action.meld < 0 or slot >= len(plans):
            return None
        found = plans[slot]
        return None if found is None else found.plan(action)
    natural = -1
    for c in action.cards:
        if c != JOKER and c % 13 != 1:
            natural = c
            break
    if natural < 0:  # 2s and a joker: a group of 2s
        found = plans[RANK_PLANS + TWO]
        return None if found is None else found.plan(action)
    found = plans[natural // 13]
    if found is not None:
        meld = found.plan(action)
        if meld is not None:
            return meld
    found = plans[RANK_PLANS + natural % 13 + 1]
    return None if found is None else found.plan(action)


def must_meld_shortcut(must: int, counts: list[int], size: int, lone: int, melds: list[Meld], rules: Ruleset) -> int:
    """Whether ``plays(state, first_only=True)`` would find a play, when the card ``must_meld`` is
    natural and the answer is plain from a few counts: 1 (it would), 0 (it would not), -1 (not plain:
    ask ``plays``). The closed pile's check (``HandState._may_take_pile``) asks at every draw.

    1 rests on a candidate the generator lists (its lists are complete: the property tests check it)
    and that ``plays`` accepts without asking the state (it leaves two cards or more, no lone card):
    three naturals in a row of the card's suit around it, three naturals of its rank (groups), the
    card alone added to one of the side's melds. 0 rests on ``plays``' own filters (no sequence of
    the suit can hold the card: ``_sequence_around``; no group of its rank has cards enough) and on
    the side's melds: none is a group of its rank, and no addition to a sequence of its suit can
    hold it (``_may_reach``).

    The state's fields are passed by the state (``must`` its ``must_meld``, ``lone``; the hand of
    the seat to act, its size, its side's melds): read through the protocol, each would be a generic
    attribute look-up in compiled code.
    """
    if must < 0 or must == JOKER or must % 13 == 1:
        return -1
    plain = lone < 0  # else every candidate is the state's to check
    suit = must // 13
    rank = must % 13 + 1
    any_wild = counts[JOKER] + counts[1] + counts[14] + counts[27] + counts[40] > 0
    # the suit's natural slots held (the card among them)
    first = 13 * suit
    avail = _avail_slots(bytes(counts[first:first + 13]))
    slots = [ACE, HIGH_ACE] if rank == ACE else [rank]
    # the card alone, added to a meld
    fits_a_meld = False
    for meld in melds:
        if meld.is_sequence:
            if meld.suit != suit or not _may_reach(meld.mask, avail, slots):
                continue
        elif meld.group_rank != rank:
            continue
        fits_a_meld = True
        if plain and size - 1 >= 2:
            touch_bytes = (meld._touch or meld.touch())[1]
            if touch_bytes >> (8 * must) & 0xFF and extended(meld, (must,), rules) is not None:
                return 1
    sequence_possible = False
    group_possible = False
    if size >= 3:
        # three naturals of the suit in a row around the card (only the windows holding the card's
        # slot count: _WINDOWS), or two and a wild
        full = _run_starts(avail, False) & _WINDOWS[rank]
        if full and plain and size - 3 >= 2:
            return 1
        sequence_possible = full != 0 or (any_wild and _run_starts(avail, True) & _WINDOWS[rank] != 0)
        if rules.groups:
            held = counts[rank - 1] + counts[12 + rank] + counts[25 + rank] + counts[38 + rank]
            if held >= 3 and plain and size - 3 >= 2:
                return 1
            group_possible = held >= (2 if any_wild else 3)
    if not fits_a_meld and not sequence_possible and not group_possible:
        return 0
    return -1


#: by rank: the first slots (bits) of the windows of three slots in a row within 1..14 that hold the
#: rank's slot (both of an ace's)
_WINDOWS: Final[list[int]] = [0] * 14
for _rank in range(1, 14):
    for _slot in ((ACE, HIGH_ACE) if _rank == ACE else (_rank,)):
        for _lo in range(max(1, _slot - 2), min(_slot, HIGH_ACE - 2) + 1):
            _WINDOWS[_rank] |= 1 << _lo


def _may_reach(mask: int, avail: int, slots: list[int]) -> bool:
    """Whether an addition to a sequence with natural slots ``mask`` might hold a natural card at one
    of ``slots``, the hand holding naturals of the suit at ``avail`` (the card's slots among them).
    A necessary condition only: the sequence after the addition is a run with at most one slot not
    natural, so between its naturals and the card at most one slot may lack a natural held; a slot
    inside the naturals' span takes the card only if no natural stands there."""
    lo = (mask & -mask).bit_length() - 1
    hi = mask.bit_length() - 1
    for slot in slots:
        if lo < slot < hi:
            if not mask >> slot & 1:
                return True
            continue
        if slot > hi:
            gap = ((1 << slot) - (1 << (hi + 1))) & ~avail  # the slots hi+1 .. slot-1 not held
        elif slot < lo:
            gap = ((1 << lo) - (1 << (slot + 1))) & ~avail  # the slots slot+1 .. lo-1 not held
        else:
            continue  # a natural of the sequence stands there already
        if gap & (gap - 1) == 0:  # none, or one
            return True
    return False
