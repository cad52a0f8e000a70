"""The bot interface."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from engine.actions import Action, Discard
from engine.rules import Ruleset

BOT_KINDS = ("random", "heuristic")


class Bot(Protocol):
    """A player that decides from what its seat sees (``HandState.view(seat)``) and the legal actions."""

    name: str

    def choose(self, view: Mapping[str, Any], legal: list[Action]) -> Action:
        """The next action: one of ``legal``."""
        ...

    def choose_discard(self, view: Mapping[str, Any], legal: list[Action]) -> Discard:
        """The card this bot would discard now (``legal`` must contain discards)."""
        ...


def make_bot(kind: str, seed: int | str = 0, rules: Ruleset | None = None) -> Bot:
    """A bot of ``kind``, deterministic for ``seed``.

    ``rules`` is the table's ruleset (public knowledge); the heuristic bot plays better with it
    (card values, groups, the clean canastra to go out) and otherwise learns what the table shows.
    """
    if kind == "random":
        from engine.bots.random_bot import RandomBot

        return RandomBot(seed)
    if kind == "heuristic":
        from engine.bots.heuristic import HeuristicBot

        return HeuristicBot(seed, rules)
    raise ValueError(f"unknown bot {kind!r}: random or heuristic")
