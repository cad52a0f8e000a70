"""A game-session process killed (SIGKILL) again and again at random points of staked matches and
restarted on the same database and address, as an operator's restart would: nothing a player or
the ledger sees goes wrong (docs/game-session.md, "Loading a table" and "Resuming").

Real processes, on SQLite and on PostgreSQL: the wallet, ranking, and one game-session process
at a fixed address. Four competitive tables with stakes held as matchmaking holds them: 2 and 4
players, express and points matches. Every seat is a client playing with a random-legal bot
(half of them acting by unary calls, half on their Play stream), following the documented client
protocol: a stream resumes with `after_seq`, an action is retried with its request id.

The kills come from the seed, of three kinds:
- idle: every seat holds its next action and nothing is in flight; every table's snapshot is
  taken before the kill and again after the restart, and they must be equal;
- in flight: at a random number of accepted actions, whatever is being sent then;
- at a match's end: as soon as a client sees a match end (its outbox rows are being delivered).
After each restart the last action every seat had accepted is sent again with its request id:
the answer must be the one it had.

At the end: every match finished, each stream delivered every event after the snapshot exactly
once and in order (checked on the messages as they arrived, duplicates included), every action's
answer agrees with the events of the stream, every pot is settled exactly once to the chip (the
ledger audited), every match recorded once by ranking, and the outbox has nothing left to deliver.

Seeds: BURACO_KILL_SEEDS (comma-separated), one by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf import json_format
from sqlalchemy import select

from buraco.v1 import (
    common_pb2,
    game_session_pb2,
    game_session_pb2_grpc,
    ranking_pb2,
    ranking_pb2_grpc,
    wallet_pb2,
    wallet_pb2_grpc,
)
from engine.bots import make_bot
from engine.rules import Ruleset
from loadtest.payouts import expected_deltas
from loadtest.table import table_request
from services.client.connection import TableConnection, play_seat
from services.client.model import ruleset_of
from services.common.auth import Kind, Minter
from services.common.db import Database
from services.game_session import models as session_models
from services.wallet.service import run_audit
from tests.conftest import POSTGRES_URL
from tests.services.harness import ServiceProcess, bearer, dev_minter, free_port, service_process

pytestmark = pytest.mark.slow

SEEDS = [int(s) for s in os.environ.get("BURACO_KILL_SEEDS", "1").split(",") if s.strip()]
BET = 40
#: (players, points target; 0: express) of each table
TABLES = [(2, 0), (2, 505), (4, 0), (4, 505)] * 2
SESSION_ENV = {
    "BURACO_GAME_SESSION_LEASE_SECONDS": "2",
    "BURACO_GAME_SESSION_TAKEOVER_SCAN_SECONDS": "0.2",
    "BURACO_GAME_SESSION_BOT_DELAY_MS": "0",
    "BURACO_GAME_SESSION_START_SECONDS": "60",
    "BURACO_GAME_SESSION_DISCONNECT_GRACE_SECONDS": "300",
    "BURACO_GAME_SESSION_OUTBOX_RETRY_SECONDS": "0.05",
    "BURACO_GAME_SESSION_OUTBOX_MAX_RETRY_SECONDS": "0.2",
}
#: Snapshot fields that legitimately differ across a restart: the turn timer starts again (the
#: players were not to blame) and connections are counted anew.
RESTARTED_FIELDS = {"turnDeadline", "connected"}


def without(payload: Any, fields: set[str]) -> Any:
    if isinstance(payload, dict):
        return {k: without(v, fields) for k, v in payload.items() if k not in fields}
    if isinstance(payload, list):
        return [without(v, fields) for v in payload]
    return payload


@dataclass
class Databases:
    """Where each service keeps its tables: its own SQLite file, or its own PostgreSQL schema."""

    env: dict[str, dict[str, str]]
    urls: dict[str, tuple[str, str | None]]

    def database(self, service: str) -> Database:
        url, schema = self.urls[service]
        return Database(url, schema=schema)


@contextlib.contextmanager
def databases(kind: str, tmp_path: Path) -> Iterator[Databases]:
    services = ("wallet", "ranking", "game_session")
    if kind == "sqlite":
        urls: dict[str, tuple[str, str | None]] = {
            s: (f"sqlite+aiosqlite:///{tmp_path / s}.db", None) for s in services}
        yield Databases({s: {"BURACO_DATABASE_URL": u} for s, (u, _) in urls.items()}, urls)
        return
    dsn = POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://", 1)

    async def execute(statement: str) -> None:
        try:
            connection = await asyncpg.connect(dsn, timeout=5)
        except (OSError, asyncpg.PostgresError) as error:
            if os.environ.get("CI") == "true":
                pytest.fail(f"PostgreSQL not reachable: {error}")
            pytest.skip(f"PostgreSQL not reachable: {error}")
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    prefix = f"kill_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    schemas = {s: f"{prefix}_{s}" for s in services}
    for schema in schemas.values():
        asyncio.run(execute(f'CREATE SCHEMA "{schema}"'))
    try:
        yield Databases(
            {s: {"BURACO_DATABASE_URL": POSTGRES_URL, "BURACO_DATABASE_SCHEMA": schemas[s]} for s in services},
            {s: (POSTGRES_URL, schemas[s]) for s in services},
        )
    finally:
        for schema in schemas.values():
            asyncio.run(execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


@dataclass
class Seat:
    player: str
    connection: TableConnection
    rules: Ruleset
    #: the stream's events as they arrived (duplicates included), snapshots left out
    arrived: list[game_session_pb2.TableEvent] = field(default_factory=list)


@dataclass
class PlayedTable:
    name: str
    match_id: str
    players: list[str]
    seats: list[Seat] = field(default_factory=list)


class Pacer:
    """Every seat's calls (actions and hints), counted, and held at will: `hold()` lets no seat
    start another and returns once none is in flight."""

    def __init__(self) -> None:
        self.accepted = 0
        self.in_flight = 0
        self._open = asyncio.Event()
        self._open.set()
        self._changed = asyncio.Event()

    def wrap(self, connection: TableConnection) -> None:
        act, hints = connection.act, connection.hints

        async def counted_act(*args: Any, **kwargs: Any) -> game_session_pb2.ActionResult:
            result: game_session_pb2.ActionResult = await self._counted(act(*args, **kwargs))
            self.accepted += 1
            return result

        async def counted_hints() -> game_session_pb2.GetLegalMovesResponse:
            reply: game_session_pb2.GetLegalMovesResponse = await self._counted(hints())
            return reply

        connection.act = counted_act  # type: ignore[method-assign]
        connection.hints = counted_hints  # type: ignore[method-assign]

    async def _counted(self, call: Any) -> Any:
        try:
            while not self._open.is_set():  # (woken by a release, held again before it ran)
                await self._open.wait()
        except BaseException:
            call.close()
            raise
        self.in_flight += 1
        try:
            return await call
        finally:
            self.in_flight -= 1
            self._changed.set()

    async def hold(self) -> None:
        self._open.clear()
        while self.in_flight:
            self._changed.clear()
            await self._changed.wait()

    def release(self) -> None:
        self._open.set()

    def wake(self) -> None:
        """Wake `until_accepted` (its other condition changed)."""
        self._changed.set()

    async def until_accepted(self, count: int, finished: asyncio.Event) -> None:
        while self.accepted < count and not finished.is_set():
            self._changed.clear()
            await self._changed.wait()


class Session:
    """The game-session process, killed and started again at the same address."""

    def __init__(self, stack: contextlib.ExitStack, tmp_path: Path, env: dict[str, str]) -> None:
        self.stack = stack
        self.tmp_path = tmp_path
        self.port = free_port()  # below the ephemeral range: no connection takes it while down
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**env, "BURACO_HOST": "127.0.0.1", "BURACO_PORT": str(self.port),
                    "BURACO_GAME_SESSION_ADVERTISE_ADDRESS": self.address}
        self.process: ServiceProcess | None = None
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        self.process = await asyncio.to_thread(
            self.stack.enter_context,
            service_process("game_session", self.tmp_path, env=self.env, label=f"game_session#{self.starts}"),
        )
        assert self.process.address == self.address

    def kill(self) -> None:
        assert self.process is not None
        self.process.process.send_signal(signal.SIGKILL)
        assert self.process.process.wait(timeout=10) == -signal.SIGKILL


def kill_plan(rng: random.Random) -> list[tuple[str, int]]:
    """(kind, actions to accept after the previous restart before it) of each kill, in order; a
    match-end kill waits instead for the next match to end."""
    kinds = ["idle", "in_flight", rng.choice(("idle", "in_flight"))]
    rng.shuffle(kinds)
    kinds.insert(rng.randint(1, len(kinds)), "match_end")  # after a kill mid-match at least
    return [(kind, rng.randrange(20, 150)) for kind in kinds]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_matches_survive_repeated_kills_of_their_process(tmp_path: Path, database: str, seed: int) -> None:
    minter = dev_minter(tmp_path / "dev-keys")
    with databases(database, tmp_path) as dbs, contextlib.ExitStack() as stack:
        wallet = stack.enter_context(service_process("wallet", tmp_path, dbs.env["wallet"]))
        ranking = stack.enter_context(service_process("ranking", tmp_path, dbs.env["ranking"]))
        session = Session(stack, tmp_path, {
            **dbs.env["game_session"], **SESSION_ENV,
            "BURACO_GAME_SESSION_DEAL_SEED": f"kill-{seed}",
            "BURACO_WALLET_ADDRESS": wallet.address, "BURACO_RANKING_ADDRESS": ranking.address,
        })
        processes: list[ServiceProcess] = [wallet, ranking]
        try:
            asyncio.run(scenario(minter, session, wallet.address, ranking.address, dbs, seed))
        except BaseException:
            for process in [*processes, *(p for p in [session.process] if p is not None)]:
                for line in process.lines:
                    if '"ERROR"' in line or "Traceback" in line:
                        print(f"[{process.name}] {line}")
            raise


async def scenario(
    minter: Minter, session: Session, wallet_address: str, ranking_address: str, dbs: Databases, seed: int
) -> None:
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:6]
    service = bearer(minter.mint(Kind.SERVICE, "matchmaking"))
    admin = bearer(minter.mint(Kind.ADMIN, "tester"))
    await session.start()
    tables: list[PlayedTable] = []
    async with grpc.aio.insecure_channel(wallet_address) as wallet_channel, \
            grpc.aio.insecure_channel(session.address) as session_channel:
        wallet: Any = wallet_pb2_grpc.WalletServiceStub(wallet_channel)
        sessions: Any = game_session_pb2_grpc.GameSessionServiceStub(session_channel)
        for index, (players, target) in enumerate(TABLES):
            names = [f"k{run}-{index}-{seat}" for seat in range(players)]
            for name in names:
                await wallet.CreateAccount(wallet_pb2.CreateAccountRequest(
                    request_id=f"{name}-open", player=f"players/{name}"), metadata=admin)
            match_id = f"k{run}-{index}"
            await wallet.HoldBets(wallet_pb2.HoldBetsRequest(
                request_id=f"{match_id}-hold", match_id=match_id,
                stakes=[wallet_pb2.Stake(player=f"players/{n}", amount_chips=BET) for n in names],
            ), metadata=service)
            options = common_pb2.TableOptions(
                ruleset=common_pb2.RulesetRef(preset="aberto"), players=players,
                length=common_pb2.MATCH_LENGTH_POINTS if target else common_pb2.MATCH_LENGTH_EXPRESS,
                target_points=target, mode=common_pb2.TABLE_MODE_COMPETITIVE, bet_chips=BET,
                draw_seconds=300, play_seconds=600,
            )
            created = await sessions.CreateTable(
                table_request(match_id, match_id, [f"players/{n}" for n in names], options), metadata=service)
            tables.append(PlayedTable(created.name, match_id, names))
        before = {n: await _balance(wallet, admin, n) for t in tables for n in t.players}
        assert all(held == BET for _, held in before.values())

    pacer = Pacer()
    match_ended = asyncio.Event()
    every_match_ended = asyncio.Event()
    ended_tables: set[str] = set()
    for table in tables:
        for seat_number, player in enumerate(table.players):
            connection = TableConnection(session.address, minter.mint(Kind.PLAYER, player), table.name,
                                         retry_seconds=60.0, play=rng.random() < 0.5)
            connection.keep_received = True
            # impatient clients: many requests meet the restarted process as it starts and scans
            connection.retry_delay_max = rng.choice((0.02, 0.1, 0.5))
            seat = Seat(player, connection, ruleset_of(common_pb2.RulesetRef(preset="aberto")))

            def arrived(method: str, message: Any, seat: Seat = seat, name: str = table.name) -> None:
                if not isinstance(message, game_session_pb2.TableEvent) or message.HasField("snapshot"):
                    return
                seat.arrived.append(message)
                if message.HasField("match_ended") and name not in ended_tables:
                    ended_tables.add(name)
                    match_ended.set()
                    if len(ended_tables) == len(tables):
                        every_match_ended.set()
                        pacer.wake()

            connection.on_message = arrived
            pacer.wrap(connection)
            table.seats.append(seat)
            assert seat_number == len(table.seats) - 1
    seats = [s for t in tables for s in t.seats]
    await asyncio.gather(*(s.connection.start() for s in seats))
    playing = [
        asyncio.ensure_future(play_seat(
            s.connection, make_bot("random", f"{seed}/{s.player}", s.rules), s.rules))
        for s in seats
    ]
    kills: list[str] = []
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        for kind, gap in kill_plan(rng):
            if kind == "match_end":
                match_ended.clear()
                waited = asyncio.ensure_future(match_ended.wait())
                await asyncio.wait({waited, asyncio.ensure_future(every_match_ended.wait())},
                                   return_when=asyncio.FIRST_COMPLETED)
                if not waited.done():
                    waited.cancel()
                    break  # every match ended before
            else:
                await pacer.until_accepted(pacer.accepted + gap, every_match_ended)
            if every_match_ended.is_set() and kind != "match_end":
                break
            killed = loop.time()
            await kill_and_restart(kind, session, tables, pacer, admin)
            kills.append(f"{kind} ({loop.time() - killed:.1f} s)")
        sent = await asyncio.wait_for(asyncio.gather(*playing), timeout=300)
    finally:
        for task in playing:
            task.cancel()
    assert sent and all(n > 0 for n in sent)
    assert kills, "no kill happened: every match ended first"
    print(f"kill-and-restart seed {seed}: kills {kills}, {pacer.accepted} actions accepted, "
          f"{sum(s.connection.reconnects for s in seats)} stream resumptions, played in {loop.time() - began:.1f} s")

    for table in tables:
        for seat in table.seats:
            model = seat.connection.model
            assert model.finished and model.match_end is not None and not model.match_end.annulled, table.name
            seqs = [e.seq for e in seat.arrived]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"{table.name} {seat.player}: a gap or duplicate"
            assert seqs[-1] == model.seq
            by_seq = {e.seq: e for e in seat.connection.received}
            for method, request, result in seat.connection.accepted:
                for event in result.events:
                    assert by_seq.get(event.seq) == event, f"{method} {request.request_id}: its answer differs"
    await settled_once(tables, before, wallet_address, ranking_address, dbs, minter)
    for seat in seats:
        await seat.connection.close()


async def kill_and_restart(
    kind: str, session: Session, tables: list[PlayedTable], pacer: Pacer, admin: Any
) -> None:
    snapshots: dict[tuple[str, str], Any] = {}
    if kind == "idle":
        await pacer.hold()
        async with grpc.aio.insecure_channel(session.address) as channel:
            stub: Any = game_session_pb2_grpc.GameSessionServiceStub(channel)
            for table in tables:
                for seat in table.seats:
                    snapshots[(table.name, seat.player)] = await _snapshot(stub, table.name, seat)
    session.kill()
    await session.start()
    async with grpc.aio.insecure_channel(session.address) as channel:
        stub = game_session_pb2_grpc.GameSessionServiceStub(channel)
        for key, before in snapshots.items():
            table = next(t for t in tables if t.name == key[0])
            seat = next(s for s in table.seats if s.player == key[1])
            after = await _retry(lambda t=table, s=seat: _snapshot(stub, t.name, s))
            assert after == before, f"{key}: the snapshot changed across the kill: {_diff(before, after)}"
        # the last action each seat had accepted, sent again: answered as it was the first time
        for table in tables:
            for seat in table.seats:
                if not seat.connection.accepted or seat.connection.play:
                    continue
                method, request, answer = seat.connection.accepted[-1]
                again = await _retry(lambda m=method, r=request, s=seat: getattr(stub, m)(
                    r, metadata=s.connection.metadata, timeout=10))
                assert again.result == answer, f"{table.name} {seat.player}: a retry was answered otherwise"
    pacer.release()


async def _snapshot(stub: Any, table: str, seat: Seat) -> Any:
    reply = await stub.GetTableSnapshot(
        game_session_pb2.GetTableSnapshotRequest(table=table), metadata=seat.connection.metadata, timeout=10)
    return without(json_format.MessageToDict(reply), RESTARTED_FIELDS)


def _diff(before: Any, after: Any, path: str = "") -> list[str]:
    """Where two snapshots (as dicts) differ."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [d for k in sorted(set(before) | set(after))
                for d in _diff(before.get(k), after.get(k), f"{path}.{k}")]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [d for i, (b, a) in enumerate(zip(before, after, strict=True)) for d in _diff(b, a, f"{path}[{i}]")]
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"]


