"""The expert bot: legal, deterministic, blind to hidden cards, bounded by its budget; its sampler.

Searches here are small and deterministic (``budget_ms=None``: a fixed number of worlds, short
rollouts), so the tests are quick and time-independent; the budget itself is checked with a fake
clock, never by timing real decisions.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from engine.actions import DRAW, TAKE_PILE, Action, Discard
from engine.bots import Bot, ExpertBot, HeuristicBot, make_bot
from engine.bots.base import BOT_KINDS
from engine.bots.expert import MeldReadings, RolloutView, student_quantile
from engine.bots.reading import TypedView, codes, read_meld
from engine.bots.sampling import PublicMemory, SamplingError, information, meld_from_view, playable, sample
from engine.cards import NCODES, format_many, parse_many
from engine.match import MatchState
from engine.rules import PRESETS, ruleset_from_spec
from engine.selfplay import play_hand
from engine.state import HandState
from tests.engine.builders import position

PRESET_NAMES = sorted(PRESETS)


def small(seed: int | str, rules: Any, worlds: int = 3, horizon: int | None = 4) -> ExpertBot:
    """An expert with a fixed, small search (no clock): deterministic and quick."""
    return ExpertBot(seed, rules, budget_ms=None, max_worlds=worlds, horizon=horizon, strict=True)


def played_position(name: str, players: int, seed: int, turns: int) -> HandState:
    """A hand played ``turns`` turns by heuristic bots (a realistic mid-hand position)."""
    rules = PRESETS[name]
    match = MatchState(rules, players)
    match.start_hand(seed=f"expert/{name}/{seed}")
    hand = match.hand
    assert hand is not None
    bots = [HeuristicBot(f"{seed}/{s}", rules) for s in range(players)]
    while not hand.is_terminal() and hand.turns < turns:
        seat = hand.to_act
        match.apply(bots[seat].choose(hand.view(seat), hand.legal_actions()), seat)
    return hand


def worlds_at(state: HandState, count: int) -> list[HandState]:
    """``count`` worlds the seat to act could be in, dealt from what it sees (seeds 0, 1, ...)."""
    view = state.view(state.to_act)
    memory = PublicMemory()
    memory.observe(view)
    info = information(view, memory, state.rules)
    return [sample(info, random.Random(k)) for k in range(count)]


def with_hidden_cards_dealt_again(state: HandState, seat: int, seed: int) -> HandState:
    """The same position for ``seat``: the cards it cannot see (other hands, stock, mortos not
    taken) dealt again at random, each hand and pack keeping its size."""
    data = state.to_json()
    others = [s for s in range(state.players) if s != seat]
    hidden = [c for s in others for c in parse_many(data["hands"][s])] + parse_many(data["stock"])
    open_mortos = [i for i, m in enumerate(data["mortos"]) if m is not None]
    for i in open_mortos:
        hidden += parse_many(data["mortos"][i])
    random.Random(seed).shuffle(hidden)
    at = 0
    for s in others:
        n = len(data["hands"][s])
        data["hands"][s] = format_many(sorted(hidden[at:at + n]))
        at += n
    for i in open_mortos:
        data["mortos"][i] = format_many(hidden[at:at + 11])
        at += 11
    data["stock"] = format_many(hidden[at:])
    return HandState.from_json(data)


# --- legality, determinism, what it reads -------------------------------------------------------------

@pytest.mark.parametrize("name", ["fechado", "aberto_sujo", "classico_104", "buraco_2005"])
@pytest.mark.parametrize("players", [2, 4])
def test_the_expert_only_plays_legal_actions_to_the_end_of_a_hand(name: str, players: int) -> None:
    rules = PRESETS[name]
    match = MatchState(rules, players)
    match.start_hand(seed=f"legal/{name}/{players}")
    hand = match.hand
    assert hand is not None
    bots: list[Bot] = [small(f"l/{s}", rules, worlds=2, horizon=3) if s % 2 == 0 else HeuristicBot(s, rules)
                       for s in range(players)]
    searched = 0
    while not hand.is_terminal():
        seat = hand.to_act
        legal = hand.legal_actions()
        action = bots[seat].choose(hand.view(seat), list(legal))
        assert action in legal, f"{action} is not legal"
        match.apply(action, seat)
        assert hand.turns < 1000
    for bot in bots:
        if isinstance(bot, ExpertBot):
            searched += bot.searches
            assert bot.rollouts >= bot.worlds > 0
    assert searched > 0


def test_the_expert_is_deterministic_for_its_seed() -> None:
    def actions(seed: str) -> list[dict[str, Any]]:
        rules = PRESETS["aberto"]
        match = MatchState(rules, 2)
        match.start_hand(seed="determinism")
        hand = match.hand
        assert hand is not None
        bots: list[Bot] = [small(f"{seed}/0", rules), HeuristicBot(f"{seed}/1", rules)]
        out = []
        while not hand.is_terminal():
            seat = hand.to_act
            action = bots[seat].choose(hand.view(seat), hand.legal_actions())
            out.append(action.to_json())
            match.apply(action, seat)
        return out

    assert actions("a") == actions("a")


@pytest.mark.parametrize("name", ["fechado", "aberto", "buraco_2005", "fechado_sujo"])
@pytest.mark.parametrize("players", [2, 4])
def test_the_expert_decides_the_same_whatever_the_hidden_cards(name: str, players: int) -> None:
    """Two positions that agree on everything the seat may see but deal the hidden cards differently:
    the same bot (same seed) makes the same decision in both, at the draw and in the play phase, and
    from a plain dict copy of the view as from the live view (which it must not reach behind)."""
    rules = PRESETS[name]
    decided = 0
    for seed in range(3):
        state = played_position(name, players, seed, turns=8 + 3 * seed)
        if state.is_terminal():
            continue
        for step in range(2):  # the draw, then the first decision of the play phase
            seat = state.to_act
            other = with_hidden_cards_dealt_again(state, seat, seed)
            assert other.view(seat).to_dict() == state.view(seat).to_dict()
            assert other.to_json()["hands"] != state.to_json()["hands"] or other.stock != state.stock
            legal = state.legal_actions()
            assert other.legal_actions() == legal
            first = small(f"blind/{seed}", rules, worlds=4)
            second = small(f"blind/{seed}", rules, worlds=4)
            third = small(f"blind/{seed}", rules, worlds=4)
            a = first.choose(state.view(seat), list(legal))
            b = second.choose(other.view(seat), list(legal))
            c = third.choose(state.view(seat).to_dict(), list(legal))
            assert a == b == c
            assert first.last_worlds == second.last_worlds
            decided += first.last_worlds > 0
            if step == 0:
                state.apply(DRAW if DRAW in legal else a, seat)
    assert decided > 0, "no decision was searched"


def test_budget_zero_plays_exactly_as_the_heuristic() -> None:
    """With no budget the expert is its advisor: the same actions as HeuristicBot(seed), no rollout."""
    rules = PRESETS["fechado"]

    def actions(kind: str) -> tuple[list[Action], int]:
        match = MatchState(rules, 2)
        match.start_hand(seed="budget-zero")
        hand = match.hand
        assert hand is not None
        if kind == "expert":
            bots: list[Any] = [ExpertBot(s, rules, budget_ms=0) for s in range(2)]
        else:
            bots = [HeuristicBot(s, rules) for s in range(2)]
        out = []
        while not hand.is_terminal():
            seat = hand.to_act
            action = bots[seat].choose(hand.view(seat), hand.legal_actions())
            out.append(action)
            match.apply(action, seat)
        return out, sum(getattr(b, "rollouts", 0) for b in bots)

    expert, rollouts = actions("expert")
    assert expert == actions("heuristic")[0]
    assert rollouts == 0


def test_tuned_policy_plays_the_advisor_and_its_sides_rollout_seats_tuned() -> None:
    """``tuned_policy``: with no budget the expert is its advisor tuned (``TUNED_KNOBS``); a rollout
    plays the expert's side tuned and the opponents plain, as such bots play the position; the knob
    turned off again gives back the plain advisor."""
    import math

    from engine.bots.heuristic import TUNED_KNOBS

    rules = PRESETS["fechado_sujo"]
    match = MatchState(rules, 2)
    match.start_hand(seed="tuned/0")
    hand = match.hand
    assert hand is not None

    def played(bots: list[Any]) -> list[Any]:
        state = hand.clone()
        while not state.is_terminal():
            seat = state.to_act
            state.apply(bots[seat].choose(state.view(seat), state.legal_actions()))
        return state.history

    def tuned(seed: int) -> HeuristicBot:
        bot = HeuristicBot(seed, rules)
        bot.tune(TUNED_KNOBS)
        return bot

    assert tuned(0).knobs(TUNED_KNOBS) == TUNED_KNOBS  # knobs reads back what tune set
    assert HeuristicBot(0, rules).knobs(TUNED_KNOBS) != TUNED_KNOBS
    experts = [ExpertBot(s, rules, budget_ms=0) for s in range(2)]
    for bot in experts:
        bot.tuned_policy = True
    assert played(experts) == played([tuned(0), tuned(1)])
    assert played([tuned(0), tuned(1)]) != played([HeuristicBot(0, rules), HeuristicBot(1, rules)])
    rollouts = []
    for on in (False, True):
        expert = ExpertBot(0, rules, budget_ms=None, max_worlds=1)
        expert.tuned_policy = on
        state = hand.clone()
        expert._rollout(state, 0, 7, math.inf, None)
        rollouts.append(state.history)
    assert rollouts[1] == played([tuned(7), HeuristicBot(8, rules)])
    assert rollouts[0] == played([HeuristicBot(7, rules), HeuristicBot(8, rules)]) != rollouts[1]
    expert = experts[0]
    expert.tuned_policy = False
    expert.choose(hand.view(hand.to_act), hand.legal_actions())
    assert expert.advisor.pile_params == HeuristicBot(0, rules).pile_params


class FakeClock:
    """A CPU clock that advances ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.now += self.step
        self.reads += 1
        return self.now


