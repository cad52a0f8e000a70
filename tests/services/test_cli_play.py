"""The terminal client's pure parts: the table model kept from the stream, the shadow state the
bots play from, rendering, command parsing."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from buraco.v1 import common_pb2, game_session_pb2
from engine.actions import DRAW, TAKE_PILE, AddCards, Discard, MeldCards
from engine.bots import make_bot
from engine.cards import parse
from engine.match import MatchState
from engine.rules import preset
from engine.state import HandState
from services.cli.__main__ import build_parser
from services.cli.commands import Annul, CommandError, Hint, Play, Say, Simple, parse_command
from services.cli.play import PracticeTable, play, practice_table_request, watch
from services.cli.render import pretty_card, render_hints, render_table
from services.cli.seat import TableConnection, play_seat
from services.cli.tableview import (
    MeldView,
    SeatInfo,
    TableModel,
    actions_from_hints,
    describe_action,
    meld_from_cards,
    ruleset_of,
    shadow_state,
)
from services.common.auth import Kind
from tests.conftest import DatabaseTarget
from tests.services.game_session.conftest import Cluster

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


def test_melds_are_rebuilt_from_their_public_cards() -> None:
    rules = preset("aberto")
    for cards, wild_as in [
        ("4H 5H 6H", None), ("4H JK 6H", None), ("2S 3S 4S", None), ("3S 4S 2D", None),
        ("QH KH AH", None), ("AH 2H 3H", None), ("JK 5C 6C", "4C"), ("7D 7S 7C", None), ("7D 7S 2C", None),
        ("AS 2S 3S 4S 5S 6S 7S 8S 9S 10S JS QS KS AS", None),
    ]:
        codes = [parse(c) for c in cards.split()]
        from engine.melds import make_meld

        try:
            meld = make_meld(codes, rules, parse(wild_as) if wild_as else None)
        except Exception:
            continue
        shown = meld.to_json(rules)
        rebuilt = meld_from_cards(shown["cards"], KINDS[shown["kind"]], rules)
        assert rebuilt == meld, cards
        assert rebuilt.state_json() == meld.state_json(), cards


def _event(seq: int, **kind: object) -> game_session_pb2.TableEvent:
    return game_session_pb2.TableEvent(seq=seq, **kind)  # type: ignore[arg-type]


def _snapshot(seq: int = 1) -> game_session_pb2.TableEvent:
    table = game_session_pb2.Table(
        name="tables/t1", seq=seq,
        options=common_pb2.TableOptions(ruleset=common_pb2.RulesetRef(preset="aberto"), players=2),
        state=game_session_pb2.Table.STATE_PLAYING,
    )
    snap = game_session_pb2.TableSnapshot(
        table=table, viewer_seat=0, hand=["4H", "5H", "6H", "KS"],
        seats=[
            game_session_pb2.TableSnapshot.SeatView(
                seat=0, participant=common_pb2.Participant(player="players/ann"), hand_size=4),
            game_session_pb2.TableSnapshot.SeatView(
                seat=1, participant=common_pb2.Participant(bot=common_pb2.BOT_LEVEL_EASY), hand_size=11),
        ],
        sides=[game_session_pb2.TableSnapshot.SideView(side=0), game_session_pb2.TableSnapshot.SideView(side=1)],
        discard_pile=["9C"], stock_count=50, hand_number=1, dealer=1, to_act=0,
        phase=game_session_pb2.TURN_PHASE_DRAW,
    )
    return _event(seq, snapshot=snap)


def test_the_model_follows_the_stream_and_ignores_duplicates() -> None:
    model = TableModel("tables/t1")
    model.apply(_snapshot(7))
    assert (model.seq, model.viewer_seat, model.players, model.my_turn) == (7, 0, 2, True)
    assert model.seats[1].label == "bot-easy"
    model.apply(_event(8, card_drawn=game_session_pb2.CardDrawn(seat=0, card="7H", stock_count=49)))
    assert model.phase == "play" and "7H" in model.hand and model.seats[0].hand_size == 5
    assert not model.apply(_event(8, card_drawn=game_session_pb2.CardDrawn(seat=0, card="7H", stock_count=49)))
    assert model.hand.count("7H") == 1
    meld = common_pb2.Meld(kind=common_pb2.Meld.KIND_SEQUENCE, cards=["4H", "5H", "6H", "7H"])
    model.apply(_event(9, meld_laid=game_session_pb2.MeldLaid(seat=0, side=0, meld_index=0, meld=meld)))
    assert model.hand == ["KS"] and model.seats[0].hand_size == 1
    model.apply(_event(10, card_discarded=game_session_pb2.CardDiscarded(seat=0, card="KS")))
    model.apply(_event(11, morto_taken=game_session_pb2.MortoTaken(
        seat=0, side=0, kind=game_session_pb2.MortoTaken.KIND_INDIRECT, cards=["2C"] * 11)))
    assert (model.to_act, model.phase, model.pile) == (1, "draw", ["9C", "KS"])
    assert model.morto_taken == [True, False] and model.morto_pending == [0, -1] and len(model.hand) == 11
    model.apply(_event(12, discard_taken=game_session_pb2.DiscardTaken(seat=1, cards=["9C", "KS"])))
    assert model.pile == [] and model.seats[1].hand_size == 13 and not model.my_turn
    model.apply(_event(13, hand_ended=game_session_pb2.HandEnded(
        hand_number=1, reason=game_session_pb2.HandEnded.REASON_WENT_OUT, match_scores=[100, 200])))
    model.apply(_event(14, match_ended=game_session_pb2.MatchEnded(match_scores=[100, 200], winning_side=1)))
    assert model.finished and model.match_scores == [100, 200] and model.phase == "hand_over"
    assert any("side 1 won" in line for line in model.messages)


def test_the_table_renders_with_suit_symbols_and_a_sorted_hand() -> None:
    model = TableModel("tables/t1")
    model.apply(_snapshot())
    model.hand = ["KS", "4H", "JK", "10D", "AS"]
    text = "\n".join(render_table(model))
    assert "your hand (5): A♠ K♠ 4♥ 10♦ JK★" in text
    assert "stock: 50 cards · pile: 1 cards, top 9♣" in text
    assert "your turn, to draw or take the pile" in text
    assert "seat 1 bot-easy" in text
    assert pretty_card("10H", color=True) == "\x1b[31m10♥\x1b[0m"
    hints = render_hints([DRAW, MeldCards((parse("4H"), parse("5H"), parse("6H"))), Discard(parse("KS"))])
    assert hints[0].strip().startswith("1. draw") and "meld 4♥ 5♥ 6♥   (meld 4H 5H 6H)" in hints[1]


def test_hints_become_engine_actions_and_commands() -> None:
    hints = game_session_pb2.GetLegalMovesResponse(
        seq=3, can_draw=True, can_take_discard=True,
        melds=[game_session_pb2.GetLegalMovesResponse.MeldOption(cards=["4H", "JK", "6H"], wild_as="5H")],
        additions=[game_session_pb2.GetLegalMovesResponse.AdditionOption(meld=1, cards=["7H"])],
        discards=["KS"],
    )
    actions = actions_from_hints(hints)
    assert [describe_action(a) for a in actions] == ["draw", "take", "meld 4H 6H JK as 5H", "add 1 7H", "discard KS"]
    assert isinstance(actions[3], AddCards) and actions[1] == TAKE_PILE


def test_commands_parse_and_explain_mistakes() -> None:
    assert parse_command("") is None
    assert parse_command(" 3 ") == Hint(3)
    assert parse_command("draw") == Play(DRAW) and parse_command("T") == Play(TAKE_PILE)
    assert parse_command("meld 4h 5♥ 6H") == Play(MeldCards((parse("4H"), parse("5H"), parse("6H"))))
    meld = parse_command("meld 4H JK 6H as 5h")
    assert isinstance(meld, Play) and isinstance(meld.action, MeldCards) and meld.action.wild_as == parse("5H")
    assert parse_command("add 0 7H 8H") == Play(AddCards(0, (parse("7H"), parse("8H"))))
    assert parse_command("x 10s") == Play(Discard(parse("10S")))
    assert parse_command("say good game, all") == Say("good game, all")
    assert parse_command("annul") == Annul(None) and parse_command("annul no") == Annul(False)
    assert parse_command("q") == Simple("quit") and parse_command("?") == Simple("hints")
    for line, fragment in [
        ("meld 4H 5H", "at least 3 cards"),
        ("meld 4H 5Z 6H", "'5Z' is not a card"),
        ("add 7H", "meld's number"),
        ("discard", "discard one card"),
        ("fly", "unknown command 'fly'"),
        ("0", "numbered from 1"),
        ("draw 2", "takes no arguments"),
    ]:
        with pytest.raises(CommandError, match=fragment):
            parse_command(line)


def test_ruleset_overrides_are_json_scalars() -> None:
    ref = common_pb2.RulesetRef(preset="aberto", overrides={"target": "3000"})
    assert ruleset_of(ref).target == 3000
    assert ruleset_of(common_pb2.RulesetRef(preset="fechado")) == preset("fechado")


# --- end to end: the command loop against an in-process game-session server --------------------------

async def test_play_and_watch_a_practice_table_end_to_end(tmp_path: Path) -> None:
    """A scripted person plays a practice table against a server bot through `play`, with typos and
    refused moves on the way, while `watch` follows it as a spectator; both reach the match's end."""
    cluster = Cluster(DatabaseTarget("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'gs.db'}"), tmp_path)
    node = await cluster.start()
    try:
        request = practice_table_request(PracticeTable(player="ann", players=2, preset="aberto"), table_id="cli-e2e")
        table = await cluster.stub().CreateTable(request, metadata=cluster.token(Kind.SERVICE, "matchmaking"))
        assert [s.participant.WhichOneof("kind") for s in table.seats] == ["player", "bot"]
        played: list[str] = []
        watched: list[str] = []
        typed: list[str] = []

        async def person(connection: TableConnection) -> AsyncIterator[str]:
            for line in ("help", "meld 4H 5Z 6H", "frobnicate", ""):
                typed.append(line)
                yield line
            turns = 0
            while True:
                await connection.wait_until(lambda m: m.finished or m.my_turn, timeout=30)
                model = connection.model
                if model.finished:
                    return
                if turns == 0 and model.phase == "draw":
                    # the pile is empty at the first turn, and nobody discards before drawing
                    line = "take" if not model.pile else f"discard {model.hand[0]}"
                elif turns == 1 and model.phase == "play":
                    line = f"discard {model.hand[-1]}"  # typed, not chosen by number
                else:
                    line = "1"
                turns += 1
                typed.append(line)
                yield line

        watcher_token = cluster.minter.mint(Kind.PLAYER, "zed")
        watching = asyncio.ensure_future(watch(node.address, watcher_token, table.name, watched.append))
        code = await asyncio.wait_for(
            play(node.address, cluster.minter.mint(Kind.PLAYER, "ann"), table.name, person, played.append), 120)
        assert code == 0
        assert await asyncio.wait_for(watching, 30) == 0
        # a player without a seat is sent to `watch`; a table that does not exist is reported
        said: list[str] = []
        stranger = cluster.minter.mint(Kind.PLAYER, "zed")
        assert await play(node.address, stranger, table.name, person, said.append) == 1
        assert await play(node.address, stranger, "tables/nope", person, said.append) == 1
        assert said[0] == "you have no seat at tables/cli-e2e; `buraco watch tables/cli-e2e` follows it as a spectator"
        assert said[1].startswith("NOT_FOUND: ")
        final = await cluster.stub().GetTable(game_session_pb2.GetTableRequest(name=table.name),
                                              metadata=cluster.token(Kind.SERVICE, "matchmaking"))
        assert final.state == game_session_pb2.Table.STATE_FINISHED
    finally:
        for each in list(cluster.nodes):
            await cluster.stop(each)

    text = "\n".join(played)
    assert "joined tables/cli-e2e as seat 0" in text
    assert "<number>" in text  # the help
    assert "? '5Z' is not a card" in text and "? unknown command 'frobnicate'" in text
    assert "refused (FAILED_PRECONDITION):" in text  # the take of an empty pile (or a discard before drawing)
    assert "legal moves (type a number, or the command):" in text and "    1. draw   (draw)" in text
    assert any(line.startswith(" your hand (11): ") and any(s in line for s in "♠♥♦♣") for line in played)
    assert "· seat 1 (bot-medium) discarded" in text and "· seat 0 (ann) drew " in text
    assert "the match is over" in played[-1]
    assert sum(1 for line in typed if line == "1") > 5
    spectated = "\n".join(watched)
    assert ("your hand" not in spectated and "seat 0 ann [dealer]" in spectated) or "seat 0 ann" in spectated
    assert "hand 1 ended" in spectated and watched[-1] == "the match is over"


