"""The driver `make bench-gateway` (bench/gateway.py, the orchestrator) starts beside the gateway,
steered by JSON lines on its stdin as bench/session_driver.py's is.

It holds players of two kinds, seated two to a table that the driver creates with a service
token (`CreateTable`, as matchmaking would), who play match after match together, a new table each:

- `gateway` players, each with one WebSocket to the gateway, as the web table holds it: the hello
  with a player token such as the gateway's sign-in mints (the same key, the session's end
  claim), the table subscribed with `"play": true`, each move an `act` message;
- `direct` players, the baseline: each on the game session's own `Play` stream
  (`services.client.connection.TableConnection(play=True)`), as the gateway itself holds them.

Both kinds play alike: an engine bot decides from the model of what the seat was told
(`services.client.connection.play_seat`); a gateway seat (`GatewaySeat`) is a `TableConnection`
whose stream is the socket's `changes` messages (their events parsed into the same model) and
whose moves go out as `act` messages. A move's latency is the time from sending it to the
arrival of its first event at its table's players (the first seat to see it, as bench-sessions
counts): for gateway players, the `changes` message that carries it, stamped as it arrives,
before it is parsed; for direct players, the event off the stream. Every table is paced as
bench-sessions paces its tables: one action every `pace` seconds, the tables' phases spread.

Commands (one JSON answer each): `connect` (open `players` more gateway players' sockets, idle),
`direct` (add `players` direct players), `seat` (seat every player not seated yet, the tables'
first snapshots received), `run` (a measured window), `release` (the players of a kind leave),
`stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import random
import sys
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
import orjson
import websockets
from google.protobuf import json_format
from websockets.asyncio.client import ClientConnection

from bench.session_driver import DRIVER_GC_SETTLE_SECONDS, Pace, settle_collector
from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc
from engine.bots import make_bot
from engine.rules import preset
from services.client.channels import ChannelPool
from services.client.connection import ActionRefused, TableConnection, Timing, play_seat
from services.common.auth import Kind, Minter, ensure_dev_keys, load_private_key
from services.common.collector import GC_THRESHOLDS
from services.common.measure import percentile
from services.gateway.errors import status_named
from services.gateway.signin import SESSION_END_CLAIM

GATEWAY = "gateway"
DIRECT = "direct"
KINDS = (GATEWAY, DIRECT)
#: the players' tokens (and their sessions) outlast any run
TOKEN_SECONDS = 24 * 3600.0
#: the longest wait for an answer on a socket (a hello, a subscription, a move)
ANSWER_SECONDS = 60.0
#: sockets opened and tables created at once while setting up
SETUP_CONCURRENCY = 50
#: a table that failed is replaced after this pause (no tight loop against a failing gateway)
FAILED_TABLE_PAUSE = 1.0


class SocketClosed(ConnectionError):
    """The player's socket closed (`code`, `reason` as the gateway gave them)."""