def a_real_choice(name: str = "aberto", players: int = 2) -> tuple[HandState, int]:
    """A play-phase decision with several candidates (no meld: which card to discard)."""
    hands = ["9C 9D KS QD 3C 7H JH", "5D 6D 9S 10S KH QH 8C", "4C 4D 8S JS AH 6C 10D", "3D 7D 5S QS 4H 8H KC"]
    s = position(name, hands[:players], pile="7S 10C", stock_top="5C")
    s.apply(DRAW, 0)
    return s, 0


# The clock is read once when ``choose`` starts, once before each world, and once as each rollout
# starts (these rollouts, two turns long, are shorter than CLOCK_EVERY actions); this position has three
# candidates (three discards), so a world costs four reads. With a read costing ``step``:
# - 10 ms, 4 ms: the first world's check sees 4 ms used, but its second rollout reads 16 ms > 14 ms
#   (the deadline, start + budget): the world is dropped whole, no world counts;
# - 50 ms, 4 ms: after two worlds the check sees 36 ms used + 18 ms per world > 50 ms: two worlds;
# - 50 ms, 1 ms: after twelve worlds, 49 ms + 4 ms > 50 ms: twelve worlds.
@pytest.mark.parametrize("budget_ms,step_ms,worlds", [(10.0, 4.0, 0), (50.0, 4.0, 2), (50.0, 1.0, 12)])
def test_the_expert_stops_dealing_worlds_at_its_budget(budget_ms: float, step_ms: float, worlds: int) -> None:
    """The bot deals another world only if the time used so far plus one world's mean cost stays within
    the budget, and drops a world whose rollouts pass the deadline: it never works on past it."""
    s, seat = a_real_choice()
    clock = FakeClock(step_ms / 1000.0)
    bot = ExpertBot(1, PRESETS["aberto"], budget_ms=budget_ms, horizon=2, clock=clock, strict=True)
    bot.prune_after = 10_000  # keep every candidate alive: the budget alone stops the search
    legal = s.legal_actions()
    heuristic = HeuristicBot(1, PRESETS["aberto"]).choose(s.view(seat), legal)
    action = bot.choose(s.view(seat), legal)
    assert bot.last_worlds == worlds
    assert bot.last_rollouts >= 3 * bot.last_worlds
    # the last read is the one that found the budget spent: no work after it
    assert clock.now <= (budget_ms + 2 * step_ms) / 1000.0
    # fewer worlds than prune_after (none, or two): too few to replace the heuristic's choice, which
    # stands, and the search is counted as such
    assert action == heuristic
    assert bot.searches == 1 and bot.short_searches == 1 and bot.switches == 0


