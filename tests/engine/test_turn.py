"""The turn: draw or take the pile, meld and add, one discard; closed pile and lone-discard rules."""

import pytest

from engine.actions import DRAW, TAKE_PILE, Discard
from engine.cards import parse
from engine.deal import deal_from_seed
from engine.errors import IllegalActionError, StaleViewError
from engine.rules import PRESETS
from engine.state import HandState
from tests.engine.builders import act, full_deal, position, to_action


def refuse(state: HandState, seat: int, code: str, **action: object) -> str:
    before = state.to_json()
    with pytest.raises(IllegalActionError) as e:
        state.apply(to_action(action), seat)
    assert e.value.code == code, e.value.message
    assert state.to_json() == before, "a refused action changed the state"
    return e.value.message


def test_the_seat_after_the_dealer_starts_and_play_passes_left() -> None:
    s = HandState(__import__("engine.rules", fromlist=["preset"]).preset("fechado"), 4, full_deal(players=4), dealer=2)
    assert s.to_act == 3
    for expected in (3, 0, 1, 2, 3):
        assert s.to_act == expected
        s.apply(DRAW, expected)
        card = s.hand_of(expected)[0]
        s.apply(Discard(card), expected)


def test_default_dealer_is_the_last_seat() -> None:
    from engine.rules import preset

    s = HandState(preset("fechado"), 2, full_deal())
    assert s.dealer == 1 and s.to_act == 0


def test_draw_takes_the_top_of_the_stock() -> None:
    s = position("aberto", ["5H 6H 7H 9C 9D", "3S 4S 8D"], stock_top="KD QD")
    events = s.apply(DRAW, 0)
    assert "KD" in [str(c) for c in s.view(0)["hand"]]
    assert events[0].for_seat(0)["card"] == "KD"
    assert "card" not in events[0].for_seat(1) and "card" not in events[0].for_seat(None)
    assert s.phase == "play"
    refuse(s, 0, "WRONG_PHASE", do="draw")
    refuse(s, 0, "WRONG_PHASE", do="take_discard")


def test_wrong_seat_and_wrong_phase() -> None:
    s = position("aberto", ["5H 6H 7H 9C 9D", "3S 4S 8D"], pile="KD")
    refuse(s, 1, "NOT_YOUR_TURN", do="draw")
    refuse(s, 0, "WRONG_PHASE", do="meld", cards=["5H", "6H", "7H"])
    refuse(s, 0, "WRONG_PHASE", do="discard", card="9C")


def test_taking_the_pile_takes_all_of_it() -> None:
    s = position("aberto", ["5H 6H 7H 9C 9D", "3S 4S 8D"], pile="KD 3C 8H")
    events = act(s, 0, do="take_discard")
    assert events[0]["cards"] == ["KD", "3C", "8H"]
    assert s.pile == [] and s.sizes[0] == 8 and s.phase == "play"


def test_an_empty_pile_cannot_be_taken() -> None:
    s = position("aberto", ["5H 6H 7H 9C 9D", "3S 4S 8D"])
    refuse(s, 0, "EMPTY_PILE", do="take_discard")
    assert TAKE_PILE not in s.legal_actions()


def test_meld_add_and_discard() -> None:
    s = position("aberto", ["5H 6H 7H 8H 9C 9D", "3S 4S 8D"], stock_top="KD")
    act(s, 0, do="draw")
    act(s, 0, do="meld", cards=["5H", "6H", "7H"])
    act(s, 0, do="add", meld=0, cards=["8H"])
    assert [m.to_json(s.rules)["cards"] for m in s.melds[0]] == [["5H", "6H", "7H", "8H"]]
    refuse(s, 0, "UNKNOWN_MELD", do="add", meld=1, cards=["9C"])
    refuse(s, 0, "NOT_IN_HAND", do="meld", cards=["9H", "10H", "JH"])
    refuse(s, 0, "NOT_IN_HAND", do="discard", card="AS")
    act(s, 0, do="discard", card="KD")
    assert s.to_act == 1 and s.phase == "draw" and s.pile == [parse("KD")]


def test_a_player_cannot_meld_two_copies_held_once() -> None:
    s = position("fechado", ["5H 5S 5D 9C 9D", "3S 4S 8D"], phase="play")
    refuse(s, 0, "NOT_IN_HAND", do="meld", cards=["5H", "5H", "5S"])


def test_partners_extend_each_others_melds() -> None:
    s = position("aberto", ["9C 9D 3C 4C", "3S 4S 8D 8C", "8H 4D 5D 6D", "3H 4H 5C 6C"],
                 melds=[["5H 6H 7H"], []], to_act=2, phase="play")
    act(s, 2, do="add", meld=0, cards=["8H"])
    assert len(s.melds[0][0].cards) == 4


