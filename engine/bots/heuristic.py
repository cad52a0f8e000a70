"""The heuristic player: a greedy, rule-aware policy that reads only its seat's view.

Each decision scores the legal actions of the moment with a few Buraco rules of thumb:

- **Draw or take the pile**: take it when what it lets the hand lay down at once (natural cards
  added to the side's melds or forming new ones, canastras completed, wilds gained) outweighs the
  dead cards it brings, which cost more as the stock runs out (``_pile_gain``).
- **Meld and add**: lay down natural cards, longest melds and canastras first; keep wilds for
  canastras (a wild is spent only to complete a canastra, to empty the hand for the morto or to go
  out, or when the hand is about to end); do not dirty a meld that could still become the clean
  canastra the side needs; empty the hand for the morto as soon as possible (direct batida first).
- **Go out** once the side may, when ahead on the table or when the opponents are about to go out
  or the stock is ending; otherwise keep two cards and play on.
- **Discard** what is least useful to the hand and least useful to the next opponent: never a wild
  while another card is legal, not a card that fits the opponents' melds (a closed pile's top card
  lets them take it all), not one close to cards they took from the pile; cards they discarded are
  safe.

The bot remembers, within a hand, what it saw the others take from the pile and discard (all of
it public); it forgets everything when a new hand starts. Ties are broken by a seeded RNG, so a
bot is deterministic for its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from engine.actions import Action, AddCards, Discard, Draw, MeldCards, TakePile
from engine.bots.planning import plan_naturals
from engine.bots.reading import CODE, TableMeld, codes, is_wild_card, melds_of
from engine.cards import JOKER, NCODES
from engine.melds import card_values
from engine.rules import CANASTRA, MORTO_SIZE, Ruleset


@dataclass(slots=True)
class Turn:
    """One decision's reading of the view."""

    seat: int
    side: int
    players: int
    hand: list[int]  # counts per card code
    hand_size: int
    melds: list[list[TableMeld]]
    pile: list[int]
    morto_available: bool  # the side still has its morto to take
    may_go_out: bool  # the side has no morto left and the required canastra
    has_clean: bool  # the side has a clean canastra
    want_out: bool
    endgame: bool  # the hand is about to end: hand cards will soon count against the side
    stock_count: int  # cards in the stock now (not counting mortos that may become stock)
    wilds: int  # wilds (2s and jokers) in hand
    lead: int  # the side's table points minus the opponents'
    opp_next_size: int  # cards in the next seat's hand
    opp_ready: bool  # the opponents have no morto to take and the canastra to go out
    emptiable: bool = False  # the hand can (we estimate) be emptied this turn, wilds included