def test_the_expert_counts_worlds_and_rollouts() -> None:
    s, seat = a_real_choice()
    bot = small(1, PRESETS["aberto"], worlds=5, horizon=2)
    bot.prune_after = 10_000
    bot.choose(s.view(seat), s.legal_actions())
    assert bot.last_worlds == 5 and bot.searches == 1
    assert bot.last_rollouts % 5 == 0 and bot.last_rollouts >= 10  # every candidate in every world


@pytest.mark.parametrize("seed", range(6))
def test_the_expert_counts_the_searches_that_replaced_the_heuristics_choice(seed: int) -> None:
    """``switches`` counts the searches whose choice is not the heuristic's; a search with as many
    worlds as ``prune_after`` or more is not short. The thresholds are loosened so that some of these
    searches switch (any candidate ahead on its worlds replaces the heuristic's choice)."""
    s, seat = a_real_choice()
    rules = PRESETS["aberto"]
    bot = small(seed, rules, worlds=4, horizon=2)
    bot.pick_z = 0.0
    bot.pick_margin = 0.0
    legal = s.legal_actions()
    heuristic = HeuristicBot(seed, rules).choose(s.view(seat), legal)
    action = bot.choose(s.view(seat), legal)
    assert bot.searches == 1 and bot.short_searches == 0
    assert bot.switches == (1 if action != heuristic else 0)


