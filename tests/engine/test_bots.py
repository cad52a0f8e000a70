"""The bots: legal, never stalling, deterministic, reading only the view; the heuristic's tactics.

Tactical positions are built with ``tests.engine.builders.position``; each test plays the bot's
whole turn through the engine (``play_turn``) and checks what it did.
"""

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.actions import DRAW, TAKE_PILE, Action, AddCards, Discard, MeldCards
from engine.bots import Bot, HeuristicBot, make_bot
from engine.bots.heuristic import suit_slots
from engine.bots.reading import read_meld
from engine.cards import JOKER, parse
from engine.match import MatchState
from engine.rules import PRESETS, ruleset_from_spec
from engine.selfplay import play_hand
from engine.state import HandState
from tests.engine.builders import cards, position

PRESET_NAMES = sorted(PRESETS)
# what HandState.view(seat) shows while a hand is played
VIEW_KEYS = {"seat", "players", "hand_number", "dealer", "phase", "to_act", "hand_sizes", "melds", "discard",
             "stock_count", "mortos_taken", "mortos_in_stock", "must_meld", "lone_card", "score", "match_totals",
             "hand"}
# A hand lasts a few hundred turns at most (the stock and both mortos run out); far more is a stall.
MAX_TURNS = 1000


def play_turn(state: HandState, bot: Bot, seat: int) -> list[Action]:
    """Let ``bot`` play ``seat``'s turn to its end; every action must be one the engine listed."""
    done: list[Action] = []
    while not state.is_terminal() and state.to_act == seat and len(done) < 100:
        legal = state.legal_actions()
        action = bot.choose(state.view(seat), legal)
        assert action in legal, f"{action} is not legal"
        state.apply(action, seat)
        done.append(action)
        if isinstance(action, Discard):
            break
    return done


def play_one_hand(rules_name: str, players: int, kinds: tuple[str, str], seed: int) -> tuple[MatchState, int]:
    rules = PRESETS[rules_name]
    bots = [make_bot(kinds[seat & 1], f"{seed}/{seat}", rules) for seat in range(players)]
    match = MatchState(rules, players, first_dealer=seed % players)
    match.start_hand(seed=f"bots/{seed}")
    actions = 0
    hand = match.hand
    assert hand is not None
    while not hand.is_terminal():
        seat = hand.to_act
        legal = hand.legal_actions()
        action = bots[seat].choose(hand.view(seat), legal)
        assert action in legal, f"{bots[seat].name} chose {action}, not a legal action"
        match.apply(action, seat)
        actions += 1
        assert hand.turns <= MAX_TURNS, f"{rules_name}: the hand did not end after {MAX_TURNS} turns"
    return match, actions


# --- every preset, both table sizes -----------------------------------------------------------------

@settings(max_examples=24)
@given(name=st.sampled_from(PRESET_NAMES), players=st.sampled_from([2, 4]),
       kinds=st.sampled_from([("heuristic", "heuristic"), ("heuristic", "random"), ("random", "heuristic")]),
       seed=st.integers(0, 2**32))
def test_bots_only_play_legal_actions_and_finish_the_hand(name: str, players: int, kinds: tuple[str, str],
                                                          seed: int) -> None:
    match, actions = play_one_hand(name, players, kinds, seed)
    hand = match.hand
    assert hand is not None and hand.is_terminal() and actions >= hand.turns
    assert hand.end_reason in ("went_out", "stock_exhausted")
    assert match.hands_played == 1


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_heuristic_self_play_ends_every_hand(name: str) -> None:
    """Two heuristic bots that like the pile still run the stock down (no endless pile exchange)."""
    for players in (2, 4):
        for seed in range(2):
            match, _ = play_one_hand(name, players, ("heuristic", "heuristic"), seed)
            assert match.hand is not None and match.hand.is_terminal()