class PlayerSocket:
    """One player's WebSocket to the gateway, its messages filed as they arrive: a table's
    `changes` and `end` to its seat, every other answer to the request that awaits it (by id)."""

    def __init__(self, url: str, token: str, timing: Timing) -> None:
        self.url = url
        self.token = token
        self.timing = timing
        self.seats: dict[str, GatewaySeat] = {}  # by subscription id
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.closed: tuple[int, str] | None = None

    async def open(self) -> None:
        """Connect and say hello (returns once the gateway answered `ready`)."""
        self._ws = await websockets.connect(self.url, max_size=None, compression=None, ping_interval=None,
                                            proxy=None, open_timeout=ANSWER_SECONDS)
        self._reader = asyncio.get_running_loop().create_task(self._read())
        ready = await self.request({"type": "hello", "token": self.token})
        if ready.get("type") != "ready":
            raise ConnectionError(f"the hello was answered {ready}")

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for text in self._ws:
                arrived = time.perf_counter()
                message = orjson.loads(text)
                kind = message.get("type")
                if kind == "changes":
                    seat = self.seats.get(message.get("sub", ""))
                    if seat is not None:
                        seat.changes(message["events"], arrived)
                elif kind == "end":
                    seat = self.seats.get(message.get("sub", ""))
                    if seat is not None:
                        seat.ended(message)
                else:
                    key = "hello" if kind == "ready" else str(message.get("id"))
                    answer = self._answers.pop(key, None)
                    if answer is not None and not answer.done():
                        answer.set_result(message)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed = (self._ws.close_code or 1006, self._ws.close_reason or "")
            failure = SocketClosed(f"the socket closed: {self.closed[0]} {self.closed[1]}")
            for answer in self._answers.values():
                if not answer.done():
                    answer.set_exception(failure)
            self._answers.clear()
            for seat in list(self.seats.values()):
                seat.ended({"type": "end", "error": {"code": "unavailable", "message": str(failure)}})

    async def send(self, message: dict[str, Any]) -> None:
        if self.closed is not None or self._ws is None:
            raise SocketClosed(f"the socket is closed: {self.closed}")
        await self._ws.send(orjson.dumps(message).decode())

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send `message` (a hello, or with an `id`, one given here when it has none) and wait for
        its answer."""
        key = "hello" if message["type"] == "hello" else str(message.setdefault("id", f"m{next(self._ids)}"))
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[key] = answer
        try:
            await self.send(message)
            async with asyncio.timeout(ANSWER_SECONDS):
                reply = await answer
        finally:
            self._answers.pop(key, None)
        return reply

    async def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader


class SubscriptionEnded(ConnectionError):
    """The gateway ended a table subscription with an error."""


class GatewaySeat(TableConnection):
    """A seat played through the gateway: a `TableConnection` (its model, its waits, so
    `play_seat`) whose stream is the socket's `changes` for one table subscription and whose
    moves are `act` messages; the legal-move hints (asked for only after a refusal) come over
    HTTP, as a browser would ask."""

    def __init__(self, socket: PlayerSocket, table: str, http: httpx.AsyncClient) -> None:
        super().__init__("gateway", "", table, play=True)
        self.socket = socket
        self.http = http
        self.sub = table
        self._inbox: deque[list[dict[str, Any]] | dict[str, Any]] = deque()
        self._wake: asyncio.Future[None] | None = None
        self.subscribed = False

    # -- filed by the socket's reader -------------------------------------------------------------
    def changes(self, events: list[dict[str, Any]], arrived: float) -> None:
        timing = self.socket.timing
        if timing.pending:
            for event in events:
                sent = timing.pending.pop((self.table, int(event.get("seq") or 0)), None)
                if sent is not None:
                    timing.samples.append((sent, arrived - sent))
        self._inbox.append(events)
        self._wakeup()

    def ended(self, message: dict[str, Any]) -> None:
        self.subscribed = False
        self._inbox.append(message)
        self._wakeup()

    def _wakeup(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    # -- TableConnection's transport, over the socket ---------------------------------------------
    async def _messages(self) -> AsyncIterator[
            tuple[str, Sequence[game_session_pb2.TableEvent], game_session_pb2.PlayUpdate | None]]:
        self.socket.seats[self.sub] = self
        try:
            answer = await self.socket.request({"type": "subscribe", "id": self.sub, "stream": "table",
                                                "table": self.table, "afterSeq": self.model.seq, "play": True})
            if answer.get("type") != "subscribed":
                raise SubscriptionEnded(f"subscribe {self.table}: {answer.get('error', answer)}")
            self.subscribed = True
            while True:
                while not self._inbox:
                    self._wake = asyncio.get_running_loop().create_future()
                    await self._wake
                item = self._inbox.popleft()
                if isinstance(item, dict):  # the subscription's end
                    if item.get("error") is not None:
                        raise SubscriptionEnded(f"{self.table}: {item['error']}")
                    return
                yield "Gateway", [json_format.ParseDict(e, game_session_pb2.TableEvent(), ignore_unknown_fields=True)
                                  for e in item], None
        finally:
            self.socket.seats.pop(self.sub, None)

    async def send(self, method: str, request: Any) -> game_session_pb2.ActionResult:
        key = (self.table, request.expected_seq + 1)
        pending = self.socket.timing.pending
        message = {"type": "act", "sub": self.sub, "method": method, "request": json_format.MessageToDict(request)}
        pending[key] = time.perf_counter()
        try:
            answer = await self.socket.request(message)
        except BaseException:
            pending.pop(key, None)
            raise
        if answer.get("type") != "result":
            pending.pop(key, None)
            error = answer.get("error") or {}
            current = next((d["currentSeq"] for d in error.get("details", []) if "currentSeq" in d), None)
            raise ActionRefused(status_named(str(error.get("code", "")).upper()), str(error.get("message", "")),
                                int(current) if current is not None else None)
        return game_session_pb2.ActionResult(seq=int(answer.get("seq") or 0))

    async def hints(self) -> game_session_pb2.GetLegalMovesResponse:
        response = await self.http.post("/buraco.v1.GameSessionService/GetLegalMoves", content=orjson.dumps(
            {"table": self.table}), headers={"authorization": f"Bearer {self.socket.token}",
                                             "content-type": "application/json"})
        if response.status_code != 200:
            raise ConnectionError(f"GetLegalMoves: {response.status_code} {response.text[:200]}")
        return json_format.ParseDict(response.json(), game_session_pb2.GetLegalMovesResponse(),
                                     ignore_unknown_fields=True)

    async def close(self) -> None:
        if self.subscribed and self.socket.closed is None:  # left mid-match: the gateway lets it go too
            self.subscribed = False
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.socket.request({"type": "unsubscribe", "id": self.sub}), 5)
        await super().close()


@dataclass
class BenchPlayer:
    name: str
    token: str
    socket: PlayerSocket | None = None  # a gateway player's


@dataclass
class Group:
    """A table's players, who play match after match together, their table paced as one."""

    kind: str
    players: list[BenchPlayer]
    pace_of: Pace
    next_action: float = 0.0
    actions: int = 0
    table: str = ""
    task: asyncio.Task[None] | None = None
    seats: list[TableConnection] = field(default_factory=list)

    async def pace(self) -> None:
        pace = self.pace_of
        await pace.running.wait()
        now = time.perf_counter()
        if self.next_action <= 0.0:
            self.next_action = now + random.uniform(0, pace.interval)  # spread the tables' phases
        if self.next_action > now:
            await asyncio.sleep(self.next_action - now)
            await pace.running.wait()
        self.next_action = max(self.next_action + pace.interval, time.perf_counter() - pace.interval)
        self.actions += 1


