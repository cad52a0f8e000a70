"""The state of one hand ("mão"): the deal, the turn, every rule of play, and what each seat sees.

Why one module over the 600-line rule: it is one class, ``HandState``, whose methods share one
invariant: nothing changes until an action has been checked in full, every change goes through
``_do`` and bumps ``version``, which is what keeps the legal-action memo (``_legal``) and the views
valid. The checks are written against the transitions themselves: ``_may_take_pile`` applies the
take in place and undoes it field by field, ``_finishable_after`` plays the action on a clone with
``_do``, and ``apply`` trusts the plans that ``legal_actions`` memoised. Checks, transitions and the
memo must therefore be read and changed together. mypyc compiles the class as one native class
(its slots as struct fields, its methods called through its vtable); split into modules, the checks
on the hot paths of ``legal_actions`` and ``apply`` would reach into private fields from outside
the class. Scoring, the record and the snapshot (``to_json``/``from_json``) are short and read the
same fields.

``HandState`` follows OpenSpiel's ``State``: ``legal_actions()``, ``apply(action)``,
``is_terminal()``, ``returns()``, ``clone()``, and ``view(seat)`` for the per-player observation.
Applying an action validates it completely before changing anything, and returns the ``Event``s
it caused. ``MatchState`` (engine/match.py) strings hands together up to the target.
"""

from __future__ import annotations

from typing import Any, Final

from engine import movegen
from engine.actions import (
    DRAW,
    TAKE_PILE,
    Action,
    AddCards,
    Discard,
    Draw,
    MeldCards,
    TakePile,
    action_from_json,
)
from engine.cards import CARD_STR, NCODES, cards_of, format_many, is_wild_capable, to_str
from engine.deal import Deal
from engine.errors import IllegalActionError
from engine.events import Event, Facts
from engine.melds import Meld, card_values, extend_meld, make_meld
from engine.rules import CANASTRA, Ruleset
from engine.view import View

DRAW_PHASE: Final = "draw"
DISCARDS: Final = movegen.ALL_DISCARDS
PLAY_PHASE: Final = "play"
OVER: Final = "hand_over"


def side_of(seat: int) -> int:
    return seat & 1


# The layers of the events every action makes, from their facts (``engine.events.Event``): made
# when an event is read, from values taken when it happened.
def _drew(facts: Facts) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    _, seat, stock_count, card = facts
    return {"stock_count": stock_count}, {seat: {"card": CARD_STR[card]}}


def _took_pile(facts: Facts) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    return {"cards": format_many(facts[1])}, {}


def _discarded(facts: Facts) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    return {"card": CARD_STR[facts[1]]}, {}


def _melded(facts: Facts) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    _, side, index, meld, rules, wild_as = facts
    payload = {"side": side, "meld": index, **meld.to_json(rules)}
    if wild_as is not None:
        payload["wild_as"] = to_str(wild_as)
    return payload, {}


def _added(facts: Facts) -> tuple[dict[str, Any], dict[int, dict[str, Any]]]:
    _, side, index, cards, meld, rules = facts
    return {"side": side, "meld": index, "added": format_many(cards), **meld.to_json(rules)}, {}


