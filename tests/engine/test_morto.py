"""The morto, going out, the end of the stock, and hand scoring."""

from typing import Any

import pytest

from engine.actions import DRAW, AddCards, Discard, MeldCards
from engine.cards import parse
from engine.errors import IllegalActionError
from engine.state import HandState
from tests.engine.builders import act, position, to_action

MORTO_A = "3C 3C 4C 4C 5C 5C 6C 6C 7C 7C 8C"
MORTO_B = "3D 3D 4D 4D 5D 5D 6D 6D 7D 7D 8D"
CLEAN = "4S 5S 6S 7S 8S 9S 10S"
DIRTY = "4S 5S 6S JK 8S 9S 10S"


def refuse(state: HandState, seat: int, code: str, **action: object) -> str:
    before = state.to_json()
    with pytest.raises(IllegalActionError) as e:
        state.apply(to_action(action), seat)
    assert e.value.code == code, e.value.message
    assert state.to_json() == before
    return e.value.message


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


# --- taking the morto ------------------------------------------------------------------------------

def test_direct_batida_takes_the_morto_and_play_goes_on() -> None:
    s = position("fechado", ["5H 6H 7H", "3S 4S 8D"], phase="play", mortos=[MORTO_A, MORTO_B])
    events = s.apply(to_action({"do": "meld", "cards": ["5H", "6H", "7H"]}), 0)
    assert [e.type for e in events] == ["melded", "morto_taken"]
    assert events[1].public == {"side": 0, "direct": True, "count": 11}
    assert events[1].for_seat(0)["cards"] == MORTO_A.split()
    assert "cards" not in events[1].for_seat(1) and "cards" not in events[1].for_seat(None)
    assert s.phase == "play" and s.to_act == 0 and s.sizes[0] == 11 and s.morto_taken == [True, False]
    act(s, 0, do="meld", cards=["3C", "4C", "5C"])  # the morto is played at once
    act(s, 0, do="discard", card="8C")


def test_indirect_batida_takes_the_morto_for_the_next_turn() -> None:
    s = position("fechado", ["9H", "3S 4S 8D"], phase="play", mortos=[MORTO_A, MORTO_B])
    events = act(s, 0, do="discard", card="9H")
    assert types(events) == ["discarded", "morto_taken"]
    assert events[1]["direct"] is False
    assert s.to_act == 1 and s.sizes[0] == 11 and s.morto_pending == [0, -1]
    act(s, 1, do="draw")
    assert s.morto_pending == [0, -1]
    act(s, 1, do="discard", card="8D")
    assert s.to_act == 0 and s.morto_pending == [-1, -1]  # the taker's turn began: the morto is played


def test_one_morto_per_side_in_four_players() -> None:
    s = position("fechado", ["9H", "3S 4S", "QH KH AH", "8D"], phase="play", mortos=[MORTO_A, MORTO_B])
    act(s, 0, do="discard", card="9H")
    assert s.morto_taken == [True, False] and s.sizes[0] == 11
    act(s, 1, do="draw")
    act(s, 1, do="discard", card="3S")
    act(s, 2, do="draw")
    # the partner may not empty the hand: the side has its morto and no canastra
    refuse(s, 2, "CANNOT_GO_OUT", do="meld", cards=["QH", "KH", "AH"])
    drawn = s.hand_of(2)[0] if s.hand_of(2)[0] not in (parse("QH"), parse("KH"), parse("AH")) else None
    assert drawn is not None
    act(s, 2, do="discard", card=__import__("engine.cards", fromlist=["to_str"]).to_str(drawn))
    act(s, 3, do="draw")
    # the other side takes its own morto
    s.counts[3] = [0] * 53
    s.counts[3][parse("8D")] = 1
    s.sizes[3] = 1
    s.touch()
    act(s, 3, do="discard", card="8D")
    assert s.morto_taken == [True, True] and s.sizes[3] == 11 and s.hand_of(3) == sorted(
        parse(c) for c in MORTO_B.split())


