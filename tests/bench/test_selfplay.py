"""bench.selfplay (`make bench-bots`): Wilson intervals and the command line."""

import re
from pathlib import Path

import pytest

from bench.selfplay import main, wilson


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


def test_the_suite_plays_every_preset_and_size_and_times_the_experts_decisions(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--suite", "fechado,aberto", "--suite-players", "2,4", "--smoke", "--bots", "expert,heuristic",
                 "--seed", "3", "--bench"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("suite expert_vs_heuristic: presets fechado, aberto; players 2, 4; 1 single hands")
    assert "expert budget 5.0 ms" in out[0]
    bench = {line.split()[1]: line.split()[2] for line in out if line.startswith("bench: ")}
    for preset in ("fechado", "aberto"):
        for players in (2, 4):
            key = f"expert_vs_heuristic_hand_winrate_{preset}_{players}p"
            assert float(bench[key]) in (0.0, 50.0, 100.0)  # one hand: won, tied or lost
            assert float(bench[key + "_ci95_low"]) <= float(bench[key]) <= float(bench[key + "_ci95_high"])
            assert bench[f"expert_vs_heuristic_hands_{preset}_{players}p"] == "1"
    decisions = int(bench["expert_decisions"])
    assert decisions > 0
    assert 0.0 < float(bench["expert_searched_decisions"]) <= 100.0
    assert float(bench["expert_cpu_per_decision_mean"]) <= float(bench["expert_cpu_per_decision_max"])
    # what the searches bought: per pairing, and over the suite (the sums of the pairings')
    searches = [line for line in out if line.startswith("expert searches: ")]
    assert len(searches) >= 2
    counts = [[int(n) for n in re.findall(r"(?<![.\d])(\d+)(?= |;|$)", line.split(":", 1)[1])] for line in searches]
    *pairings, total = counts
    assert total == [sum(c[i] for c in pairings) for i in range(5)]
    searched, short, switched, cut, worlds = total
    assert searched > 0 and 0 <= short <= searched and 0 <= switched <= searched - short and 0 <= cut <= searched
    assert float(bench["expert_worlds_per_search"]) == round(worlds / searched, 2)
    assert worlds >= 3 * (searched - short)  # a search that could switch dealt at least prune_after worlds
    assert float(bench["expert_searches_short"]) == round(100 * short / searched, 1)
    assert float(bench["expert_searches_switched"]) == round(100 * switched / searched, 1)
    assert float(bench["expert_searches_cut"]) == round(100 * cut / searched, 1)


def test_the_suite_refuses_an_unknown_preset(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--suite", "aberto,nope", "--bots", "expert,heuristic"])
    assert exc.value.code == 2
    assert "unknown preset(s) nope" in capsys.readouterr().err


def test_the_suite_deals_in_duplicate_pairs_of_games() -> None:
    from bench.selfplay import play_match
    from engine.rules import PRESETS

    rules = PRESETS["aberto"].to_dict()
    games = [play_match(rules, 2, ("heuristic", "random"), "dup", game, None, True) for game in range(4)]
    # a pair (games 0 and 1, 2 and 3): the same hand dealt, each bot on the other side
    assert games[0].deals == games[1].deals and games[2].deals == games[3].deals
    assert games[0].swap != games[1].swap and games[2].swap != games[3].swap
    assert games[0].deals != games[2].deals  # the next pair deals other hands
    assert all(len(g.deals) == 1 and g.hand_totals for g in games)


def test_the_service_collector_settles_only_when_enabled_and_when_due() -> None:
    """The bench runs Python's collector as a game-session replica does (frozen survivors, young
    passes every 10,000 allocations), only in its own processes, at most every settle period."""
    import gc

    from bench.selfplay import ServiceCollector
    from services.common.collector import GC_THRESHOLDS

    thresholds = gc.get_threshold()
    collector = ServiceCollector()
    try:
        collector.settle_if_due()  # not enabled: the process's collector is left alone
        assert collector.settled is None and gc.get_threshold() == thresholds
        collector.enabled = True
        before = gc.get_freeze_count()
        keep: list[list[int]] = [[] for _ in range(1000)]  # young survivors the settle must freeze
        collector.settle_if_due()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() >= before + len(keep)
        first = collector.settled
        collector.settle_if_due()  # within the period: no second settle
        assert collector.settled == first
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.parametrize(("df", "exact"), [
    (1, 12.7062), (2, 4.30265), (3, 3.18245), (5, 2.57058), (10, 2.22814), (29, 2.04523), (59, 2.00100),
    (1000, 1.96234), (10000, 1.96020),
])
def test_student_t_quantile_matches_the_tables(df: int, exact: float) -> None:
    from bench.selfplay import student_t_quantile

    assert student_t_quantile(0.975, df) == pytest.approx(exact, abs=1e-5)


def test_the_paired_rate_takes_the_duplicate_pair_as_its_unit() -> None:
    from bench.selfplay import paired_rate, student_t_quantile

    # every pair split: the deal decided each match, the bot's rate is exactly one half
    split = paired_rate([True, False] * 15)
    assert split.rate == 0.5
    assert (split.pairs, split.both_won, split.split, split.both_lost) == (15, 0, 15, 0)
    # ... but every pair alike shows no spread: the interval is Wilson's over the games, not a point
    assert (split.low, split.high) == pytest.approx(wilson(15, 30))
    assert (paired_rate([True] * 8).low, paired_rate([True] * 8).high) == pytest.approx(wilson(8, 8))
    # one pair that differs: Student's t over the pairs
    mixed = paired_rate([True, False] * 14 + [True, True])
    lo, hi = wilson(16, 30)
    assert mixed.low < mixed.rate < mixed.high and mixed.high - mixed.low < (hi - lo) / 2  # the luck cancelled
    # 20 pairs won twice, 10 split: 50 of 60 games; pair values 1 (x20) and 0.5 (x10)
    won = [True, True] * 20 + [False, True] * 10
    rate = paired_rate(won)
    values = [1.0] * 20 + [0.5] * 10
    mean = sum(values) / 30
    sd = (sum((v - mean) ** 2 for v in values) / 29) ** 0.5
    half = student_t_quantile(0.975, 29) * sd / 30 ** 0.5
    assert rate.rate == pytest.approx(50 / 60)
    assert rate.low == pytest.approx(mean - half) and rate.high == pytest.approx(mean + half)
    assert (rate.both_won, rate.split, rate.both_lost) == (20, 10, 0)
    # the same 50 wins in 60 games, but pairs won or lost whole: a wider interval than the split pairs'
    whole = paired_rate([True, True] * 25 + [False, False] * 5)
    assert whole.rate == pytest.approx(50 / 60)
    assert whole.high - whole.low > rate.high - rate.low
    # an odd game is a unit of its own; none at all: no information
    assert paired_rate([True, True, False]).pairs == 2
    assert (paired_rate([]).low, paired_rate([]).high) == (0.0, 1.0)


def test_the_suite_prints_the_paired_rates_and_writes_the_outcomes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    path = tmp_path / "outcomes.jsonl"
    assert main(["--suite", "aberto", "--suite-players", "2", "--games", "4", "--bots", "heuristic,random",
                 "--seed", "5", "--bench", "--outcomes", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    bench = {line.split()[1]: line.split()[2] for line in out if line.startswith("bench: ")}
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["preset"], r["players"], r["game"]) for r in rows] == [("aberto", 2, g) for g in range(4)]
    won = [r["winner"] == r["swap"] % 2 for r in rows]  # the first bot (heuristic) plays side swap
    key = "heuristic_vs_random_match_winrate_aberto_2p"
    assert float(bench[key]) == pytest.approx(100 * sum(won) / 4, abs=0.05)
    from bench.selfplay import paired_rate

    paired = paired_rate(won)
    assert float(bench[key + "_paired_ci95_low"]) == pytest.approx(100 * paired.low, abs=0.05)
    assert float(bench[key + "_paired_ci95_high"]) == pytest.approx(100 * paired.high, abs=0.05)
    assert any(line.startswith("duplicate pairs (heuristic): 2, ") for line in out)
    assert bench["heuristic_vs_random_pairings"] == "1"
    over = int(bench["heuristic_vs_random_pairings_over_60pct_paired"])
    assert over == int(paired.low > 0.6)


def test_expert_knobs_are_parsed_to_their_types_and_bad_ones_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.selfplay import expert_knobs

    assert expert_knobs(["pick_z=1.5", "discard_candidates=2", "search_all_plays=true"]) == {
        "pick_z": 1.5, "discard_candidates": 2, "search_all_plays": True}
    assert type(expert_knobs(["pick_z=2"])["pick_z"]) is float
    for bad, message in (("nope=1", "KNOB one of"), ("pick_z", "KNOB=VALUE"), ("prune_after=1.5", "takes a int"),
                         ("search_all_plays=1", "takes a bool")):
        with pytest.raises(ValueError, match=message):
            expert_knobs([bad])
    with pytest.raises(SystemExit):
        main(["--suite", "aberto", "--bots", "expert,heuristic", "--expert-set", "genius=1"])
    assert "--expert-set: 'genius=1'" in capsys.readouterr().err


def test_expert_knobs_take_the_types_of_a_new_bots_values() -> None:
    """The knobs' types are read off a bot's values, which are plain numbers and booleans in either
    build (the compiled class holds descriptors where the source holds the defaults)."""
    from bench.selfplay import EXPERT_KNOBS
    from engine.bots import ExpertBot

    bot = ExpertBot(0)
    assert EXPERT_KNOBS
    for knob, kind in EXPERT_KNOBS.items():
        assert kind in (int, float, bool), knob
        assert type(getattr(bot, knob)) is kind


def test_a_knob_reaches_the_expert_of_every_match(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.selfplay as selfplay
    from engine.bots.base import Bot, make_bot
    from engine.bots.expert import ExpertBot
    from engine.rules import PRESETS, Ruleset

    made: list[Bot] = []

    def spy(kind: str, seed: str, rules: Ruleset, budget_ms: float | None = None) -> Bot:
        made.append(make_bot(kind, seed, rules, budget_ms=budget_ms))
        return made[-1]

    monkeypatch.setattr(selfplay, "make_bot", spy)
    selfplay.play_match(PRESETS["aberto"].to_dict(), 4, ("expert", "heuristic"), "k", 0, 1.0, True, {"pick_z": 7.5})
    experts = [bot for bot in made if isinstance(bot, ExpertBot)]
    assert len(experts) == 2 and all(bot.pick_z == 7.5 for bot in experts)
    assert ExpertBot(0).pick_z != 7.5  # set on the match's bots, not on the class


def test_heuristic_knobs_are_parsed_to_their_types_and_bad_ones_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.selfplay import HEURISTIC_KNOBS, heuristic_knobs
    from engine.bots import HeuristicBot

    bot = HeuristicBot(0)
    for knob, kind in HEURISTIC_KNOBS.items():
        assert kind in (int, float, bool), knob
        assert type(getattr(bot, knob)) is kind
    assert heuristic_knobs(["keep_wilds=3", "feed_danger=45", "out_when_pressed=false",
                            "pile_params.morto=0,0,0,0"]) == {
        "heuristic.keep_wilds": 3, "heuristic.feed_danger": 45.0, "heuristic.out_when_pressed": False,
        "heuristic.pile_params.morto": (0.0, 0.0, 0.0, 0.0)}
    for bad, message in (("genius=1", "expected KNOB=VALUE"), ("keep_wilds=two", "takes a int"),
                         ("pile_params.sleepy=1,2,3,4", "takes a stage"),
                         ("pile_params.morto=1,2,3", "takes four numbers")):
        with pytest.raises(ValueError, match=message):
            heuristic_knobs([bad])
    with pytest.raises(SystemExit):  # a variant of the first bot, which must be the heuristic
        main(["--suite", "aberto", "--bots", "expert,heuristic", "--heuristic-set", "keep_wilds=3"])
    assert "--heuristic-set: a variant of the first bot" in capsys.readouterr().err


def test_a_heuristic_knob_reaches_the_first_bots_players_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variant against the plain heuristic: the first bot's players (side ``swap``) get the knobs, the
    second bot's keep the defaults, and the table every bot reads by default is left as it was."""
    import bench.selfplay as selfplay
    from engine.bots.base import Bot, make_bot
    from engine.bots.heuristic import HeuristicBot
    from engine.rules import PRESETS, Ruleset

    default_morto = HeuristicBot.PILE_PARAMS["morto"]
    knobs = selfplay.heuristic_knobs(["keep_wilds=5", "pile_params.morto=-7,0,0,0"])
    made: list[Bot] = []

    def spy(kind: str, seed: str, rules: Ruleset, budget_ms: float | None = None) -> Bot:
        made.append(make_bot(kind, seed, rules, budget_ms=budget_ms))
        return made[-1]

    monkeypatch.setattr(selfplay, "make_bot", spy)
    for game in (0, 1):
        made.clear()
        outcome = selfplay.play_match(PRESETS["aberto"].to_dict(), 4, ("heuristic", "heuristic"), "k", game,
                                      None, True, knobs)
        assert len(made) == 4
        for seat, bot in enumerate(made):
            assert isinstance(bot, HeuristicBot)
            variant = (seat & 1) == outcome.swap
            assert bot.keep_wilds == (5 if variant else HeuristicBot(0).keep_wilds)
            assert bot.pile_params["morto"] == ((-7.0, 0.0, 0.0, 0.0) if variant else default_morto)
            assert bot.pile_params["build"] == HeuristicBot.PILE_PARAMS["build"]
    assert HeuristicBot.PILE_PARAMS["morto"] == default_morto and HeuristicBot(0).pile_params["morto"] == default_morto


def test_compare_pairs_two_runs_game_by_game(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from bench.selfplay import sign_test

    def write(name: str, won: list[bool], knobs: dict[str, float]) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"preset": "aberto", "players": 2, "seed": "s", "game": g,
                                            "knobs": knobs, "won": w}) + "\n" for g, w in enumerate(won)))
        return path

    a = write("a.jsonl", [True, True, True, False, True, True], {})
    b = write("b.jsonl", [True, False, False, False, True, False], {"pick_z": 1.5})
    assert main(["--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"aberto 2p: 6 games; A won 5, B won 2; A alone 3, B alone 0; sign test p = {sign_test(3, 0):.3f}"
    assert out[-1].startswith("all: 6 games; A won 5, B won 2")
    assert sign_test(3, 0) == pytest.approx(0.25) and sign_test(0, 0) == 1.0 and sign_test(5, 5) == 1.0
    # a line written before outcome lines carried "won": the match's winner against the first bot's side
    from bench.selfplay import _won

    assert _won({"swap": 1, "winner": 1, "hand_totals": [[0, 0], [0, 0]]})
    assert not _won({"swap": 0, "winner": 1, "hand_totals": [[0, 0]]})
    assert _won({"swap": 1, "winner": -1, "hand_totals": [[100, 250]]})  # a single hand: its totals
    (tmp_path / "bad.jsonl").write_text("{}\n")
    with pytest.raises(SystemExit):
        main(["--compare", str(a), str(tmp_path / "bad.jsonl")])
    assert "not an outcome line" in capsys.readouterr().err


def test_a_suite_in_parts_plays_the_same_deals_and_summarizes_as_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from bench.selfplay import paired_rate

    whole, first, second = tmp_path / "whole.jsonl", tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    common = ["--suite", "aberto", "--suite-players", "2", "--bots", "heuristic,random", "--seed", "p"]
    assert main([*common, "--games", "4", "--outcomes", str(whole)]) == 0
    assert main([*common, "--games", "2", "--outcomes", str(first)]) == 0
    assert main([*common, "--games", "2", "--first-game", "2", "--outcomes", str(second)]) == 0
    capsys.readouterr()
    rows = [json.loads(line) for path in (first, second) for line in path.read_text().splitlines()]
    assert [r["game"] for r in rows] == [0, 1, 2, 3]
    # the parts deal what the whole run deals, game by game
    assert [r["deals"] for r in rows] == [json.loads(line)["deals"] for line in whole.read_text().splitlines()]
    assert main(["--summarize", str(first), str(second)]) == 0
    out = capsys.readouterr().out.splitlines()
    won = [r["won"] for r in rows]
    paired = paired_rate(won)
    assert out[0].startswith(f"aberto 2p (seed p, games 0..3): won {sum(won)}/4 = ")
    assert f"duplicate pairs {100 * paired.low:.1f}%..{100 * paired.high:.1f}%" in out[0]
    assert out[-1].startswith("pairings over 60% at the low end of the 95% interval: ")
    # a game twice, a part missing, an odd first game: refused
    for args, message in ((["--summarize", str(first), str(whole)], "is in another file too"),
                          (["--summarize", str(second)], None),
                          (["--suite", "aberto", "--first-game", "1"], "--first-game takes an even number")):
        if message is None:
            assert main(args) == 0  # games 2..3 alone are whole pairs in a row
            capsys.readouterr()
            continue
        with pytest.raises(SystemExit):
            main(args)
        assert message in capsys.readouterr().err
    gap = tmp_path / "gap.jsonl"
    gap.write_text(first.read_text().splitlines()[0] + "\n" + second.read_text().splitlines()[0] + "\n")
    with pytest.raises(SystemExit):
        main(["--summarize", str(gap)])
    assert "are not whole duplicate pairs in a row" in capsys.readouterr().err
