"""XP awards and the level curve (docs/ranking.md, "XP" and "Levels"). Pure functions.

XP (the platform's rules, source P): the winner of a points match gets 40 XP, of an express match
20 XP; a loser gets 5 XP. A player who abandons gets nothing (they did not finish the match; the
sources penalise abandoning). Practice matches, annulled matches and matches where two seats shared
an address give nobody anything.

Levels: level L starts at 50 * L * (L - 1) XP: level 1 at 0, 2 at 100, 3 at 300, 4 at 600, 5 at
1,000, 10 at 4,500, 20 at 19,000, 50 at 122,500. Each level costs 100 XP more than the one before
(level L -> L + 1 costs 100 * L), so early levels come after a few wins and later ones take a
steady stream of play. There is no top level.
"""

from __future__ import annotations

from enum import StrEnum
from math import isqrt

XP_POINTS_WIN = 40
XP_EXPRESS_WIN = 20
XP_LOSS = 5
XP_ABANDONED = 0

#: XP between level L and L + 1 is LEVEL_STEP * L.
LEVEL_STEP = 100
MAX_LEVEL = 2**31 - 1


class Outcome(StrEnum):
    WON = "won"
    LOST = "lost"
    ABANDONED = "abandoned"
    VOID = "void"


def xp_for(outcome: Outcome, *, express: bool) -> int:
    """The XP one player earns from an outcome of a match that awards XP."""
    if outcome is Outcome.WON:
        return XP_EXPRESS_WIN if express else XP_POINTS_WIN
    if outcome is Outcome.LOST:
        return XP_LOSS
    return XP_ABANDONED  # abandoned (and void, which never reaches here: annulled matches award nothing)


def level_start(level: int) -> int:
    """The XP at which `level` (>= 1) starts."""
    return LEVEL_STEP * level * (level - 1) // 2


def level_for(xp: int) -> int:
    """The level of a player with `xp` XP (>= 0): the highest L with level_start(L) <= xp."""
    if xp <= 0:
        return 1
    # level_start(L) <= xp  <=>  L*L - L - 2*xp/STEP <= 0  <=>  L <= (1 + sqrt(1 + 8*xp/STEP)) / 2
    level = (1 + isqrt(1 + 8 * xp // LEVEL_STEP)) // 2
    while level_start(level + 1) <= xp:
        level += 1
    while level > 1 and level_start(level) > xp:
        level -= 1
    return min(level, MAX_LEVEL)