def test_a_side_without_canastra_may_not_empty_its_hand_again() -> None:
    s = position("fechado", ["5H 6H 7H", "3S 4S 8D"], phase="play", morto_taken=(True, False),
                 mortos=[None, MORTO_B], melds=[["4C 5C 6C"], []])
    refuse(s, 0, "CANNOT_GO_OUT", do="meld", cards=["5H", "6H", "7H"])
    s2 = position("fechado", ["5H 6H 7H 9D", "3S 4S 8D"], phase="play", morto_taken=(True, False),
                  mortos=[None, MORTO_B], melds=[["4C 5C 6C"], []])
    msg = refuse(s2, 0, "CANNOT_GO_OUT", do="meld", cards=["5H", "6H", "7H"])  # would leave one card
    assert "no legal way" in msg
    s3 = position("fechado", ["9D", "3S 4S 8D"], phase="play", morto_taken=(True, False),
                  mortos=[None, MORTO_B], melds=[["4C 5C 6C"], []])
    refuse(s3, 0, "CANNOT_GO_OUT", do="discard", card="9D")


def test_the_last_card_may_complete_the_canastra_that_lets_the_side_go_out() -> None:
    s = position("fechado", ["10S", "3S 4S 8D"], phase="play", morto_taken=(True, False),
                 mortos=[None, MORTO_B], melds=[["4S 5S 6S 7S 8S 9S"], []])
    assert s.legal_actions() == [to_action({"do": "add", "meld": 0, "cards": ["10S"]})]
    events = act(s, 0, do="add", meld=0, cards=["10S"])
    assert types(events) == ["added", "hand_ended"]
    assert s.is_terminal() and s.went_out == 0


def test_going_out_by_discarding_with_a_clean_canastra() -> None:
    s = position("fechado", ["9D", "3S 4S 8D"], phase="play", morto_taken=(True, True),
                 mortos=[None, None], melds=[[CLEAN], []])
    events = act(s, 0, do="discard", card="9D")
    assert types(events) == ["discarded", "hand_ended"]
    assert events[1]["reason"] == "went_out"


def test_a_dirty_canastra_is_not_enough_where_a_clean_one_is_required() -> None:
    for name, ok in [("fechado", False), ("aberto", False), ("fechado_sujo", True), ("buraco_2005", True)]:
        dirty = DIRTY if name != "aberto" else "4S 5S 6S 2H 8S 9S 10S"
        s = position(name, ["9D", "3S 4S 8D"], phase="play", morto_taken=(True, True),
                     mortos=[None, None], melds=[[dirty], []])
        if ok:
            act(s, 0, do="discard", card="9D")
            assert s.is_terminal()
        else:
            refuse(s, 0, "CANNOT_GO_OUT", do="discard", card="9D")


def test_aberto_sujo_goes_out_only_by_discarding() -> None:
    s = position("aberto_sujo", ["8H 9H", "3S 4S 8D"], phase="play", morto_taken=(True, True),
                 mortos=[None, None], melds=[[DIRTY, "5H 6H 7H"], []])
    msg = refuse(s, 0, "CANNOT_GO_OUT", do="add", meld=1, cards=["8H", "9H"])
    assert "only by discarding" in msg
    act(s, 0, do="add", meld=1, cards=["8H"])
    act(s, 0, do="discard", card="9H")
    assert s.is_terminal()


def test_aberto_sujo_still_takes_the_morto_by_melding() -> None:
    s = position("aberto_sujo", ["5H 6H 7H", "3S 4S 8D"], phase="play", mortos=[MORTO_A, MORTO_B])
    act(s, 0, do="meld", cards=["5H", "6H", "7H"])
    assert s.morto_taken == [True, False] and s.sizes[0] == 11


def test_wild_going_out_discard_rule() -> None:
    def base(name: str, melds: list[str]) -> HandState:
        return position(name, ["JK", "3S 4S 8D"], melds=[melds, []], phase="play", morto_taken=(True, True),
                        mortos=[None, None])

    s = base("buraco_2005", [CLEAN, "5H 6H 7H"])
    refuse(s, 0, "WILD_DISCARD", do="discard", card="JK")
    act(s, 0, do="add", meld=1, cards=["JK"])  # playing it goes out instead
    assert s.is_terminal()
    # a wild that fits nowhere may be discarded to go out
    s = base("buraco_2005", ["4S 5S 6S JK 8S 9S 10S"])
    act(s, 0, do="discard", card="JK")
    assert s.is_terminal()
    # other rulesets have no such rule
    s = base("fechado_sujo", [CLEAN, "5H 6H 7H"])
    act(s, 0, do="discard", card="JK")
    assert s.is_terminal()