def test_the_pile_exchange_between_two_bots_is_broken_by_a_draw() -> None:
    """Both bots would take a one-card pile that fits their hand for ever; the stock must still shrink."""
    bot = HeuristicBot(0, PRESETS["aberto"])
    s = position("aberto", ["5H 6H 9C 9D KS QD", "5D 6D 9S 10S KH QH"], pile="7H")
    stocks = []
    for _ in range(6):
        seat = s.to_act
        play_turn(s, bot if seat == 0 else HeuristicBot(1, PRESETS["aberto"]), seat)
        stocks.append(len(s.stock))
    assert stocks[-1] < stocks[0], f"nobody drew in six turns: stock {stocks}"


# --- determinism and what the bots read ---------------------------------------------------------------

@pytest.mark.parametrize("kind", ["heuristic", "random"])
def test_a_bot_is_deterministic_for_its_seed(kind: str) -> None:
    def actions(seed: str) -> list[dict[str, Any]]:
        rules = PRESETS["fechado"]
        bots = [make_bot(kind, f"{seed}/{seat}", rules) for seat in range(2)]
        match = MatchState(rules, 2)
        match.start_hand(seed="determinism")
        hand = match.hand
        assert hand is not None
        out = []
        while not hand.is_terminal():
            seat = hand.to_act
            action = bots[seat].choose(hand.view(seat), hand.legal_actions())
            out.append(action.to_json())
            match.apply(action, seat)
        return out

    assert actions("a") == actions("a")


class RecordingView(Mapping[str, Any]):
    """A plain copy of a view that remembers which fields were read."""

    def __init__(self, data: dict[str, Any], read: set[str]) -> None:
        self._data = data
        self._read = read

    def __getitem__(self, key: str) -> Any:
        self._read.add(key)
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


@pytest.mark.parametrize("name", ["fechado", "aberto", "buraco_2005"])
def test_the_heuristic_decides_from_the_view_alone(name: str) -> None:
    """Given a plain copy of the view (no link to the state) it plays exactly as with the live view,
    and it reads only the fields a seat's view documents."""
    rules = PRESETS[name]
    live = [HeuristicBot(f"v/{seat}", rules) for seat in range(2)]
    copied = [HeuristicBot(f"v/{seat}", rules) for seat in range(2)]
    match = MatchState(rules, 2)
    match.start_hand(seed=f"view/{name}")
    hand = match.hand
    assert hand is not None
    read: set[str] = set()
    while not hand.is_terminal():
        seat = hand.to_act
        legal = hand.legal_actions()
        view = hand.view(seat)
        copy = RecordingView(view.to_dict(), read)
        action = live[seat].choose(view, list(legal))
        assert copied[seat].choose(copy, list(legal)) == action
        match.apply(action, seat)
    assert read <= VIEW_KEYS, f"read fields outside the seat's view: {read - VIEW_KEYS}"
    assert "hand" in read and "discard" in read


def test_a_copy_of_a_bot_mid_hand_plays_on_as_the_bot_itself() -> None:
    """``copy.deepcopy`` of a bot whose memory holds the hand (the pile taken, discards, the melds it
    read): the offline measure of the expert (bench/decisions.py) plays on with such copies of the
    table's bots, compiled as well as in Python."""
    import copy as copying

    rules = PRESETS["aberto"]
    bots = [HeuristicBot(f"c/{seat}", rules) for seat in range(2)]
    match = MatchState(rules, 2)
    match.start_hand(seed="copy")
    hand = match.hand
    assert hand is not None
    copies: list[HeuristicBot] = []
    compared = 0
    while not hand.is_terminal():
        seat = hand.to_act
        if not copies and hand.turns >= 40:
            assert any(any(row) for row in bots[0]._discarded) and any(bots[s]._table_melds[1 - s] for s in range(2))
            copies = [copying.deepcopy(bot, {id(rules): rules}) for bot in bots]
        legal = hand.legal_actions()
        action = bots[seat].choose(hand.view(seat), list(legal))
        if copies:
            assert copies[seat].choose(hand.view(seat), list(legal)) == action
            compared += 1
        match.apply(action, seat)
    assert compared > 20


