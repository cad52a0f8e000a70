"""``plan_naturals``: what a hand can lay down, as the heuristic estimates it (its pile and batida
decisions rest on it; the play digests check that the heuristic plays the same, these the plan's
own counts)."""

from __future__ import annotations

from engine.bots.planning import Plan, plan_naturals
from engine.bots.reading import TableMeld, read_meld
from engine.cards import NCODES, parse_many, to_str
from engine.melds import card_values
from engine.rules import PRESETS

VALUES = card_values(PRESETS["fechado"])


def counts(cards: str) -> list[int]:
    out = [0] * NCODES
    for c in parse_many(cards.split()):
        out[c] += 1
    return out


def laid(plan: Plan) -> list[str]:
    """The cards the plan lays down, as a sorted list of strings (a card twice when both copies)."""
    return sorted(to_str(c) for c in range(NCODES) for _ in range(plan.used[c]))


def sequence(cards: str, canastra: str = "none") -> TableMeld:
    return read_meld("sequence", tuple(cards.split()), canastra)


def test_runs_of_three_or_more_and_their_value() -> None:
    plan = plan_naturals(counts("4H 5H 6H 9C KD"), [], False, VALUES)
    assert laid(plan) == sorted(["4H", "5H", "6H"])
    assert (plan.count, plan.value, plan.canastras, plan.clean_canastras) == (3, 15, 0, 0)


def test_second_copies_make_a_second_run_and_a_long_run_a_clean_canastra() -> None:
    plan = plan_naturals(counts("3S 4S 5S 6S 7S 8S 9S 3S 4S 5S"), [], False, VALUES)
    assert plan.count == 10
    assert (plan.canastras, plan.clean_canastras) == (1, 1)


def test_the_ace_below_the_two_and_above_the_king() -> None:
    assert laid(plan_naturals(counts("AD 2D 3D 9C"), [], False, VALUES, wilds=False)) == sorted(["AD", "2D", "3D"])
    assert laid(plan_naturals(counts("QD KD AD 9C"), [], False, VALUES, wilds=False)) == sorted(["QD", "KD", "AD"])
    # a run through every rank with one ace: the ace stands at one end only (13 cards)
    whole = "AD 2D 3D 4D 5D 6D 7D 8D 9D 10D JD QD KD"
    plan = plan_naturals(counts(whole), [], False, VALUES, wilds=False)
    assert plan.count == 13 and plan.used == counts(whole)


def test_naturals_extend_the_sides_melds_and_complete_a_canastra() -> None:
    meld = sequence("5C 6C 7C 8C 9C")
    plan = plan_naturals(counts("4C 10C 3C KH"), [meld], False, VALUES)
    assert laid(plan) == sorted(["3C", "4C", "10C"])
    assert (plan.canastras, plan.clean_canastras) == (1, 1)


def test_a_card_that_takes_a_wilds_place_moves_the_wild_to_an_end() -> None:
    meld = sequence("5C 6C 2H 8C")  # the 2 of hearts stands for the 7 of clubs
    plan = plan_naturals(counts("7C KH"), [meld], False, VALUES)
    assert laid(plan) == ["7C"]


def test_groups_only_where_the_ruleset_has_them() -> None:
    hand = counts("9C 9D 9S 4H")
    assert laid(plan_naturals(hand, [], True, VALUES)) == sorted(["9C", "9D", "9S"])
    assert plan_naturals(hand, [], False, VALUES).count == 0
    group = read_meld("group", ("KC", "KD", "KS"), "none")
    assert laid(plan_naturals(counts("KH KH 4H"), [group], True, VALUES)) == ["KH", "KH"]


def test_a_wild_joins_two_close_leftover_cards() -> None:
    hand = counts("4H 6H JC 2S")
    assert laid(plan_naturals(hand, [], False, VALUES)) == sorted(["4H", "6H", "2S"])
    assert plan_naturals(hand, [], False, VALUES, wilds=False).count == 0
    assert plan_naturals(counts("4H 9H 2S"), [], False, VALUES).count == 0  # too far apart