def test_buraco_2005_keeps_two_cards_while_the_side_has_its_morto_and_no_canastra() -> None:
    # V: "Quando a sua dupla já pegou o morto mas não tem buraco, o app recusa qualquer baixada que
    # deixaria você com uma carta ou nenhuma"
    def base(rules: str | dict[str, object], hand: str, melds: list[str]) -> HandState:
        return position(rules, [hand, "3S 4S 8D"], phase="play", mortos=[None, MORTO_B],
                        morto_taken=(True, False), melds=[melds, []])

    six = "4S 5S 6S 7S 8S 9S"
    meld = to_action({"do": "meld", "cards": ["5H", "6H", "7H"]})
    # the 10S left could complete the canastra and go out: elsewhere that is enough
    s = base("fechado_sujo", "5H 6H 7H 10S", [six])
    assert meld in s.legal_actions()
    act(s, 0, do="meld", cards=["5H", "6H", "7H"])
    act(s, 0, do="add", meld=0, cards=["10S"])
    assert s.is_terminal() and s.went_out == 0
    # buraco_2005 refuses it, and does not list it
    s = base("buraco_2005", "5H 6H 7H 10S", [six])
    assert meld not in s.legal_actions()
    msg = refuse(s, 0, "CANNOT_GO_OUT", do="meld", cards=["5H", "6H", "7H"])
    assert "keeps two cards" in msg
    # an addition that leaves one card is refused the same way
    s = base("buraco_2005", "8H 9H 10S", [six, "5H 6H 7H"])
    assert to_action({"do": "add", "meld": 1, "cards": ["8H", "9H"]}) not in s.legal_actions()
    refuse(s, 0, "CANNOT_GO_OUT", do="add", meld=1, cards=["8H", "9H"])
    # completing the canastra first keeps the way out open
    s = base("buraco_2005", "5H 6H 7H 10S", [six])
    act(s, 0, do="add", meld=0, cards=["10S"])
    act(s, 0, do="meld", cards=["5H", "6H", "7H"])
    assert s.is_terminal() and s.went_out == 0
    # a meld or addition that itself makes the canastra may leave one card or none
    s = base("buraco_2005", "10S JS 9D", [six])
    act(s, 0, do="add", meld=0, cards=["10S", "JS"])
    assert s.sizes[0] == 1 and not s.is_terminal()
    # with a canastra on the table (a dirty one is enough in V) one card may be left
    s = base("buraco_2005", "5H 6H 7H 9D", [DIRTY])
    act(s, 0, do="meld", cards=["5H", "6H", "7H"])
    assert s.sizes[0] == 1
    # a side that has not taken its morto is not concerned: emptying the hand takes the morto
    s = position("buraco_2005", ["5H 6H 7H 9D", "3S 4S 8D"], phase="play", mortos=[MORTO_A, MORTO_B])
    act(s, 0, do="meld", cards=["5H", "6H", "7H"])
    assert s.sizes[0] == 1
    # the parameter in another ruleset
    s = base({"preset": "fechado_sujo", "keep_two_without_canastra": True}, "5H 6H 7H 10S", [six])
    refuse(s, 0, "CANNOT_GO_OUT", do="meld", cards=["5H", "6H", "7H"])


# --- the end of the stock ----------------------------------------------------------------------------

def test_an_untaken_morto_becomes_the_stock() -> None:
    s = position("fechado", ["5H 6H 9C", "3S 4S 8D"], stock_top="KD", stock_size=1,
                 mortos=[MORTO_A, MORTO_B])
    events = act(s, 0, do="draw")
    assert types(events) == ["drew", "morto_to_stock"]
    assert events[1]["side"] == 0  # the drawing side's morto first
    assert s.mortos[0] is None and s.morto_to_stock == [True, False] and len(s.stock) == 11
    assert s.morto_taken == [False, False]


def test_the_other_morto_becomes_the_stock_when_the_drawers_was_taken() -> None:
    s = position("fechado", ["5H 6H 9C", "3S 4S 8D"], stock_top="KD", stock_size=1,
                 mortos=[None, MORTO_B], morto_taken=(True, False))
    events = act(s, 0, do="draw")
    assert events[1]["side"] == 1


