"""The terminal client: rendering, command parsing, and `play` and `watch` end to end against an
in-process game-session server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from buraco.v1 import common_pb2, game_session_pb2
from engine.actions import DRAW, TAKE_PILE, AddCards, Discard, MeldCards
from engine.cards import parse
from services.cli.__main__ import BOT_CHOICES, build_parser
from services.cli.commands import Annul, CommandError, Hint, Play, Say, Simple, describe_action, parse_command
from services.cli.play import BOT_LEVELS, TABLE_CREATOR, PracticeTable, play, practice_table_request, watch
from services.cli.render import pretty_card, render_hints, render_table
from services.client.connection import TableConnection
from services.client.model import TableModel, actions_from_hints
from services.common.auth import Kind
from tests.conftest import DatabaseTarget
from tests.services.client.events import snapshot
from tests.services.game_session.conftest import Cluster


def test_the_table_renders_with_suit_symbols_and_a_sorted_hand() -> None:
    model = TableModel("tables/t1")
    model.apply(snapshot())
    model.hand = ["KS", "4H", "JK", "10D", "AS"]
    text = "\n".join(render_table(model))
    assert "your hand (5): A♠ K♠ 4♥ 10♦ JK★" in text
    assert "stock: 50 cards · pile: 1 cards, top 9♣" in text
    assert "your turn, to draw or take the pile" in text
    assert "seat 1 bot-easy" in text
    assert pretty_card("10H", color=True) == "\x1b[31m10♥\x1b[0m"
    hints = render_hints([DRAW, MeldCards((parse("4H"), parse("5H"), parse("6H"))), Discard(parse("KS"))])
    assert hints[0].strip().startswith("1. draw") and "meld 4♥ 5♥ 6♥   (meld 4H 5H 6H)" in hints[1]


def test_hints_become_commands() -> None:
    hints = game_session_pb2.GetLegalMovesResponse(
        seq=3, can_draw=True, can_take_discard=True,
        melds=[game_session_pb2.GetLegalMovesResponse.MeldOption(cards=["4H", "JK", "6H"], wild_as="5H")],
        additions=[game_session_pb2.GetLegalMovesResponse.AdditionOption(meld=1, cards=["7H"])],
        discards=["KS"],
    )
    actions = actions_from_hints(hints)
    assert [describe_action(a) for a in actions] == ["draw", "take", "meld 4H 6H JK as 5H", "add 1 7H", "discard KS"]
    assert [parse_command(describe_action(a)) for a in actions] == [Play(a) for a in actions]


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


# --- end to end: the command loop against an in-process game-session server --------------------------

async def test_play_and_watch_a_practice_table_end_to_end(tmp_path: Path) -> None:
    """A scripted person plays a practice table against a server bot through `play`, with typos and
    refused moves on the way, while `watch` follows it as a spectator; both reach the match's end."""
    cluster = Cluster(DatabaseTarget("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'gs.db'}"), tmp_path)
    node = await cluster.start()
    try:
        request = practice_table_request(PracticeTable(player="ann", players=2, preset="aberto"), table_id="cli-e2e")
        # as `buraco play` creates it: with the identity whose place it takes
        table = await cluster.stub().CreateTable(request, metadata=cluster.token(Kind.SERVICE, TABLE_CREATOR))
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


def test_play_takes_the_bots_level_by_name_or_by_the_engines_name() -> None:
    """`buraco play --bot expert`: easy, medium or expert, or the engine's random, heuristic,
    expert; the practice table's bots and its own level (a dropped player's bot) are that level."""
    levels = {"easy": common_pb2.BOT_LEVEL_EASY, "random": common_pb2.BOT_LEVEL_EASY,
              "medium": common_pb2.BOT_LEVEL_MEDIUM, "heuristic": common_pb2.BOT_LEVEL_MEDIUM,
              "expert": common_pb2.BOT_LEVEL_HARD}
    assert set(BOT_CHOICES) == set(BOT_LEVELS)
    for name, level in levels.items():
        args = build_parser().parse_args(["play", "--bot", name])
        request = practice_table_request(PracticeTable(player="ann", players=4, bot_level=args.bot_level))
        assert request.table.options.bot_level == level, name
        assert [s.participant.bot for s in request.table.seats[1:]] == [level] * 3, name
    assert build_parser().parse_args(["play"]).bot_level == "medium"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["play", "--bot", "grandmaster"])
