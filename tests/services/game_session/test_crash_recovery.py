"""A game-session process killed (SIGKILL) in the middle of a match loses nothing.

Two real `python -m services.game_session` processes in turn, on one database (SQLite and
PostgreSQL): bot clients (one per seat, each following its own stream) play a table dealt from the
test deal seed; the first process is killed once the match is well under way; a second one starts on
the same database, takes the table over when the lease runs out (short in tests), rebuilds it from
the log; the clients resume (Subscribe with `after_seq`, the action in flight retried with its
request id; and one accepted before the crash sent again, which must get its first answer and
change nothing) and the match finishes. Every seat must have received exactly the events of an
uninterrupted run of the same table (same id, same deal seed, same bots), without gap or duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import asyncpg
import grpc
from google.protobuf import json_format

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc
from engine.bots import make_bot
from engine.rules import preset
from services.client.connection import TableConnection, play_seat
from services.common.auth import Kind
from tests.conftest import DatabaseTarget
from tests.services.harness import ServiceProcess, bearer, dev_minter, service_process

PLAYERS = ("ana", "bia")
TABLE_ID = "crash-t1"
KILL_AT_SEQ = 40  # the first process dies once the table's log holds this many events
TIME_FIELDS = {"time", "deadline", "turnDeadline", "returnDeadline", "createTime", "ownerAddress"}


def server_env(target: DatabaseTarget, tmp_path: Path) -> dict[str, str]:
    return {
        **target.environment(),
        "BURACO_DEV_KEYS_DIR": str(tmp_path / "dev-keys"),
        "BURACO_GAME_SESSION_DEAL_SEED": "crash-recovery-seed",
        "BURACO_GAME_SESSION_LEASE_SECONDS": "1",
        "BURACO_GAME_SESSION_TAKEOVER_SCAN_SECONDS": "0.2",
        "BURACO_GAME_SESSION_BOT_DELAY_MS": "0",
        "BURACO_GAME_SESSION_START_SECONDS": "30",
        "BURACO_GAME_SESSION_DISCONNECT_GRACE_SECONDS": "120",
        "BURACO_GAME_SESSION_OUTBOX_RETRY_SECONDS": "0.05",
        "BURACO_GAME_SESSION_OUTBOX_MAX_RETRY_SECONDS": "0.2",
    }


def without_times(payload: Any) -> Any:
    """A message as a dict, without the fields that depend on the wall clock or the replica."""
    if isinstance(payload, dict):
        return {k: without_times(v) for k, v in payload.items() if k not in TIME_FIELDS}
    if isinstance(payload, list):
        return [without_times(v) for v in payload]
    return payload


@contextlib.asynccontextmanager
async def database_pair(target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[tuple[DatabaseTarget, DatabaseTarget]]:
    """The fixture's database for the interrupted run, and a second one alike for the reference run."""
    if target.kind == "sqlite":
        yield target, DatabaseTarget("sqlite", f"sqlite+aiosqlite:///{tmp_path / 'reference.db'}")
        return
    schema = f"{target.schema}_ref"
    dsn = target.url.replace("postgresql+asyncpg://", "postgresql://", 1)
    connection = await asyncpg.connect(dsn, timeout=5)
    try:
        await connection.execute(f'CREATE SCHEMA "{schema}"')
        yield target, DatabaseTarget("postgresql", target.url, schema)
    finally:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await connection.close()


async def start(stack: contextlib.ExitStack, tmp_path: Path, env: Mapping[str, str]) -> ServiceProcess:
    return await asyncio.to_thread(stack.enter_context, service_process("game_session", tmp_path, env=env))