class HandState:
    """One hand of Buraco. Seats ``0..players-1``; side 0 is seats 0 and 2, side 1 seats 1 and 3."""

    __slots__ = (
        "_legal",
        "_seat_plays",
        "counts",
        "deal",
        "dealer",
        "end_reason",
        "hand_number",
        "history",
        "lone",
        "match_totals",
        "melds",
        "morto_pending",
        "morto_taken",
        "morto_to_stock",
        "mortos",
        "must_meld",
        "phase",
        "pile",
        "players",
        "rules",
        "sizes",
        "stock",
        "to_act",
        "turns",
        "version",
        "went_out",
    )

    rules: Ruleset
    players: int
    deal: Deal
    dealer: int
    hand_number: int
    counts: list[list[int]]
    sizes: list[int]
    melds: list[list[Meld]]
    pile: list[int]
    stock: list[int]
    mortos: list[tuple[int, ...] | None]
    morto_taken: list[bool]
    morto_to_stock: list[bool]
    morto_pending: list[int]
    to_act: int
    phase: str
    must_meld: int
    lone: int
    went_out: int
    end_reason: str
    turns: int
    history: list[tuple[int, Action]]
    version: int
    match_totals: list[int]
    _legal: LegalMemo | None
    _seat_plays: list[movegen.SeatPlays | None]

    def __init__(self, rules: Ruleset, players: int, deal: Deal, dealer: int | None = None,
                 hand_number: int = 1, match_totals: list[int] | None = None) -> None:
        """``match_totals``: the sides' match totals before this hand (public; ``[0, 0]`` for a hand
        played alone), which every seat's view shows."""
        if players not in (2, 4):
            raise ValueError("Buraco is played by 2 or 4 players")
        if len(deal.hands) != players:
            raise ValueError("the deal has a hand per seat")
        self.rules = rules
        self.players = players
        self.deal = deal
        self.dealer = players - 1 if dealer is None else dealer
        if not 0 <= self.dealer < players:
            raise ValueError(f"dealer must be a seat 0..{players - 1}")
        self.hand_number = hand_number
        self.match_totals = [0, 0] if match_totals is None else [int(match_totals[0]), int(match_totals[1])]
        self.counts = []
        for hand in deal.hands:
            counts = [0] * NCODES
            for c in hand:
                counts[c] = counts[c] + 1
            self.counts.append(counts)
        self.sizes = [len(h) for h in deal.hands]
        self.melds = [[], []]
        self.pile = []
        self.stock = list(reversed(deal.stock))  # the next card to draw is at the end
        self.mortos = [deal.mortos[0], deal.mortos[1]]
        self.morto_taken = [False, False]
        self.morto_to_stock = [False, False]
        self.morto_pending = [-1, -1]  # seat that took it by discarding and has not played since
        self.to_act = (self.dealer + 1) % players
        self.phase = DRAW_PHASE
        self.must_meld = -1  # closed pile: the card that must be melded at once
        self.lone = -1  # a one-card pile taken this turn: that card may not be discarded
        self.went_out = -1
        self.end_reason = ""
        self.turns = 1
        self.history = []
        self.version = 0  # counts the changes; a view (and the legal-action memo) is valid for one version
        self._legal = None
        self._seat_plays = [None] * players  # per seat, its legal plays kept up to date (movegen.SeatPlays)

    # --- OpenSpiel-style basics ------------------------------------------------------------------
    def current_player(self) -> int:
        return -1 if self.phase == OVER else self.to_act

    def is_terminal(self) -> bool:
        return self.phase == OVER

    def returns(self) -> list[int]:
        """Each seat's side total for the hand (final once terminal)."""
        totals = [s["total"] for s in self.score()]
        return [totals[side_of(seat)] for seat in range(self.players)]

    def clone(self) -> HandState:
        other = HandState(self.rules, self.players, self.deal, self.dealer, self.hand_number, self.match_totals)
        other.counts = [c[:] for c in self.counts]
        other.sizes = self.sizes[:]
        other.melds = [self.melds[0][:], self.melds[1][:]]
        other.pile = self.pile[:]
        other.stock = self.stock[:]
        other.mortos = self.mortos[:]
        other.morto_taken = self.morto_taken[:]
        other.morto_to_stock = self.morto_to_stock[:]
        other.morto_pending = self.morto_pending[:]
        other.to_act = self.to_act
        other.phase = self.phase
        other.must_meld = self.must_meld
        other.lone = self.lone
        other.went_out = self.went_out
        other.end_reason = self.end_reason
        other.turns = self.turns
        other.history = self.history[:]
        other.version = self.version
        return other

    # --- facts the rules ask about ------------------------------------------------------------------
    def hand_of(self, seat: int) -> list[int]:
        return cards_of(self.counts[seat])

    def morto_available(self, side: int) -> bool:
        return self.mortos[side] is not None

    def has_canastra_to_go_out(self, side: int, melds: list[Meld] | None = None) -> bool:
        clean = self.rules.clean_to_go_out
        for m in self.melds[side] if melds is None else melds:
            if len(m.cards) >= CANASTRA and (m.wild < 0 or not clean):
                return True
        return False

    def morto_allows_going_out(self, side: int) -> bool:
        """The side's morto no longer stands in the way of going out: the side took it, or it became
        the stock; with ``go_out_after_both_mortos``, a side that never took its morto also waits
        until no morto is left on the table."""
        if self.mortos[side] is not None:
            return False
        return self.morto_taken[side] or not self.rules.go_out_after_both_mortos or self.mortos[1 - side] is None

    def may_go_out(self, side: int, melds: list[Meld] | None = None) -> bool:
        """The side's morto allows going out (``morto_allows_going_out``) and the side holds the
        canastra the ruleset requires (in ``melds`` when given, else on the table)."""
        return self.morto_allows_going_out(side) and self.has_canastra_to_go_out(side, melds)

    # --- legal actions -------------------------------------------------------------------------------
    def legal_actions(self) -> list[Action]:
        """Every legal action now, without duplicates, in a stable order."""
        cached = self._legal
        if cached is not None and cached.version == self.version:
            return list(cached.actions)
        actions: list[Action] = []
        routed: movegen.PlanSlots | None = None
        whole: movegen.SeatPlays | None = None
        plans: dict[Action, Meld | None] | None = None
        if self.phase == DRAW_PHASE:
            actions.append(DRAW)
            if self.pile and self._may_take_pile():
                actions.append(TAKE_PILE)
        elif self.phase == PLAY_PHASE:
            seat = self.to_act
            counts = self.counts[seat]
            if self.must_meld < 0 and self.lone < 0:
                # the usual case: the plays kept up to date move by move (movegen.legal_plays, the same
                # list as movegen.plays), then every card held as a discard (a discard always is legal
                # with two cards or more)
                seat_plays = self._seat_plays[seat]
                if seat_plays is None:
                    seat_plays = movegen.SeatPlays(movegen.ruleset_number(self.rules))
                    self._seat_plays[seat] = seat_plays
                routed = movegen.legal_plays(self, seat_plays, actions, self.rules, counts, self.sizes[seat],
                                             self.melds[seat & 1])
                if routed is None:
                    whole = seat_plays
                if self.sizes[seat] > 1:
                    actions.extend(seat_plays.discards)  # every card held, in card order
                else:
                    actions.extend([DISCARDS[code] for code in range(NCODES)
                                    if counts[code] and self._discard_problem(code) is None])
            else:
                plans = {}
                actions.extend(movegen.plays(self, plans=plans))
                if self.must_meld < 0:
                    if self.sizes[seat] > 1 and self.lone < 0:
                        actions.extend([DISCARDS[code] for code in range(NCODES) if counts[code]])
                    else:
                        actions.extend([DISCARDS[code] for code in range(NCODES)
                                        if counts[code] and self._discard_problem(code) is None])
        # remembered for this version of the state, so that applying a listed meld or addition skips
        # the checks (draws, takes and discards are checked again: their checks are cheap)
        if cached is None:
            self._legal = LegalMemo(self.version, actions, routed, whole, plans)
        else:  # the memo of an older version: refilled, not allocated again
            cached.version = self.version
            cached.actions = actions
            cached.routed = routed
            cached.seat_plays = whole
            cached.plans = plans
        return list(actions)

    def legal_plans(self) -> dict[Action, Meld | None]:
        """Each legal action now with the meld it makes (``None`` for a draw, a take or a discard):
        what ``apply`` takes without checking again."""
        out: dict[Action, Meld | None] = {}
        for action in self.legal_actions():
            plan: Meld | None = None
            if isinstance(action, (MeldCards, AddCards)):
                plan = self._listed_plan(action)
                assert plan is not None
            out[action] = plan
        return out

    def _listed_plan(self, action: MeldCards | AddCards) -> Meld | None:
        """The meld ``action`` makes if ``legal_actions`` listed it for this very state, else ``None``."""
        cached = self._legal
        if cached is None or cached.version != self.version:
            return None
        if cached.routed is not None:
            return movegen.plan_of(cached.routed, action)
        if cached.seat_plays is not None:
            return cached.seat_plays.plan(action)
        if cached.plans is not None:
            return cached.plans.get(action)
        return None

    def is_legal(self, action: Action) -> bool:
        try:
            self._plan(action)
        except IllegalActionError:
            return False
        return True

    # --- applying ---------------------------------------------------------------------------------
    def apply(self, action: Action, seat: int | None = None) -> list[Event]:
        """Validate and apply ``action`` for the seat to act; returns the events it caused.

        Raises ``IllegalActionError`` (and changes nothing) when the rules forbid it. A new meld is
        applied and recorded (history, events) in the form ``legal_actions`` lists: a ``wild_as``
        that names the default place is dropped.
        """
        if self.phase == OVER:
            raise IllegalActionError("HAND_OVER", "the hand is over")
        if seat is not None and seat != self.to_act:
            raise IllegalActionError("NOT_YOUR_TURN", f"it is seat {self.to_act}'s turn, not seat {seat}'s")
        plan: Meld | None = None
        listed = False
        if isinstance(action, (MeldCards, AddCards)):
            plan = self._listed_plan(action)  # listed as legal for exactly this state
            listed = plan is not None
        elif isinstance(action, Discard):
            if self.phase == PLAY_PHASE:  # _plan's check of a discard, without its dispatch
                problem = self._discard_problem(action.card)
                if problem is not None:
                    raise problem
                listed = True
        elif isinstance(action, (Draw, TakePile)):
            cached = self._legal
            listed = cached is not None and cached.version == self.version and action in cached.actions
        if not listed:
            plan = self._plan(action)
            if isinstance(action, MeldCards) and action.wild_as is not None:
                action = self._canonical_meld(action, plan)
        actor = self.to_act
        events = self._do(action, plan)
        self.history.append((actor, action))
        return events

    def _canonical_meld(self, action: MeldCards, plan: Meld | None) -> MeldCards:
        """The form ``legal_actions`` lists for a new meld: without ``wild_as`` when the wild stands
        where the rules put it by default (or the meld is a group, where it names no place), so that
        the history and the events carry one form per meld."""
        if plan is not None and plan == movegen.placed(action.cards, self.rules, None):
            return MeldCards(action.cards)
        return action

    def _plan(self, action: Action) -> Meld | None:
        """Check ``action`` completely; returns the meld it makes (meld/add) so it is not recomputed."""
        if self.phase == OVER:
            raise IllegalActionError("HAND_OVER", "the hand is over")
        if isinstance(action, Draw):
            if self.phase != DRAW_PHASE:
                raise IllegalActionError("WRONG_PHASE", "the player has already drawn this turn")
            return None
        if isinstance(action, TakePile):
            if self.phase != DRAW_PHASE:
                raise IllegalActionError("WRONG_PHASE", "the player has already drawn this turn")
            problem = self._take_pile_problem()
            if problem is not None:
                raise problem
            return None
        if self.phase != PLAY_PHASE:
            raise IllegalActionError("WRONG_PHASE", "draw from the stock or take the pile first")
        if isinstance(action, Discard):
            problem = self._discard_problem(action.card)
            if problem is not None:
                raise problem
            return None
        if isinstance(action, MeldCards):
            self._check_holds(action.cards)
            self._check_pile_top(action.cards)
            made = movegen.placed(action.cards, self.rules, action.wild_as)
            meld = made if made is not None else make_meld(action.cards, self.rules, action.wild_as)
            self._check_meld_result(action, meld, -1)
            return meld
        if isinstance(action, AddCards):
            side_melds = self.melds[side_of(self.to_act)]
            if not 0 <= action.meld < len(side_melds):
                raise IllegalActionError("UNKNOWN_MELD", f"the side has no meld number {action.meld}")
            self._check_holds(action.cards)
            self._check_pile_top(action.cards)
            made = movegen.extended(side_melds[action.meld], action.cards, self.rules)
            meld = made if made is not None else extend_meld(side_melds[action.meld], action.cards, self.rules)
            self._check_meld_result(action, meld, action.meld)
            return meld
        raise TypeError(f"not an action: {action!r}")

    def _check_holds(self, cards: tuple[int, ...]) -> None:
        counts = self.counts[self.to_act]
        need: dict[int, int] = {}
        for c in cards:
            need[c] = need.get(c, 0) + 1
        for c, n in need.items():
            if counts[c] < n:
                have = "does not hold" if counts[c] == 0 else f"holds only {counts[c]} of"
                raise IllegalActionError("NOT_IN_HAND", f"the player {have} {to_str(c)}")

    def _check_pile_top(self, cards: tuple[int, ...]) -> None:
        if self.must_meld >= 0 and self.must_meld not in cards:
            raise IllegalActionError(
                "PILE_TOP_REQUIRED",
                f"the closed pile was taken: {to_str(self.must_meld)} must be melded or added now",
            )

    def meld_result_allowed(self, action: MeldCards | AddCards, meld: Meld, index: int) -> bool:
        """Whether the rules around a meld or addition allow it now: the closed pile's top card is
        among its cards when one must be melded, and the turn can still end legally after it.

        ``meld`` is what ``action`` makes; ``index`` the side's meld it changes, -1 for a new meld.
        The meld itself and the cards held are the caller's to check (the move generator builds only
        valid melds from cards held). ``apply`` refuses what this refuses, with
        ``_check_meld_result``'s errors.
        """
        if self.must_meld >= 0 and self.must_meld not in action.cards:
            return False
        return self._finishable_after(action, meld, index, self.sizes[self.to_act] - len(action.cards))

    def _check_meld_result(self, action: MeldCards | AddCards, meld: Meld, index: int) -> None:
        """``meld_result_allowed``, raising its reason: ``PILE_TOP_REQUIRED`` or ``CANNOT_GO_OUT``."""
        self._check_pile_top(action.cards)
        remaining = self.sizes[self.to_act] - len(action.cards)
        if not self._finishable_after(action, meld, index, remaining):
            raise IllegalActionError("CANNOT_GO_OUT", self._cannot_go_out_message(meld, index, remaining))

    def _cannot_go_out_message(self, meld: Meld, index: int, remaining: int) -> str:
        side = side_of(self.to_act)
        if remaining == 0 and self.may_go_out(side) and not self.rules.go_out_by_meld:
            return "in this ruleset a player goes out only by discarding"
        why = self._not_out_reason(side)
        if remaining == 1 and self._must_keep_two(side, self._melds_after(side, meld, index)):
            return (f"this would leave 1 card: in this ruleset a player keeps two cards while the side may not "
                    f"go out ({why})")
        if remaining == 0:
            return f"this would empty the hand, but the side may not go out yet: {why}"
        return (f"this would leave {remaining} card(s) and no legal way to end the turn "
                f"(the side may not go out yet: {why})")

    def _not_out_reason(self, side: int) -> str:
        """Why the side may not go out, in words (for the messages of ``CANNOT_GO_OUT``)."""
        if self.mortos[side] is None and not self.morto_allows_going_out(side):
            return ("the side never took its morto, and in this ruleset such a side may go out only once no "
                    "morto is left on the table")
        need = "a clean canastra" if self.rules.clean_to_go_out else "a canastra"
        if self.mortos[side] is None:
            return f"the side needs {need}"
        return f"the side needs its morto and {need}"

    def _must_keep_two(self, side: int, melds: list[Meld]) -> bool:
        """``keep_two_without_canastra``: with ``melds`` on the table, the side has no morto left to
        take and may not go out, so none of its players may be left one card or none by a meld."""
        return self.rules.keep_two_without_canastra and self.mortos[side] is None \
            and not self.may_go_out(side, melds)

    def _melds_after(self, side: int, meld: Meld, index: int) -> list[Meld]:
        """The side's melds once ``meld`` is laid down (``index`` -1) or replaces meld ``index``."""
        melds = self.melds[side][:]
        if index < 0:
            melds.append(meld)
        else:
            melds[index] = meld
        return melds

    def _finishable_after(self, action: MeldCards | AddCards, meld: Meld, index: int, remaining: int) -> bool:
        side = side_of(self.to_act)
        if remaining >= 2 and (self.lone < 0 or self._holds_other_than(action.cards, self.lone)):
            return True
        if remaining == 0 and self.mortos[side] is not None:
            return True  # direct batida: the morto comes into the hand
        melds = self._melds_after(side, meld, index)
        if remaining == 0:
            return self.rules.go_out_by_meld and self.may_go_out(side, melds)
        if remaining == 1:
            if self._must_keep_two(side, melds):
                return False
            # the card left: the first held beyond what the action lays down
            counts = self.counts[self.to_act]
            last = -1
            for c in range(NCODES):
                if counts[c] and counts[c] > action.cards.count(c):
                    last = c
                    break
            return self._last_card_playable(side, last, melds)
        # two cards or more, all copies of the lone card: play it out on a copy (rare, tiny hand)
        trial = self.clone()
        trial._do(action, meld)
        return trial._any_way_to_finish()

    def _last_card_playable(self, side: int, card: int, melds: list[Meld]) -> bool:
        """With ``card`` alone in hand (after a meld or addition), can the turn still end legally?"""
        rules = self.rules
        morto = self.mortos[side] is not None
        if card != self.lone and morto:
            return True  # discarding it takes the morto (indirect batida)
        if not morto and not self.morto_allows_going_out(side):
            return False  # emptying the hand would go out, which the side's morto does not allow yet
        fits = self._extensions_by(card, melds)
        if card != self.lone and self.has_canastra_to_go_out(side, melds) and not (
                rules.no_wild_going_out and rules.go_out_by_meld and is_wild_capable(card) and fits):
            return True  # discarding it goes out
        for i, extended_meld in fits:  # adding it empties the hand
            if morto:
                return True
            after = melds[:]
            after[i] = extended_meld
            if rules.go_out_by_meld and self.has_canastra_to_go_out(side, after):
                return True
        return False

    def _extensions_by(self, card: int, melds: list[Meld]) -> list[tuple[int, Meld]]:
        """The melds ``card`` alone would extend, by index, with the result. A meld the card cannot
        touch (``Meld.touch``: the move generator's own filter) is not tried."""
        rules = self.rules
        bit = 0xFF << (8 * card)
        wild = is_wild_capable(card)
        out = []
        for i, m in enumerate(melds):
            takes_wild, touch_bytes = m._touch or m.touch()
            if touch_bytes & bit or (wild and takes_wild):
                extended = movegen.extended(m, (card,), rules)
                if extended is not None:
                    out.append((i, extended))
        return out

    def _holds_other_than(self, removed: tuple[int, ...], card: int) -> bool:
        """After removing ``removed``, does the hand still hold a card other than ``card``?"""
        counts = self.counts[self.to_act]
        kept_same = counts[card] - removed.count(card)
        return self.sizes[self.to_act] - len(removed) - kept_same > 0

    def _any_way_to_finish(self) -> bool:
        if self.phase != PLAY_PHASE:
            return True
        counts = self.counts[self.to_act]
        if self.must_meld < 0:
            for code in range(NCODES):
                if counts[code] and self._discard_problem(code) is None:
                    return True
        return bool(movegen.plays(self, first_only=True))

    def _take_pile_problem(self) -> IllegalActionError | None:
        if not self.pile:
            return IllegalActionError("EMPTY_PILE", "the discard pile is empty")
        if self._may_take_pile():
            return None
        if self.rules.closed_pile:
            return IllegalActionError(
                "PILE_TOP_REQUIRED",
                f"the pile is closed: it can be taken only to meld its top card "
                f"{to_str(self.pile[-1])} at once, and that is not possible",
            )
        return IllegalActionError("LONE_DISCARD", "taking this single card would leave no card to discard")

    def _may_take_pile(self) -> bool:
        """Whether the seat may take the (non-empty) pile: ``_take_pile_problem`` without the error,
        which legal_actions asks at every draw and would otherwise build and drop half the time."""
        if not self.rules.closed_pile and not (self.rules.lone_discard and len(self.pile) == 1):
            return True  # the hand grows to two cards or more: a discard is always possible
        seat, pile = self.to_act, self.pile
        counts = self.counts[seat]
        if self.rules.closed_pile:
            # most takes are plain from a few counts of the hand with the pile (must_meld_shortcut),
            # asked on a copy of the hand's counts: the state is not changed for it
            with_pile = counts[:]
            for c in pile:
                with_pile[c] = with_pile[c] + 1
            plain = movegen.must_meld_shortcut(
                pile[-1], with_pile, self.sizes[seat] + len(pile),
                pile[0] if len(pile) == 1 and self.rules.lone_discard else -1, self.melds[seat & 1], self.rules)
            if plain >= 0:
                return plain == 1
        # try the take in place and undo it (cheaper than a copy of the whole state)
        for c in pile:
            counts[c] = counts[c] + 1
        self.sizes[seat] = self.sizes[seat] + len(pile)
        self.pile = []
        self.phase = PLAY_PHASE
        self.must_meld = pile[-1] if self.rules.closed_pile else -1
        self.lone = pile[0] if len(pile) == 1 and self.rules.lone_discard else -1
        try:
            if self.rules.closed_pile:
                ok = bool(movegen.plays(self, first_only=True))
            else:
                ok = self.lone < 0 or self._any_way_to_finish()
        finally:
            for c in pile:
                counts[c] = counts[c] - 1
            self.sizes[seat] = self.sizes[seat] - len(pile)
            self.pile = pile
            self.phase = DRAW_PHASE
            self.must_meld = -1
            self.lone = -1
        return ok

    def _discard_problem(self, card: int) -> IllegalActionError | None:
        seat = self.to_act
        if not 0 <= card < NCODES or self.counts[seat][card] == 0:
            return IllegalActionError("NOT_IN_HAND", f"the player does not hold {to_str(card)}")
        if self.must_meld >= 0:
            return IllegalActionError(
                "PILE_TOP_REQUIRED",
                f"the closed pile was taken: {to_str(self.must_meld)} must be melded or added first",
            )
        if card == self.lone:
            return IllegalActionError(
                "LONE_DISCARD", f"{to_str(card)} was the only card of the pile: it cannot be discarded this turn"
            )
        if self.sizes[seat] > 1:
            return None
        side = side_of(seat)
        if self.mortos[side] is not None:
            return None  # indirect batida
        if not self.may_go_out(side):
            return IllegalActionError(
                "CANNOT_GO_OUT", f"discarding the last card would go out, and {self._not_out_reason(side)}"
            )
        if self.rules.no_wild_going_out and self.rules.go_out_by_meld and is_wild_capable(card) \
                and self._playable(card, side):
            return IllegalActionError(
                "WILD_DISCARD", f"{to_str(card)} can still be played: a player may not go out by discarding a wild"
            )
        return None

    def _playable(self, card: int, side: int) -> bool:
        return bool(self._extensions_by(card, self.melds[side]))

    # --- mutation (only after the checks) ---------------------------------------------------------
    def touch(self) -> None:
        """Declare a change made outside ``apply`` (tests and tools that set positions up by hand)."""
        self.version += 1
        self._legal = None

    def _do(self, action: Action, plan: Meld | None) -> list[Event]:
        # the events of the actions themselves defer their layers to their facts (Event's sixth
        # argument, given by position: the cheapest call in pure Python)
        self.version += 1
        seat = self.to_act
        side = seat & 1  # side_of
        counts = self.counts[seat]
        events: list[Event] = []
        if isinstance(action, Draw):
            card = self.stock.pop()
            counts[card] = counts[card] + 1
            self.sizes[seat] = self.sizes[seat] + 1
            self.phase = PLAY_PHASE
            events.append(Event("drew", seat, None, None, None, (_drew, seat, len(self.stock), card)))
            if not self.stock:
                self._stock_ran_out(events)
        elif isinstance(action, TakePile):
            taken = self.pile
            self.pile = []
            for c in taken:
                counts[c] = counts[c] + 1
            self.sizes[seat] = self.sizes[seat] + len(taken)
            self.phase = PLAY_PHASE
            if self.rules.closed_pile:
                self.must_meld = taken[-1]
            if len(taken) == 1 and self.rules.lone_discard:
                self.lone = taken[0]
            events.append(Event("took_pile", seat, None, None, None, (_took_pile, tuple(taken))))
        elif isinstance(action, Discard):
            counts[action.card] = counts[action.card] - 1
            self.sizes[seat] = self.sizes[seat] - 1
            self.pile.append(action.card)
            events.append(Event("discarded", seat, None, None, None, (_discarded, action.card)))
            if self.sizes[seat] == 0:
                if self.mortos[side] is not None:
                    self._take_morto(seat, direct=False, events=events)
                else:
                    self._end(seat, "went_out", events)
                    return events
            self._next_turn()
        else:
            assert plan is not None and isinstance(action, (MeldCards, AddCards))
            for c in action.cards:
                counts[c] = counts[c] - 1
            self.sizes[seat] = self.sizes[seat] - len(action.cards)
            self.must_meld = -1
            if isinstance(action, MeldCards):
                self.melds[side].append(plan)
                events.append(Event("melded", seat, None, None, None,
                                    (_melded, side, len(self.melds[side]) - 1, plan, self.rules, action.wild_as)))
            else:
                self.melds[side][action.meld] = plan
                events.append(Event("added", seat, None, None, None,
                                    (_added, side, action.meld, action.cards, plan, self.rules)))
            if self.sizes[seat] == 0:
                if self.mortos[side] is not None:
                    self._take_morto(seat, direct=True, events=events)
                else:
                    self._end(seat, "went_out", events)
        return events

    def _take_morto(self, seat: int, direct: bool, events: list[Event]) -> None:
        side = side_of(seat)
        morto = self.mortos[side]
        assert morto is not None
        self.mortos[side] = None
        self.morto_taken[side] = True
        counts = self.counts[seat]
        for c in morto:
            counts[c] = counts[c] + 1
        self.sizes[seat] = self.sizes[seat] + len(morto)
        if not direct:
            self.morto_pending[side] = seat
        events.append(Event("morto_taken", seat, {"side": side, "direct": direct, "count": len(morto)},
                            {seat: {"cards": format_many(sorted(morto))}}))

    def _stock_ran_out(self, events: list[Event]) -> None:
        if self.rules.stock_out == "morto_then_end":
            drawer_side = side_of(self.to_act)
            for side in (drawer_side, 1 - drawer_side):
                morto = self.mortos[side]
                if morto is not None:
                    self.mortos[side] = None
                    self.morto_to_stock[side] = True
                    self.stock = list(reversed(morto))
                    events.append(Event("morto_to_stock", -1, {"side": side, "stock_count": len(self.stock)}))
                    return
        self._end(-1, "stock_exhausted", events)

    def _next_turn(self) -> None:
        self.to_act = (self.to_act + 1) % self.players
        self.phase = DRAW_PHASE
        self.lone = -1
        self.must_meld = -1
        self.turns += 1
        side = self.to_act & 1  # side_of
        if self.morto_pending[side] == self.to_act:
            self.morto_pending[side] = -1  # the morto taken by discarding is now played

    def _end(self, seat: int, reason: str, events: list[Event]) -> None:
        self.phase = OVER
        self.went_out = seat
        self.end_reason = reason
        self.must_meld = -1
        self.lone = -1
        events.append(Event("hand_ended", seat, {
            "reason": reason,
            "hands": [format_many(self.hand_of(s)) for s in range(self.players)],
            "score": self.score(),
        }))

    # --- scoring -------------------------------------------------------------------------------------
    def score(self) -> list[dict[str, int]]:
        """Per side: cards, bonus, going_out, hand, morto, total (hand and morto only once over)."""
        rules = self.rules
        values = card_values(rules)
        out = []
        over = self.phase == OVER
        for side in (0, 1):
            cards = bonus = 0
            for m in self.melds[side]:
                facts = m._facts_for(rules)
                bonus += facts[1]
                cards += facts[2]
            going_out = rules.going_out_bonus if self.went_out >= 0 and side_of(self.went_out) == side else 0
            hand = 0
            morto = 0
            if over:
                unplayed = self.morto_pending[side] >= 0 and rules.unplayed_morto_penalty
                for seat in range(side, self.players, 2):
                    if unplayed and seat == self.morto_pending[side]:
                        continue  # "paid as if not taken": the untouched morto does not count as hand
                    counts = self.counts[seat]
                    hand -= sum(values[c] * counts[c] for c in range(NCODES) if counts[c])
                if not self.morto_taken[side] or unplayed:
                    morto = -rules.morto_penalty
            out.append({"cards": cards, "bonus": bonus, "going_out": going_out, "hand": hand, "morto": morto,
                        "total": cards + bonus + going_out + hand + morto})
        return out

    # --- what a seat sees ----------------------------------------------------------------------------
    def view(self, seat: int | None) -> View:
        """Exactly what ``seat`` may see (``None``: a spectator, who sees no hand at all).

        A read-only mapping computed lazily (``engine/view.py``); ``view(seat).to_dict()`` is a plain dict.
        """
        return View(self, seat)

    def record_state(self) -> dict[str, Any]:
        """The whole state in the game-record output form (every hand shown)."""
        return {
            "phase": self.phase,
            "to_act": self.to_act,
            "hands": [format_many(self.hand_of(s)) for s in range(self.players)],
            "melds": [[m.to_json(self.rules) for m in side] for side in self.melds],
            "discard": format_many(self.pile),
            "stock_count": len(self.stock),
            "mortos_taken": self.morto_taken[:],
        }

    def started_event(self) -> Event:
        """The ``hand_started`` event: each seat sees its own cards; the rest of the deal is secret."""
        return Event(
            "hand_started", -1,
            {"hand_number": self.hand_number, "dealer": self.dealer, "first": (self.dealer + 1) % self.players,
             "players": self.players, "stock_count": len(self.deal.stock)},
            {s: {"hand": format_many(sorted(self.deal.hands[s]))} for s in range(self.players)},
            {"deal": self.deal.to_json()},
        )

    # --- persistence -----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """A lossless snapshot (JSON-compatible); ``from_json`` rebuilds an equal state."""
        return {
            "rules": self.rules.to_dict(),
            "players": self.players,
            "dealer": self.dealer,
            "hand_number": self.hand_number,
            "deal": self.deal.to_json(),
            "hands": [format_many(self.hand_of(s)) for s in range(self.players)],
            "melds": [[m.state_json() for m in side] for side in self.melds],
            "pile": format_many(self.pile),
            "stock": format_many(reversed(self.stock)),
            "mortos": [None if m is None else format_many(m) for m in self.mortos],
            "morto_taken": self.morto_taken[:],
            "morto_to_stock": self.morto_to_stock[:],
            "morto_pending": self.morto_pending[:],
            "to_act": self.to_act,
            "phase": self.phase,
            "must_meld": self.must_meld,
            "lone": self.lone,
            "went_out": self.went_out,
            "end_reason": self.end_reason,
            "turns": self.turns,
            "history": [[seat, a.to_json()] for seat, a in self.history],
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> HandState:
        from engine.cards import parse_many
        from engine.rules import Ruleset as _Ruleset

        rules = _Ruleset(**data["rules"]).check()
        players = int(data["players"])
        deal = Deal.from_json(data["deal"], rules, players)
        state = HandState(rules, players, deal, int(data["dealer"]), int(data["hand_number"]))
        for seat, hand in enumerate(data["hands"]):
            counts = [0] * NCODES
            for c in parse_many(hand):
                counts[c] = counts[c] + 1
            state.counts[seat] = counts
            state.sizes[seat] = len(hand)
        state.melds = [[Meld.from_state_json(m) for m in side] for side in data["melds"]]
        state.pile = parse_many(data["pile"])
        state.stock = list(reversed(parse_many(data["stock"])))
        state.mortos = [None if m is None else tuple(parse_many(m)) for m in data["mortos"]]
        state.morto_taken = [bool(x) for x in data["morto_taken"]]
        state.morto_to_stock = [bool(x) for x in data["morto_to_stock"]]
        state.morto_pending = [int(x) for x in data["morto_pending"]]
        state.to_act = int(data["to_act"])
        state.phase = str(data["phase"])
        state.must_meld = int(data["must_meld"])
        state.lone = int(data["lone"])
        state.went_out = int(data["went_out"])
        state.end_reason = str(data["end_reason"])
        state.turns = int(data["turns"])
        state.history = [(int(seat), action_from_json(a)) for seat, a in data["history"]]
        return state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HandState) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"HandState(hand {self.hand_number}, {self.phase}, seat {self.to_act} to act, "
                f"stock {len(self.stock)}, pile {len(self.pile)})")


class LegalMemo:
    """``legal_actions`` of one version of a state: the list, and where to find the meld each listed
    meld or addition makes: in the seat's segments when ``movegen.legal_plays`` listed them whole
    (``seat_plays``, valid as long as the state keeps this version), by segment when it had to check
    some (``routed``), or in one mapping (``plans``, from ``movegen.plays``)."""

    def __init__(self, version: int, actions: list[Action], routed: movegen.PlanSlots | None,
                 seat_plays: movegen.SeatPlays | None, plans: dict[Action, Meld | None] | None) -> None:
        self.version = version
        self.actions = actions
        self.routed = routed
        self.seat_plays = seat_plays
        self.plans = plans


def total_cards(state: HandState) -> int:
    """Every card the hand holds anywhere (for invariant checks)."""
    return (sum(state.sizes) + sum(len(m.cards) for side in state.melds for m in side) + len(state.pile)
            + len(state.stock) + sum(len(m) for m in state.mortos if m is not None))


__all__ = ["DRAW_PHASE", "OVER", "PLAY_PHASE", "HandState", "side_of", "total_cards"]
