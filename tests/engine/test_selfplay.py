"""engine.selfplay: side rotation, one hand to its end, matches tallied."""

from engine.rules import PRESETS, ruleset_from_spec
from engine.selfplay import first_dealer, run, side_of_bot


def test_bots_swap_sides_every_game_and_the_first_dealer_moves_every_two() -> None:
    assert [side_of_bot(0, g) for g in range(4)] == [0, 1, 0, 1]
    assert [side_of_bot(1, g) for g in range(4)] == [1, 0, 1, 0]
    assert [first_dealer(g, 2) for g in range(4)] == [0, 0, 1, 1]
    # over four games each bot plays each side both after and before the other's first move
    starts = {(side_of_bot(0, g), (first_dealer(g, 2) + 1) % 2) for g in range(4)}
    assert starts == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert [first_dealer(g, 4) for g in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_matches_are_counted_per_bot_and_are_deterministic() -> None:
    rules = ruleset_from_spec({"preset": "fechado", "target": 1500})
    a = run(rules, 2, ("heuristic", "random"), "t", games=3)
    b = run(rules, 2, ("heuristic", "random"), "t", games=3)
    assert a.matches == 3 and a.hands >= 3 and len(a.hand_turns) == a.hands
    assert a.turns == sum(a.hand_turns) and a.actions > a.turns
    for x, y in zip(a.stats, b.stats, strict=True):
        assert (x.hands_won, x.hands_tied, x.hand_points, x.matches_won, x.match_points) == (
            y.hands_won, y.hands_tied, y.hand_points, y.matches_won, y.match_points)
    first, second = a.stats
    assert first.hands == second.hands == a.hands
    assert first.hands_won + second.hands_won + first.hands_tied == a.hands
    assert first.hands_tied == second.hands_tied
    assert first.matches_won + second.matches_won == a.matches == first.matches
    assert a.hand_turns == b.hand_turns


def test_min_hands_plays_more_matches() -> None:
    result = run(PRESETS["classico_104"], 2, ("random", "random"), "m", games=1, min_hands=3)
    assert result.hands >= 3 and result.matches == result.hands  # express: one hand a match


def test_single_hands_mode() -> None:
    result = run(PRESETS["fechado"], 4, ("heuristic", "random"), "h", hands=3)
    assert result.hands == 3 and result.matches == 0
    assert all(s.matches == 0 and s.hands == 3 for s in result.stats)
