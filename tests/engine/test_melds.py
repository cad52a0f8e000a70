"""Melds: sequences, groups, wilds, the wild's place, canastra kinds and bonuses."""

import pytest

from engine.cards import parse
from engine.errors import IllegalActionError
from engine.melds import Meld, extend_meld, make_meld
from engine.rules import Ruleset, preset
from tests.engine.builders import cards

FECHADO = preset("fechado")
ABERTO = preset("aberto")
SUJO = preset("aberto_sujo")
V = preset("buraco_2005")


def meld(text: str, rules: Ruleset = FECHADO, wild_as: str | None = None) -> Meld:
    return make_meld(cards(text), rules, None if wild_as is None else parse(wild_as))


def shown(m: Meld) -> str:
    return " ".join(m.to_json(FECHADO)["cards"])


def refused(text: str, rules: Ruleset = FECHADO, wild_as: str | None = None) -> str:
    with pytest.raises(IllegalActionError) as e:
        meld(text, rules, wild_as)
    assert e.value.code == "INVALID_MELD"
    return e.value.message


def add(m: Meld, text: str, rules: Ruleset = FECHADO) -> Meld:
    return extend_meld(m, cards(text), rules)


def add_refused(m: Meld, text: str, rules: Ruleset = FECHADO) -> str:
    with pytest.raises(IllegalActionError) as e:
        add(m, text, rules)
    assert e.value.code == "INVALID_ADD"
    return e.value.message


# --- sequences ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text,expected", [
    ("5H 6H 7H", "5H 6H 7H"),
    ("7H 5H 6H", "5H 6H 7H"),
    ("AH 2H 3H", "AH 2H 3H"),  # ace low, natural 2
    ("QH KH AH", "QH KH AH"),  # ace high
    ("10S JS QS KS AS", "10S JS QS KS AS"),
])
def test_natural_sequences(text: str, expected: str) -> None:
    m = meld(text)
    assert m.is_sequence and shown(m) == expected and m.wild < 0


@pytest.mark.parametrize("text,why", [
    ("5H 6H", "at least 3"),
    ("KH AH 2H 3H", "run"),  # no wrap-around
    ("5H 6H 8H", "run"),
    ("5H 6H 7S", "one suit"),
    ("5H 5H 6H 7H", "two 5H"),
    ("5C 6C 2D JK", "at most one wild"),
    ("5H 6H 2S 2D", "at most one wild"),
    ("4H 8H JK", "run"),
])
def test_invalid_sequences(text: str, why: str) -> None:
    assert why in refused(text)


def test_wild_fills_a_gap() -> None:
    m = meld("4H 5H 6H 2S 8H 9H 10H", V)
    assert shown(m) == "4H 5H 6H 2S 8H 9H 10H"
    assert m.wild == parse("2S") and m.wild_slot == 7


def test_wild_stands_at_the_high_end_by_default_then_low() -> None:
    assert shown(meld("4H 5H JK")) == "4H 5H JK"
    assert shown(meld("QH KH JK")) == "QH KH JK"  # the joker is the high ace
    assert shown(meld("QH KH AH JK")) == "JK QH KH AH"  # no room above the ace: low end


def test_wild_as_places_the_wild() -> None:
    assert shown(meld("4H 5H JK", wild_as="3H")) == "JK 4H 5H"
    assert shown(meld("4H 5H JK", wild_as="6H")) == "4H 5H JK"
    assert "wild_as" in refused("4H 5H JK", wild_as="9H")
    assert "suit" in refused("4H 5H JK", wild_as="3S")
    assert "no wild" in refused("4H 5H 6H", wild_as="7H")


def test_a_two_of_the_suit_takes_its_natural_place() -> None:
    m = meld("3H 4H 5H 2H")
    assert shown(m) == "2H 3H 4H 5H" and m.wild < 0
    m = meld("4H 5H 6H 2H")  # its place would leave a gap: it is the wild, high end
    assert shown(m) == "4H 5H 6H 2H" and m.wild_slot == 7


def test_natural_two_and_a_wild_in_one_meld() -> None:
    m = meld("2H 3H 4H JK")
    assert shown(m) == "2H 3H 4H JK" and m.wild == parse("JK")
    m = meld("2H 3H 2H")  # one 2H natural, the other the wild
    assert shown(m) == "2H 3H 2H" and m.wild_slot == 4


def test_ace_to_ace() -> None:
    full = "AH 2H 3H 4H 5H 6H 7H 8H 9H 10H JH QH KH AH"
    m = meld(full)
    assert len(m.cards) == 14 and m.canastra(FECHADO) == "ace_to_ace" and m.bonus(FECHADO) == 1000
    assert "ace to ace" in refused(full, SUJO)
    assert "ace to ace" in refused(full, V)


def test_aberto_sujo_allows_a_wild_as_the_second_ace() -> None:
    m = meld("AH 2H 3H 4H 5H 6H 7H 8H 9H 10H JH QH KH JK", SUJO)
    assert len(m.cards) == 14 and m.canastra(SUJO) == "dirty"


def test_royal_canastra_is_a_clean_thirteen() -> None:
    low = meld("AH 2H 3H 4H 5H 6H 7H 8H 9H 10H JH QH KH")
    high = meld("2S 3S 4S 5S 6S 7S 8S 9S 10S JS QS KS AS")
    for m in (low, high):
        assert m.canastra(FECHADO) == "royal" and m.bonus(FECHADO) == 500
        assert m.canastra(V) == "clean" and m.bonus(V) == 200  # V knows no royal canastra


