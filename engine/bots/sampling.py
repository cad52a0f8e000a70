"""Determinisation: whole hands sampled from what one seat knows, for the expert bot's search.

A seat sees its own hand, both sides' melds, the whole discard pile, every hand's size, the stock's
size and which mortos were taken or became the stock (``HandState.view(seat)``). Between its
decisions it may also remember public history: the cards it saw an opponent take with the pile,
what each seat discarded since, what each side laid down. ``PublicMemory`` keeps that history;
``information`` puts the view and the memory together (``Information``); ``sample`` deals the
cards the seat cannot see (the other hands, the mortos not taken, the stock's order) at random,
and returns a ``HandState`` that agrees with everything the seat knows.

Guarantees:

- Nothing here reads a ``HandState`` the seat did not build itself: the input is the view, read
  as a mapping (its public fields and the seat's own hand), and the memory, built from earlier
  views. Two hands that differ only in what the seat cannot see give the same ``Information``,
  and the same sample for the same random generator.
- A sample is a legal position of the ruleset: exactly the ruleset's deck, each hand of the size
  the view shows, the mortos and the stock of the sizes the view implies, the seat's own cards,
  the melds and the pile exactly as shown. Cards the memory places in a hand (seen taken with the
  pile) go to that hand while they are still unaccounted for; a memory that disagrees with the
  cards (a guess that went stale) is dropped card by card, never the deck's consistency.
- ``information`` checks that the melds rebuilt from the view print back exactly as the view shows
  them, and raises ``SamplingError`` otherwise: the search then falls back on the heuristic rather
  than search a position that is not the table's.

Beliefs about play: a seat that finished a turn has usually laid down every natural card it could,
on its side's melds or as a new meld of three, and a seat that drew from the stock rather than take
the pile usually held no two cards that would have made a meld with the pile's top.
``sample(info, rng, laid, declined)`` leans on that: with probability ``laid`` per card, a card dealt
to such a hand that could have been laid down (it fits a meld of its side, or makes a natural run or
group with the hand's other cards), and with probability ``declined`` one that makes a run or group
with the top it declined at its last turn, is swapped with a card of the stock or a face-down morto
that is neither. A hand that has not played since it was dealt or took its morto is dealt freely.
With both 0, the plain uniform sample.

The memory is a belief, not a record: cards taken with the pile and laid down later by a side are
taken out of the belief of that side's seats (first the seat believed to hold them); a card taken
by a seat while this seat was not looking (4 players: a discard made and taken between two of its
turns) is not known at all. Beliefs only bias the sample; they are never needed for legality.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final

from engine.bots.evaluation import dealt_stock
from engine.bots.reading import CODE, read_meld
from engine.cards import HIGH_ACE, JOKER, NCODES, deck
from engine.deal import Deal
from engine.melds import Meld
from engine.rules import MORTO_SIZE, Ruleset
from engine.state import HandState


class SamplingError(Exception):
    """The view cannot be turned into a position (a ruleset that is not the table's, a meld that
    does not read back): the caller should not search."""


@lru_cache(maxsize=8192)
def meld_from_view(kind: str, cards: tuple[str, ...], canastra: str, rules: Ruleset) -> Meld:
    """The engine's ``Meld`` for a meld as the view shows it (``kind``, ``cards``, ``canastra``).

    The view shows a meld's cards in table order with the wild in its place; ``read_meld`` reads
    the shape back (a sequence's suit, natural slots, the wild and its slot; a group's rank). The
    result must print back to the same view form, or ``SamplingError``.
    """
    shape = read_meld(kind, cards, canastra)
    if shape.is_sequence:
        meld = Meld.sequence(shape.suit, shape.mask, shape.wild, shape.wild_slot)
    else:
        naturals = shape.cards[:-1] if shape.wild >= 0 else shape.cards
        meld = Meld.group(shape.rank, tuple(naturals), shape.wild)
    printed = meld.to_json(rules)
    if printed["kind"] != kind or tuple(printed["cards"]) != cards or printed["canastra"] != canastra:
        raise SamplingError(f"the meld {kind} {' '.join(cards)} ({canastra}) does not read back: {printed}")
    return meld


def _table_counts(view: Mapping[str, Any]) -> list[list[int]]:
    """Per side, how many of each card code lies in its melds."""
    out = [[0] * NCODES, [0] * NCODES]
    for side, melds in enumerate(view["melds"]):
        counts = out[side]
        for m in melds:
            for c in m["cards"]:
                counts[CODE[c]] += 1
    return out


class PublicMemory:
    """What one seat remembers of a hand's public history between its own decisions.

    ``observe(view)`` is called with every view the seat decides on; the work is done once per turn
    (the first view of the seat's turn). ``note_discard`` records the seat's own discard, so that
    the next turn can tell what happened to the pile meanwhile. A new hand (another hand number or
    dealer, or a stock that grew by more than a morto) clears it.
    """

    __slots__ = ("declined", "hand_key", "known", "morto_pending", "mortos_taken", "observed", "pile_after_mine",
                 "stale_turns", "stock_seen", "table")

    declined: list[int]
    hand_key: tuple[int, int]
    known: list[list[int]]
    morto_pending: list[int]
    mortos_taken: list[bool]
    observed: bool
    pile_after_mine: list[int] | None
    stale_turns: int
    stock_seen: int
    table: list[list[int]]

    def __init__(self) -> None:
        self.hand_key = (-1, -1)
        self.reset()

    def reset(self) -> None:
        #: per seat: cards seen taken with the pile and believed still in that hand
        self.known = [[0] * NCODES for _ in range(4)]
        #: per seat: the top of the pile it declined at its last turn, drawing from the stock (-1: it
        #: took the pile, or this seat has not seen its turn)
        self.declined = [-1] * 4
        #: per side: the seat that took the morto by discarding its last card and has not played
        #: since (the engine's ``morto_pending``), inferred at this seat's turn; -1 for none
        self.morto_pending = [-1, -1]
        self.mortos_taken = [False, False]
        self.pile_after_mine = None  # the pile as this seat left it with its discard
        self.stale_turns = 0  # own turns in a row at which the stock had not shrunk since the one before
        self.stock_seen = -1
        self.table = [[0] * NCODES, [0] * NCODES]
        self.observed = False  # no view of this hand yet

    def observe(self, view: Mapping[str, Any]) -> bool:
        """Bring the memory up to this view; returns whether this view starts a new turn of the seat.

        A turn starts at the draw phase; a seat that joins mid-turn (a bot taking over a seat) starts
        its memory at its first view, whatever the phase.
        """
        stock = int(view["stock_count"])
        key = (int(view["hand_number"]), int(view["dealer"]))
        if key != self.hand_key or (self.stock_seen >= 0 and stock > self.stock_seen + MORTO_SIZE):
            self.hand_key = key
            self.reset()
        if view["phase"] != "draw" and self.observed:
            return False  # a later view of the same turn: nothing happened but the seat's own plays
        self.observed = True
        self._new_turn(view, [CODE[c] for c in view["discard"]], stock)
        return True

    def _new_turn(self, view: Mapping[str, Any], pile: list[int], stock: int) -> None:
        seat = int(view["seat"])
        players = int(view["players"])
        self.stale_turns = self.stale_turns + 1 if 0 <= self.stock_seen <= stock else 0
        self.stock_seen = stock
        known = self.known
        before = self.pile_after_mine
        if before is not None and pile:
            n = len(before)
            pile_taken = pile[:n] != before
            if not pile_taken:
                new, first = pile[n:], (seat + 1) % players
            else:
                # the pile was taken: its taker discarded pile[0], the seats after it the rest
                first = (seat - len(pile)) % players
                if first != seat:
                    for c in before:
                        known[first][c] += 1
                new = pile
            for i, c in enumerate(new):
                s = (first + i) % players
                if known[s][c]:
                    known[s][c] -= 1
            # each seat that drew from the stock declined the pile as the seat before it left it
            self.declined = [-1] * 4
            tops = new[:-1] if pile_taken else [before[-1], *new[:-1]]
            start = first + 1 if pile_taken else first
            for i, c in enumerate(tops):
                s = (start + i) % players
                if s != seat:
                    self.declined[s] = c
        # cards a side laid down since: no longer in the hands of its seats
        table = _table_counts(view)
        for side in (0, 1):
            old, now = self.table[side], table[side]
            for c in range(NCODES):
                grew = now[c] - old[c]
                s = side
                while grew > 0 and s < players:
                    if s != seat and known[s][c]:
                        known[s][c] -= 1
                        grew -= 1
                    else:
                        s += 2
        self.table = table
        # a morto taken since this seat's previous turn by a seat that discarded its last card: that
        # seat holds exactly the morto's 11 cards (a morto taken by melding is followed by a discard
        # in the same turn, leaving 10 at most), and it has not played since
        taken = [bool(x) for x in view["mortos_taken"]]
        sizes = view["hand_sizes"]
        self.morto_pending = [-1, -1]
        for side in (0, 1):
            if taken[side] and not self.mortos_taken[side]:
                for s in range(side, players, 2):
                    if s != seat and int(sizes[s]) == MORTO_SIZE:
                        self.morto_pending[side] = s
                        break
        self.mortos_taken = taken

    def note_discard(self, view: Mapping[str, Any], card: int) -> None:
        """The seat discards ``card`` from the position ``view`` shows: its turn ends."""
        self.pile_after_mine = [*(CODE[c] for c in view["discard"]), card]


class Information:
    """Everything one seat knows at one decision, in the engine's terms; ``sample`` deals the rest."""

    __slots__ = ("dealer", "declined", "fits", "hand", "hand_number", "in_hands", "known", "lone", "match_totals",
                 "melds", "morto_open", "morto_pending", "morto_taken", "morto_to_stock", "must_meld", "phase", "pile",
                 "played", "players", "pool", "rules", "seat", "shares", "sizes", "stock_count", "to_act")

    rules: Ruleset
    players: int
    seat: int
    dealer: int
    hand_number: int
    match_totals: list[int]  # per side: the match's totals before this hand
    hand: list[int]  # the seat's own cards, as codes
    sizes: list[int]
    melds: list[list[Meld]]
    pile: list[int]
    stock_count: int
    morto_open: list[bool]  # per side: its morto is still face down (neither taken nor the stock)
    morto_taken: list[bool]
    morto_to_stock: list[bool]
    morto_pending: list[int]
    to_act: int
    phase: str
    must_meld: int
    lone: int
    known: list[list[int]]  # per seat: cards believed in that hand (as codes), each still unaccounted for
    pool: list[int]  # every other card the seat cannot place, as codes (sorted)
    # a sample deals the shuffled pool in this order: per other seat, its hand's unknown cards
    # (``shares[seat]``: that slice of the pool; empty for the seat itself), then from ``in_hands``
    # the open mortos and the stock
    shares: list[tuple[int, int]]
    in_hands: int
    fits: list[list[bool]]  # per side, per card code: a natural card that can be added to one of its melds
    # per seat: the hand has finished a turn since it was dealt or took its morto (its cards were
    # shaped by its own play); never the seat itself
    played: list[bool]
    declined: list[int]  # per seat that has played: the pile's top it declined at its last turn, or -1


def information(view: Mapping[str, Any], memory: PublicMemory, rules: Ruleset) -> Information:
    """The seat's knowledge at ``view`` (with ``memory`` brought up to it by ``observe``)."""
    info = Information()
    info.rules = rules
    info.players = players = int(view["players"])
    info.seat = seat = int(view["seat"])
    info.dealer = int(view["dealer"])
    info.hand_number = int(view["hand_number"])
    info.hand = [CODE[c] for c in view["hand"]]
    info.sizes = [int(x) for x in view["hand_sizes"]]
    info.melds = [[meld_from_view(m["kind"], tuple(m["cards"]), m["canastra"], rules) for m in side]
                  for side in view["melds"]]
    info.pile = [CODE[c] for c in view["discard"]]
    info.stock_count = int(view["stock_count"])
    totals = view.get("match_totals") or (0, 0)
    info.match_totals = [int(totals[0]), int(totals[1])]
    info.morto_taken = [bool(x) for x in view["mortos_taken"]]
    info.morto_to_stock = [bool(x) for x in view["mortos_in_stock"]]
    info.morto_open = [not info.morto_taken[s] and not info.morto_to_stock[s] for s in (0, 1)]
    info.morto_pending = memory.morto_pending[:]
    info.to_act = int(view["to_act"])
    info.phase = str(view["phase"])
    must = view["must_meld"]
    info.must_meld = -1 if must is None else CODE[must]
    lone = view["lone_card"]
    info.lone = -1 if lone is None else CODE[lone]
    if len(info.hand) != info.sizes[seat]:
        raise SamplingError("the view's hand and hand size disagree")
    # the unseen cards: the deck less what the seat sees
    unseen = [0] * NCODES
    for c in deck(rules.jokers):
        unseen[c] += 1
    seen = info.hand + info.pile + [c for side in info.melds for m in side for c in m.cards]
    for c in seen:
        unseen[c] -= 1
        if unseen[c] < 0:
            raise SamplingError(f"more copies of card {c} in sight than the ruleset's deck holds")
    # beliefs first, as long as the cards are unseen and the hand has room
    known: list[list[int]] = [[] for _ in range(players)]
    for s in range(players):
        if s == seat:
            continue
        room = info.sizes[s]
        believed = memory.known[s]
        for c in range(NCODES):
            k = min(believed[c], unseen[c], room)
            if k > 0:
                known[s].extend([c] * k)
                unseen[c] -= k
                room -= k
    info.known = known
    info.pool = [c for c in range(NCODES) for _ in range(unseen[c])]
    shares: list[tuple[int, int]] = []
    at = 0
    for s in range(players):
        need = 0 if s == seat else info.sizes[s] - len(known[s])
        shares.append((at, at + need))
        at += need
    info.shares = shares
    info.in_hands = at
    fits = [[False] * NCODES, [False] * NCODES]
    for side, melds in enumerate(view["melds"]):
        for m in melds:
            for c in read_meld(m["kind"], tuple(m["cards"]), m["canastra"]).fits:
                fits[side][c] = True
    info.fits = fits
    # every other seat plays between two turns of this one; before its first turn, the seats from the
    # hand's first player to this one have. A seat that joined mid-hand (a bot taking over) has no
    # turn of its own to go by: the stock tells it that a round has been played (every turn draws
    # from it or takes the pile, so it has shrunk by no more than the turns played)
    first = (info.dealer + 1) % players
    round_played = (memory.pile_after_mine is not None or (
        not any(info.morto_to_stock) and dealt_stock(rules, players) - info.stock_count >= players))
    info.played = [s != seat and s not in memory.morto_pending
                   and (round_played or (s - first) % players < (seat - first) % players)
                   for s in range(players)]
    info.declined = [memory.declined[s] if info.played[s] else -1 for s in range(players)]
    hidden = info.in_hands + info.stock_count + MORTO_SIZE * (info.morto_open[0] + info.morto_open[1])
    if hidden != len(info.pool):
        raise SamplingError(f"{len(info.pool)} unseen cards for {hidden} hidden places")
    return info


def sample(info: Information, rng: random.Random, laid: float = 0.0, declined: float = 0.0) -> HandState:
    """A position consistent with ``info``, its hidden cards dealt at random by ``rng``. With ``laid``
    or ``declined`` above 0, the hands that have played lean towards holding nothing they could have
    laid down, and nothing that would have made the pile they declined worth taking (the module's
    "Beliefs about play").

    The same ``info``, ``laid``, ``declined`` and generator state give the same position (the pool is
    sorted; the shuffle and the swaps are the generator's).
    """
    pool = info.pool[:]
    rng.shuffle(pool)
    if laid > 0.0 or declined > 0.0:
        _lean(info, pool, rng, laid, declined)
    hands: list[tuple[int, ...]] = []
    for s in range(info.players):
        if s == info.seat:
            hands.append(tuple(info.hand))
            continue
        first, end = info.shares[s]
        hands.append((*info.known[s], *pool[first:end]))
    at = info.in_hands
    mortos: list[tuple[int, ...]] = []
    for side in (0, 1):
        if info.morto_open[side]:
            mortos.append(tuple(pool[at:at + MORTO_SIZE]))
            at += MORTO_SIZE
        else:
            mortos.append(())
    stock = tuple(pool[at:])
    state = HandState(info.rules, info.players, Deal(tuple(hands), (mortos[0], mortos[1]), stock),
                      info.dealer, info.hand_number, info.match_totals)
    state.melds = [info.melds[0][:], info.melds[1][:]]
    state.pile = info.pile[:]
    state.mortos = [mortos[side] if info.morto_open[side] else None for side in (0, 1)]
    state.morto_taken = info.morto_taken[:]
    state.morto_to_stock = info.morto_to_stock[:]
    state.morto_pending = info.morto_pending[:]
    state.to_act = info.to_act
    state.phase = info.phase
    state.must_meld = info.must_meld
    state.lone = info.lone
    state.touch()
    return state


#: tries at finding a stock or morto card to swap with one that a hand would have laid down
SWAP_TRIES = 8


def playable(c: int, counts: list[int], fits: list[bool], groups: bool) -> bool:
    """Whether a hand holding ``counts`` (``c`` among them) could lay ``c`` down as a natural card: on a
    meld of its side (``fits``), or in a run of three naturals of its suit, or (``groups``) in a group
    of three of its rank. 2s and jokers count as wilds, never as naturals here."""
    r = c % 13
    if c == JOKER or r == 1:
        return False
    if fits[c]:
        return True
    if groups and counts[r] + counts[13 + r] + counts[26 + r] + counts[39 + r] >= 3:
        return True
    base = c - r
    # slots 3..14 (the 2 is a wild; the ace stands above the king): a run of three through c's slot
    slot = HIGH_ACE if r == 0 else r + 1
    run = 0
    for s in range(max(3, slot - 2), min(HIGH_ACE, slot + 2) + 1):
        if counts[base + (0 if s == HIGH_ACE else s - 1)]:
            run += 1
            if run == 3:
                return True
        else:
            run = 0
    return False


def _runs_with(c: int, counts: list[int], top: int, groups: bool) -> bool:
    """Whether ``c``, in a hand holding ``counts``, would make a natural run (or group) of three with
    the card ``top`` added, and not without it (a meld the hand holds already is the other belief's,
    ``laid``): the hand that declined ``top`` did not hold such a card, as far as its play shows."""
    if playable(c, counts, _NO_FITS, groups):
        return False
    counts[top] += 1
    found = playable(c, counts, _NO_FITS, groups)
    counts[top] -= 1
    return found


_NO_FITS: Final[list[bool]] = [False] * NCODES


def _lean(info: Information, pool: list[int], rng: random.Random, laid: float, declined: float) -> None:
    """Swap, in the shuffled ``pool`` (dealt in ``sample``'s order, ``Information.shares``), cards of
    the hands that have played with cards of the mortos and stock: with probability ``laid`` a card
    the hand could have laid down, with probability ``declined`` a card that makes a run or group with
    the pile's top that the hand declined. A card comes in only if it is neither."""
    at = info.in_hands
    free = len(pool) - at
    if free <= 0:
        return
    groups = info.rules.groups
    for s in range(info.players):
        if not info.played[s]:  # never the seat itself
            continue
        first, end = info.shares[s]
        fits = info.fits[s & 1] if laid > 0.0 else _NO_FITS
        top = info.declined[s] if declined > 0.0 else -1
        counts = [0] * NCODES
        for c in info.known[s]:
            counts[c] += 1
        for i in range(first, end):
            counts[pool[i]] += 1
        for i in range(first, end):
            c = pool[i]
            if laid > 0.0 and playable(c, counts, fits, groups):
                chance = laid
            elif top >= 0 and _runs_with(c, counts, top, groups):
                chance = declined
            else:
                continue
            if rng.random() >= chance:
                continue
            counts[c] -= 1
            for _ in range(SWAP_TRIES):
                j = at + rng.randrange(free)
                other = pool[j]
                counts[other] += 1
                if (laid > 0.0 and playable(other, counts, fits, groups)) or (
                        top >= 0 and _runs_with(other, counts, top, groups)):
                    counts[other] -= 1
                    continue
                pool[i], pool[j] = other, c
                break
            else:
                counts[c] += 1


__all__ = ["Information", "PublicMemory", "SamplingError", "information", "meld_from_view", "playable", "sample"]