def test_the_heuristic_forgets_a_hand_when_the_next_one_starts() -> None:
    """A bot kept for a whole match remembers within a hand only."""
    rules = ruleset_from_spec({"preset": "aberto", "target": 5000})
    bots = [HeuristicBot(seat, rules) for seat in range(2)]
    match = MatchState(rules, 2)
    match.start_hand(seed="memory")
    play_hand(match, bots)
    assert any(any(row) for bot in bots for row in bot._discarded), "nothing was remembered in hand 1"
    assert match.needs_deal()
    match.start_hand(seed="memory-2")
    hand = match.hand
    assert hand is not None
    seat = hand.to_act
    bots[seat].choose(hand.view(seat), hand.legal_actions())
    assert not any(any(row) for row in bots[seat]._discarded) and not bots[seat]._known_any
    assert bots[seat]._hand_key == (2, hand.dealer)


def test_choose_discard_returns_a_legal_discard() -> None:
    s = position("fechado", ["5S 9D KH JK 2C", "3S 4S 8D"], stock_top="7C")
    s.apply(DRAW, 0)
    legal = s.legal_actions()
    for kind in ("heuristic", "random"):
        d = make_bot(kind, 1, PRESETS["fechado"]).choose_discard(s.view(0), legal)
        assert isinstance(d, Discard) and d in legal
    with pytest.raises(ValueError):
        HeuristicBot().choose_discard(s.view(0), [a for a in legal if not isinstance(a, Discard)])


def test_make_bot_knows_both_kinds() -> None:
    assert make_bot("heuristic").name == "heuristic"
    assert make_bot("random").name == "random"
    with pytest.raises(ValueError, match="unknown bot"):
        make_bot("perfect")


# --- reading melds from the view ----------------------------------------------------------------------

def test_reading_a_sequence_with_its_wild_and_a_group() -> None:
    seq = read_meld("sequence", ("4H", "JK", "6H", "7H"), "none")
    assert seq.is_sequence and seq.suit == 1 and (seq.lo, seq.hi) == (4, 7)
    assert seq.wild == JOKER and seq.wild_slot == 5
    # 3H and 8H extend it; 5H takes the joker's place (the joker moves to an end)
    assert seq.fits == {parse("3H"), parse("8H"), parse("5H")}
    low = read_meld("sequence", ("AS", "2S", "3S"), "none")
    assert low.wild == -1 and low.lo == 1 and low.fits == {parse("4S")}
    high = read_meld("sequence", ("QD", "KD", "AD"), "none")
    assert (high.lo, high.hi) == (12, 14) and high.fits == {parse("JD")}
    group = read_meld("group", ("9S", "9H", "9C", "2D"), "none")
    assert not group.is_sequence and group.rank == 9 and group.wild == parse("2D")
    assert group.fits == {parse("9S"), parse("9H"), parse("9D"), parse("9C")}
    for meld in (seq, low, high, group):
        assert meld.fits_bits == sum(1 << c for c in meld.fits)
    # stretched by the pile: 8H and 9H extend the run to 9, so 10H fits; a group is not stretched
    extra = [0] * 53
    extra[parse("8H")] = extra[parse("9H")] = 1
    assert seq.fits_bits_with(extra) == sum(1 << parse(c) for c in ("3H", "5H", "8H", "10H"))
    assert group.fits_bits_with(extra) == group.fits_bits


def closeness_by_definition(counts: list[int], c: int, groups: bool, own: bool) -> float:
    """The heuristic's closeness of card ``c`` to ``counts``, written from its definition: 25 per
    held neighbour in its suit one slot away, 10 per one two slots away (an ace stands at slots 1 and
    14), and with groups 18 per other card of its rank (a 2 excepted)."""
    r = c % 13
    base = c - r

    def held(slot: int) -> int:
        if slot < 1 or slot > 14:
            return 0
        return 1 if counts[base + (0 if slot == 14 else slot - 1)] else 0

    if r == 0:
        near, far = held(2) + held(13), held(3) + held(12)
    else:
        x = r + 1
        near, far = held(x - 1) + held(x + 1), held(x - 2) + held(x + 2)
    score = 25.0 * near + 10.0 * far
    same = counts[r] + counts[13 + r] + counts[26 + r] + counts[39 + r] - (1 if own else 0)
    if groups and r != 1 and same > 0:
        score += 18.0 * same
    return score


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=53, max_size=53), st.booleans(), st.booleans())
def test_a_cards_closeness_counts_its_neighbours_and_its_rank(counts: list[int], groups: bool, own: bool) -> None:
    """The discard's closeness, read from each suit's held slots as one mask (``suit_slots``), is
    the definition's for every card."""
    bot = HeuristicBot(0)
    bot.groups = groups
    slots = suit_slots(counts)
    for c in range(52):
        assert bot._closeness(counts, slots, c, own) == closeness_by_definition(counts, c, groups, own)