async def _retry(call: Any, timeout: float = 30.0) -> Any:
    """A call until it answers: UNAVAILABLE while the restarted process loads the table."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                return await call()
            except grpc.aio.AioRpcError as error:
                if error.code() is not grpc.StatusCode.UNAVAILABLE:
                    raise
            await asyncio.sleep(0.05)


async def _balance(wallet: Any, admin: Any, player: str) -> tuple[int, int]:
    account = await wallet.GetAccount(wallet_pb2.GetAccountRequest(name=f"accounts/player-{player}"),
                                      metadata=admin, timeout=10)
    return int(account.balance_chips), int(account.held_chips)


async def settled_once(
    tables: list[PlayedTable], before: dict[str, tuple[int, int]], wallet_address: str, ranking_address: str,
    dbs: Databases, minter: Minter,
) -> None:
    """Each pot settled exactly once to the chip, each match recorded once, the outbox empty."""
    admin = bearer(minter.mint(Kind.ADMIN, "tester"))
    expected: dict[str, int] = {}
    for table in tables:
        model = table.seats[0].connection.model
        assert model.match_end is not None
        first_seat = (model.dealer - (model.hand_number - 1) + 1) % model.players
        winners = [o.seat for o in model.match_end.outcomes if o.outcome == common_pb2.OUTCOME_WON]
        deltas = expected_deltas(BET, len(table.players), winners, first_seat, 20)
        for seat, player in enumerate(table.players):
            expected[player] = before[player][0] + deltas[seat]
    async with grpc.aio.insecure_channel(wallet_address) as wallet_channel, \
            grpc.aio.insecure_channel(ranking_address) as ranking_channel:
        wallet: Any = wallet_pb2_grpc.WalletServiceStub(wallet_channel)
        ranking: Any = ranking_pb2_grpc.RankingServiceStub(ranking_channel)
        # the outbox delivers in the background; well before a claim of the killed process would
        # run out (30 s): the restarted process takes its predecessor's claims at once
        async with asyncio.timeout(15):
            while True:
                now = {p: await _balance(wallet, admin, p) for p in expected}
                for player, (balance, held) in now.items():  # never paid twice, never half
                    assert (balance, held) in ((before[player][0], BET), (expected[player], 0)), (player, now)
                if all(now[p] == (expected[p], 0) for p in expected):
                    break
                await asyncio.sleep(0.1)
        for table in tables:
            for player in table.players:
                async with asyncio.timeout(60):
                    while True:
                        profile = await ranking.GetPlayer(
                            ranking_pb2.GetPlayerRequest(name=f"players/{player}"), metadata=admin, timeout=10)
                        if profile.stats.matches >= 1:
                            break
                        await asyncio.sleep(0.1)
                assert profile.stats.matches == 1, player
                xp = await ranking.ListXpEvents(
                    ranking_pb2.ListXpEventsRequest(parent=f"players/{player}"), metadata=admin, timeout=10)
                assert [e.match_id for e in xp.events] == [table.match_id], player
    db = dbs.database("game_session")
    try:
        outbox = session_models.outbox
        async with asyncio.timeout(30):
            while True:
                async with db.transaction() as transaction:
                    rows = (await transaction.execute(select(outbox.c.table_id, outbox.c.target, outbox.c.state))).all()
                if all(row.state == "delivered" for row in rows):
                    break
                await asyncio.sleep(0.1)
        owed = sorted((row.table_id, row.target) for row in rows)
        assert owed == sorted((t.name.removeprefix("tables/"), target) for t in tables
                              for target in ("ranking.RecordMatch", "wallet.Settle")), owed
    finally:
        await db.dispose()
    ledger = dbs.database("wallet")
    try:
        report = await run_audit(ledger)
        assert report.ok, report.problems
    finally:
        await ledger.dispose()
