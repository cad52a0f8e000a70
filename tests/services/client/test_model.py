"""The table model kept from the stream, the shadow state the bots play from, and the server's
hints as engine actions (pure: no I/O)."""

from __future__ import annotations

import random

import pytest

from buraco.v1 import common_pb2, game_session_pb2
from engine.actions import DRAW, TAKE_PILE, Discard, add_action, meld_action
from engine.bots import make_bot
from engine.cards import parse
from engine.match import MatchState
from engine.rules import preset
from engine.state import HandState
from services.client.model import (
    MeldView,
    SeatInfo,
    TableModel,
    actions_from_hints,
    meld_from_cards,
    participant_label,
    ruleset_of,
    shadow_state,
)
from tests.services.client.events import event, snapshot

KINDS = {"sequence": common_pb2.Meld.KIND_SEQUENCE, "group": common_pb2.Meld.KIND_GROUP}
CANASTRAS = {
    "none": common_pb2.Meld.CANASTRA_NONE,
    "dirty": common_pb2.Meld.CANASTRA_DIRTY,
    "clean": common_pb2.Meld.CANASTRA_CLEAN,
    "royal": common_pb2.Meld.CANASTRA_ROYAL,
    "ace_to_ace": common_pb2.Meld.CANASTRA_ACE_TO_ACE,
}


def model_of(state: HandState, seat: int) -> TableModel:
    """What `seat` knows of `state` (its own hand and the public table), as the stream tells it."""
    view = state.view(seat)
    model = TableModel("tables/t", viewer_seat=seat, players=state.players)
    model.seats = [SeatInfo(label=f"p{s}", hand_size=n) for s, n in enumerate(view["hand_sizes"])]
    model.hand = list(view["hand"])
    model.melds = [[MeldView(KINDS[m["kind"]], list(m["cards"]), CANASTRAS[m["canastra"]]) for m in side]
                   for side in view["melds"]]
    model.morto_taken = list(view["mortos_taken"])
    model.mortos_in_stock = list(view["mortos_in_stock"])
    model.morto_pending = list(state.morto_pending)
    model.pile = list(view["discard"])
    model.stock_count = view["stock_count"]
    model.hand_number = view["hand_number"]
    model.dealer = view["dealer"]
    model.to_act = view["to_act"]
    model.phase = view["phase"]
    model.must_meld = view["must_meld"]
    model.lone = view["lone_card"]
    return model


@pytest.mark.parametrize("name", ["aberto", "fechado", "buraco_2005", "classico_104"])
@pytest.mark.parametrize("players", [2, 4])
def test_the_shadow_state_allows_exactly_the_real_legal_actions(name: str, players: int) -> None:
    """At every decision of random games, the state rebuilt from what the acting seat knows lists
    the same legal actions as the real state, and its view of the table is the seat's view."""
    rules = preset(name)
    rng = random.Random(f"{name}{players}")
    for game in range(2):
        match = MatchState(rules, players)
        match.start_hand(seed=f"shadow-{name}-{players}-{game}")
        bots = [make_bot("random", seed=s + game) for s in range(players)]
        state = match.hand
        assert state is not None
        steps = 0
        while not state.is_terminal() and steps < 3000:
            seat = state.current_player()
            shadow = shadow_state(model_of(state, seat), rules)
            legal = state.legal_actions()
            assert shadow.legal_actions() == legal, (name, players, steps)
            real_view, seen = state.view(seat).to_dict(), shadow.view(seat).to_dict()
            assert seen == real_view
            action = bots[seat].choose(state.view(seat), legal) if rng.random() < 0.95 else rng.choice(legal)
            match.apply(action, seat)
            steps += 1
        assert steps > 10


MELDS = [
    ("4H 5H 6H", None), ("4H JK 6H", None), ("2S 3S 4S", None), ("3S 4S 2D", None),
    ("QH KH AH", None), ("AH 2H 3H", None), ("JK 5C 6C", "4C"), ("7D 7S 7C", None), ("7D 7S 2C", None),
    ("AS 2S 3S 4S 5S 6S 7S 8S 9S 10S JS QS KS AS", None),
]


@pytest.mark.parametrize(("cards", "wild_as"), MELDS)
def test_melds_are_rebuilt_from_their_public_cards(cards: str, wild_as: str | None) -> None:
    """Every kind of meld (runs with and without wilds, groups, ace to ace), in `fechado`, which
    allows them all, comes back from the cards the stream shows as the meld it was."""
    from engine.melds import make_meld

    rules = preset("fechado")
    meld = make_meld([parse(c) for c in cards.split()], rules, parse(wild_as) if wild_as else None)
    shown = meld.to_json(rules)
    rebuilt = meld_from_cards(shown["cards"], KINDS[shown["kind"]], rules)
    assert rebuilt == meld
    assert rebuilt.state_json() == meld.state_json()


