"""The random-legal player, exactly the policy used to compare engines.

Take the pile with probability 0.5 when that is legal, else draw; then, up to 40 times, with
probability 0.9 each, apply a legal meld or addition chosen uniformly; then discard a uniformly
chosen legal card. When a closed pile obliges a meld, the bot melds before anything else.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from engine.actions import Action, AddCards, Discard, MeldCards, TakePile


class RandomBot:
    name = "random"

    def __init__(self, seed: int | str = 0) -> None:
        self.rng = random.Random(seed)
        self.melds_this_turn = 0
        self.stopped = False

    def choose(self, view: Mapping[str, Any], legal: list[Action]) -> Action:
        rng = self.rng
        if view["phase"] == "draw":
            self.melds_this_turn = 0
            self.stopped = False
            if len(legal) > 1 and rng.random() < 0.5:
                return next(a for a in legal if isinstance(a, TakePile))
            return legal[0]
        plays = [a for a in legal if isinstance(a, (MeldCards, AddCards))]
        discards = [a for a in legal if isinstance(a, Discard)]
        if plays and (not discards or (not self.stopped and self.melds_this_turn < 40)):
            if not discards or rng.random() < 0.9:
                self.melds_this_turn += 1
                return rng.choice(plays)
            self.stopped = True
        return rng.choice(discards)

    def choose_discard(self, view: Mapping[str, Any], legal: list[Action]) -> Discard:
        return self.rng.choice([a for a in legal if isinstance(a, Discard)])
