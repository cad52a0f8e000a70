"""The heuristic player: a greedy, rule-aware policy that reads only its seat's view.

Every decision scores the legal actions of the moment with Buraco rules of thumb. What the bot
weighs depends on the stage of its side's hand (``_stage``):

- ``morto``: the side still has its morto to take. Where any canastra lets a side go out, empty
  the hand quickly; where going out needs a clean canastra, gather cards first (take the pile
  readily: the material makes clean canastras, and it starves the opponents of the pile).
- ``build``: the morto is taken, the canastra to go out is missing: gather and build.
- ``out``: the side may go out; it sheds cards and refuses piles that would leave it more cards
  than they let it lay down.
- ``pressed``: the hand may end any time (the stock is nearly out, or an opponent who may go out
  holds few cards): lay down everything, wilds included, and take no pile that brings dead cards.

The decisions:

- **Draw or take the pile** (``_pile_gain``): what the pile lets the hand lay down at once
  (``plan_naturals``), wilds gained, canastras completed, cards that connect to the hand, against
  the dead cards it brings. Two bots never pass the pile back and forth for ever: a bot draws when
  the stock has not shrunk since its previous turn (``max_stale_turns``), so the hand runs down.
- **Meld and add** (``_play_score``): natural cards first, longer melds and canastras first; a wild
  is spent to complete a canastra, to empty the hand (for the morto or to go out), when the hand
  holds more wilds than it keeps (``keep_wilds``) or when pressed; a wild does not dirty a meld that
  could still become the clean canastra the side needs. Emptying the hand for the morto comes
  before anything else (direct batida).
- **Go out** when the side may and is ahead on an estimate of both sides' totals, or, in a match to
  a target (where points count, not only the hand), when the opponents are about to go out;
  otherwise the bot keeps cards and plays on.
- **Discard** (``_discard_cost``) what is least useful to the hand and to the next opponent: never a
  wild while another card is legal, not a card that fits the opponents' melds (with the pile's
  cards; far worse when it may give them their canastra), nothing next to the cards they took from
  the pile; a card they discarded themselves is safe. The bigger the pile, the more it matters.

A turn always ends: each meld or addition lays cards down and the bot discards once nothing scores
above zero. The bot remembers, within a hand, what the others took from the pile and discarded
(all public) and forgets it when a new hand starts. Ties are broken by a seeded RNG, so a bot is
deterministic for its seed. Given the ruleset (``make_bot("heuristic", seed, rules)``) it knows
the card values, whether groups exist and whether going out needs a clean canastra; without it, it
assumes the defaults of ``Ruleset()`` and learns groups from the table.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

from engine.actions import DRAW, Action, AddCards, Discard, MeldCards, TakePile
from engine.bots.planning import plan_naturals
from engine.bots.reading import TableMeld, hand_counts, held_slots, is_wild_card, melds_of, pile_codes
from engine.cards import JOKER, NCODES
from engine.melds import card_values
from engine.rules import CANASTRA, MORTO_SIZE, Ruleset

#: knob settings (``HeuristicBot.tune``) of a variant of the heuristic that beat the plain one in
#: duplicate matches of ``fechado_sujo`` and is even with it in the other presets measured
#: (docs/performance.md, "Bots"): the expert's own side may play them (``ExpertBot.tuned_policy``);
#: the heuristic bot of the tables keeps its defaults
TUNED_KNOBS: Final[dict[str, Any]] = {
    "pile_params.morto": (0.0, 0.0, 0.0, 0.0),
}


class Turn:
    """One decision's reading of the view.

    Written out rather than a dataclass (as engine.actions.MeldCards): every decision makes one, and a
    compiled dataclass still builds itself in interpreted code."""

    __slots__ = (
        "emptiable",
        "hand",
        "hand_size",
        "has_clean",
        "may_go_out",
        "melds",
        "morto_available",
        "next_seat",
        "opp_ready",
        "pile",
        "players",
        "pressed",
        "seat",
        "side",
        "want_out",
        "wilds",
    )

    def __init__(self, seat: int, side: int, players: int, hand: list[int], hand_size: int, wilds: int,
                 melds: list[list[TableMeld]], pile: list[int], morto_available: bool, may_go_out: bool,
                 has_clean: bool, want_out: bool, pressed: bool, opp_ready: bool, next_seat: int,
                 emptiable: int = -1) -> None:
        self.seat = seat
        self.side = side
        self.players = players
        self.hand = hand  # counts per card code
        self.hand_size = hand_size
        self.wilds = wilds  # 2s and jokers in hand
        self.melds = melds  # per side
        self.pile = pile
        self.morto_available = morto_available  # the side still has its morto to take
        # the side has no morto left to take and the canastra the ruleset requires
        self.may_go_out = may_go_out
        self.has_clean = has_clean  # the side has a clean canastra
        self.want_out = want_out  # going out now would leave the side ahead (estimated)
        self.pressed = pressed  # the hand may end any time: cards in hand will soon count against the side
        self.opp_ready = opp_ready  # the opponents may go out
        self.next_seat = next_seat
        # 1: the hand can be emptied this turn, wilds spent (estimate); -1: not worked out
        self.emptiable = emptiable


class HeuristicBot:
    name = "heuristic"

    # Tuning knobs, class attributes so that experiments can vary them (on one bot: ``tune``).
    # Taking the pile, per stage: the bar the pile's gain must clear (what a card from the stock
    # would have brought), the cost of each dead card it brings, the worth of a pile card that
    # connects to the hand without being laid at once, and of each card the hand lacks below six.
    # Every bot reads its ``pile_params``, this table unless a variant was given its own (a new
    # dict: the shared one is never changed).
    PILE_PARAMS: ClassVar[dict[str, tuple[float, float, float, float]]] = {
        "morto": (10.0, 3.0, 0.0, 0.0),
        "morto_clean": (-15.0, 0.0, 10.0, 8.0),
        "build": (0.0, 0.0, 10.0, 8.0),
        "out": (10.0, 12.0, 0.0, 0.0),
        "pressed": (60.0, 30.0, 0.0, 0.0),
    }
    pile_per_laid = 8.0  # per card the pile lets the hand lay down at once
    pile_wild = 25.0  # per wild in the pile
    max_stale_turns = 1  # own turns the stock may stay still before the bot draws instead of taking
    wild_spent = 90.0  # the cost of spending a wild where it does not pay
    wild_spent_well = 4.0  # ... to complete a canastra, to empty the hand, or when pressed
    keep_wilds = 2  # wilds kept in hand for canastras and batidas; more are spent more freely
    wild_surplus = 12.0
    dirtying = 70.0  # a wild in a meld of 4+ that could become the clean canastra the side lacks
    direct_batida = 400.0  # emptying the hand by melding: the morto comes at once
    indirect_batida = 150.0  # leaving one card, whose discard takes the morto
    feed_danger = 60.0  # discarding a card that fits an opponent meld
    feed_near_canastra = 3.0  # ... a meld two cards or less from the canastra they lack
    close_hand = 4  # an opponent side that may go out, or nearly, with a hand this small presses us
    close_meld = 6  # "nearly": free of its morto with a meld this long, of the kind it needs
    out_when_pressed = True  # in a match to a target, go out before pressing opponents do, even behind
    length_weight = 2.0  # per card of the meld after the play: longer melds first
    shed_value = 0.3  # how much a card's value argues for discarding it (it costs that if the hand ends)

    def __init__(self, seed: int | str = 0, rules: Ruleset | None = None) -> None:
        self.rng = random.Random(seed)
        self.rules = rules if rules is not None else Ruleset()
        self.values = card_values(self.rules)
        self.pile_params: dict[str, tuple[float, float, float, float]] = self.PILE_PARAMS
        self.groups = rules.groups if rules is not None else False  # learnt from the table otherwise
        self.clean_needed = self.rules.clean_to_go_out
        self._hand_key: tuple[int, int] = (-1, -1)
        self._reset()

    def tune(self, knobs: Mapping[str, Any]) -> None:
        """Set knobs on this bot alone: a knob by its name (``keep_wilds``), or one stage's four
        parameters of taking the pile as ``pile_params.STAGE`` (the shared table is not changed)."""
        for knob, value in knobs.items():
            if knob.startswith("pile_params."):
                stage = knob[len("pile_params."):]
                if stage not in self.PILE_PARAMS:
                    raise ValueError(f"{knob!r}: no such stage of taking the pile")
                self.pile_params = {**self.pile_params, stage: value}
            else:
                setattr(self, knob, value)

    def knobs(self, names: Iterable[str]) -> dict[str, Any]:
        """This bot's values of the knobs ``names``, named as ``tune`` takes them (its inverse)."""
        return {knob: self.pile_params[knob[len("pile_params."):]] if knob.startswith("pile_params.")
                else getattr(self, knob) for knob in names}

    # --- memory within a hand ---------------------------------------------------------------------
    def _reset(self) -> None:
        self._pile_after_mine: list[int] | None = None  # the pile as this seat left it
        self._known: list[list[int]] = [[0] * NCODES for _ in range(4)]  # taken from the pile, per seat
        self._known_any = False
        self._discarded: list[list[int]] = [[0] * NCODES for _ in range(4)]  # discarded, per seat
        self._table_melds: list[list[TableMeld]] = [[], []]  # per side: its melds on the table, as last read
        self._stock_seen = -1  # the stock at this seat's previous turn
        self._stale_turns = 0  # own turns in a row at which the stock had not shrunk since the one before

    def _observe(self, view: Mapping[str, Any], pile: list[int]) -> None:
        """At the start of this seat's turn: what happened since its last turn."""
        stock = int(view["stock_count"])
        key = (int(view["hand_number"]), int(view["dealer"]))
        if key != self._hand_key or (self._stock_seen >= 0 and stock > self._stock_seen + MORTO_SIZE):
            self._hand_key = key
            self._reset()  # a new hand (a stock that grows by more than a morto cannot be this hand's)
        self._stale_turns = self._stale_turns + 1 if 0 <= self._stock_seen <= stock else 0
        self._stock_seen = stock
        before = self._pile_after_mine
        if before is None:
            return
        seat = int(view["seat"])
        players = int(view["players"])
        n = len(before)
        if pile[:n] == before:
            new, first = pile[n:], (seat + 1) % players
        else:  # the pile was taken: the taker discarded pile[0], the seats after it the rest
            first = (seat - len(pile)) % players
            for c in before:
                self._known[first][c] = self._known[first][c] + 1
            self._known_any = True
            new = pile
        for i, c in enumerate(new):
            s = (first + i) % players
            self._discarded[s][c] = self._discarded[s][c] + 1
            if self._known[s][c]:
                self._known[s][c] = self._known[s][c] - 1

    def _forget_laid(self, t: Turn) -> None:
        """Cards an opponent took from the pile and has since laid down are no longer in its hand."""
        opp = 1 - t.side
        melds = t.melds[opp]
        seen = self._table_melds[opp]  # the readings of the last call (a meld is immutable: its cards)
        # what the opponents laid since: the cards of the melds that are not the very same readings
        # as then, less those readings' cards
        laid: dict[int, int] = {}
        for i in range(max(len(melds), len(seen))):
            if i < len(melds) and i < len(seen) and melds[i] is seen[i]:
                continue
            if i < len(melds):
                for c in melds[i].cards:
                    laid[c] = laid.get(c, 0) + 1
            if i < len(seen):
                for c in seen[i].cards:
                    laid[c] = laid.get(c, 0) - 1
        if not laid:
            return
        self._table_melds[opp] = melds[:]
        for c, grew in laid.items():
            s = opp
            while grew > 0 and s < t.players:
                if self._known[s][c]:
                    self._known[s][c] = self._known[s][c] - 1
                    grew -= 1
                else:
                    s += 2

    # --- reading -------------------------------------------------------------------------------------
    def _read(self, view: Mapping[str, Any], pile: list[int]) -> Turn:
        seat = int(view["seat"])
        players = int(view["players"])
        side = seat & 1
        opp = 1 - side
        hand = hand_counts(view)
        melds = melds_of(view)
        if not self.groups:
            self.groups = any(not m.is_sequence for ms in melds for m in ms)
        taken: list[bool] = view["mortos_taken"]
        in_stock: list[bool] = view["mortos_in_stock"]
        sizes: list[int] = view["hand_sizes"]
        clean_needed = self.clean_needed
        morto_available = not taken[side] and not in_stock[side]
        has_clean = any(m.size >= CANASTRA and m.wild < 0 for m in melds[side])
        may_go_out = not morto_available and (has_clean or (
            not clean_needed and any(m.size >= CANASTRA for m in melds[side])))
        rules = self.rules
        stock = int(view["stock_count"])
        if rules.stock_out == "morto_then_end":
            stock += MORTO_SIZE * ((not taken[0] and not in_stock[0]) + (not taken[1] and not in_stock[1]))
        opp_free = bool(taken[opp] or in_stock[opp])
        opp_ready = False
        opp_close = False
        if opp_free:
            opp_ready = any(m.size >= CANASTRA and (m.wild < 0 or not clean_needed) for m in melds[opp])
            near = opp_ready or any(m.size >= self.close_meld and (m.wild < 0 or not clean_needed)
                                    for m in melds[opp])
            opp_close = near and min(sizes[s] for s in range(opp, players, 2)) <= self.close_hand
        want_out = False
        if may_go_out:
            score: list[dict[str, int]] = view["score"]
            avg = 7  # a card left in a hand costs about this much
            mine = score[side]["total"] + rules.going_out_bonus - avg * sum(
                sizes[s] for s in range(side, players, 2) if s != seat)
            theirs = score[opp]["total"] - avg * sum(sizes[s] for s in range(opp, players, 2))
            if not opp_free:
                theirs -= rules.morto_penalty
            # ahead: go out; behind, in a match to a target, go out before opponents about to (points
            # count); in a one-hand match only the win counts: play on
            want_out = mine > theirs or (opp_close and rules.target > 0 and self.out_when_pressed)
        wilds = hand[JOKER] + hand[1] + hand[14] + hand[27] + hand[40]
        return Turn(seat, side, players, hand, int(sizes[seat]), wilds, melds, pile, morto_available,
                    may_go_out, has_clean, want_out, stock <= 2 * players or opp_close, opp_ready,
                    (seat + 1) % players)

    def _stage(self, t: Turn) -> str:
        if t.pressed:
            return "pressed"
        if t.morto_available:
            return "morto_clean" if self.clean_needed else "morto"
        return "out" if t.may_go_out else "build"

    # --- the Bot interface ---------------------------------------------------------------------------
    def choose(self, view: Mapping[str, Any], legal: list[Action]) -> Action:
        pile = pile_codes(view)
        if view["phase"] == "draw":
            self._observe(view, pile)
            take = next((a for a in legal if isinstance(a, TakePile)), None)
            if take is None or self._stale_turns >= self.max_stale_turns:
                return DRAW if DRAW in legal else legal[0]
            return take if self._pile_gain(self._read(view, pile)) > 0 else DRAW
        if len(legal) == 1:
            action = legal[0]
            if isinstance(action, Discard):
                self._pile_after_mine = [*pile, action.card]
            return action
        t = self._read(view, pile)
        best: Action | None = None
        best_score = 0.0
        discards: list[Discard] = []
        for a in legal:
            if isinstance(a, Discard):
                discards.append(a)
            elif isinstance(a, (MeldCards, AddCards)):
                s = self._play_score(t, a)
                if best is None or s > best_score:
                    best, best_score = a, s
        if best is not None and (best_score > 0 or not discards):
            return best
        return self._pick_discard(t, discards)

    def choose_discard(self, view: Mapping[str, Any], legal: list[Action]) -> Discard:
        discards = [a for a in legal if isinstance(a, Discard)]
        if not discards:
            raise ValueError("choose_discard needs legal discards")
        return self._pick_discard(self._read(view, pile_codes(view)), discards)

    # --- taking the pile -----------------------------------------------------------------------------
    def _pile_gain(self, t: Turn) -> float:
        mine = t.melds[t.side]
        base = plan_naturals(t.hand, mine, self.groups, self.values)
        both = t.hand[:]
        wilds = 0
        for c in t.pile:
            both[c] = both[c] + 1
            wilds += is_wild_card(c)
        after = plan_naturals(both, mine, self.groups, self.values)
        laid = after.count - base.count
        bar, dead_cost, link_worth, small_hand = self.pile_params[self._stage(t)]
        links = 0
        if link_worth:
            slots = suit_slots(both)
            for c in t.pile:
                if not is_wild_card(c) and after.used[c] < both[c] and self._closeness(both, slots, c, True) > 0:
                    links += 1
        rules = self.rules
        gain = (after.value - base.value) + self.pile_per_laid * laid + self.pile_wild * wilds + link_worth * links
        gain += small_hand * max(0, 6 - t.hand_size)
        gain += (after.canastras - base.canastras) * rules.bonus_dirty
        gain += (after.clean_canastras - base.clean_canastras) * (rules.bonus_clean - rules.bonus_dirty)
        # the hand's growth once what can be laid is laid (the pile's wilds and links are no dead weight)
        dead = max(0, len(t.pile) - laid - wilds - links)
        return gain - dead * dead_cost - bar

    # --- melds and additions ----------------------------------------------------------------------------
    def _emptiable(self, t: Turn) -> bool:
        """Whether the hand can (we estimate) be emptied this turn, all its wilds spent, but one card."""
        if t.emptiable < 0:
            mine = t.melds[t.side]
            plan = plan_naturals(t.hand, mine, self.groups, self.values)
            left = t.hand_size - plan.count
            spare = t.wilds - sum(plan.used[w] for w in (JOKER, 1, 14, 27, 40))
            # each spare wild can still go onto a meld of the side that holds none
            left -= min(spare, sum(1 for m in mine if m.wild < 0))
            t.emptiable = 1 if left <= 1 else 0
        return t.emptiable == 1

    def _play_score(self, t: Turn, a: MeldCards | AddCards) -> float:
        cards = a.cards
        k = len(cards)
        values = self.values
        if isinstance(a, AddCards):
            m = t.melds[t.side][a.meld]
            before, had_wild, seq, suit = m.size, m.wild >= 0, m.is_sequence, m.suit
            low = bool(m.mask & 0b1010)  # the meld holds the ace or the 3 of its suit
            group_of_twos = not seq and m.rank == 2
        else:
            before, had_wild = 0, False
            naturals = [c for c in cards if not is_wild_card(c)]
            seq = not naturals or any(c % 13 != naturals[0] % 13 for c in naturals)
            if not naturals and self.groups:
                seq = False
            suit = naturals[0] // 13 if naturals else -1
            low = False
            group_of_twos = not naturals
        if seq and not low:
            low = any(c // 13 == suit and c % 13 in (0, 2) for c in cards)
        wilds = 0  # wild cards spent (a 2 laid in a group of 2s is spent too: no longer a wild in hand)
        dirtying = 0  # of which standing as the meld's wild
        natural_two = False
        natural_value = 0
        for c in cards:
            if c == JOKER:
                wilds += 1
                dirtying += 1
            elif c % 13 == 1:
                if seq and c // 13 == suit and low and not natural_two:
                    natural_two = True  # a 2 in its own place beside the ace or the 3
                    natural_value += values[c]
                else:
                    wilds += 1
                    dirtying += not group_of_twos
            else:
                natural_value += values[c]
        after = before + k
        dirty = had_wild or dirtying > 0
        remaining = t.hand_size - k
        rules = self.rules
        score = 10.0 * (k - wilds) + 0.5 * natural_value + self.length_weight * after
        completes = before < CANASTRA <= after
        if completes:
            score += rules.bonus_dirty if dirty else rules.bonus_clean
            if not dirty and self.clean_needed and not t.has_clean:
                score += 100.0
        if wilds:
            batida = (remaining <= 1 and t.morto_available) or (remaining == 0 and t.may_go_out)
            dirty_ok = not self.clean_needed or t.has_clean
            if t.pressed or batida or ((t.morto_available or (t.may_go_out and t.want_out))
                                       and self._emptiable(t)):
                score -= self.wild_spent_well * wilds
            elif t.wilds - wilds >= self.keep_wilds and (dirty_ok or had_wild):
                score -= self.wild_surplus * wilds
            elif completes and (dirty_ok or before == CANASTRA - 1):
                score -= self.wild_spent_well * wilds
            else:
                score -= self.wild_spent * wilds
            if dirtying and not had_wild and before >= 4 and self.clean_needed and not t.has_clean \
                    and not t.pressed:
                score -= self.dirtying
        if remaining == 0:
            if t.morto_available:
                score += self.direct_batida
            else:
                score += 600.0 if t.want_out else -1000.0
        elif remaining == 1:
            if t.morto_available:
                score += self.indirect_batida
            elif t.may_go_out or completes:
                score += 300.0 if t.want_out else -1000.0
        return score

    # --- discards -------------------------------------------------------------------------------------
    def _pick_discard(self, t: Turn, discards: list[Discard]) -> Discard:
        best = discards[0]
        if len(discards) > 1:
            if self._known_any:
                self._forget_laid(t)
            mine = 0  # bit c: card c fits the side's melds
            for m in t.melds[t.side]:
                mine |= m.fits_bits
            # what each card would give the opponents' melds, with the pile they would take with it
            feeds = [0.0] * NCODES
            pile_counts: list[int] | None = None
            for m in t.melds[1 - t.side]:
                fits = m.fits_bits
                if t.pile and m.is_sequence:
                    if pile_counts is None:
                        pile_counts = [0] * NCODES
                        for p in t.pile:
                            pile_counts[p] = pile_counts[p] + 1
                    fits = m.fits_bits_with(pile_counts)
                weight = self.feed_danger
                if m.size >= CANASTRA - 2 and not t.opp_ready:
                    weight *= self.feed_near_canastra  # it may give them the canastra they need
                while fits:
                    low = fits & -fits
                    c = low.bit_length() - 1
                    fits ^= low
                    if feeds[c] < weight:
                        feeds[c] = weight
            slots = suit_slots(t.hand)
            known = self._known[t.next_seat]
            known_slots = suit_slots(known) if self._known_any else _NO_SLOTS
            tie = self.rng.random
            best_cost = 0.0
            for i in range(len(discards)):
                d = discards[i]
                cost = self._discard_cost(t, d.card, mine, feeds, slots, known, known_slots) + tie() * 0.01
                if i == 0 or cost < best_cost:
                    best, best_cost = d, cost
        self._pile_after_mine = [*t.pile, best.card]
        return best

    def _discard_cost(self, t: Turn, c: int, mine: int, feeds: list[float], slots: list[int], known: list[int],
                      known_slots: list[int]) -> float:
        """How much discarding ``c`` hurts: its use to us, plus its use to the next opponent.

        ``mine``: bit c set where card c fits the side's melds; ``feeds``: per card, how much it would
        give the opponents' melds; ``slots`` and ``known_slots``: ``suit_slots`` of the hand and of the
        cards the next seat is known to hold (``known``).
        """
        if t.hand_size == 1:
            return 0.0  # going out, or the indirect batida
        if is_wild_card(c):
            return 500.0
        # a card kept costs its value if the hand ends
        cost = -self.shed_value * self.values[c] + self._closeness(t.hand, slots, c, True)
        if mine >> c & 1:
            cost += 120.0
        danger = feeds[c]
        if self._known_any:
            danger += 0.6 * self._closeness(known, known_slots, c, False)
        if self._discarded[t.next_seat][c]:
            danger -= 15.0
        return cost + danger * (1.0 + len(t.pile) / 4.0)

    def _closeness(self, counts: list[int], slots: list[int], c: int, own: bool) -> float:
        """How well ``c`` connects to the cards in ``counts`` (``slots``: their ``suit_slots``):
        neighbours in its suit, its rank."""
        r = c % 13
        held = slots[c // 13]
        # each held neighbour one slot away weighs 25, two slots away 10 (sums of whole numbers: exact
        # in any order); an ace stands at both ends, slots 1 and 14, and no slot outside 1..14 is held
        if r == 0:
            near = (held >> 2 & 1) + (held >> 13 & 1)
            far = (held >> 3 & 1) + (held >> 12 & 1)
        else:
            slot = r + 1
            near = (held >> (slot - 1) & 1) + (held >> (slot + 1) & 1)
            far = (held >> (slot - 2) & 1) + (held >> (slot + 2) & 1)
        score = 25.0 * near + 10.0 * far
        if self.groups and r != 1:
            same = counts[r] + counts[13 + r] + counts[26 + r] + counts[39 + r] - (1 if own else 0)
            if same > 0:
                score += 18.0 * same
        return score


#: ``suit_slots`` of no cards
_NO_SLOTS: Final[list[int]] = [0, 0, 0, 0]


def suit_slots(counts: list[int]) -> list[int]:
    """``held_slots`` of each suit."""
    return [held_slots(counts, 0), held_slots(counts, 1), held_slots(counts, 2), held_slots(counts, 3)]


__all__ = ["TUNED_KNOBS", "HeuristicBot", "Turn"]