def test_some_loosened_searches_switch() -> None:
    """The counter above can count: over a few seeds, a loosened search replaces the heuristic's choice."""
    s, seat = a_real_choice()
    switched = 0
    for seed in range(6):
        bot = small(seed, PRESETS["aberto"], worlds=4, horizon=2)
        bot.pick_z = 0.0
        bot.pick_margin = 0.0
        bot.choose(s.view(seat), s.legal_actions())
        switched += bot.switches
    assert switched > 0


#: the switch's threshold each kind of match reads: one hand or to a target, two players or two pairs
SWITCH_THRESHOLDS = ("pick_z", "pairs_pick_z", "express_pick_z", "express_pairs_pick_z")


@pytest.mark.parametrize("name,players,read", [
    ("aberto", 2, "pick_z"), ("fechado_sujo", 2, "pick_z"), ("aberto", 4, "pairs_pick_z"),
    ("fechado_sujo", 4, "pairs_pick_z"), ("classico_104", 2, "express_pick_z"),
    ("classico_104", 4, "express_pairs_pick_z"),
])
def test_the_switch_asks_the_threshold_of_its_kind_of_match(name: str, players: int, read: str) -> None:
    """The threshold of the match's kind decides (the others, set the opposite way, are never read):
    loosened, some searches replace the heuristic's choice; raised out of reach, none does."""
    s, seat = a_real_choice(name, players)
    assert (PRESETS[name].target == 0) == (name == "classico_104")
    switched = {}
    for loose in (True, False):
        switched[loose] = 0
        for seed in range(6):
            bot = small(seed, PRESETS[name], worlds=4, horizon=2)
            bot.pick_margin = 0.0
            for threshold in SWITCH_THRESHOLDS:
                setattr(bot, threshold, (0.0 if loose else 1e9) if threshold == read else (1e9 if loose else 0.0))
            bot.choose(s.view(seat), s.legal_actions())
            switched[loose] += bot.switches
    assert switched[True] > 0 and switched[False] == 0


@pytest.mark.parametrize("df,t", [(1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042),
                                  (120, 1.980)])
def test_student_quantile_reads_as_the_t_tables(df: int, t: float) -> None:
    """The normal law's 97.5% quantile carried to Student's t: the tables' 97.5% quantiles."""
    assert student_quantile(1.959964, df) == pytest.approx(t, abs=1e-3)


def test_student_quantile_falls_towards_the_normal_one() -> None:
    """Bisection under 1,000 degrees of freedom, Cornish-Fisher from there: one falling curve."""
    values = [student_quantile(2.0, df) for df in (1, 2, 4, 8, 16, 64, 256, 999, 1000, 4000, 10 ** 6)]
    assert values == sorted(values, reverse=True) and len(set(values)) == len(values)
    assert 2.0 < values[-1] < 2.0 + 1e-5
    # no step where the method changes: from 999 to 1,000 the curve falls by its slope, z (z^2 + 1) / 4n^2
    for z in (2.0, 4.0):
        fall = student_quantile(z, 999) - student_quantile(z, 1000)
        assert fall == pytest.approx(z * (z * z + 1) / 4 / 999 / 1000, rel=0.01)


def test_student_quantile_is_odd_and_needs_a_degree_of_freedom() -> None:
    assert student_quantile(0.0, 3) == 0.0
    assert student_quantile(-1.959964, 5) == pytest.approx(-2.571, abs=1e-3)
    assert student_quantile(-3.0, 2000) == -student_quantile(3.0, 2000)
    with pytest.raises(ValueError, match="degree of freedom"):
        student_quantile(2.0, 0)
    # past the series' digits, a threshold set out of reach stays out of reach
    assert all(student_quantile(z, df) >= z for z in (8.0, 40.0, 1e9) for df in (2, 3, 39, 999))


@pytest.mark.parametrize("name,players,read", [
    ("aberto", 2, "pick_z"), ("aberto", 4, "pairs_pick_z"), ("classico_104", 2, "express_pick_z"),
    ("classico_104", 4, "express_pairs_pick_z"),
])
def test_the_student_switch_asks_more_of_fewer_worlds(name: str, players: int, read: str) -> None:
    """On (the default), the threshold is Student's t of the worlds less one, stricter the fewer the
    worlds; off, the kind's in standard errors, whatever the worlds."""
    bot = ExpertBot(0, PRESETS[name])
    z = getattr(bot, read)
    strict = [bot.threshold(players, w) for w in (3, 10, 40)]
    assert strict == [student_quantile(z, 2), student_quantile(z, 9), student_quantile(z, 39)]
    assert strict[0] > strict[1] > strict[2] > z
    bot.student_switch = False
    assert [bot.threshold(players, w) for w in (3, 10, 40)] == [z, z, z]


