"""The bot interface."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from engine.actions import Action, Discard
from engine.rules import Ruleset

BOT_KINDS = ("random", "heuristic", "expert")


class Bot(Protocol):
    """A player that decides from what its seat sees (``HandState.view(seat)``) and the legal actions."""

    name: str

    def choose(self, view: Mapping[str, Any], legal: list[Action]) -> Action:
        """The next action: one of ``legal``."""
        ...

    def choose_discard(self, view: Mapping[str, Any], legal: list[Action]) -> Discard:
        """The card this bot would discard now (``legal`` must contain discards)."""
        ...


def make_bot(kind: str, seed: int | str = 0, rules: Ruleset | None = None, budget_ms: float | None = None) -> Bot:
    """A bot of ``kind``, deterministic for ``seed``.

    ``rules`` is the table's ruleset (public knowledge); the heuristic bot plays better with it
    (card values, groups, the clean canastra to go out) and otherwise learns what the table shows.
    The expert bot searches with it (its rollouts play by these rules) within ``budget_ms`` of CPU
    per decision (``None``: its default, ``engine.bots.expert.DEFAULT_BUDGET_MS``); the other kinds
    do not search and ignore the budget.
    """
    if kind == "random":
        from engine.bots.random_bot import RandomBot

        return RandomBot(seed)
    if kind == "heuristic":
        from engine.bots.heuristic import HeuristicBot

        return HeuristicBot(seed, rules)
    if kind == "expert":
        from engine.bots.expert import ExpertBot

        if budget_ms is None:
            return ExpertBot(seed, rules)
        return ExpertBot(seed, rules, budget_ms=budget_ms)
    raise ValueError(f"unknown bot {kind!r}: random, heuristic or expert")
