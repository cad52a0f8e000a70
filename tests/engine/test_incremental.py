"""The legal plays kept up to date move by move (``movegen.SeatPlays``, ``movegen.legal_plays``) and the
closed pile's shortcut (``movegen.must_meld_shortcut``) against generation from scratch.

Random legal play in every preset, 2 and 4 players: at every step ``legal_actions`` lists exactly what
``movegen.plays`` (the generator that rebuilds everything) and the discards list, in the same order,
each meld or addition with the same plan; at every draw, whether the pile may be taken agrees with
taking it on a copy and asking ``plays`` for a meld of its top card.
"""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from engine import movegen
from engine.actions import TAKE_PILE, Action, AddCards, Discard, MeldCards
from engine.cards import JOKER, NCODES, TWO
from engine.deal import deal_from_seed
from engine.melds import Meld, extended_or_problem
from engine.rules import PRESETS
from engine.state import DRAW_PHASE, PLAY_PHASE, HandState

PRESET_NAMES = sorted(PRESETS)


def from_scratch(state: HandState) -> tuple[list[Action], dict[Action, Meld | None]]:
    """The legal actions of a play phase as the engine listed them before it kept them up to date."""
    plans: dict[Action, Meld | None] = {}
    actions: list[Action] = list(movegen.plays(state, plans=plans))
    if state.must_meld < 0:
        counts = state.counts[state.to_act]
        actions.extend(Discard(code) for code in range(NCODES)
                       if counts[code] and ((state.sizes[state.to_act] > 1 and state.lone < 0)
                                            or state._discard_problem(code) is None))
    return actions, plans


def may_take_from_scratch(state: HandState) -> bool:
    """Whether the pile may be taken, by taking it on a copy and asking the full generator."""
    trial = state.clone()
    trial._do(TAKE_PILE, None)
    if state.rules.closed_pile:
        return bool(movegen.plays(trial, first_only=True))
    return trial.lone < 0 or trial._any_way_to_finish()


def play_and_compare(name: str, players: int, seed: int, hands: int = 1) -> int:
    rules = PRESETS[name]
    rng = random.Random(seed)
    steps = 0
    for hand in range(hands):
        state = HandState(rules, players, deal_from_seed(rules, players, f"{seed}-{hand}"), dealer=hand % players)
        while not state.is_terminal():
            legal = state.legal_actions()
            if state.phase == PLAY_PHASE:
                expected, plans = from_scratch(state)
                assert legal == expected, (name, players, seed, state.turns)
                listed = state.legal_plans()
                for action in legal:
                    if isinstance(action, (MeldCards, AddCards)):
                        assert listed[action] == plans[action], action
            elif state.phase == DRAW_PHASE and state.pile:
                assert (TAKE_PILE in legal) == may_take_from_scratch(state), (name, players, seed, state.turns)
            plays = [a for a in legal if isinstance(a, (MeldCards, AddCards))]
            action = rng.choice(plays) if plays and rng.random() < 0.8 else rng.choice(legal)
            state.apply(action, state.to_act)
            steps += 1
    return steps


@settings(max_examples=12)
@given(seed=st.integers(0, 1 << 30), players=st.sampled_from([2, 4]))
def test_the_plays_kept_up_to_date_equal_plays_from_scratch_in_every_preset(seed: int, players: int) -> None:
    for name in PRESET_NAMES:
        assert play_and_compare(name, players, seed, hands=2) > 0


def test_a_state_changed_by_hand_is_read_right() -> None:
    """A state set up by hand and ``touch``-ed (as tools and tests do) lists what ``plays`` lists,
    even after the seat's plays were kept for another hand."""
    rules = PRESETS["fechado"]
    state = HandState(rules, 2, deal_from_seed(rules, 2, "by-hand"))
    state.apply(state.legal_actions()[0])  # draw
    state.legal_actions()
    seat = state.to_act
    state.counts[seat] = [0] * NCODES
    for card in (2, 3, 4, 5, 6, 52, 17, 18, 19):
        state.counts[seat][card] += 1
    state.sizes[seat] = 9
    state.touch()
    assert state.legal_actions() == from_scratch(state)[0]