@pytest.mark.parametrize("players", [2, 4])
def test_a_one_hand_win_weighs_win_weight_for_two_players_and_its_own_for_two_pairs(players: int) -> None:
    rules = PRESETS["classico_104"]
    assert rules.target == 0
    match = MatchState(rules, players)
    match.start_hand(seed="express-utility")
    play_hand(match, [HeuristicBot(s, rules) for s in range(players)])
    state = match.hand
    assert state is not None and state.is_terminal()
    totals = [side["total"] for side in state.score()]
    diff = float(totals[0] - totals[1])
    assert diff != 0
    bot = ExpertBot(0, rules)
    bot.win_weight, bot.express_pairs_win_weight = 1000.0, 300.0
    weight = 1000.0 if players == 2 else 300.0
    won = 1.0 if diff > 0 else -1.0
    assert bot._utility(state, 0) == diff + won * weight and bot._utility(state, 1) == -diff - won * weight


def test_trivial_decisions_do_not_search() -> None:
    s = position("aberto", ["4H 5H 6H 9C", "5D 6D 9S 10S"])  # empty pile: drawing is the only action
    bot = ExpertBot(1, PRESETS["aberto"], clock=FakeClock(1.0))  # any search would see the budget spent
    assert bot.choose(s.view(0), s.legal_actions()) == DRAW
    assert bot.searches == 0 and bot.rollouts == 0


def test_choose_discard_answers_with_a_legal_discard_at_once() -> None:
    s, seat = a_real_choice()
    legal = s.legal_actions()
    bot = ExpertBot(1, PRESETS["aberto"])
    d = bot.choose_discard(s.view(seat), legal)
    assert isinstance(d, Discard) and d in legal and bot.rollouts == 0


def test_make_bot_builds_the_expert() -> None:
    assert "expert" in BOT_KINDS
    bot = make_bot("expert", 3, PRESETS["fechado"])
    assert bot.name == "expert" and isinstance(bot, ExpertBot) and bot.budget_ms == 50.0
    quick = make_bot("expert", 3, PRESETS["fechado"], budget_ms=5.0)
    assert isinstance(quick, ExpertBot) and quick.budget_ms == 5.0


def test_a_seeded_match_against_the_heuristic_runs_to_its_end() -> None:
    rules = ruleset_from_spec({"preset": "aberto", "target": 600})
    match = MatchState(rules, 2)
    bots: list[Any] = [small("m/0", rules, worlds=2, horizon=3), HeuristicBot("m/1", rules)]
    while not match.is_over():
        match.start_hand(seed=f"match/{match.hands_played}")
        hand = match.hand
        assert hand is not None
        while not hand.is_terminal():
            seat = hand.to_act
            legal = hand.legal_actions()
            action = bots[seat].choose(hand.view(seat), legal)
            assert action in legal
            match.apply(action, seat)
        assert match.hands_played < 30
    assert match.winner in (0, 1)
    assert bots[0].searches > 0


def test_in_a_match_to_a_target_the_hand_that_ends_it_weighs_the_match_win() -> None:
    """The expert's value of a finished hand: the hands' difference, and with ``match_aware``
    ``win_weight`` more for the side that wins the match when the hand ends it (a side reaches the
    target)."""
    rules = PRESETS["fechado"]
    match = MatchState(rules, 2)
    match.start_hand(seed="utility")
    play_hand(match, [HeuristicBot(s, rules) for s in range(2)])
    state = match.hand
    assert state is not None and state.is_terminal()
    totals = [side["total"] for side in state.score()]
    diff = float(totals[0] - totals[1])
    assert diff != 0 and max(totals) < rules.target
    bot = ExpertBot(0, rules)
    state.match_totals = [rules.target - totals[0], 0]
    assert bot._utility(state, 0) == diff  # off by default: the hand's difference alone
    bot.match_aware = True
    weight = bot.win_weight
    state.match_totals = [0, 0]  # nobody reaches the target: the hand's difference alone
    assert bot._utility(state, 0) == diff and bot._utility(state, 1) == -diff
    state.match_totals = [rules.target - totals[0], 0]  # side 0 reaches it exactly, side 1 stays far below
    assert bot._utility(state, 0) == diff + weight and bot._utility(state, 1) == -diff - weight
    state.match_totals = [0, rules.target - totals[1] + 50]  # side 1 is over it and ahead
    assert bot._utility(state, 0) == diff - weight and bot._utility(state, 1) == -diff + weight
    both = rules.target + abs(totals[0] - totals[1])  # both over it, level: no winner yet
    state.match_totals = [both - totals[0], both - totals[1]]
    assert bot._utility(state, 0) == diff
    bot.match_aware = False
    state.match_totals = [rules.target - totals[0], 0]
    assert bot._utility(state, 0) == diff


