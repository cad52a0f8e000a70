"""engine.selfplay: Wilson intervals, side rotation, results, the command line."""

import re

import pytest

from engine.rules import PRESETS, ruleset_from_spec
from engine.selfplay import first_dealer, main, run, side_of_bot, wilson


def test_wilson_interval() -> None:
    lo, hi = wilson(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    lo, hi = wilson(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)
    lo, hi = wilson(20, 20)
    assert lo == pytest.approx(0.8389, abs=1e-4) and hi == 1.0
    assert wilson(0, 0) == (0.0, 1.0)
    # narrower with more trials, always around the rate
    lo1, hi1 = wilson(90, 100)
    lo2, hi2 = wilson(900, 1000)
    assert lo1 < lo2 < 0.9 < hi2 < hi1


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


def test_the_command_prints_win_rates_intervals_scores_and_speed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--ruleset", "fechado", "--players", "2", "--games", "2", "--bots", "heuristic,random",
                 "--seed", "7", "--bench"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ruleset fechado, 2 players, target 2000"
    rate = r"\d+/\d+ = \d+\.\d% \(95% CI \d+\.\d%\.\.\d+\.\d%\)"
    for line, kind in zip(out[1:3], ("heuristic", "random"), strict=True):
        assert re.fullmatch(rf"{kind}: hands won {rate}, tied \d+; matches won {rate}; "
                            r"average hand score -?\d+\.\d, average match score -?\d+\.\d", line), line
    assert re.fullmatch(r"played 2 matches, \d+ hands, \d+ turns, \d+ actions in \d+\.\d+ s: "
                        r"\d+\.\d hands/s, \d+ turns/s", out[3]), out[3]
    bench = [line for line in out if line.startswith("bench: ")]
    names = [line.split()[1] for line in bench]
    assert "heuristic_vs_random_hand_winrate_fechado" in names
    assert "heuristic_vs_random_match_winrate_fechado" in names
    assert "heuristic_vs_random_hand_winrate_fechado_ci95_low" in names
    for line in bench:
        assert re.fullmatch(r"bench: \S+ -?\d+\.\d (%|hands/s)", line), line


def test_the_command_takes_a_json_ruleset_and_single_hands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--ruleset", '{"preset": "fechado", "target": 0}', "--players", "4", "--hands", "2",
                 "--bots", "random,heuristic", "--seed", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "ruleset fechado+custom, 4 players, target express"
    assert out[1].startswith("random: hands won ") and "matches" not in out[1]
    assert out[3].startswith("played 2 single hands, ")


@pytest.mark.parametrize(("args", "message"), [
    (["--ruleset", "nope"], "unknown ruleset"),
    (["--ruleset", "{bad json"], "not valid JSON"),
    (["--bots", "heuristic"], "--bots takes two"),
    (["--bots", "heuristic,genius"], "--bots takes two"),
    (["--players", "3"], "invalid choice"),
    (["--games", "-1"], "must not be negative"),
    (["--hands", "2", "--min-hands", "5"], "--min-hands goes with --games"),
])
def test_bad_arguments_are_refused_with_a_message(args: list[str], message: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
