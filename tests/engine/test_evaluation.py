"""The expert's learned evaluation: its readings, its symmetry, its weights, and where it applies."""

from __future__ import annotations

import dataclasses

import pytest

from engine.actions import DRAW, Action
from engine.bots import ExpertBot
from engine.bots.evaluation import (
    FEATURES,
    N_FEATURES,
    dealt_stock,
    draws,
    draws_left,
    side_features,
    stage,
    weights_for,
)
from engine.bots.evaluation_weights import STAGES, WEIGHTS
from engine.melds import card_values
from engine.rules import MORTO_SIZE, PRESETS
from engine.state import HandState
from tests.engine.builders import position
from tests.engine.test_expert_bot import FakeClock, played_position, worlds_at

PRESET_NAMES = sorted(PRESETS)


def test_the_readings_of_a_side() -> None:
    s = position("aberto", ["9C 9D KS QD 3C 2H JH", "5D 6D 9S 10S KH QH 8C"],
                 melds=[["3H 4H 5H 6H 7H 8H 9H", "4S 5S 6S"], ["JD QD KD"]], pile="7S 10C", stock_top="5C")
    values = card_values(s.rules)
    mine = dict(zip(FEATURES, side_features(s, 0, values), strict=True))
    theirs = dict(zip(FEATURES, side_features(s, 1, values), strict=True))
    # a clean canastra (3..9 of hearts: 45 points and 200 of bonus) and 4-5-6 of spades (15)
    assert mine["table"] == 260 and mine["clean_canastras"] == 1 and mine["short_melds"] == 1
    assert mine["dirty_canastras"] == 0 and mine["near_canastras"] == 0
    # 9C 9D KS QD JH 2H at 10 and 3C at 5; the 2 is the one wild held
    assert mine["hand_cards"] == 7 and mine["hand_value"] == 65 and mine["hand_wilds"] == 1
    # seat 0 draws next: the pile of two is its to take; the other side has none of it
    assert mine["draws_next"] == 1 and mine["pile_next"] == 2
    assert theirs["draws_next"] == 0 and theirs["pile_next"] == 0
    assert theirs["table"] == 30 and theirs["short_melds"] == 1 and theirs["hand_wilds"] == 0
    assert mine["morto_waiting"] == theirs["morto_waiting"] == 1


def test_a_morto_taken_or_become_the_stock_no_longer_waits() -> None:
    s = position("aberto", ["9C 9D", "5D 6D"], mortos=[None, None], morto_taken=(True, False),
                 morto_to_stock=(False, True))
    values = card_values(s.rules)
    assert side_features(s, 0, values)[FEATURES.index("morto_waiting")] == 0
    assert side_features(s, 1, values)[FEATURES.index("morto_waiting")] == 0
    assert draws_left(s) == len(s.stock)


