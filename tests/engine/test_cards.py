import pytest

from engine.cards import JOKER, cards_of, counts_of, deck, format_many, parse, rank_of, suit_of, to_str
from engine.errors import MalformedError


def test_every_code_round_trips() -> None:
    for code in range(53):
        assert parse(to_str(code)) == code


@pytest.mark.parametrize("text,expected", [("4H", "4H"), ("10s", "10S"), ("jk", "JK"), ("aC", "AC"), ("Qd", "QD")])
def test_parse_is_case_insensitive(text: str, expected: str) -> None:
    assert to_str(parse(text)) == expected


@pytest.mark.parametrize("bad", ["1H", "11S", "TH", "JK2", "", "4X", " 4H", 4, None, ["4H"]])
def test_unknown_cards_are_refused(bad: object) -> None:
    with pytest.raises(MalformedError):
        parse(bad)


def test_codes_sort_by_suit_then_rank_with_jokers_last() -> None:
    hand = [parse(c) for c in ["JK", "KC", "2S", "AH", "AS", "10D", "3S"]]
    assert format_many(sorted(hand)) == ["AS", "2S", "3S", "AH", "10D", "KC", "JK"]


def test_rank_and_suit() -> None:
    assert (rank_of(parse("AS")), suit_of(parse("AS"))) == (1, 0)
    assert (rank_of(parse("KC")), suit_of(parse("KC"))) == (13, 3)
    assert (rank_of(JOKER), suit_of(JOKER)) == (0, -1)


@pytest.mark.parametrize("jokers,size", [(0, 104), (4, 108)])
def test_deck_has_two_copies_of_each_card(jokers: int, size: int) -> None:
    d = deck(jokers)
    assert len(d) == size
    counts = counts_of(d)
    assert all(counts[c] == 2 for c in range(52))
    assert counts[JOKER] == jokers
    assert cards_of(counts) == sorted(d)