def test_the_model_follows_the_stream_and_ignores_duplicates() -> None:
    model = TableModel("tables/t1")
    model.apply(snapshot(7))
    assert (model.seq, model.viewer_seat, model.players, model.my_turn) == (7, 0, 2, True)
    assert model.seats[1].label == "bot-easy"
    model.apply(event(8, card_drawn=game_session_pb2.CardDrawn(seat=0, card="7H", stock_count=49)))
    assert model.phase == "play" and "7H" in model.hand and model.seats[0].hand_size == 5
    assert not model.apply(event(8, card_drawn=game_session_pb2.CardDrawn(seat=0, card="7H", stock_count=49)))
    assert model.hand.count("7H") == 1
    meld = common_pb2.Meld(kind=common_pb2.Meld.KIND_SEQUENCE, cards=["4H", "5H", "6H", "7H"])
    model.apply(event(9, meld_laid=game_session_pb2.MeldLaid(seat=0, side=0, meld_index=0, meld=meld)))
    assert model.hand == ["KS"] and model.seats[0].hand_size == 1
    model.apply(event(10, card_discarded=game_session_pb2.CardDiscarded(seat=0, card="KS")))
    model.apply(event(11, morto_taken=game_session_pb2.MortoTaken(
        seat=0, side=0, kind=game_session_pb2.MortoTaken.KIND_INDIRECT, cards=["2C"] * 11)))
    assert (model.to_act, model.phase, model.pile) == (1, "draw", ["9C", "KS"])
    assert model.morto_taken == [True, False] and model.morto_pending == [0, -1] and len(model.hand) == 11
    model.apply(event(12, discard_taken=game_session_pb2.DiscardTaken(seat=1, cards=["9C", "KS"])))
    assert model.pile == [] and model.seats[1].hand_size == 13 and not model.my_turn
    model.apply(event(13, hand_ended=game_session_pb2.HandEnded(
        hand_number=1, reason=game_session_pb2.HandEnded.REASON_WENT_OUT, match_scores=[100, 200])))
    model.apply(event(14, match_ended=game_session_pb2.MatchEnded(match_scores=[100, 200], winning_side=1)))
    assert model.finished and model.match_scores == [100, 200] and model.phase == "hand_over"
    assert any("side 1 won" in line for line in model.messages)


def test_hints_become_engine_actions() -> None:
    hints = game_session_pb2.GetLegalMovesResponse(
        seq=3, can_draw=True, can_take_discard=True,
        melds=[game_session_pb2.GetLegalMovesResponse.MeldOption(cards=["4H", "JK", "6H"], wild_as="5H")],
        additions=[game_session_pb2.GetLegalMovesResponse.AdditionOption(meld=1, cards=["7H"])],
        discards=["KS"],
    )
    assert actions_from_hints(hints) == [
        DRAW,
        TAKE_PILE,
        meld_action([parse("4H"), parse("JK"), parse("6H")], parse("5H")),
        add_action(1, [parse("7H")]),
        Discard(parse("KS")),
    ]


def test_ruleset_overrides_are_json_scalars() -> None:
    ref = common_pb2.RulesetRef(preset="aberto", overrides={"target": "3000"})
    assert ruleset_of(ref).target == 3000
    assert ruleset_of(common_pb2.RulesetRef(preset="fechado")) == preset("fechado")


def test_chat_and_timers_do_not_change_the_game_version() -> None:
    model = TableModel("tables/t1")
    model.apply(snapshot(7))
    version = model.version
    model.apply(event(8, chat_message=game_session_pb2.ChatMessage(sender="players/bob", text="hi")))
    model.apply(event(9, turn_timer_started=game_session_pb2.TurnTimerStarted(
        seat=0, phase=game_session_pb2.TURN_PHASE_DRAW)))
    assert (model.version, model.seq, model.messages[-1]) == (version, 9, "<bob> hi")
    model.apply(event(10, card_drawn=game_session_pb2.CardDrawn(seat=0, card="7H", stock_count=49)))
    assert model.version == version + 1


def test_a_bot_seat_is_labelled_by_its_level() -> None:
    """HARD is shown as the expert bot; a bot seat naming no level shows the level it plays at
    (the seat's `bot_level`, the table's)."""
    bot = common_pb2.Participant
    assert participant_label(bot(bot=common_pb2.BOT_LEVEL_HARD)) == "bot-expert"
    assert participant_label(bot(bot=common_pb2.BOT_LEVEL_UNSPECIFIED), common_pb2.BOT_LEVEL_EASY) == "bot-easy"
    assert participant_label(bot(bot=common_pb2.BOT_LEVEL_UNSPECIFIED)) == "bot"
    assert participant_label(bot(player="players/ana"), common_pb2.BOT_LEVEL_HARD) == "ana"