def test_the_cards_left_to_draw_count_the_mortos_only_where_they_become_the_stock() -> None:
    assert PRESETS["aberto"].stock_out == "morto_then_end" and PRESETS["buraco_2005"].stock_out == "end"
    assert draws(PRESETS["aberto"], 30, 2) == 30 + 2 * MORTO_SIZE
    assert draws(PRESETS["buraco_2005"], 30, 2) == 30


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("players", [2, 4])
def test_the_value_is_antisymmetric_and_the_stage_follows_the_stock(name: str, players: int) -> None:
    evaluation = weights_for(PRESETS[name], players)
    assert evaluation is not None
    previous = -1
    for turns in (1, 15, 40, 80):
        s = played_position(name, players, 7, turns)
        if s.is_terminal():
            break
        assert evaluation.value(s, 0) == pytest.approx(-evaluation.value(s, 1))
        k = stage(s)
        assert 0 <= k < STAGES and (k >= previous or len(s.stock) > len(s.deal.stock) // 2)  # a morto refills it
        previous = k
        assert evaluation.remaining_turns(len(s.stock), 2) > 0


@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("players", [2, 4])
def test_a_world_dealt_at_a_decision_is_at_the_real_positions_stage(name: str, players: int) -> None:
    """The expert's worlds are dealt from the decision's position (their deal holds the stock as it
    was then): the stage and the cards left to draw must still be the real hand's."""
    rules = PRESETS[name]
    state = played_position(name, players, 2, 30)
    assert len(state.deal.stock) == dealt_stock(rules, players)
    if state.is_terminal():
        return
    for world in worlds_at(state, 3):
        assert stage(world) == stage(state) and draws_left(world) == draws_left(state)


def test_the_fitted_weights_have_a_row_per_stage_and_a_weight_per_feature() -> None:
    assert WEIGHTS, "no fitted weights: run python -m bench.evaluation --presets all --write"
    for key, (turns_per_draw, rows) in WEIGHTS.items():
        name, players = key.split("/")
        assert name in PRESETS and players in ("2", "4")
        assert turns_per_draw > 0
        assert len(rows) == STAGES and all(len(row) == N_FEATURES for row in rows)


def test_a_ruleset_without_fitted_weights_has_no_evaluation() -> None:
    custom = dataclasses.replace(PRESETS["aberto"], name="custom")
    assert weights_for(custom, 2) is None
    assert weights_for(PRESETS["aberto"], 3) is None


def early_aberto_choice() -> tuple[HandState, int, list[Action]]:
    """An early decision of a long hand (``aberto``, 2 players: more than a hundred turns left)."""
    s = played_position("aberto", 2, 3, 4)
    if s.phase == "draw":
        s.apply(DRAW, s.to_act)
    return s, s.to_act, s.legal_actions()


def test_a_search_whose_worlds_would_not_fit_cuts_its_rollouts_short() -> None:
    """With a known turn cost, a search where ``cut_worlds`` worlds played to the end of the hand would
    pass the budget plays its rollouts as many turns as let them fit, and values them by the
    evaluation; where they fit, or with ``cut_worlds`` 0, it plays them to the end."""
    s, seat, legal = early_aberto_choice()
    rules = PRESETS["aberto"]
    for cut_worlds, turn_cost, cut in ((8, 0.001, True), (8, 1e-7, False), (0, 0.001, False)):
        bot = ExpertBot(5, rules, budget_ms=50.0, max_worlds=2, clock=FakeClock(1e-6), strict=True)
        bot.cut_worlds = cut_worlds
        bot.turn_cost = turn_cost  # as if measured by earlier searches
        view = s.view(seat)
        bot.choose(view, legal)
        assert bot.searches == 1
        assert bot.cut_searches == (1 if cut else 0)
        if cut:
            # 50 ms over 8 worlds of 3 or 4 candidates at 1 ms a turn: the floor, min_cut_turns
            assert bot.last_horizon == bot.min_cut_turns
        else:
            assert bot.last_horizon == 0
        assert bot.turn_cost > 0  # measured again from the worlds played (the fake clock's reads)


def test_the_turn_cost_is_measured_from_the_worlds_played() -> None:
    s, seat, legal = early_aberto_choice()
    bot = ExpertBot(5, PRESETS["aberto"], budget_ms=50.0, max_worlds=2, clock=FakeClock(1e-5), strict=True)
    assert bot.turn_cost == 0.0
    bot.choose(s.view(seat), legal)
    assert bot.last_worlds >= 1 and bot.cut_searches == 0  # nothing known yet: no cut
    assert bot.turn_cost > 0.0


def test_without_a_budget_the_rollouts_are_never_cut() -> None:
    """The exact mode (``budget_ms=None``, a fixed number of worlds) reads no clock and stays exact:
    its rollouts play to the end of the hand whatever the turn cost."""
    s, seat, legal = early_aberto_choice()
    bot = ExpertBot(5, PRESETS["aberto"], budget_ms=None, max_worlds=1, strict=True)
    bot.turn_cost = 0.001
    action = bot.choose(s.view(seat), legal)
    assert action in legal and bot.searches == 1
    assert bot.cut_searches == 0 and bot.last_horizon == 0


def test_a_cut_rollout_is_valued_by_the_evaluation_and_a_finished_hand_by_its_score() -> None:
    s = early_aberto_choice()[0]
    rules = PRESETS["aberto"]
    evaluation = weights_for(rules, 2)
    assert evaluation is not None
    bot = ExpertBot(5, rules, budget_ms=None, strict=True)
    static = bot._utility(s, 0)
    bot._evaluation = evaluation  # as a cut search sets it
    assert bot._utility(s, 0) == pytest.approx(evaluation.value(s, 0))
    assert bot._utility(s, 0) != pytest.approx(static)
    finished = played_position("fechado", 2, 1, 10_000)
    assert finished.is_terminal()
    bot = ExpertBot(5, PRESETS["fechado"], budget_ms=None, strict=True)
    exact = bot._utility(finished, 0)
    fechado = weights_for(PRESETS["fechado"], 2)
    assert fechado is not None
    bot._evaluation = fechado
    assert bot._utility(finished, 0) == exact  # the hand's real score, never the estimate