class HeuristicBot:
    name = "heuristic"
    # tuning knobs (class attributes so experiments can vary them)
    # taking the pile, per stage of the hand (``_stage``): the bar a pile must clear (what a card
    # from the stock would have brought), the cost of each dead card it brings, the worth of a card
    # that connects to the hand without being laid at once, and of each card the hand lacks below 6
    pile_params: ClassVar[dict[str, tuple[float, float, float, float]]] = {
        "morto": (10.0, 3.0, 0.0, 0.0),
        "morto_clean": (0.0, 0.0, 10.0, 8.0),  # going out needs a clean canastra: material first
        "build": (0.0, 0.0, 10.0, 8.0),
        "out": (10.0, 12.0, 0.0, 0.0),
        "pressed": (60.0, 30.0, 0.0, 0.0),
    }
    pile_per_laid = 8.0
    pile_big_hand = 100  # above this many cards in hand, each dead card of a pile costs more
    pile_dead_per_card = 2.0
    pile_wild = 25.0
    wild_spent = 90.0  # the cost of spending a wild where it does not pay
    wild_spent_sujo = 90.0  # the same when any canastra lets a side go out
    wild_spent_well = 4.0
    direct_batida = 400.0
    indirect_batida = 150.0
    max_stale_turns = 2
    pressed_shed = 0.3  # how much a card's value argues for discarding it when the hand may end soon
    close_meld = 6  # ... or when they have a meld this long (0: only with the canastra they need)
    close_hand = 4  # an opponent who may go out with this many cards or fewer is about to
    plan_wilds = True  # the pile estimate lets wilds join close pairs
    feed_danger = 60.0  # discarding a card that fits an opponent meld
    feed_near_canastra = 3.0  # ... one that is two cards or less from a canastra, when they lack one
    live_cards = 0.0  # weight of the unseen cards that could still combine with a card we hold
    hidden_danger = 0.0  # weight of the cards the next opponent may hold that meld with a discard
    morto_race_stock = 0  # with this few stock cards left, race for the morto before it goes to the stock
    race_lead = 10_000  # ahead by this much on the table, stop gathering cards and race to go out
    keep_wilds = 2  # wilds kept in hand for canastras; more are spent more freely
    wild_surplus = 12.0
    wild_going_out = 90.0  # spending a wild to shed cards when the side may go out and wants to
    dirtying = 70.0  # the cost of putting a wild in a meld that could become the clean canastra

    def __init__(self, seed: int | str = 0, rules: Ruleset | None = None) -> None:
        self.rng = random.Random(seed)
        self.rules = rules if rules is not None else Ruleset()
        self.values = card_values(self.rules)
        # Without the ruleset, learn what the table shows (groups seen, a closed pile).
        self.groups = rules.groups if rules is not None else False
        self.clean_needed = self.rules.clean_to_go_out
        self._hand_key: tuple[int, int] | None = None
        self._reset()

    # --- memory within a hand ---------------------------------------------------------------------
    def _reset(self) -> None:
        self._pile_after_mine: list[int] | None = None
        self._stock_seen = -1  # the stock at this seat's previous turn
        self._stale_turns = 0  # own turns in a row at which the stock had not shrunk since the one before
        self._known: list[list[int]] = [[0] * NCODES for _ in range(4)]  # taken from the pile, per seat
        self._discarded: list[list[int]] = [[0] * NCODES for _ in range(4)]  # discarded, per seat
        self._table: list[list[int]] = [[0] * NCODES, [0] * NCODES]  # cards on the table, per side

    def _sync(self, view: dict[str, Any], melds: list[list[TableMeld]]) -> None:
        key = (int(view["hand_number"]), int(view["dealer"]))
        if key != self._hand_key:
            self._hand_key = key
            self._reset()
        if not self.groups:
            self.groups = any(not m.is_sequence for side in melds for m in side)
        if view["phase"] != "draw":
            return
        seat = int(view["seat"])
        players = int(view["players"])
        pile = codes(view["discard"])
        before = self._pile_after_mine
        if before is not None:
            n = len(before)
            if pile[:n] == before:
                new, first = pile[n:], (seat + 1) % players
            else:  # someone took the pile: it held what we left; the taker discarded pile[0]
                first = (seat - len(pile)) % players
                for c in before:
                    self._known[first][c] += 1
                new = pile
            for i, c in enumerate(new):
                s = (first + i) % players
                self._discarded[s][c] += 1
                if self._known[s][c]:
                    self._known[s][c] -= 1
        for side in (0, 1):
            now = [0] * NCODES
            for m in view["melds"][side]:
                for c in m["cards"]:
                    now[CODE[c]] += 1
            old = self._table[side]
            for c in range(NCODES):
                grew = now[c] - old[c]
                s = side
                while grew > 0 and s < players:
                    if self._known[s][c]:
                        self._known[s][c] -= 1
                        grew -= 1
                    else:
                        s += 2
            self._table[side] = now

    # --- reading -------------------------------------------------------------------------------------
    def _turn(self, view: dict[str, Any], melds: list[list[TableMeld]]) -> Turn:
        seat = int(view["seat"])
        players = int(view["players"])
        side = seat & 1
        hand = [0] * NCODES
        for c in view["hand"]:
            hand[CODE[c]] += 1
        taken = view["mortos_taken"]
        in_stock = view["mortos_in_stock"]
        morto_available = not taken[side] and not in_stock[side]
        mine = melds[side]
        has_clean = any(m.is_canastra and m.is_clean for m in mine)
        has_any = any(m.is_canastra for m in mine)
        may_go_out = not morto_available and (has_clean or (has_any and not self.clean_needed))
        stock = int(view["stock_count"])
        rules = self.rules
        if rules.stock_out == "morto_then_end":
            stock += MORTO_SIZE * sum(1 for s in (0, 1) if not taken[s] and not in_stock[s])
        endgame = stock <= 2 * players
        # the opponents' threat: a seat of theirs with few cards whose side may go out
        opp = 1 - side
        opp_melds = melds[opp]
        opp_free = taken[opp] or in_stock[opp]
        opp_canastra = any(m.is_canastra and (m.is_clean or not self.clean_needed) for m in opp_melds)
        sizes = view["hand_sizes"]
        opp_near = opp_canastra or (self.close_meld > 0 and any(
            m.size >= self.close_meld and (m.is_clean or not self.clean_needed) for m in opp_melds))
        opp_close = opp_free and opp_near and min(sizes[s] for s in range(opp, players, 2)) <= self.close_hand
        score = view["score"]
        avg = 7
        mine_est = score[side]["total"] + rules.going_out_bonus - sum(
            sizes[s] * avg for s in range(side, players, 2) if s != seat)
        theirs_est = score[opp]["total"] - sum(sizes[s] * avg for s in range(opp, players, 2))
        if not opp_free:
            theirs_est -= rules.morto_penalty
        want_out = mine_est > theirs_est
        wilds = hand[JOKER] + sum(hand[s * 13 + 1] for s in range(4))
        return Turn(seat, side, players, hand, int(sizes[seat]), melds, codes(view["discard"]), morto_available,
                    may_go_out, has_clean, want_out, endgame or opp_close, int(view["stock_count"]), wilds,
                    score[side]["total"] - score[opp]["total"], int(sizes[(seat + 1) % players]),
                    opp_free and opp_canastra)

    # --- the Bot interface ---------------------------------------------------------------------------
    def choose(self, view: dict[str, Any], legal: list[Action]) -> Action:
        melds = melds_of(view)
        self._sync(view, melds)
        if len(legal) == 1:
            action = legal[0]
            if isinstance(action, Discard):
                self._discarding(view, action.card)
            return action
        t = self._turn(view, melds)
        if view["phase"] == "play" and (t.morto_available or (t.may_go_out and t.want_out)):
            t.emptiable = self._cards_left_at_best(t) <= 1  # the last one is discarded
        if view["phase"] == "draw":
            stock = int(view["stock_count"])
            self._stale_turns = self._stale_turns + 1 if 0 <= self._stock_seen <= stock else 0
            self._stock_seen = stock
            take = next((a for a in legal if isinstance(a, TakePile)), None)
            # Never take the pile turn after turn while nobody draws: the stock must run down so
            # that the hand ends even between two bots that would rather pass the pile back and forth.
            if take is not None and self._stale_turns < self.max_stale_turns and self._pile_gain(t) > 0:
                return take
            return next(a for a in legal if isinstance(a, Draw))
        best: Action | None = None
        best_score = 0.0
        discards: list[Discard] = []
        for a in legal:
            if isinstance(a, Discard):
                discards.append(a)
                continue
            if not isinstance(a, MeldCards | AddCards):
                continue
            s = self._play_score(t, a)
            if best is None or s > best_score:
                best, best_score = a, s
        if best is not None and (best_score > 0 or not discards):
            return best
        return self._pick_discard(view, t, discards)

    def choose_discard(self, view: dict[str, Any], legal: list[Action]) -> Discard:
        melds = melds_of(view)
        self._sync(view, melds)
        discards = [a for a in legal if isinstance(a, Discard)]
        if not discards:
            raise ValueError("choose_discard needs legal discards")
        return self._pick_discard(view, self._turn(view, melds), discards)

    # --- taking the pile -----------------------------------------------------------------------------
    def _pile_gain(self, t: Turn) -> float:
        mine = t.melds[t.side]
        base = plan_naturals(t.hand, mine, self.groups, self.values, self.plan_wilds)
        both = t.hand[:]
        wilds = 0
        for c in t.pile:
            both[c] += 1
            wilds += is_wild_card(c)
        after = plan_naturals(both, mine, self.groups, self.values, self.plan_wilds)
        laid = after.count - base.count
        bar, dead_cost, link_worth, small_hand = self.pile_params[self._stage(t)]
        links = 0
        if link_worth:
            for c in t.pile:
                if not is_wild_card(c) and after.used[c] < both[c] and self._closeness(both, c, own=True) > 0:
                    links += 1
        rules = self.rules
        gain = (after.value - base.value) + self.pile_per_laid * laid + self.pile_wild * wilds + link_worth * links
        gain += small_hand * max(0, 6 - t.hand_size)
        gain += (after.canastras - base.canastras) * rules.bonus_dirty
        gain += (after.clean_canastras - base.clean_canastras) * (rules.bonus_clean - rules.bonus_dirty)
        dead = max(0, len(t.pile) - laid - wilds - links)
        dead_cost += self.pile_dead_per_card * max(0, t.hand_size - self.pile_big_hand)
        return gain - dead * dead_cost - bar

    def _stage(self, t: Turn) -> str:
        """``pressed`` (the hand may end soon), ``morto`` (to take), ``build`` (the canastra to go out), ``out``."""
        if t.endgame:
            return "pressed"
        if t.morto_available:
            gather = self.clean_needed and t.lead < self.race_lead and t.stock_count > self.morto_race_stock
            return "morto_clean" if gather else "morto"
        if t.may_go_out:
            return "out"
        return "build" if t.lead < self.race_lead else "morto"

    # --- melds and additions ----------------------------------------------------------------------------
    def _cards_left_at_best(self, t: Turn) -> int:
        """An estimate of the fewest cards the hand can keep this turn, spending every wild.

        Natural cards go where ``plan_naturals`` lays them; two leftover cards that are close
        (same suit within two ranks, or same rank where groups are allowed) make a meld with a wild;
        each other wild goes onto a meld of the side that has none yet.
        """
        mine = t.melds[t.side]
        plan = plan_naturals(t.hand, mine, self.groups, self.values)
        left: list[int] = []
        for c in range(JOKER):
            if c % 13 != 1:
                left.extend([c] * (t.hand[c] - plan.used[c]))
        wilds = t.wilds
        free = sum(1 for m in mine if m.wild < 0)
        singles = 0
        i = 0
        while i < len(left):
            c = left[i]
            if wilds and i + 1 < len(left):
                d = left[i + 1]
                close = (c // 13 == d // 13 and 0 < d - c <= 2) or (self.groups and c % 13 == d % 13)
                if close:
                    wilds -= 1
                    free += 1
                    i += 2
                    continue
            singles += 1
            i += 1
        return singles + max(0, wilds - free)

    def _play_score(self, t: Turn, a: MeldCards | AddCards) -> float:
        cards = a.cards
        k = len(cards)
        values = self.values
        if isinstance(a, AddCards):
            m = t.melds[t.side][a.meld]
            before, had_wild, seq = m.size, m.wild >= 0, m.is_sequence
            suit = m.suit
            low_slots = m.mask & 0b1010  # the ace or the 3 of the suit: a 2 of the suit would be natural
            group_of_twos = not seq and m.rank == 2
        else:
            before, had_wild = 0, False
            naturals = [c for c in cards if not is_wild_card(c)]
            seq = not naturals or len({c % 13 for c in naturals}) > 1
            if not naturals and self.groups:
                seq = False
            suit = naturals[0] // 13 if naturals else -1
            low_slots = 0
            group_of_twos = not naturals
        if seq:
            for c in cards:
                if c // 13 == suit and c % 13 in (0, 2):
                    low_slots = 1
        wilds = 0  # wild cards spent (a 2 in a group of 2s is spent too: it is no longer a wild in hand)
        dirtying = 0  # of which standing as the meld's wild
        natural_two_seen = False
        natural_value = 0
        for c in cards:
            if c == JOKER:
                wilds += 1
                dirtying += 1
            elif c % 13 == 1:
                if seq and c // 13 == suit and low_slots and not natural_two_seen:
                    natural_two_seen = True
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
        score = 10.0 * (k - wilds) + 0.5 * natural_value + 2.0 * after
        completes = before < CANASTRA <= after
        if completes:
            score += rules.bonus_dirty if dirty else rules.bonus_clean
            if not dirty and self.clean_needed and not t.has_clean:
                score += 100.0
        if wilds:
            batida = (remaining <= 1 and t.morto_available) or t.emptiable
            dirty_ok = not self.clean_needed or t.has_clean
            surplus = t.wilds - wilds >= self.keep_wilds
            if t.endgame or batida or (remaining == 0 and t.may_go_out):
                score -= self.wild_spent_well * wilds
            elif t.may_go_out and t.want_out:
                score -= self.wild_going_out * wilds
            elif surplus and (dirty_ok or had_wild):
                score -= self.wild_surplus * wilds
            elif completes and (dirty_ok or before == CANASTRA - 1):
                score -= self.wild_spent_well * wilds
            else:
                score -= (self.wild_spent if self.clean_needed else self.wild_spent_sujo) * wilds
            if dirtying and not had_wild and before >= 4 and self.clean_needed and not t.has_clean \
                    and not t.endgame:
                score -= self.dirtying
        if remaining == 0:
            if t.morto_available:
                score += self.direct_batida  # the morto comes at once and the turn goes on
            else:
                score += 600.0 if t.want_out else -1000.0
        elif remaining == 1:
            if t.morto_available:
                score += self.indirect_batida  # the last card's discard takes the morto
            elif t.may_go_out or completes:
                score += 300.0 if t.want_out else -1000.0
        return score

    # --- discards -------------------------------------------------------------------------------------
    def _pick_discard(self, view: dict[str, Any], t: Turn, discards: list[Discard]) -> Discard:
        best: Discard | None = None
        best_cost = 0.0
        unseen: list[int] | None = None
        if self.hidden_danger or self.live_cards:
            # every copy this seat has not seen: in other hands, the stock or the mortos
            unseen = [2] * JOKER + [self.rules.jokers]
            for c in range(NCODES):
                unseen[c] -= t.hand[c]
            for c in t.pile:
                unseen[c] -= 1
            for side in t.melds:
                for m in side:
                    for c in m.cards:
                        unseen[c] -= 1
        for d in discards:
            cost = self._discard_cost(t, d.card, unseen) + self.rng.random() * 0.01
            if best is None or cost < best_cost:
                best, best_cost = d, cost
        assert best is not None, "no legal discard"
        self._discarding(view, best.card)
        return best

    def _discarding(self, view: dict[str, Any], card: int) -> None:
        self._pile_after_mine = [*codes(view["discard"]), card]

    def _discard_cost(self, t: Turn, c: int, unseen: list[int] | None = None) -> float:
        """How much discarding ``c`` hurts: its use to us plus its use to the next opponent."""
        hand = t.hand
        if t.hand_size == 1:
            # going out, or the indirect batida: it costs nothing more to decide
            return 0.0
        if is_wild_card(c):
            return 500.0
        cost = -(self.pressed_shed if t.endgame else 0.3) * self.values[c]
        for m in t.melds[t.side]:
            if m.accepts(c):
                cost += 120.0
                break
        cost += self._closeness(hand, c, own=True)
        if unseen is not None and self.live_cards:
            # a card whose partners are all in sight (on the table, in the pile) is dead: let it go first
            cost += self.live_cards * self._closeness(unseen, c, own=False) / 25.0
        # the next opponent
        nxt = (t.seat + 1) % t.players
        danger = 0.0
        pile_counts: list[int] | None = None
        for m in t.melds[1 - t.side]:
            if m.accepts(c):
                fed = True
            elif t.pile and m.is_sequence and m.suit == c // 13:
                if pile_counts is None:
                    pile_counts = [0] * NCODES
                    for p in t.pile:
                        pile_counts[p] += 1
                fed = m.accepts_with(c, pile_counts)
            else:
                fed = False
            if fed:
                weight = self.feed_danger
                if m.size >= CANASTRA - 2 and not t.opp_ready:
                    weight *= self.feed_near_canastra  # it may give them the canastra to go out
                danger = max(danger, weight)
        known = self._known[nxt]
        danger += 0.6 * self._closeness(known, c, own=False)
        if self._discarded[nxt][c]:
            danger -= 15.0
        if unseen is not None:
            # cards the next opponent may hold that would meld with it (the pile's top card decides
            # whether a closed pile can be taken)
            pool = sum(unseen)
            if pool > 0 and self.hidden_danger:
                danger += self.hidden_danger * t.opp_next_size / pool * self._closeness(unseen, c, own=False) / 25.0
        danger *= 1.0 + len(t.pile) / 4.0
        return cost + danger

    def _closeness(self, counts: list[int], c: int, own: bool) -> float:
        """How well ``c`` connects to the cards in ``counts`` (neighbours in its suit, its rank)."""
        if c == JOKER:
            return 0.0
        suit, rank = divmod(c, 13)
        rank += 1
        base = suit * 13
        score = 0.0
        slots = (1, 14) if rank == 1 else (rank,)
        for slot in slots:
            for delta, weight in ((1, 25.0), (2, 10.0)):
                for s in (slot - delta, slot + delta):
                    if 1 <= s <= 14:
                        code = base + (0 if s == 14 else s - 1)
                        if counts[code]:
                            score += weight
        if self.groups and rank != 2:
            same = sum(counts[s * 13 + rank - 1] for s in range(4)) - (1 if own else 0)
            score += 18.0 * max(0, same)
        return score


__all__ = ["HeuristicBot"]
