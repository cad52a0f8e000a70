"""The random-legal player, exactly the policy used to compare engines.

Take the pile with probability 0.5 when that is legal, else draw; then, up to 40 times, with
probability 0.9 each, apply a legal meld or addition chosen uniformly; then discard a uniformly
chosen legal card. When a closed pile obliges a meld, the bot melds before anything else.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from engine.actions import Action, Discard, Draw, TakePile


class RandomBot:
    name = "random"

    def __init__(self, seed: int | str = 0) -> None:
        self.rng = random.Random(seed)
        self.melds_this_turn = 0
        self.stopped = False

    def choose(self, view: Mapping[str, Any], legal: list[Action]) -> Action:
        rng = self.rng
        # the draw phase is the one whose legal actions start with the draw (``legal_actions`` lists
        # it first, and only then): read from the list rather than through the view's mapping
        if legal and isinstance(legal[0], Draw):
            self.melds_this_turn = 0
            self.stopped = False
            if len(legal) > 1 and rng.random() < 0.5:
                for action in legal:
                    if isinstance(action, TakePile):
                        return action
            return legal[0]
        # ``legal_actions`` lists the melds and additions first, then the discards: where the discards
        # start is found by bisection rather than by sorting the whole list. ``rng.choice`` over a
        # range of the same length draws the same index as over the list itself (``_below``).
        plays = _discards_from(legal)
        discards = len(legal) - plays
        if plays and (not discards or (not self.stopped and self.melds_this_turn < 40)):
            if not discards or rng.random() < 0.9:
                self.melds_this_turn += 1
                return legal[_below(rng, plays)]
            self.stopped = True
        return legal[plays + _below(rng, discards)]

    def choose_discard(self, view: Mapping[str, Any], legal: list[Action]) -> Discard:
        return self.rng.choice([a for a in legal if isinstance(a, Discard)])


def _below(rng: random.Random, n: int) -> int:
    """The index ``rng.choice`` draws from a sequence of ``n`` items: CPython's ``Random._randbelow``
    (the smallest number of random bits that covers ``n``, drawn again until under ``n``), the same
    draws of the generator, without ``choice``'s and ``_randbelow``'s interpreted calls."""
    if n <= 0:
        raise IndexError("Cannot choose from an empty sequence")
    k = n.bit_length()
    r = rng.getrandbits(k)
    while r >= n:
        r = rng.getrandbits(k)
    return r


def _discards_from(legal: list[Action]) -> int:
    """Where the discards start in a play phase's legal actions (melds and additions come first)."""
    lo = 0
    hi = len(legal)
    while lo < hi:
        mid = (lo + hi) >> 1
        if isinstance(legal[mid], Discard):
            hi = mid
        else:
            lo = mid + 1
    return lo