@pytest.mark.parametrize("text,kind,bonus", [
    ("4H 5H 6H 7H 8H 9H", "none", 0),
    ("4H 5H 6H 7H 8H 9H 10H", "clean", 200),
    ("4H 5H 6H JK 8H 9H 10H", "dirty", 100),
    ("5H 5S 5D 5C 5H 5S 5D", "clean", 200),
    ("5H 5S 5D 5C 5H 5S 2D", "dirty", 100),
])
def test_canastra_kinds_and_bonuses(text: str, kind: str, bonus: int) -> None:
    m = meld(text)
    assert m.canastra(FECHADO) == kind and m.bonus(FECHADO) == bonus


def test_card_values_by_ruleset() -> None:
    m = meld("4H 5H 6H 2S 8H 9H 10H", V)
    assert m.value(V) == 65  # the V source's example: 15 + 20 + 30
    assert m.value(FECHADO) == 55  # the 2 is worth 10 in P
    assert meld("AS KS QS").value(FECHADO) == 35
    assert meld("3H 4H JK").value(preset("aberto_joker50")) == 60


# --- groups ----------------------------------------------------------------------------------------

def test_groups_where_allowed() -> None:
    m = meld("5H 5S 5D")
    assert not m.is_sequence and m.group_rank == 5
    m = meld("KH KS 2D")
    assert m.wild == parse("2D")
    assert "sequences only" in refused("5H 5S 5D", ABERTO)
    assert "sequences only" in refused("5H 5S 5D", preset("fechado_stbl"))
    assert "at most one wild" in refused("5H 5S 2D JK")


def test_groups_of_twos() -> None:
    m = meld("2H 2S 2D")
    assert m.group_rank == 2 and m.wild < 0
    m = meld("2H 2S JK")
    assert m.group_rank == 2 and m.wild == parse("JK")
    assert "group of 2s" in refused("2H 2S 2D", SUJO)


def test_a_group_needs_two_naturals() -> None:
    assert refused("5H 2S JK")


def test_adding_to_a_group() -> None:
    m = meld("5H 5S 5D")
    m2 = add(m, "5C 5H JK")
    assert len(m2.cards) == 6 and m2.wild == parse("JK")
    assert "one wild" in add_refused(m2, "2S")
    assert "does not belong" in add_refused(m, "6H")


# --- additions and the wild's place -------------------------------------------------------------

def test_additions_at_both_ends() -> None:
    m = meld("5H 6H 7H")
    assert shown(add(m, "4H 8H 9H")) == "4H 5H 6H 7H 8H 9H"
    assert "run" in add_refused(m, "9H")
    assert "suit" in add_refused(m, "8S")
    assert "already holds" in add_refused(m, "6H")


def test_a_displaced_wild_moves_to_the_high_end() -> None:
    m = meld("4H 5H JK", wild_as="6H")
    m2 = add(m, "6H")
    assert shown(m2) == "4H 5H 6H JK" and m2.wild_slot == 7


def test_a_displaced_wild_moves_to_the_low_end_when_the_high_end_is_full() -> None:
    m = meld("QH KH JK")  # JK is the high ace
    m2 = add(m, "AH")
    assert shown(m2) == "JK QH KH AH" and m2.wild_slot == 11


def test_a_wild_two_of_the_suit_goes_home() -> None:
    m = meld("4H 5H 6H 2H")  # 2H stands for 7H
    m2 = add(m, "3H")
    assert shown(m2) == "2H 3H 4H 5H 6H" and m2.wild < 0


def test_dirty_canastra_becomes_clean_when_its_two_goes_home() -> None:
    # J's example: the 2D stands for the 4D; once the 4D arrives the 2D drops into its place
    m = meld("3D 2D 5D 6D 7D 8D 9D", wild_as="4D")
    assert m.canastra(FECHADO) == "dirty"
    m2 = add(m, "4D")
    assert shown(m2) == "2D 3D 4D 5D 6D 7D 8D 9D"
    assert m2.canastra(FECHADO) == "clean" and m2.bonus(FECHADO) == 200


def test_a_joker_never_becomes_clean() -> None:
    m = meld("3D JK 5D 6D 7D 8D 9D")
    m2 = add(m, "4D")
    assert m2.canastra(FECHADO) == "dirty" and m2.wild == parse("JK")


def test_a_wild_that_still_fits_stays_where_it_is() -> None:
    m = meld("4H 5H 6H 2S", wild_as="3H")
    m2 = add(m, "7H")
    assert shown(m2) == "2S 4H 5H 6H 7H" and m2.wild_slot == 3


def test_a_complete_ace_to_ace_cannot_take_a_replacement_for_its_wild() -> None:
    m = meld("AH 2H 3H 4H 5H 6H JK 8H 9H 10H JH QH KH AH")
    assert len(m.cards) == 14
    assert "ace-to-ace" in add_refused(m, "7H")


def test_adding_a_wild_and_the_natural_two() -> None:
    m = meld("3H 4H 5H")
    assert shown(add(m, "JK")) == "3H 4H 5H JK"
    assert "one wild" in add_refused(add(m, "JK"), "2S")
    m2 = add(add(m, "JK"), "2H")  # a natural 2 joins even though the meld has its wild
    assert shown(m2) == "2H 3H 4H 5H JK"


def test_the_joker_moves_when_the_natural_two_arrives() -> None:
    m = meld("3H 4H JK", wild_as="2H")
    assert shown(m) == "JK 3H 4H"
    assert shown(add(m, "2H")) == "2H 3H 4H JK"


def test_adding_an_ace_prefers_the_high_end() -> None:
    m = meld("JH QH KH")
    assert shown(add(m, "AH")) == "JH QH KH AH"
    m = meld("2H 3H 4H")
    assert shown(add(m, "AH")) == "AH 2H 3H 4H"