def test_play_and_watch_parse_their_options() -> None:
    args = build_parser().parse_args(["play", "--players", "4", "--preset", "fechado", "--target", "1500",
                                      "--player", "ann", "--bot-level", "hard"])
    assert (args.players, args.preset, args.target, args.player, args.bot_level) == (4, "fechado", 1500, "ann", "hard")
    request = practice_table_request(PracticeTable(player="ann", players=4, preset="fechado", target_points=1500,
                                                   bot_level="hard"))
    options = request.table.options
    assert (options.length, options.target_points, options.mode) == (
        common_pb2.MATCH_LENGTH_POINTS, 1500, common_pb2.TABLE_MODE_PRACTICE)
    assert [s.participant.bot for s in request.table.seats[1:]] == [common_pb2.BOT_LEVEL_HARD] * 3
    assert build_parser().parse_args(["watch", "t1"]).table == "t1"


def test_chat_and_timers_do_not_change_the_game_version() -> None:
    model = TableModel("tables/t1")
    model.apply(_snapshot(7))
    version = model.version
    model.apply(_event(8, chat_message=game_session_pb2.ChatMessage(sender="players/bob", text="hi")))
    model.apply(_event(9, turn_timer_started=game_session_pb2.TurnTimerStarted(
        seat=0, phase=game_session_pb2.TURN_PHASE_DRAW)))
    assert (model.version, model.seq, model.messages[-1]) == (version, 9, "<bob> hi")
    model.apply(_event(10, card_drawn=game_session_pb2.CardDrawn(seat=0, card="7H", stock_count=49)))
    assert model.version == version + 1