async def create_table(address: str, tmp_path: Path) -> str:
    minter = dev_minter(tmp_path / "dev-keys")
    seats = [game_session_pb2.Seat(seat=s, participant=common_pb2.Participant(player=f"players/{p}"))
             for s, p in enumerate(PLAYERS)]
    options = common_pb2.TableOptions(
        ruleset=common_pb2.RulesetRef(preset="aberto"), players=len(PLAYERS),
        length=common_pb2.MATCH_LENGTH_EXPRESS, mode=common_pb2.TABLE_MODE_PRACTICE,
        draw_seconds=300, play_seconds=600,
    )
    async with grpc.aio.insecure_channel(address) as channel:
        stub = game_session_pb2_grpc.GameSessionServiceStub(channel)
        table = await stub.CreateTable(
            game_session_pb2.CreateTableRequest(
                request_id="create-crash-t1", table_id=TABLE_ID,
                table=game_session_pb2.Table(match_id="crash-match-1", options=options, seats=seats),
            ),
            metadata=bearer(minter.mint(Kind.SERVICE, "matchmaking")),
            timeout=10,
        )
    return str(table.name)


async def play_match(tmp_path: Path, env: Mapping[str, str], kill: bool) -> tuple[list[list[Any]], int]:
    """Play the table to its end (killing the first process midway when `kill`); each seat's events
    (snapshots left out: a resumed stream has none) and the number of reconnections."""
    rules = preset("aberto")
    minter = dev_minter(tmp_path / "dev-keys")
    with contextlib.ExitStack() as stack:
        first = await start(stack, tmp_path, env)
        table = await create_table(first.address, tmp_path)
        # seat 0 acts by unary calls, seat 1 on its Play stream (its action in flight at the kill is
        # sent again on the resumed stream)
        connections = [
            TableConnection(first.address, minter.mint(Kind.PLAYER, p), table, retry_seconds=60.0, play=seat == 1)
            for seat, p in enumerate(PLAYERS)
        ]
        for connection in connections:
            connection.keep_received = True
        try:
            await asyncio.gather(*(c.start() for c in connections))
            games = [
                asyncio.ensure_future(play_seat(c, make_bot("random", seed=f"crash-{seat}"), rules))
                for seat, c in enumerate(connections)
            ]
            if kill:
                await connections[0].wait_until(lambda m: m.seq >= KILL_AT_SEQ, timeout=60)
                assert not connections[0].model.finished, "the match ended before the kill: raise KILL_AT_SEQ"
                first.process.send_signal(signal.SIGKILL)
                first.process.wait()
                before_kill = list(connections[0].accepted)
                second = await start(stack, tmp_path, env)
                for connection in connections:
                    connection.retarget(second.address)
                # A client that never saw the answer to its last action retries it, same request id:
                # the new process answers from the log, as the first did, and applies nothing again.
                method, request, answer = before_kill[-1]
                retried = await connections[0].call(method, request)
                assert without_times(json_format.MessageToDict(retried.result)) == without_times(
                    json_format.MessageToDict(answer))
            sent = await asyncio.wait_for(asyncio.gather(*games), timeout=120)
            assert all(n > 10 for n in sent)
            events = [
                [without_times(json_format.MessageToDict(e)) for e in c.received
                 if e.WhichOneof("event") != "snapshot"]
                for c in connections
            ]
            for connection, seen in zip(connections, events, strict=True):
                seqs = [e["seq"] for e in seen]
                assert [int(s) for s in seqs] == list(range(int(seqs[0]), int(seqs[0]) + len(seqs))), "a gap"
                assert connection.model.finished
            return events, sum(c.reconnects for c in connections)
        finally:
            for connection in connections:
                await connection.close()


async def test_a_match_survives_sigkill_of_its_process(
    db_target: DatabaseTarget, tmp_path: Path
) -> None:
    async with database_pair(db_target, tmp_path) as (interrupted_db, reference_db):
        reference_dir = tmp_path / "reference"
        reference_dir.mkdir()
        reference, _ = await play_match(reference_dir, server_env(reference_db, reference_dir), kill=False)
        crashed_dir = tmp_path / "crashed"
        crashed_dir.mkdir()
        crashed, reconnects = await play_match(crashed_dir, server_env(interrupted_db, crashed_dir), kill=True)
    assert reconnects >= len(PLAYERS), "every client lost its stream and resumed"
    for seat in range(len(PLAYERS)):
        kinds = [next(iter(k for k in e if k != "seq")) for e in reference[seat]]
        assert "matchEnded" in kinds and kinds.count("cardDiscarded") > 5
        assert crashed[seat] == reference[seat], f"seat {seat}: the events differ from the uninterrupted run"