# --- the heuristic's tactics ---------------------------------------------------------------------------

def heuristic(rules: str | dict[str, object], seed: int = 0) -> HeuristicBot:
    return HeuristicBot(seed, ruleset_from_spec(rules))


def test_it_goes_out_when_it_can_and_is_ahead() -> None:
    s = position("fechado", ["JS", "4C 8C 10D QD KH"], stock_top="9C",
                 melds=[["3H 4H 5H 6H 7H 8H 9H", "QS KS AS"], ["4D 5D 6D"]],
                 mortos=[None, None], morto_taken=(True, True))
    play_turn(s, heuristic("fechado"), 0)
    assert s.is_terminal() and s.went_out == 0


def test_behind_in_a_one_hand_match_it_does_not_go_out() -> None:
    """Going out would lose the match on the spot: it keeps a card and plays on."""
    express = {"preset": "fechado", "target": 0}
    s = position(express, ["JS", "4C 8C"], stock_top="9C",
                 melds=[["3H 4H 5H 6H 7H 8H 9H", "QS KS AS"],
                        ["4D 5D 6D 7D 8D 9D 10D", "4S 5S 6S 7S 8S 9S 10S", "AC AC AD AD AH"]],
                 mortos=[None, None], morto_taken=(True, True))
    play_turn(s, heuristic(express), 0)
    assert not s.is_terminal() and s.sizes[0] >= 1


def test_it_does_not_discard_a_wild_when_another_card_can_go() -> None:
    for wild in ("JK", "2C"):
        s = position("fechado", [f"5S 9D KH {wild}", "3S 4S 8D"], stock_top="7C")
        actions = play_turn(s, heuristic("fechado"), 0)
        assert isinstance(actions[-1], Discard) and actions[-1].card != parse(wild)
        assert parse(wild) in s.hand_of(0)


def test_it_keeps_a_wild_rather_than_spend_it_on_a_short_meld() -> None:
    """5H 6H JK could be laid, but early in the hand the joker is kept for a canastra."""
    s = position("fechado", ["5H 6H JK 9C KD QS 3D 10S", "3S 4S 8D"], stock_top="8C")
    play_turn(s, heuristic("fechado"), 0)
    assert JOKER in s.hand_of(0) and not s.melds[0]


def test_it_spends_the_wild_to_empty_its_hand_for_the_morto() -> None:
    """Every card can be laid with the joker: the hand empties by melding (direct batida) and the
    morto comes into the hand at once."""
    s = position("fechado", ["5H 6H JK 9C 9D", "3S 4S 8D"], stock_top="9S")
    actions = play_turn(s, heuristic("fechado"), 0)
    assert s.morto_taken[0]
    melds = [a for a in actions if isinstance(a, MeldCards)]
    assert any(JOKER in m.cards for m in melds)
    assert s.morto_pending[0] == -1  # taken by melding, not by the last discard


def test_it_takes_a_pile_that_completes_a_canastra() -> None:
    s = position("aberto_sujo", ["3C 8D QS", "3S 4S 8S"], pile="KS 10H",
                 melds=[["4H 5H 6H 7H 8H 9H"], []])
    actions = play_turn(s, heuristic("aberto_sujo"), 0)
    assert actions[0] == TAKE_PILE
    assert any(isinstance(a, AddCards) and parse("10H") in a.cards for a in actions)
    assert len(s.melds[0][0].cards) == 7


def test_it_leaves_a_pile_of_dead_cards() -> None:
    s = position("aberto_sujo", ["3C 8D QS", "3S 4S 8S"], pile="KS 4D",
                 melds=[["4H 5H 6H 7H 8H 9H"], []])
    actions = play_turn(s, heuristic("aberto_sujo"), 0)
    assert actions[0] == DRAW