@pytest.mark.parametrize("stream", ["SubscribeChanges", "Subscribe", "Play"])
async def test_a_connection_follows_the_redirect_to_the_tables_owner(tmp_path: Path, stream: str) -> None:
    """Connected through a replica that does not own the table, a client is redirected to the owner
    (UNAVAILABLE + buraco-owner-address) for its stream and its actions, and plays on there, on
    either stream."""
    cluster = Cluster(DatabaseTarget("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'gs.db'}"), tmp_path)
    owner = await cluster.start()
    other = await cluster.start()
    connections: list[TableConnection] = []
    try:
        request = practice_table_request(PracticeTable(player="ann", players=2), table_id="redirected")
        request.table.seats[1].participant.player = "players/bob"
        table = await cluster.stub(owner).CreateTable(request, metadata=cluster.token(Kind.SERVICE, "matchmaking"))
        connections = [TableConnection(other.address, cluster.minter.mint(Kind.PLAYER, p), table.name,
                                       by_change=stream != "Subscribe", play=stream == "Play") for p in ("ann", "bob")]
        await asyncio.gather(*(c.start() for c in connections))
        assert [c.address for c in connections] == [owner.address] * 2
        assert all(c.home == other.address for c in connections)
        rules = preset("aberto")
        games = [play_seat(c, make_bot("random", seed=s), rules) for s, c in enumerate(connections)]
        assert sum(await asyncio.wait_for(asyncio.gather(*games), 60)) > 20
        assert all(c.model.finished and c.address == owner.address for c in connections)
    finally:
        for connection in connections:
            await connection.close()
        for node in list(cluster.nodes):
            await cluster.stop(node)
