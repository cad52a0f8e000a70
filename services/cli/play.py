"""`buraco play` and `buraco watch`: a person at a table in the terminal, over the real gRPC API.

`play` (local mode) mints a service token to create a practice table with bot seats, and a player
token to play seat 0 (or joins `--table` as the player named). It shows the table whenever the
turn comes back, the legal moves numbered (GetLegalMoves), reads commands (`services.cli.commands`:
a number, or `meld 4H 5H 6H`, `add 0 7H`, `discard KS`, `draw`, `take`, ...) and prints the status
message of a refused move. The stream is followed by `services.client.connection.TableConnection`,
which resumes after a drop. `watch TABLE` follows a table as a spectator.

The command loop reads lines from any async iterator and writes through a function, so tests
drive it with scripted input.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import grpc

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc
from engine.actions import Action
from services.cli.commands import HELP, Annul, CommandError, Hint, Play, Say, Simple, parse_command
from services.cli.render import render_hints, render_table
from services.client.connection import ActionRefused, TableConnection
from services.client.model import TableModel, actions_from_hints

Write = Callable[[str], None]
#: `buraco play --bot`: a level, or the engine's name of its bot (`hard`: the contract's name of expert)
BOT_LEVELS = {
    "easy": common_pb2.BOT_LEVEL_EASY, "random": common_pb2.BOT_LEVEL_EASY,
    "medium": common_pb2.BOT_LEVEL_MEDIUM, "heuristic": common_pb2.BOT_LEVEL_MEDIUM,
    "expert": common_pb2.BOT_LEVEL_HARD, "hard": common_pb2.BOT_LEVEL_HARD,
}


@dataclass
class PracticeTable:
    """What `play` creates when no table is named."""

    player: str
    players: int = 2
    preset: str = "aberto"
    target_points: int = 0  # 0: one hand (express)
    bot_level: str = "medium"
    draw_seconds: int = 120
    play_seconds: int = 300


def practice_table_request(spec: PracticeTable, table_id: str = "") -> game_session_pb2.CreateTableRequest:
    """The practice table: the player at seat 0, bots of `spec.bot_level` at the others, and the
    same level as the table's (the bot that plays the player's seat if they drop)."""
    level = BOT_LEVELS[spec.bot_level]
    seats = [game_session_pb2.Seat(seat=0, participant=common_pb2.Participant(player=f"players/{spec.player}"))]
    seats += [
        game_session_pb2.Seat(seat=s, participant=common_pb2.Participant(bot=level))
        for s in range(1, spec.players)
    ]
    options = common_pb2.TableOptions(
        ruleset=common_pb2.RulesetRef(preset=spec.preset),
        players=spec.players,
        length=common_pb2.MATCH_LENGTH_POINTS if spec.target_points else common_pb2.MATCH_LENGTH_EXPRESS,
        target_points=spec.target_points,
        mode=common_pb2.TABLE_MODE_PRACTICE,
        draw_seconds=spec.draw_seconds,
        play_seconds=spec.play_seconds,
        spectators_allowed=True,
        bot_level=level,
    )
    return game_session_pb2.CreateTableRequest(
        request_id=f"cli-{uuid.uuid4().hex}",
        table_id=table_id,
        table=game_session_pb2.Table(match_id=f"practice-{uuid.uuid4().hex[:20]}", options=options, seats=seats),
    )


#: The service identity `buraco play` creates its practice table as: matchmaking's, whose place it
#: takes, since the game-session service takes CreateTable only from the services that seat
#: players (docs/contracts.md, "Who may call what").
TABLE_CREATOR = "matchmaking"


async def create_practice_table(address: str, service_token: str, spec: PracticeTable) -> str:
    """Create a practice table (a service identity's call); its name."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = game_session_pb2_grpc.GameSessionServiceStub(channel)
        table: game_session_pb2.Table = await stub.CreateTable(
            practice_table_request(spec), metadata=(("authorization", f"Bearer {service_token}"),), timeout=10
        )
        return table.name


async def stdin_lines(prompt: str = "> ") -> AsyncIterator[str]:
    """Lines typed at the terminal (ends at end of input)."""
    loop = asyncio.get_running_loop()
    while True:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        yield line


class Printer:
    """Prints the model's new event lines as the stream brings them."""

    def __init__(self, model_of: Callable[[], TableModel], write: Write) -> None:
        self.model_of = model_of
        self.write = write
        self.printed = 0

    def __call__(self, event: game_session_pb2.TableEvent) -> None:
        model = self.model_of()
        new = model.said - self.printed
        if new > 0:
            for line in model.messages[-min(new, len(model.messages)):]:
                self.write(f"· {line}")
        self.printed = model.said


class Session:
    """The command loop of one player at one table."""

    def __init__(self, connection: TableConnection, write: Write, color: bool = False) -> None:
        self.connection = connection
        self.write = write
        self.color = color
        self.hints: list[Action] = []
        self.hints_version = -1  # the model's game version the hints were listed for
        self.shown_version = -1

    @property
    def model(self) -> TableModel:
        return self.connection.model

    def show(self) -> None:
        for line in render_table(self.model, self.color):
            self.write(line)

    async def show_hints(self) -> None:
        if not self.model.my_turn:
            self.write("not your turn: no moves to list")
            return
        version = self.model.version
        reply = await self.connection.hints()
        self.hints = actions_from_hints(reply)
        self.hints_version = version if reply.seq <= self.model.seq else -1
        self.write("legal moves (type a number, or the command):")
        for line in render_hints(self.hints, self.color):
            self.write(line)

    async def turn_started(self) -> None:
        self.shown_version = self.model.version
        self.show()
        await self.show_hints()

    async def run(self, lines: AsyncIterator[str]) -> int:
        """Until the match ends or the player quits; 0 then, 1 when the stream failed for good."""
        if self.model.my_turn:
            await self.turn_started()
        else:
            self.show()
        reader = lines.__aiter__()
        line_task: asyncio.Task[str] | None = None
        try:
            while True:
                if self.model.finished:
                    self.show()
                    self.write("the match is over")
                    return 0
                if self.model.my_turn and self._turn_changed(self.shown_version)(self.model):
                    await self.turn_started()
                if line_task is None:
                    line_task = asyncio.ensure_future(reader.__anext__())
                change = asyncio.ensure_future(self.connection.wait_until(self._turn_changed(self.shown_version)))
                done, _ = await asyncio.wait({line_task, change}, return_when=asyncio.FIRST_COMPLETED)
                if change not in done:
                    change.cancel()
                elif change.exception() is not None:
                    self.write(f"lost the table: {change.exception()}")
                    return 1
                if line_task in done:
                    task, line_task = line_task, None
                    try:
                        line = task.result()
                    except StopAsyncIteration:
                        return 0
                    if not await self.handle(line):
                        return 0
        finally:
            if line_task is not None:
                line_task.cancel()

    def _turn_changed(self, shown: int) -> Callable[[TableModel], bool]:
        """The match ended, or the game moved and it is (still) our turn: show it again."""
        return lambda m: m.finished or (m.my_turn and m.version != shown and self.hints_version != m.version)

    async def handle(self, line: str) -> bool:
        """Carry out one command line; False to stop."""
        try:
            command = parse_command(line)
        except CommandError as error:
            self.write(f"? {error}")
            return True
        if command is None:
            return True
        if isinstance(command, Simple):
            if command.name == "quit":
                return False
            if command.name == "help":
                self.write(HELP)
            elif command.name == "show":
                self.show()
            elif command.name == "hints":
                await self.show_hints()
            elif command.name == "leave":
                await self._call("LeaveTable", game_session_pb2.LeaveTableRequest(
                    table=self.model.table_name, request_id=uuid.uuid4().hex))
            return True
        if isinstance(command, Say):
            await self._call("SendChat", game_session_pb2.SendChatRequest(
                table=self.model.table_name, request_id=uuid.uuid4().hex, text=command.text))
            return True
        if isinstance(command, Annul):
            await self._annul(command.vote)
            return True
        if isinstance(command, Hint):
            if self.hints_version != self.model.version:
                await self.show_hints()
                if not self.hints:
                    return True
                self.write("the table had moved on: here are the moves now; choose again")
                return True
            if not 1 <= command.number <= len(self.hints):
                self.write(f"? no move {command.number}: choose 1 to {len(self.hints)}")
                return True
            await self.play(self.hints[command.number - 1])
            return True
        assert isinstance(command, Play)
        await self.play(command.action)
        return True

    async def play(self, action: Action) -> None:
        if not self.model.my_turn:
            self.write(f"? not your turn: {self.model.seat_name(self.model.to_act)} is playing")
            return
        try:
            result = await self.connection.act(action)
        except ActionRefused as refused:
            self.write(f"refused ({refused.code.name}): {refused.message}")
            return
        await self.connection.wait_until(lambda m: m.seq >= result.seq or m.finished)

    async def _annul(self, vote: bool | None) -> None:
        table = self.model.table_name
        if vote is None:
            reply = await self._call("ProposeAnnulment", game_session_pb2.ProposeAnnulmentRequest(
                table=table, request_id=uuid.uuid4().hex))
            if reply is not None:
                self.write("annulment proposed; every player must vote yes")
            return
        if self.model.annulment is None:
            self.write("? there is no open annulment proposal")
            return
        await self._call("VoteAnnulment", game_session_pb2.VoteAnnulmentRequest(
            table=table, request_id=uuid.uuid4().hex, proposal_id=self.model.annulment.proposal_id, approve=vote))

    async def _call(self, method: str, request: object) -> object | None:
        try:
            reply: object = await self.connection.call(method, request)
            return reply
        except grpc.aio.AioRpcError as error:
            self.write(f"refused ({error.code().name}): {error.details()}")
            return None


async def play(
    address: str,
    player_token: str,
    table: str,
    lines: AsyncIterator[str] | Callable[[TableConnection], AsyncIterator[str]],
    write: Write,
    color: bool = False,
) -> int:
    """Play `table` as the token's player, reading commands from `lines` (or from the lines a
    function of the connection gives: scripted players that look at the table)."""
    connection = TableConnection(address, player_token, table)
    connection.on_event = Printer(lambda: connection.model, write)
    try:
        await connection.start()
        if connection.model.viewer_seat is None:
            write(f"you have no seat at {table}; `buraco watch {table}` follows it as a spectator")
            return 1
        write(f"joined {table} as seat {connection.model.viewer_seat} (type `help` for the commands)")
        source = lines(connection) if callable(lines) else lines
        return await Session(connection, write, color).run(source)
    except grpc.aio.AioRpcError as error:
        write(f"{error.code().name}: {error.details()}")
        return 1
    finally:
        await connection.close()


async def watch(address: str, token: str, table: str, write: Write, color: bool = False) -> int:
    """Follow `table` as a spectator until its match ends: every event, and the table at each turn."""
    connection = TableConnection(address, token, table)
    printer = Printer(lambda: connection.model, write)
    last_turn: list[tuple[int, int, str]] = []

    def on_event(event: game_session_pb2.TableEvent) -> None:
        printer(event)
        model = connection.model
        turn = (model.hand_number, model.to_act, model.phase)
        if not last_turn or last_turn[-1] != turn:
            last_turn.append(turn)
            if model.phase == "draw" or event.WhichOneof("event") == "snapshot":
                for line in render_table(model, color):
                    write(line)

    connection.on_event = on_event
    try:
        await connection.start()
        await connection.wait_until(lambda m: m.finished)
        write("the match is over")
        return 0
    except grpc.aio.AioRpcError as error:
        write(f"{error.code().name}: {error.details()}")
        return 1
    finally:
        await connection.close()