def test_in_a_closed_pile_it_melds_the_top_card() -> None:
    s = position("fechado", ["3C 8D QS 10S", "3S 4S 8S"], pile="KS 3D 10H",
                 melds=[["4H 5H 6H 7H 8H 9H"], []])
    actions = play_turn(s, heuristic("fechado"), 0)
    assert actions[0] == TAKE_PILE
    assert isinstance(actions[1], MeldCards | AddCards) and parse("10H") in actions[1].cards


def test_it_does_not_feed_an_opponent_meld_close_to_a_canastra() -> None:
    """9C would give the opponents their sixth club; KH and JD are as useless to the bot and safe."""
    s = position("fechado", ["9C KH 4S", "3S 4D 8D"], stock_top="JD",
                 melds=[[], ["4C 5C 6C 7C 8C"]], mortos=[None, None], morto_taken=(True, True))
    actions = play_turn(s, heuristic("fechado"), 0)
    assert isinstance(actions[-1], Discard) and actions[-1].card != parse("9C")


def test_it_remembers_what_the_opponent_took_from_the_pile() -> None:
    """The opponent took 7D 8D from the pile: the bot does not hand it the 9D next to them, which
    it would otherwise discard first (the only card of its hand that connects to nothing)."""

    def discard_after_the_take(remembers: bool) -> int:
        s = position("aberto_sujo", ["KS QS 4H 5H 9D", "5S 6S 9H QH JC"], stock_top="3C QC", pile="7D 8D",
                     to_act=1)
        bot = heuristic("aberto_sujo")
        if remembers:  # as this seat's previous turn in the hand would have left it
            bot._hand_key = (s.hand_number, s.dealer)
            bot._pile_after_mine = cards("7D 8D")
        s.apply(TAKE_PILE, 1)
        s.apply(Discard(parse("JC")), 1)
        actions = play_turn(s, bot, 0)
        assert isinstance(actions[-1], Discard)
        if remembers:
            assert bot._known[1][parse("7D")] == 1 and bot._known[1][parse("8D")] == 1
        return actions[-1].card

    assert discard_after_the_take(remembers=False) == parse("9D")
    assert discard_after_the_take(remembers=True) != parse("9D")


# --- strength (a small sample; `make bench-bots` measures it properly) -------------------------------

@pytest.mark.parametrize(("name", "hands", "at_least"), [("fechado", 30, 21), ("fechado_sujo", 30, 18)])
def test_heuristic_beats_random(name: str, hands: int, at_least: int) -> None:
    """Over these fixed deals the heuristic wins about 90% of hands; ``at_least`` is far below."""
    from engine.selfplay import run

    result = run(PRESETS[name], 2, ("heuristic", "random"), "strength-test", hands=hands)
    heuristic_stats = result.stats[0]
    assert heuristic_stats.hands == hands
    assert heuristic_stats.hands_won >= at_least, heuristic_stats
    assert heuristic_stats.hand_points > result.stats[1].hand_points


def test_play_hand_refuses_to_run_for_ever() -> None:
    """selfplay's guard: a bot that never finishes its turn is reported, not waited on."""
    from engine import selfplay

    class Dawdler:
        name = "dawdler"

        def choose(self, view: Mapping[str, Any], legal: list[Action]) -> Action:
            if view["phase"] == "draw":
                return legal[0]
            return next((a for a in legal if not isinstance(a, Discard)), legal[0])

        def choose_discard(self, view: Mapping[str, Any], legal: list[Action]) -> Discard:
            raise NotImplementedError

    match = MatchState(PRESETS["fechado"], 2)
    match.start_hand(seed=1)
    old = selfplay.MAX_ACTIONS_PER_HAND
    selfplay.MAX_ACTIONS_PER_HAND = 30
    try:
        with pytest.raises(selfplay.StalledError):
            play_hand(match, [Dawdler(), Dawdler()])
    finally:
        selfplay.MAX_ACTIONS_PER_HAND = old