def test_closed_pile_top_card_must_be_melded_at_once() -> None:
    s = position("fechado", ["5H 6H 9C 9D QS", "3S 4S 8D"], pile="KD 7H")
    assert TAKE_PILE in s.legal_actions()
    act(s, 0, do="take_discard")
    assert s.view(0)["must_meld"] == "7H"
    refuse(s, 0, "PILE_TOP_REQUIRED", do="discard", card="QS")
    refuse(s, 0, "PILE_TOP_REQUIRED", do="meld", cards=["9C", "9D", "KD"])  # a group, without the 7H
    legal = s.legal_actions()
    assert legal and all(parse("7H") in a.cards for a in legal)  # type: ignore[union-attr]
    act(s, 0, do="meld", cards=["5H", "6H", "7H"])
    assert s.view(0)["must_meld"] is None
    act(s, 0, do="discard", card="QS")


def test_closed_pile_cannot_be_taken_when_its_top_card_cannot_be_melded() -> None:
    s = position("fechado", ["5H 6H 9C 9D QS", "3S 4S 8D"], pile="7H KD")
    msg = refuse(s, 0, "PILE_TOP_REQUIRED", do="take_discard")
    assert "KD" in msg
    assert s.legal_actions() == [DRAW]


def test_closed_pile_top_card_may_go_to_an_existing_meld() -> None:
    s = position("fechado_stbl", ["9C 9D QS", "3S 4S 8D"], melds=[["4H 5H 6H"], []], pile="KD 7H")
    act(s, 0, do="take_discard")
    act(s, 0, do="add", meld=0, cards=["7H"])


def test_open_pile_has_no_obligation() -> None:
    s = position("aberto", ["5H 6H 9C 9D QS", "3S 4S 8D"], pile="7H KD")
    act(s, 0, do="take_discard")
    act(s, 0, do="discard", card="QS")


def test_lone_discard_rule() -> None:
    s = position("classico_104", ["5H 6H 9C 9D QS", "3S 4S 8D"], pile="KD")
    act(s, 0, do="take_discard")
    refuse(s, 0, "LONE_DISCARD", do="discard", card="KD")
    assert Discard(parse("KD")) not in s.legal_actions()
    act(s, 0, do="discard", card="QS")
    # elsewhere the single card can go straight back
    s = position("aberto", ["5H 6H 9C 9D QS", "3S 4S 8D"], pile="KD")
    act(s, 0, do="take_discard")
    act(s, 0, do="discard", card="KD")


def test_lone_discard_applies_only_to_a_one_card_pile() -> None:
    s = position("classico_104", ["5H 6H 9C 9D QS", "3S 4S 8D"], pile="JD KD")
    act(s, 0, do="take_discard")
    act(s, 0, do="discard", card="KD")


def test_lone_discard_refuses_a_take_that_leaves_nothing_to_discard() -> None:
    s = position("classico_104", ["KD", "3S 4S 8D"], pile="KD", morto_taken=(True, False),
                 mortos=[None, "3H 3H 4H 4H 5H 5H 6H 6H 7H 7H 8H"])
    refuse(s, 0, "LONE_DISCARD", do="take_discard")
    assert s.legal_actions() == [DRAW]


def test_legal_actions_in_the_draw_phase() -> None:
    s = position("aberto", ["5H 6H 9C 9D QS", "3S 4S 8D"], pile="KD")
    assert s.legal_actions() == [DRAW, TAKE_PILE]


def test_hand_over_refuses_everything() -> None:
    s = position("aberto", ["5H", "3S 4S 8D"], melds=[["4C 5C 6C 7C 8C 9C 10C"], []], phase="play",
                 morto_taken=(True, False), mortos=[None, "3H 3H 4H 4H 6H 6H 7H 7H 8H 8H 9H"])
    act(s, 0, do="discard", card="5H")
    assert s.is_terminal() and s.legal_actions() == []
    refuse(s, 1, "HAND_OVER", do="draw")


def test_a_view_keeps_what_it_read_and_refuses_a_first_read_after_a_change() -> None:
    """A view describes the state when taken: a field read then keeps its value, and a field first
    read after the state changed raises StaleViewError, whether or not any field was read before."""
    rules = PRESETS["fechado"]
    state = HandState(rules, 2, deal_from_seed(rules, 2, "views"))
    seat = state.to_act
    read_once = state.view(seat)
    never_read = state.view(seat)
    stock = read_once["stock_count"]
    state.apply(DRAW, seat)
    assert read_once["stock_count"] == stock == state.view(seat)["stock_count"] + 1
    for view in (read_once, never_read):
        with pytest.raises(StaleViewError):
            view["hand"]
