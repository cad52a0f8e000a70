"""Bots against bots: one hand played to its end, and matches between two bot kinds, tallied.

``play_hand`` plays the current hand of a ``MatchState`` with one bot per seat (and refuses to run
for ever: ``MAX_ACTIONS_PER_HAND``). ``run`` plays N matches to the ruleset's target (or N single
hands) between two bot kinds: the first bot plays side 0 and the second side 1 in even games, the
other way round in odd games, and the first dealer moves every two games, so neither seat order nor
the first move favours a bot. Every deal and every bot is seeded from ``seed``: the same call gives
the same tallies (but not the same seconds).

The command line and its report (win rates with confidence intervals, ``bench:`` lines) are a tool:
``python -m bench.selfplay`` (``make bench-bots``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.bots.base import Bot, make_bot
from engine.match import MatchState
from engine.rules import Ruleset

# A hand of 108 cards lasts a few hundred actions; far more means a bot is not finishing its turns.
MAX_ACTIONS_PER_HAND = 20_000


class StalledError(RuntimeError):
    """A hand went on past ``MAX_ACTIONS_PER_HAND`` actions."""


@dataclass(slots=True)
class BotStats:
    kind: str
    hands: int = 0
    hands_won: int = 0
    hands_tied: int = 0
    hand_points: int = 0
    matches: int = 0
    matches_won: int = 0
    match_points: int = 0


@dataclass(slots=True)
class SelfPlayResult:
    rules: Ruleset
    players: int
    stats: list[BotStats]
    hands: int = 0
    turns: int = 0
    actions: int = 0
    seconds: float = 0.0
    matches: int = 0
    hand_turns: list[int] = field(default_factory=list)

    @property
    def hands_per_second(self) -> float:
        return self.hands / self.seconds if self.seconds > 0 else 0.0

    @property
    def turns_per_second(self) -> float:
        return self.turns / self.seconds if self.seconds > 0 else 0.0


def play_hand(match: MatchState, bots: Sequence[Bot]) -> int:
    """Play the match's current hand to its end with one bot per seat; returns the actions taken."""
    hand = match.hand
    assert hand is not None
    actions = 0
    while not hand.is_terminal():
        seat = hand.to_act
        action = bots[seat].choose(hand.view(seat), hand.legal_actions())
        match.apply(action, seat)
        actions += 1
        if actions > MAX_ACTIONS_PER_HAND:
            raise StalledError(f"hand {hand.hand_number} did not end after {MAX_ACTIONS_PER_HAND} actions")
    return actions


def side_of_bot(bot: int, game: int) -> int:
    """The side bot ``bot`` (0: the first named) plays in game ``game``: they swap every game."""
    return (bot + game) % 2


def first_dealer(game: int, players: int) -> int:
    """The first dealer of game ``game``: it moves every two games, so that over each four games
    (two players) each bot both starts and follows from each side."""
    return (game // 2) % players


def run(rules: Ruleset, players: int, kinds: tuple[str, str], seed: str | int, games: int = 0,
        hands: int = 0, min_hands: int = 0) -> SelfPlayResult:
    """Play ``games`` matches between two bot kinds (more, until ``min_hands`` hands were played),
    or, when ``hands`` > 0, that many single hands."""
    stats = [BotStats(kinds[0]), BotStats(kinds[1])]
    result = SelfPlayResult(rules, players, stats)
    started = time.perf_counter()
    game = 0
    while game < (hands if hands > 0 else games) or (hands == 0 and result.hands < min_hands):
        swap = side_of_bot(0, game)  # bot b plays side (b + swap) % 2
        side_kind = [kinds[swap], kinds[1 - swap]]
        bots: list[Bot] = [make_bot(side_kind[seat & 1], f"{seed}/{game}/{seat}", rules) for seat in range(players)]
        match = MatchState(rules, players, first_dealer=first_dealer(game, players))
        while match.needs_deal():
            match.start_hand(seed=f"{seed}/{game}/{match.hands_played}")
            result.actions += play_hand(match, bots)
            assert match.hand is not None
            result.turns += match.hand.turns
            result.hand_turns.append(match.hand.turns)
            result.hands += 1
            totals = [s["total"] for s in match.hand_scores[-1]]
            for b in (0, 1):
                side = (b + swap) % 2
                st = stats[b]
                st.hands += 1
                st.hand_points += totals[side]
                if totals[side] > totals[1 - side]:
                    st.hands_won += 1
                elif totals[side] == totals[1 - side]:
                    st.hands_tied += 1
            if hands > 0:
                break
        if hands == 0:
            result.matches += 1
            for b in (0, 1):
                side = (b + swap) % 2
                st = stats[b]
                st.matches += 1
                st.match_points += match.totals[side]
                st.matches_won += match.winner == side
        game += 1
    result.seconds = time.perf_counter() - started
    return result