def test_the_view_the_worlds_and_a_restored_match_show_the_totals_before_the_hand() -> None:
    rules = PRESETS["fechado"]
    bots = [HeuristicBot(s, rules) for s in range(2)]
    match = MatchState(rules, 2)
    match.start_hand(seed="totals/1")
    play_hand(match, bots)
    before = match.totals[:]
    assert before != [0, 0] and not match.is_over()
    match.start_hand(seed="totals/2")
    hand = match.hand
    assert hand is not None
    for _ in range(9):
        seat = hand.to_act
        match.apply(bots[seat].choose(hand.view(seat), hand.legal_actions()), seat)
    seat = hand.to_act
    view = hand.view(seat)
    assert view["match_totals"] == before
    restored = MatchState.from_json(match.to_json())
    assert restored.hand is not None and restored.hand.match_totals == before
    memory = PublicMemory()
    memory.observe(view)
    world = sample(information(view, memory, rules), random.Random(1))
    assert world.view(seat).to_dict() == view.to_dict()
    assert RolloutView(world, seat, {}, MeldReadings())["match_totals"] == before
    play_hand(match, bots)  # the hand over: the totals now count it, the hand's still exclude it
    assert match.totals != before
    restored = MatchState.from_json(match.to_json())
    assert restored.hand is not None and restored.hand.match_totals == before


# --- the sampler ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PRESET_NAMES)
@pytest.mark.parametrize("players", [2, 4])
def test_a_sample_shows_the_seat_exactly_its_own_view(name: str, players: int) -> None:
    """Every sampled world looks, from the seat, exactly like the real position: the same view, the
    same legal actions; and it is a whole deck of the ruleset."""
    rules = PRESETS[name]
    for seed in range(2):
        state = played_position(name, players, seed, turns=6 + 7 * seed)
        if state.is_terminal():
            continue
        seat = state.to_act
        view = state.view(seat)
        for world in worlds_at(state, 3):
            assert world.view(seat).to_dict() == view.to_dict()
            assert world.legal_actions() == state.legal_actions()
            total = sum(world.sizes) + len(world.pile) + len(world.stock) + sum(
                len(m.cards) for side in world.melds for m in side) + sum(len(m) for m in world.mortos if m)
            assert total == rules.deck_size


def test_playable_reads_runs_groups_and_the_sides_melds() -> None:
    none = [False] * NCODES

    def counts(cards: str) -> list[int]:
        out = [0] * NCODES
        for c in parse_many(cards.split()):
            out[c] += 1
        return out

    def card(text: str) -> int:
        return parse_many([text])[0]

    run = counts("5H 6H 7H KC")
    assert all(playable(card(c), run, none, False) for c in ("5H", "6H", "7H"))
    assert not playable(card("KC"), run, none, False)
    gap = counts("5H 7H 8C")
    assert not any(playable(card(c), gap, none, True) for c in ("5H", "7H", "8C"))
    assert playable(card("AS"), counts("QS KS AS"), none, False)  # the ace above the king
    assert not playable(card("AS"), counts("AS 2S 3S"), none, False)  # a 2 is a wild, not a natural
    assert not playable(card("3S"), counts("AS 2S 3S"), none, False)
    trio = counts("9C 9D 9S")
    assert playable(card("9C"), trio, none, True)
    assert not playable(card("9C"), trio, none, False)  # no groups in the ruleset
    fits = none[:]
    fits[card("4D")] = fits[card("2D")] = True
    assert playable(card("4D"), counts("4D KC"), fits, False)
    assert not playable(card("2D"), counts("2D KC"), fits, False)  # a wild is never a natural play


def hidden_cards(world: HandState, seat: int) -> list[int]:
    """The cards ``seat`` cannot see: the other hands, the stock and the face-down mortos."""
    return sorted([*world.stock, *(c for m in world.mortos if m for c in m),
                   *(c for s in range(world.players) if s != seat for c in world.hand_of(s))])


def laid_down_cards(world: HandState, info: Any) -> int:
    """Cards, in the hands ``info`` says have played, that could have been laid down (the beliefs'
    cards, taken with the pile, are counted too: they are the seat's memory, not the sample's)."""
    found = 0
    for s in range(world.players):
        if info.played[s]:
            counts = list(world.counts[s])
            found += sum(counts[c] for c in range(len(counts))
                         if counts[c] and playable(c, counts, info.fits[s & 1], world.rules.groups))
    return found