async def gather_all(*awaitables: Any) -> list[Any]:
    """Every result once all have finished; then the first failure, if any, is raised (a bare
    gather would leave a table's other seat playing on after one failed)."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return list(results)


class GatewayDriver:
    def __init__(self, config: dict[str, Any]) -> None:
        self.address = str(config["address"])  # the game session's
        self.gateway_url = str(config["gateway"]).rstrip("/")
        self.socket_url = self.gateway_url.replace("http://", "ws://", 1) + "/v1/socket"
        self.ruleset = str(config.get("preset", "aberto"))
        self.bot_kind = str(config.get("bot", "random"))
        private, _ = ensure_dev_keys(Path(config["keys"]))
        self.minter = Minter(load_private_key(private), audience="buraco")
        # matchmaking's identity, whose place the driver takes: CreateTable admits the services that
        # seat players only (docs/contracts.md, "Who may call what")
        self.service_token = self.minter.mint(Kind.SERVICE, "matchmaking", ttl=TOKEN_SECONDS)
        self.pool = ChannelPool(int(config.get("channels", 16)))
        self.http = httpx.AsyncClient(base_url=self.gateway_url, timeout=30, trust_env=False,
                                      limits=httpx.Limits(max_connections=32, max_keepalive_connections=32))
        self.pace = Pace(interval=float(config.get("pace", 2.0)))
        self.timings = {kind: Timing() for kind in KINDS}
        self.waiting: dict[str, list[BenchPlayer]] = {kind: [] for kind in KINDS}  # not seated yet
        self.groups: dict[str, list[Group]] = {kind: [] for kind in KINDS}
        self.finished = dict.fromkeys(KINDS, 0)
        self.failed = dict.fromkeys(KINDS, 0)
        self.errors: list[str] = []
        self.run_id = uuid.uuid4().hex[:8]
        self._numbers = itertools.count(1)
        self._tables = itertools.count(1)
        self.settling: asyncio.Task[None] | None = None

    def new_player(self, kind: str) -> BenchPlayer:
        name = f"{kind[0]}{self.run_id}p{next(self._numbers)}"
        if kind == GATEWAY:  # as the gateway's sign-in mints it: a player token with the session's end
            token = self.minter.mint(Kind.PLAYER, name, ttl=TOKEN_SECONDS, claims={
                SESSION_END_CLAIM: int(time.time() + TOKEN_SECONDS), "name": name})
        else:
            token = self.minter.mint(Kind.PLAYER, name, ttl=TOKEN_SECONDS)
        return BenchPlayer(name, token)

    # -- commands ---------------------------------------------------------------------------------
    async def connect(self, count: int) -> dict[str, Any]:
        """`count` more gateway players, each with its socket open (hello answered), not seated."""
        started = time.perf_counter()
        semaphore = asyncio.Semaphore(SETUP_CONCURRENCY)
        players = [self.new_player(GATEWAY) for _ in range(count)]

        async def one(player: BenchPlayer) -> None:
            async with semaphore:
                player.socket = PlayerSocket(self.socket_url, player.token, self.timings[GATEWAY])
                await player.socket.open()

        await gather_all(*(one(p) for p in players))
        self.waiting[GATEWAY].extend(players)
        return {"players": count, "seconds": time.perf_counter() - started,
                "sockets": sum(len(g.players) for g in self.groups[GATEWAY]) + len(self.waiting[GATEWAY])}

    def add_direct(self, count: int) -> dict[str, Any]:
        self.waiting[DIRECT].extend(self.new_player(DIRECT) for _ in range(count))
        return {"players": count}

    async def seat(self) -> dict[str, Any]:
        """Every waiting player at a table (two to a table), playing once the tables' first
        snapshots have arrived."""
        started = time.perf_counter()
        semaphore = asyncio.Semaphore(SETUP_CONCURRENCY)
        firsts: list[asyncio.Future[None]] = []
        for kind in KINDS:
            waiting, self.waiting[kind] = self.waiting[kind], []
            for first in range(0, len(waiting) - 1, 2):
                group = Group(kind, waiting[first:first + 2], self.pace)
                seated: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                group.task = asyncio.get_running_loop().create_task(self.play(group, seated, semaphore))
                self.groups[kind].append(group)
                firsts.append(seated)
            self.waiting[kind] = waiting[len(waiting) - len(waiting) % 2:]
        await asyncio.gather(*firsts)
        gc.collect()
        gc.freeze()  # the tables' long-lived objects leave the collector's scans
        gc.set_threshold(*GC_THRESHOLDS)
        if self.settling is None:
            self.settling = asyncio.ensure_future(settle_collector(DRIVER_GC_SETTLE_SECONDS))
        return {"tables": len(firsts), "seconds": time.perf_counter() - started,
                **{f"{kind}_tables": len(self.groups[kind]) for kind in KINDS}}

    async def create_table(self, group: Group) -> str:
        index = next(self._tables)
        stub = game_session_pb2_grpc.GameSessionServiceStub(self.pool.get(self.address))
        options = common_pb2.TableOptions(
            ruleset=common_pb2.RulesetRef(preset=self.ruleset), players=len(group.players),
            length=common_pb2.MATCH_LENGTH_EXPRESS, mode=common_pb2.TABLE_MODE_PRACTICE,
            draw_seconds=300, play_seconds=600,
        )
        request = game_session_pb2.CreateTableRequest(
            request_id=f"gw-{self.run_id}-{index}",
            table=game_session_pb2.Table(
                match_id=f"gw-{self.run_id}-{index}", options=options,
                seats=[game_session_pb2.Seat(seat=s, participant=common_pb2.Participant(player=f"players/{p.name}"))
                       for s, p in enumerate(group.players)],
            ),
        )
        table: game_session_pb2.Table = await stub.CreateTable(
            request, metadata=(("authorization", f"Bearer {self.service_token}"),), timeout=30)
        return table.name

    def seat_of(self, group: Group, player: BenchPlayer, table: str) -> TableConnection:
        if group.kind == GATEWAY:
            assert player.socket is not None
            return GatewaySeat(player.socket, table, self.http)
        connection = TableConnection(self.address, player.token, table, channels=self.pool, play=True)
        connection.timing = self.timings[DIRECT]
        return connection

    async def play(self, group: Group, seated: asyncio.Future[None], semaphore: asyncio.Semaphore) -> None:
        """The group's matches, one table after another, until released."""
        rules = preset(self.ruleset)
        while True:
            try:
                if seated.done():
                    await self.open_table(group)
                else:  # the first table: at most SETUP_CONCURRENCY opening at once
                    async with semaphore:
                        await self.open_table(group)
                    seated.set_result(None)
                await gather_all(*(
                    play_seat(seat, make_bot(self.bot_kind, seed=f"{group.table}/{index}", rules=rules), rules,
                              group.pace)
                    for index, seat in enumerate(group.seats)))
                self.finished[group.kind] += 1
            except asyncio.CancelledError:
                raise
            except Exception as error:  # one table's failure is counted, its players play on
                self.failed[group.kind] += 1
                self.errors.append(f"{group.kind} {group.table}: {type(error).__name__}: {error}")
                if not seated.done():
                    seated.set_result(None)
                await asyncio.sleep(FAILED_TABLE_PAUSE)
            finally:
                seats, group.seats = group.seats, []
                for seat in seats:
                    await seat.close()

    async def open_table(self, group: Group) -> None:
        """A new table for the group, its seats following it (each seat's snapshot received)."""
        group.table = await self.create_table(group)
        group.seats = [self.seat_of(group, p, group.table) for p in group.players]
        await gather_all(*(seat.start() for seat in group.seats))

    async def run(self, warmup: float, seconds: float, out: TextIO) -> dict[str, Any]:
        """Every table at its pace for warmup + seconds; the figures of the window, by kind."""
        for groups in self.groups.values():
            for group in groups:
                group.next_action = 0.0
        self.pace.running.set()
        await asyncio.sleep(warmup)
        start = time.perf_counter()
        paced_before = {kind: sum(g.actions for g in self.groups[kind]) for kind in KINDS}
        finished_before, failed_before = dict(self.finished), dict(self.failed)
        print(json.dumps({"event": "window"}), file=out, flush=True)
        cpu_before = time.process_time()
        lags: list[float] = []
        health: list[float] = []

        async def watch_loop() -> None:
            """How late this driver's own event loop runs (a late driver inflates every latency)."""
            while True:
                before = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - before - 0.01)

        async def probe_gateway() -> None:
            """GET /healthz every 100 ms: how long the gateway's loop keeps any request waiting."""
            while True:
                before = time.perf_counter()
                with contextlib.suppress(httpx.HTTPError):
                    await self.http.get("/healthz")
                    health.append(time.perf_counter() - before)
                await asyncio.sleep(0.1)

        tasks = [asyncio.ensure_future(watch_loop()), asyncio.ensure_future(probe_gateway())]
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
        end = time.perf_counter()
        self.pace.running.clear()
        kinds: dict[str, Any] = {}
        for kind, timing in self.timings.items():
            window = [latency for sent, latency in timing.samples if start <= sent < end]
            timing.samples = [s for s in timing.samples if s[0] >= end]
            tables = len(self.groups[kind])
            kinds[kind] = {
                "players": sum(len(g.players) for g in self.groups[kind]),
                "tables": tables,
                "offered": tables / self.pace.interval if self.pace.interval else 0.0,
                "actions": len(window),
                "paced": sum(g.actions for g in self.groups[kind]) - paced_before[kind],
                "p50": percentile(window, 0.5),
                "p99": percentile(window, 0.99),
                "max": max(window, default=float("nan")),
                "matches_finished": self.finished[kind] - finished_before[kind],
                "tables_failed": self.failed[kind] - failed_before[kind],
            }
        return {
            "seconds": end - start,
            "kinds": kinds,
            "errors": self.errors[-5:],
            "error_count": sum(self.failed.values()),
            "driver_cpu": time.process_time() - cpu_before,
            "driver_lag_p99": percentile(lags, 0.99),
            "driver_lag_max": max(lags, default=0.0),
            "health_p50": percentile(health, 0.5),
            "health_p99": percentile(health, 0.99),
        }

    async def release(self, kind: str) -> dict[str, Any]:
        """The players of `kind` leave: their tables stop, their sockets close."""
        groups, self.groups[kind] = self.groups[kind], []
        for group in groups:
            if group.task is not None:
                group.task.cancel()
        await asyncio.gather(*(g.task for g in groups if g.task is not None), return_exceptions=True)
        players = [p for g in groups for p in g.players] + self.waiting[kind]
        self.waiting[kind] = []
        await asyncio.gather(*(p.socket.close() for p in players if p.socket is not None), return_exceptions=True)
        self.timings[kind] = Timing()
        return {"released": len(players)}

    async def stop(self) -> None:
        for kind in KINDS:
            await self.release(kind)
        if self.settling is not None:
            self.settling.cancel()
        await self.http.aclose()
        await self.pool.close()


async def drive() -> None:
    """The driver process: JSON commands on stdin, one JSON answer each on stdout."""
    loop = asyncio.get_running_loop()
    driver: GatewayDriver | None = None
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = orjson.loads(line)
        kind = command["cmd"]
        answer: dict[str, Any]
        if kind == "stop":
            if driver is not None:
                await driver.stop()
            print(json.dumps({"ok": True}), flush=True)
            break
        if driver is None:
            driver = GatewayDriver(command)
        try:
            if kind == "connect":
                answer = await driver.connect(int(command["players"]))
            elif kind == "direct":
                answer = driver.add_direct(int(command["players"]))
            elif kind == "seat":
                answer = await driver.seat()
            elif kind == "run":
                answer = await driver.run(float(command["warmup"]), float(command["seconds"]), sys.stdout)
            elif kind == "release":
                answer = await driver.release(str(command["kind"]))
            else:
                answer = {"error": f"unknown command {kind!r}"}
        except Exception as error:  # told to the orchestrator, which decides (a level that fails to open)
            answer = {"error": f"{kind}: {type(error).__name__}: {error}"}
        print(json.dumps(answer), flush=True)  # (json: NaN where a figure has no sample)