def test_the_hand_ends_when_the_last_card_is_drawn_and_no_morto_is_left() -> None:
    s = position("fechado", ["5H 6H 9C", "3S 4S 8D"], stock_top="KD", stock_size=1,
                 mortos=[None, None], morto_taken=(True, True))
    events = act(s, 0, do="draw")
    assert types(events) == ["drew", "hand_ended"]
    assert events[1]["reason"] == "stock_exhausted" and s.went_out == -1
    assert s.score()[0]["going_out"] == 0 and s.score()[1]["going_out"] == 0


def test_buraco_2005_ends_the_hand_with_the_stock_even_with_mortos_left() -> None:
    s = position("buraco_2005", ["5H 6H 9C", "3S 4S 8D"], stock_top="KD", stock_size=1,
                 mortos=[MORTO_A, MORTO_B])
    events = act(s, 0, do="draw")
    assert types(events) == ["drew", "hand_ended"]
    score = s.score()
    assert score[0]["morto"] == -100 and score[1]["morto"] == -100
    # the drawn card stays in the hand and counts against it
    assert score[0]["hand"] == -(5 + 5 + 10 + 10)


def test_a_side_whose_morto_went_to_the_stock_may_go_out_without_it() -> None:
    s = position("fechado", ["9D", "3S 4S 8D"], phase="play", mortos=[None, MORTO_B],
                 morto_to_stock=(True, False), melds=[[CLEAN], []])
    act(s, 0, do="discard", card="9D")
    assert s.is_terminal() and s.went_out == 0
    assert s.score()[0]["morto"] == -100  # it never took a morto


def test_aberto_joker50_without_a_morto_goes_out_only_once_no_morto_is_left() -> None:
    # J: "só é possível um jogador bater quando os dois mortos virarem monte"; side 0's morto became
    # the stock, side 1's is still on the table
    def waiting(hand: str, rules: str | dict[str, object] = "aberto_joker50") -> HandState:
        return position(rules, [hand, "3S 4S 8D"], phase="play", mortos=[None, MORTO_B],
                        morto_to_stock=(True, False), melds=[[CLEAN, "5H 6H 7H"], []])

    s = waiting("9D")
    msg = refuse(s, 0, "CANNOT_GO_OUT", do="discard", card="9D")
    assert "no morto is left on the table" in msg
    s = waiting("8H 9H")
    refuse(s, 0, "CANNOT_GO_OUT", do="add", meld=1, cards=["8H", "9H"])  # empties the hand
    refuse(s, 0, "CANNOT_GO_OUT", do="add", meld=1, cards=["8H"])  # 9H could only go out
    assert s.legal_actions() == [Discard(parse("8H")), Discard(parse("9H"))]
    s = waiting("9H 10H JH")
    refuse(s, 0, "CANNOT_GO_OUT", do="meld", cards=["9H", "10H", "JH"])
    # a meld that leaves one card is refused too: that card could only go out
    s = waiting("9H 10H JH 9D")
    msg = refuse(s, 0, "CANNOT_GO_OUT", do="meld", cards=["9H", "10H", "JH"])
    assert "no legal way" in msg
    assert not [a for a in s.legal_actions() if isinstance(a, AddCards | MeldCards)]
    # the same position where the parameter is off (and in fechado, source P) goes out
    s = waiting("9D", {"preset": "aberto_joker50", "go_out_after_both_mortos": False})
    act(s, 0, do="discard", card="9D")
    assert s.is_terminal() and s.went_out == 0
    # both mortos became the stock: the side goes out
    s = position("aberto_joker50", ["9D", "3S 4S 8D"], phase="play", mortos=[None, None],
                 morto_to_stock=(True, True), melds=[[CLEAN], []])
    act(s, 0, do="discard", card="9D")
    assert s.is_terminal() and s.went_out == 0 and s.score()[0]["morto"] == -100