@pytest.mark.parametrize("name", ["classico_104", "fechado", "buraco_2005"])
@pytest.mark.parametrize("players", [2, 4])
def test_worlds_lean_towards_hands_that_laid_down_what_they_could(name: str, players: int) -> None:
    """With ``laid`` 1, the hands that have played hold (almost) no card they could have laid down,
    where uniform worlds hold many; each world still shows the seat exactly its view."""
    rules = PRESETS[name]
    uniform = leaning = 0
    for seed in range(3):
        state = played_position(name, players, seed, turns=12 + 5 * seed)
        if state.is_terminal():
            continue
        seat = state.to_act
        view = state.view(seat)
        memory = PublicMemory()
        memory.observe(view)
        info = information(view, memory, rules)
        # mid-hand, every other seat has played, but one that has just taken its morto (its 11 cards)
        assert info.played == [s != seat and s not in memory.morto_pending for s in range(players)]
        for k in range(10):
            plain = sample(info, random.Random(k))
            world = sample(info, random.Random(k), laid=1.0)
            assert world.view(seat).to_dict() == view.to_dict()
            assert world.legal_actions() == state.legal_actions()
            assert hidden_cards(world, seat) == hidden_cards(plain, seat)  # the same cards, dealt otherwise
            uniform += laid_down_cards(plain, info)
            leaning += laid_down_cards(world, info)
    assert uniform >= 10
    assert leaning * 10 <= uniform


def test_hands_that_have_not_played_are_dealt_freely() -> None:
    """The first seat to act at a new hand: no other hand has played, so leaning changes nothing."""
    rules = PRESETS["classico_104"]
    match = MatchState(rules, 4)
    match.start_hand(seed="laid/first")
    hand = match.hand
    assert hand is not None
    view = hand.view(hand.to_act)
    memory = PublicMemory()
    memory.observe(view)
    info = information(view, memory, rules)
    assert not any(info.played)
    for k in range(3):
        assert sample(info, random.Random(k), laid=1.0).to_json() == sample(info, random.Random(k)).to_json()


def seat_0_discards_the_8s(seat_1: str, pile: str) -> tuple[HandState, PublicMemory]:
    """An ``aberto`` hand of two where seat 0 (whose memory is returned) draws and discards the 8S;
    seat 1 holds ``seat_1`` and is to act."""
    s = position("aberto", ["4H 5H 9C 9D KS QD 3C 8S", seat_1], pile=pile)
    memory = PublicMemory()
    memory.observe(s.view(0))
    s.apply(DRAW, 0)
    memory.note_discard(s.view(0), parse_many(["8S"])[0])
    s.apply(Discard(parse_many(["8S"])[0]), 0)
    return s, memory


def test_cards_seen_taken_with_the_pile_are_dealt_to_the_taker() -> None:
    rules = PRESETS["aberto"]
    s, memory = seat_0_discards_the_8s("5D 6D 9S 10S KH QH 8C 2S", pile="7S")
    s.apply(TAKE_PILE, 1)  # seat 1 takes 7S 8S
    s.apply(Discard(parse_many(["2S"])[0]), 1)
    assert memory.observe(s.view(0))  # the seat's next turn starts (at its draw)
    s.apply(DRAW, 0)
    view = s.view(0)
    assert not memory.observe(view)  # the same turn
    info = information(view, memory, rules)
    assert sorted(info.known[1]) == sorted(parse_many(["7S", "8S"]))
    for k in range(5):
        world = sample(info, random.Random(k))
        assert world.counts[1][parse_many(["7S"])[0]] >= 1 and world.counts[1][parse_many(["8S"])[0]] >= 1


def test_the_memory_knows_which_pile_top_each_seat_declined() -> None:
    """A seat that drew from the stock declined the pile's top as the seat before it left it; a seat
    that took the pile declined nothing."""
    s, memory = seat_0_discards_the_8s("5D 6D 9S 10S KH QH 8C 3S", pile="7S")
    s.apply(DRAW, 1)  # seat 1 declines the 8S
    s.apply(Discard(parse_many(["3S"])[0]), 1)
    assert memory.observe(s.view(0))
    assert memory.declined[:2] == [-1, parse_many(["8S"])[0]]
    s.apply(DRAW, 0)
    view = s.view(0)
    assert information(view, memory, PRESETS["aberto"]).declined == [-1, parse_many(["8S"])[0]]
    memory.note_discard(view, parse_many(["QD"])[0])
    s.apply(Discard(parse_many(["QD"])[0]), 0)
    s.apply(TAKE_PILE, 1)  # seat 1 takes the pile this time
    s.apply(Discard(parse_many(["8C"])[0]), 1)
    memory.observe(s.view(0))
    assert memory.declined[:2] == [-1, -1]


