"""A learned evaluation of an unfinished hand, for the expert's shortened rollouts.

Early in a long hand (``aberto``, ``classico_104``, ``aberto_joker50``: 360-490 actions) one world of
the expert's search (every candidate played to the end of the hand) costs more than a decision's
budget, so the search buys too few worlds to tell candidates apart. A rollout stopped after some
turns needs a value for the position it reached; the static one (cards on the table less the cards
held) predicts the hand's end poorly early on: taking a large pile reads as a cost there, where in
play it is the way to canastras (docs/performance.md, "What the searches buy").

This module gives that value as a linear function of a few readings of each side (``FEATURES``),
fitted on heuristic self-play per preset and number of players (``bench/evaluation.py`` fits them
and writes ``engine/bots/evaluation_weights.py``), one set of weights per stage of the hand (how
much of the dealt stock is left). The value is antisymmetric: each feature enters as the side's
reading less the other side's, so the two sides' values are opposite, like the hand's real score
difference. It predicts the expert's own utility (the hand's score difference, plus or minus the
win's weight in a one-hand match).

Guarantees: pure and deterministic (it reads the position, never changes it); it reads only what a
position the expert built holds, so it sees no more than the expert's worlds do. A ruleset or a
number of players without fitted weights has no evaluation (``weights_for`` gives ``None``), and the
expert then plays its rollouts to the end of the hand. The expert cuts its rollouts only when its
``cut_worlds`` is set (0 by default: measured, the cut did not pay; docs/performance.md, "Bots").
"""

from __future__ import annotations

from typing import Final

from engine.bots.evaluation_weights import STAGES, WEIGHTS
from engine.cards import JOKER
from engine.melds import card_values
from engine.rules import CANASTRA, HAND_SIZE, MORTO_SIZE, Ruleset
from engine.state import DRAW_PHASE, HandState

#: one reading per side; the evaluation weighs each side's reading less the other side's
FEATURES: Final = (
    "table",  # points on the table: the melds' cards and canastra bonuses
    "clean_canastras",  # clean canastras (royal and ace-to-ace included): what going out needs
    "dirty_canastras",
    "near_canastras",  # melds of 5 or 6 cards
    "short_melds",  # melds of 3 or 4 cards
    "hand_cards",  # cards held by the side's seats
    "hand_value",  # their points
    "hand_wilds",  # jokers and 2s held
    "morto_waiting",  # 1 while the side's morto is on the table (not taken, not become the stock)
    "pile_next",  # the pile's size when the side draws next (what it may take), else 0
    "draws_next",  # 1 when the side draws next
)
N_FEATURES: Final = len(FEATURES)


class Evaluation:
    """The fitted weights of one ruleset and number of players (``weights_for``)."""

    __slots__ = ("players", "rules", "turns_per_draw", "values", "weights")

    def __init__(self, rules: Ruleset, players: int, weights: list[list[float]], turns_per_draw: float) -> None:
        self.rules = rules
        self.players = players
        self.weights = weights  # per stage, one weight per feature
        self.turns_per_draw = turns_per_draw  # turns a hand lasts per card left to draw (``remaining_turns``)
        self.values = card_values(rules)

    def value(self, state: HandState, side: int) -> float:
        """The position's predicted utility for ``side`` (minus that of the other side)."""
        x = differences(state, side, self.values)
        w = self.weights[stage(state)]
        out = 0.0
        for i in range(N_FEATURES):
            out += w[i] * x[i]
        return out

    def remaining_turns(self, stock: int, mortos_open: int) -> float:
        """About how many turns the hand has left with ``stock`` cards in the stock and ``mortos_open``
        mortos face down: the cards left to draw (``draws``) times the turns a card lasted in self-play."""
        return self.turns_per_draw * draws(self.rules, stock, mortos_open)


def weights_for(rules: Ruleset, players: int) -> Evaluation | None:
    """The evaluation fitted for this ruleset (by its preset's name) and number of players, if any."""
    fitted = WEIGHTS.get(f"{rules.name}/{players}")
    if fitted is None:
        return None
    return Evaluation(rules, players, [list(row) for row in fitted[1]], fitted[0])


def stage(state: HandState) -> int:
    """How far the hand is, 0 .. STAGES - 1, by the share of the dealt stock already drawn.

    The dealt stock's size comes from the ruleset and the table size, not from ``state.deal``: the
    expert's worlds are dealt from the position of a decision, their "deal" holding the stock as it
    was then."""
    return stage_at(state.rules, state.players, len(state.stock))


def stage_at(rules: Ruleset, players: int, stock: int) -> int:
    """``stage`` of a hand with ``stock`` cards in the stock."""
    gone = 1.0 - stock / dealt_stock(rules, players)
    return max(0, min(STAGES - 1, int(gone * STAGES)))


def dealt_stock(rules: Ruleset, players: int) -> int:
    """The stock's size once the hands and the two mortos are dealt."""
    return max(1, rules.deck_size - players * HAND_SIZE - 2 * MORTO_SIZE)


def draws(rules: Ruleset, stock: int, mortos_open: int) -> int:
    """Cards left to draw: the stock, and the face-down mortos that become the stock when it runs out."""
    return stock + (MORTO_SIZE * mortos_open if rules.stock_out == "morto_then_end" else 0)


def draws_left(state: HandState) -> int:
    """``draws`` of a position (a morto is ``None`` once taken or become the stock)."""
    return draws(state.rules, len(state.stock), sum(1 for m in state.mortos if m is not None))


def differences(state: HandState, side: int, values: tuple[int, ...]) -> list[float]:
    """What the evaluation weighs: each of ``side``'s readings less the other side's."""
    mine = side_features(state, side, values)
    theirs = side_features(state, 1 - side, values)
    return [mine[i] - theirs[i] for i in range(N_FEATURES)]


def side_features(state: HandState, side: int, values: tuple[int, ...]) -> list[float]:
    """The readings of ``FEATURES`` for ``side``."""
    rules = state.rules
    table = 0
    clean = dirty = near = short = 0
    for m in state.melds[side]:
        table += m.value(rules) + m.bonus(rules)
        n = len(m.cards)
        if n >= CANASTRA:
            if m.wild >= 0:
                dirty += 1
            else:
                clean += 1
        elif n >= 5:
            near += 1
        else:
            short += 1
    cards = value = wilds = 0
    for seat in range(side, state.players, 2):
        counts = state.counts[seat]
        cards += state.sizes[seat]
        for c in range(len(counts)):
            n = counts[c]
            if n:
                value += values[c] * n
                if c == JOKER or c % 13 == 1:
                    wilds += n
    drawer = state.to_act if state.phase == DRAW_PHASE else (state.to_act + 1) % state.players
    next_draw = 1 if drawer & 1 == side else 0
    return [float(table), float(clean), float(dirty), float(near), float(short), float(cards), float(value),
            float(wilds), 0.0 if state.mortos[side] is None else 1.0, float(len(state.pile) * next_draw),
            float(next_draw)]


__all__ = ["FEATURES", "N_FEATURES", "Evaluation", "dealt_stock", "differences", "draws", "draws_left",
           "side_features", "stage", "stage_at", "weights_for"]
