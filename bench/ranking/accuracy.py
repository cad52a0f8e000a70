"""Part 1 of the ranking benchmark: the rating model's predictive accuracy on engine self-play
(bench/ranking/__init__.py describes it)."""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from typing import Any

from openskill.models import BradleyTerryFull, PlackettLuce, ThurstoneMostellerFull

from bench.ranking import emit
from engine.actions import Action, Discard
from engine.bots.base import Bot, make_bot
from engine.match import MatchState
from engine.rules import ruleset_from_spec
from services.ranking import ratings


class HesitantBot:
    """The random-legal bot, weakened: in the play phase, with probability `skip` it discards at
    once instead of melding or adding (where a discard is legal)."""

    def __init__(self, skip: float, seed: int) -> None:
        self.inner = make_bot("random", seed)
        self.skip = skip
        self.rng = random.Random(seed * 7919 + 1)
        self.name = f"random-skip-{skip}"

    def choose(self, view: Any, legal: list[Action]) -> Action:
        if view["phase"] == "play" and self.rng.random() < self.skip:
            discards = [a for a in legal if isinstance(a, Discard)]
            if discards and len(discards) < len(legal):
                return self.inner.choose_discard(view, legal)
        return self.inner.choose(view, legal)

    def choose_discard(self, view: Any, legal: list[Action]) -> Discard:
        return self.inner.choose_discard(view, legal)


@dataclass(frozen=True)
class BotPlayer:
    name: str
    #: Strength rank for the oracle: lower is stronger.
    level: int
    kind: str
    skip: float

    def bot(self, seed: int) -> Bot:
        if self.kind == "heuristic":
            return make_bot("heuristic", seed)
        return HesitantBot(self.skip, seed)


@dataclass(frozen=True)
class Result:
    players: int
    sides: tuple[tuple[BotPlayer, ...], tuple[BotPlayer, ...]]
    winner: int


def heuristic_available() -> bool:
    try:
        make_bot("heuristic", 0)
    except ValueError:
        return False
    return True


def population() -> list[BotPlayer]:
    skips = [0.0, 0.5, 0.7, 0.8, 0.9]
    levels: list[tuple[str, float]] = [("random", s) for s in skips]
    if heuristic_available():
        levels.insert(0, ("heuristic", 0.0))
    return [
        BotPlayer(f"{kind}-{skip}-{copy}", level, kind, skip)
        for level, (kind, skip) in enumerate(levels)
        for copy in range(6)
    ]


def play(result_players: list[BotPlayer], seed: int) -> int:
    """One express match (one hand); the winning side."""
    size = len(result_players)
    rules = ruleset_from_spec({"preset": "aberto", "target": 0})
    state = MatchState(rules, size, seed % size)
    bots = [p.bot(seed * 10 + i) for i, p in enumerate(result_players)]
    state.start_hand(seed=seed)
    while not state.is_over():
        if state.needs_deal():  # express: never, but a tie rule could ask for another hand
            state.start_hand(seed=seed + 10**6)
        hand = state.hand
        assert hand is not None
        seat = hand.to_act
        state.apply(bots[seat].choose(hand.view(seat), hand.legal_actions()), seat)
    winner = state.winner
    assert winner is not None
    return winner


def selfplay(matches: int, seed: int = 6) -> list[Result]:
    rng = random.Random(seed)
    people = population()
    results: list[Result] = []
    for index in range(matches):
        size = 2 if index % 3 else 4  # two thirds 2-player, one third pairs
        seated = rng.sample(people, size)
        winner = play(seated, seed * 100_000 + index)
        results.append(Result(size, (tuple(seated[0::2]), tuple(seated[1::2])), winner))
    return results


@dataclass
class Scores:
    correct: float = 0.0
    log_loss: float = 0.0
    brier: float = 0.0
    count: int = 0

    def add(self, p_winner: float) -> None:
        self.correct += 1.0 if p_winner > 0.5 else 0.5 if p_winner == 0.5 else 0.0
        p = min(max(p_winner, 1e-12), 1 - 1e-12)
        self.log_loss -= math.log(p)
        self.brier += (1.0 - p_winner) ** 2
        self.count += 1


def evaluate(model: Any, results: list[Result], held_out_from: int) -> Scores:
    """Learn match by match (one rating per bot player and table size); score each held-out match's
    prediction made before learning from it."""
    table: dict[tuple[str, int], Any] = {}
    scores = Scores()
    for index, result in enumerate(results):
        teams = [[table.setdefault((p.name, result.players), model.rating()) for p in side] for side in result.sides]
        if index >= held_out_from:
            scores.add(model.predict_win(teams)[result.winner])
        ranks = [0.0 if side == result.winner else 1.0 for side in range(2)]
        rated = model.rate(teams, ranks=ranks)
        for side, team in zip(result.sides, rated, strict=True):
            for player, rating in zip(side, team, strict=True):
                table[(player.name, result.players)] = rating
    return scores


def oracle(results: list[Result], held_out_from: int) -> float:
    """How often the side of the stronger bots (by construction) won."""
    right = 0.0
    held = results[held_out_from:]
    for result in held:
        strength = [sum(p.level for p in side) for side in result.sides]
        if strength[0] == strength[1]:
            right += 0.5
        else:
            right += 1.0 if strength[result.winner] < strength[1 - result.winner] else 0.0
    return right / len(held)


def bench_accuracy(matches: int, seed: int) -> None:
    started = time.perf_counter()
    results = selfplay(matches, seed)
    emit("selfplay_matches", len(results), "matches", 0)
    emit("selfplay_seconds", time.perf_counter() - started, "s", 1)
    held_out_from = len(results) // 2
    emit("rating_heldout_matches", len(results) - held_out_from, "matches", 0)
    service_model = evaluate(ratings.MODEL, results, held_out_from)
    n = service_model.count
    emit("rating_accuracy_higher_rated_wins", service_model.correct / n, "ratio")
    emit("rating_log_loss", service_model.log_loss / n, "nats")
    emit("rating_brier", service_model.brier / n, "score")
    emit("rating_log_loss_coin_flip", math.log(2), "nats")
    emit("rating_brier_coin_flip", 0.25, "score")
    best = oracle(results, held_out_from)
    emit("rating_accuracy_oracle", best, "ratio")
    emit("rating_accuracy_ratio_to_oracle", (service_model.correct / n) / best, "ratio")
    for name, model in (
        ("plackett_luce", PlackettLuce()),
        ("bradley_terry", BradleyTerryFull()),
        ("thurstone_mosteller", ThurstoneMostellerFull()),
    ):
        other = evaluate(model, results, held_out_from)
        emit(f"rating_accuracy_{name}", other.correct / other.count, "ratio")
        emit(f"rating_log_loss_{name}", other.log_loss / other.count, "nats")
        emit(f"rating_brier_{name}", other.brier / other.count, "score")