def test_aberto_joker50_a_side_without_its_morto_goes_out_once_the_other_took_its_own() -> None:
    # docs/rules.md, the choice: no morto is left on the table, so the side may go out
    s = position("aberto_joker50", ["9D", "3S 4S 8D"], phase="play", mortos=[None, None],
                 morto_taken=(False, True), morto_to_stock=(True, False), melds=[[CLEAN], []])
    assert s.legal_actions() == [Discard(parse("9D"))]
    act(s, 0, do="discard", card="9D")
    assert s.is_terminal() and s.went_out == 0


def test_go_out_after_both_mortos_does_not_touch_a_side_that_took_its_morto() -> None:
    s = position("aberto_joker50", ["9D", "3S 4S 8D"], phase="play", mortos=[None, MORTO_B],
                 morto_taken=(True, False), melds=[[CLEAN], []])
    act(s, 0, do="discard", card="9D")
    assert s.is_terminal() and s.went_out == 0


# --- scoring -------------------------------------------------------------------------------------------

def test_hand_scoring_breakdown_after_going_out() -> None:
    s = position("fechado", ["9D", "KS 4H"], phase="play", morto_taken=(True, False),
                 mortos=[None, MORTO_B], melds=[[CLEAN, "AH 2H 3H"], ["QC KC AC"]])
    act(s, 0, do="discard", card="9D")
    a, b = s.score()
    assert a == {"cards": 50 + 15 + 10 + 5 + 10 - 10, "bonus": 200, "going_out": 100, "hand": 0, "morto": 0,
                 "total": 50 + 30 + 200 + 100}
    assert b == {"cards": 35, "bonus": 0, "going_out": 0, "hand": -15, "morto": -100, "total": 35 - 15 - 100}


def test_partners_hands_count_against_their_side() -> None:
    s = position("fechado", ["9D", "KS", "AH AS", "3C"], phase="play", morto_taken=(True, True),
                 mortos=[None, None], melds=[[CLEAN], []])
    act(s, 0, do="discard", card="9D")
    a, b = s.score()
    assert a["hand"] == -30 and b["hand"] == -15


def test_an_unplayed_morto_costs_the_penalty_as_if_not_taken() -> None:
    # seat 0 takes its morto by discarding; seat 1 goes out before seat 0 plays again
    s = position("fechado", ["9H", "8D"], phase="play", mortos=[MORTO_A, None], morto_taken=(False, True),
                 melds=[[], [CLEAN.replace("S", "H")]])
    act(s, 0, do="discard", card="9H")
    act(s, 1, do="draw")
    assert s.morto_pending == [0, -1]
    # seat 1 goes out before seat 0 plays again (its hand trimmed to one card for brevity)
    s.counts[1] = [0] * 53
    s.counts[1][parse("8D")] = 1
    s.sizes[1] = 1
    s.touch()
    act(s, 1, do="discard", card="8D")
    assert s.is_terminal()
    a, _ = s.score()
    assert a["morto"] == -100 and a["hand"] == 0  # the untouched morto is not counted as hand


def test_aberto_sujo_has_no_penalty_for_an_unplayed_morto() -> None:
    s = position("aberto_sujo", ["9H", "8D"], phase="play", mortos=[MORTO_A, None], morto_taken=(False, True),
                 melds=[[], [DIRTY]])
    act(s, 0, do="discard", card="9H")
    act(s, 1, do="draw")
    s.counts[1] = [0] * 53
    s.counts[1][parse("8D")] = 1
    s.sizes[1] = 1
    s.touch()
    act(s, 1, do="discard", card="8D")
    a, _ = s.score()
    assert a["morto"] == 0 and a["hand"] == -(10 * 5 + 10)  # the morto counts as hand


def test_score_before_the_end_counts_only_the_table() -> None:
    s = position("fechado", ["9D 9C", "KS"], phase="play", melds=[[CLEAN], []])
    a, b = s.score()
    assert (a["hand"], a["morto"], b["morto"]) == (0, 0, 0)
    assert a["total"] == 250


def test_draw_then_discard_keeps_turn_order_with_mortos() -> None:
    s = position("fechado", ["9H", "3S 4S 8D"], phase="play", mortos=[MORTO_A, MORTO_B])
    act(s, 0, do="discard", card="9H")
    s.apply(DRAW, 1)
    s.apply(Discard(parse("8D")), 1)
    assert s.to_act == 0 and s.sizes[0] == 11