def test_melds_replaced_or_removed_by_hand_are_read_right() -> None:
    """A side's meld replaced by one of another suit or rank, or removed, in a state set up by hand
    and ``touch``-ed: the seat's plays follow the meld's part of the hand (``SeatPlays.part_bits``) and
    the number of melds, as ``plays`` lists them."""
    rules = PRESETS["fechado"]
    state = HandState(rules, 2, deal_from_seed(rules, 2, "melds-by-hand"))
    state.apply(state.legal_actions()[0])  # draw
    seat = state.to_act
    state.counts[seat] = [0] * NCODES
    for card in (0, 1, 4, 5, 9, 10, 17, 18, 30, 43, 52):  # AS 2S 5S 6S 10S JS 5H 6H 5D 5C JK
        state.counts[seat][card] += 1
    state.sizes[seat] = 11
    side = seat & 1
    state.melds[side] = [Meld.sequence(0, 0b111 << 6), Meld.group(5, (4, 17, 30))]  # 6S 7S 8S; 5S 5H 5D
    state.touch()
    assert state.legal_actions() == from_scratch(state)[0]
    state.melds[side][0] = Meld.group(6, (5, 18, 31))  # a group where a sequence was
    state.touch()
    assert state.legal_actions() == from_scratch(state)[0]
    for card in (44, 7):  # 6C, then 8S: the group's part of the hand changes, then the old sequence's
        state.counts[seat][card] += 1
        state.sizes[seat] += 1
        state.touch()
        assert state.legal_actions() == from_scratch(state)[0]
    state.melds[side][1] = Meld.sequence(1, 0b111 << 7)  # a sequence of hearts where a group was
    state.touch()
    assert state.legal_actions() == from_scratch(state)[0]
    for card in (19, 17):  # 7H, then 5H away: the hearts change
        state.counts[seat][card] += 1 if card == 19 else -1
        state.sizes[seat] += 1 if card == 19 else -1
        state.touch()
        assert state.legal_actions() == from_scratch(state)[0]
    del state.melds[side][1]
    state.touch()
    assert state.legal_actions() == from_scratch(state)[0]
    state.melds[side].append(Meld.sequence(0, 0b111 << 11))  # JS QS KS
    state.touch()
    assert state.legal_actions() == from_scratch(state)[0]


@settings(max_examples=300)
@given(rank=st.integers(1, 13), in_group=st.lists(st.integers(0, 2), min_size=4, max_size=4),
       held=st.lists(st.integers(0, 2), min_size=4, max_size=4),
       group_wild=st.sampled_from([-1, JOKER, 1, 14, 27, 40]),
       wilds=st.lists(st.integers(0, 2), min_size=5, max_size=5))
def test_group_additions_are_every_addition_that_fits_whatever_the_group_holds(
        rank: int, in_group: list[int], held: list[int], group_wild: int, wilds: list[int]) -> None:
    """A group's additions are listed from its rank, the hand's cards of that rank and its wilds alone
    (the memo shares them between the groups of a rank, and leaves their melds to be made): they are
    exactly the cards held that ``extend_meld`` accepts, each once, and each makes the meld it makes."""
    rules = PRESETS["fechado"]  # groups, and groups of 2s
    number = movegen.ruleset_number(rules)
    codes = [13 * suit + rank - 1 for suit in range(4)]
    naturals = tuple(code for code, n in zip(codes, in_group, strict=True) for _ in range(n))
    if len(naturals) < 2 or (rank == TWO and group_wild not in (-1, JOKER)) or group_wild in codes:
        return  # not a group
    meld = Meld.group(rank, naturals, group_wild)
    counts = [0] * NCODES
    for code, n in zip(codes, held, strict=True):
        counts[code] = n
    for code, n in zip((JOKER, 1, 14, 27, 40), wilds, strict=True):
        if code not in codes:
            counts[code] = n
    part = bytes(counts[rank - 1:rank + 39:13])
    additions, results = movegen.meld_additions(number, meld, part, movegen.wild_key(counts))
    expected: dict[tuple[int, ...], Meld] = {}
    held_wilds = [code for code in (JOKER, 1, 14, 27, 40) if counts[code] and code not in codes]
    for picks in itertools.product(*(range(counts[code] + 1) for code in codes)):
        chosen = [code for code, n in zip(codes, picks, strict=True) for _ in range(n)]
        for extra in ([], *([w] for w in held_wilds)):
            cards = tuple(sorted(chosen + extra))
            if cards:
                made = extended_or_problem(meld, cards, rules)
                if isinstance(made, Meld):
                    expected[cards] = made
    assert sorted(additions) == sorted(expected) and len(set(additions)) == len(additions)
    for cards, result in zip(additions, results, strict=True):
        made = result if result is not None else movegen.made_meld(meld, cards, number)
        assert made == expected[cards] and made.cards == expected[cards].cards