def test_worlds_lean_away_from_what_would_have_made_the_declined_pile_worth_taking() -> None:
    """Seat 1 declined the 8S: with ``declined`` 1 its sampled hand holds no 6S-7S, 7S-9S or 9S-10S
    pair, where uniform worlds often do; each world still shows seat 0 exactly its view."""
    rules = PRESETS["aberto"]
    s, memory = seat_0_discards_the_8s("5D 6D 9S 10S KH QH 8C 3S", pile="7C")
    s.apply(DRAW, 1)
    s.apply(Discard(parse_many(["3S"])[0]), 1)
    assert memory.observe(s.view(0))
    s.apply(DRAW, 0)
    view = s.view(0)
    info = information(view, memory, rules)
    eight = parse_many(["8S"])[0]

    def pairs(world: HandState) -> int:
        """Seat 1's cards that make a run with the 8S and not without it."""
        counts = list(world.counts[1])
        none = [False] * len(counts)
        found = 0
        for c in range(len(counts)):
            if counts[c] and not playable(c, counts, none, rules.groups):
                counts[eight] += 1
                found += playable(c, counts, none, rules.groups)
                counts[eight] -= 1
        return found

    uniform = leaning = 0
    for k in range(200):
        world = sample(info, random.Random(k), declined=1.0)
        assert world.view(0).to_dict() == view.to_dict()
        uniform += pairs(sample(info, random.Random(k)))
        leaning += pairs(world)
    assert uniform >= 10
    assert leaning == 0


def test_a_meld_that_does_not_read_back_is_refused() -> None:
    with pytest.raises(SamplingError):
        meld_from_view("sequence", ("4H", "5H", "6H"), "clean", PRESETS["aberto"])


@pytest.mark.parametrize("name", ["fechado", "aberto", "buraco_2005"])
@pytest.mark.parametrize("players", [2, 4])
def test_the_rollout_view_shows_what_the_view_shows(name: str, players: int) -> None:
    """The rollouts' players read ``RolloutView``: it must equal ``HandState.view(seat)`` field by field."""
    cache: dict[Any, dict[str, Any]] = {}
    tables = MeldReadings()
    for turns in (1, 9, 25, 60):
        state = played_position(name, players, 1, turns=turns)
        if state.is_terminal():
            continue
        for seat in range(players):
            fast = RolloutView(state, seat, cache, tables)
            assert dict(fast) == state.view(seat).to_dict()
            assert dict(RolloutView(state, seat, cache, tables)) == dict(fast)  # from the cache, the same


@pytest.mark.parametrize("name", ["fechado", "aberto_joker50", "buraco_2005"])
@pytest.mark.parametrize("players", [2, 4])
def test_the_rollout_view_reads_every_position_of_a_rollout_as_its_fields_read(name: str, players: int) -> None:
    """A rollout's positions follow one another in one state, two rollouts interleaved (as a world
    plays its candidates): the melds each position shows are read as its fields read, whatever the
    readings kept from the position before (the row of a side is reused only where its melds are the
    very same)."""
    rules = PRESETS[name]
    cache: dict[Any, dict[str, Any]] = {}
    readings = MeldReadings()
    states = [played_position(name, players, 3, turns=2), played_position(name, players, 4, turns=2)]
    bots = [[HeuristicBot(f"r{k}/{s}", rules) for s in range(players)] for k in range(2)]
    positions = grown = 0
    while not all(state.is_terminal() for state in states):
        for k, state in enumerate(states):
            if state.is_terminal():
                continue
            seat = state.to_act
            view = RolloutView(state, seat, cache, readings)
            read = [[read_meld(m["kind"], tuple(m["cards"]), m["canastra"]) for m in side] for side in view["melds"]]
            before = [len(row) for row in readings.rows]
            assert view.table_melds() == read
            grown += sum(len(row) for row in read) != sum(before)
            positions += 1
            state.apply(bots[k][seat].choose(view, state.legal_actions()))
    assert positions > 100 and grown > 0


@pytest.mark.parametrize("name", ["fechado", "aberto", "buraco_2005"])
@pytest.mark.parametrize("players", [2, 4])
def test_the_rollout_view_reads_as_its_fields_read(name: str, players: int) -> None:
    """``RolloutView``'s typed reads (what the rollouts' players use) are what its fields read as,
    the melds on the table included, and new lists each time (the reader may change them)."""
    cache: dict[Any, dict[str, Any]] = {}
    tables = MeldReadings()
    melds_seen = 0
    for turns in (1, 9, 25, 60, 90):
        state = played_position(name, players, 2, turns=turns)
        for seat in range(players):
            for _ in range(2):  # the second time from the caches
                view = RolloutView(state, seat, cache, tables)
                assert isinstance(view, TypedView)
                counts = [0] * len(state.counts[seat])
                for c in codes(view["hand"]):
                    counts[c] += 1
                assert view.hand_counts() == counts
                assert view.pile_codes() == codes(view["discard"])
                read = [[read_meld(m["kind"], tuple(m["cards"]), m["canastra"]) for m in side]
                        for side in view["melds"]]
                assert view.table_melds() == read
                melds_seen += sum(len(side) for side in read)
                view.hand_counts().append(99)
                view.pile_codes().append(99)
                for row in view.table_melds():
                    row.append(read_meld("group", ("3H", "3S", "3D"), "none"))
                assert view.hand_counts() == counts and view.pile_codes() == codes(view["discard"])
                assert view.table_melds() == read
    assert melds_seen > 0
