"""The bot interface."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from engine.actions import Action, Discard


class Bot(Protocol):
    """A player that decides from what its seat sees (``HandState.view(seat)``) and the legal actions."""

    name: str

    def choose(self, view: Mapping[str, Any], legal: list[Action]) -> Action:
        """The next action: one of ``legal``."""
        ...

    def choose_discard(self, view: Mapping[str, Any], legal: list[Action]) -> Discard:
        """The card this bot would discard now (``legal`` must contain discards)."""
        ...


def make_bot(kind: str, seed: int | str = 0) -> Bot:
    if kind == "random":
        from engine.bots.random_bot import RandomBot

        return RandomBot(seed)
    raise ValueError(f"unknown bot {kind!r}: random or heuristic")
