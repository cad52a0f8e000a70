"""What the move generator and the views read of a hand, as protocols.

``engine/state.py`` uses ``engine/movegen.py`` and ``engine/view.py``; they read a hand through the
protocols below, never through ``HandState`` itself, so neither imports ``engine.state`` and the
modules form no cycle. ``HandState`` satisfies both (mypy checks it where it passes itself).

The attributes keep their concrete types (``list[int]``, not ``Sequence[int]``): the move generator
is compiled by mypyc (``make engine-native``), which turns operations on a known ``list`` into
direct calls and on anything else into generic ones.
"""

from __future__ import annotations

from typing import Protocol

from engine.actions import AddCards, MeldCards
from engine.melds import Meld
from engine.rules import Ruleset


class PlayPosition(Protocol):
    """A hand in its play phase, as the move generator reads it (``movegen.plays``)."""

    rules: Ruleset
    #: the seat to act
    to_act: int
    #: per seat, how many of each card code it holds
    counts: list[list[int]]
    #: per seat, how many cards it holds
    sizes: list[int]
    #: per side, its melds on the table
    melds: list[list[Meld]]
    #: the card that must be melded at once (a closed pile was taken), or -1
    must_meld: int
    #: the card of a one-card pile taken this turn (it may not be discarded), or -1
    lone: int

    def meld_result_allowed(self, action: MeldCards | AddCards, meld: Meld, index: int) -> bool:
        """Whether the rules around a meld or addition allow it now (the closed pile's top card,
        and a turn that can still end legally); the meld itself is the caller's to check."""
        ...


class ViewedPosition(Protocol):
    """A hand as a seat's view reads it (``view.View``)."""

    rules: Ruleset
    players: int
    hand_number: int
    dealer: int
    match_totals: list[int]
    phase: str
    counts: list[list[int]]
    sizes: list[int]
    melds: list[list[Meld]]
    pile: list[int]
    stock: list[int]
    morto_taken: list[bool]
    morto_to_stock: list[bool]
    must_meld: int
    lone: int
    went_out: int
    end_reason: str
    #: counts the changes: a view is valid for one version
    version: int

    def current_player(self) -> int: ...

    def score(self) -> list[dict[str, int]]: ...
