"""Scenario `web`: the players' journey as browsers make it, through the gateway (services/gateway).

Each simulated player is a browser of the web table: JSON over HTTP (httpx) for the calls and one
WebSocket (websockets) for everything that streams, kept from its sign-in to the end of the run.

    signin       (once per player) `POST /v1/sign-in` (the development sign-in: the gateway opens
                 the account, with its starting grant), the socket opened and its hello answered,
                 the ranking profile read
    fund         the balance over HTTP (WalletService/GetAccount); a player short of a stake fails
                 the step with SHORT_OF_CHIPS (a browser cannot grant itself chips: the starting
                 grant, BURACO_WALLET_STARTING_GRANT_CHIPS, pays for its matches)
    queue        CreateTicket over HTTP, the ticket followed on the socket (a `ticket`
                 subscription) until MATCHED, ConfirmTicket over HTTP when a match is proposed
    play         the table subscribed on the socket with `"play": true`; on each of its turns the
                 player asks for its legal moves over HTTP (GameSessionService/GetLegalMoves),
                 takes the first (`next_move`: draw; lay a meld, else add to one; discard) and
                 sends it as an `act` message, until the subscription ends with the match
    settle       the balance over HTTP until no chips are held, checked to the chip against the
                 match's outcome as the other scenarios check it (counter `settlements_checked`)
    leaderboard  ranking over HTTP: the profile counts the match; the player's rank; the top 10

Rows of the report: every HTTP call as `http.<service>.<Method>` (and `http.SignIn`,
`http.Refresh`); the socket as `socket.hello`, `socket.ticket` and `socket.table` (a subscription,
timed to its first update or change: the time to first event) and `socket.act/<Method>` (a move,
to its result). A failure counts under the gRPC status the gateway's error body names (upper
case: `FAILED_PRECONDITION`), or the driver's own codes (`TIMEOUT`, `SOCKET_CLOSED`, ...). A move
refused as stale (the table moved on first) is expected (`expected:socket.act/<Method>:...`) and
decided again. A 429 is waited out (`Retry-After`) and sent again (counter `rate_limited`).

Each player sends `X-Forwarded-For` with an address of its own (10.x.y.z): a gateway that trusts
the driver's address as a proxy (BURACO_GATEWAY_TRUSTED_PROXIES) takes it as the player's, so that
its per-address rate limit and ranking's same-address rule see the players apart, as they see
real players; any other gateway ignores the header.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import websockets
from google.protobuf import json_format
from websockets.asyncio.client import ClientConnection

from buraco.v1 import game_session_pb2
from loadtest.client import RunEnded, StepError, status_name
from loadtest.journey import POLL_INTERVAL_S, POLL_MAX_S, Player, keep_going, run_journeys
from loadtest.recorder import Recorder
from loadtest.settings import Settings
from loadtest.table import settlement
from services.client.model import TableModel

#: Refresh the token when it has less than this left.
REFRESH_BEFORE_S = 60.0
#: Moves refused as stale in a row, on a table that did not move on, before the step fails.
MAX_REFUSALS = 5
BOARD = {"scope": "SCOPE_GLOBAL", "period": "PERIOD_ALL_TIME", "metric": "METRIC_XP"}
STALE = ("FAILED_PRECONDITION", "ABORTED")


class Refused(StepError):
    """The gateway's refusal: `code` is the gRPC status it names (upper case)."""

    def __init__(self, code: str, message: str, details: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(code, message)
        self.message = message
        self.details = list(details)


def refused(error: dict[str, Any]) -> Refused:
    """The error body `{"code", "message", "details"}` as a `Refused`."""
    return Refused(str(error.get("code", "unknown")).upper(), str(error.get("message", "")),
                   error.get("details") or [])


def retry_after_s(response: httpx.Response) -> float:
    body_wait = next((d.get("retryAfterMs") for d in _details(response) if "retryAfterMs" in d), None)
    if body_wait is not None:
        return float(body_wait) / 1000
    return float(response.headers.get("retry-after", "1"))


def _details(response: httpx.Response) -> list[dict[str, Any]]:
    with contextlib.suppress(ValueError, AttributeError):
        return list(response.json().get("details") or [])
    return []


def next_move(hints: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """A simple player, as the web table's tests play: draw; lay the first meld offered, else the
    first addition; then discard the first card offered. None when there is nothing to do."""
    if hints.get("canDraw"):
        return "Draw", {}
    if hints.get("melds"):
        meld = hints["melds"][0]
        return "Meld", {"cards": meld["cards"], "wildAs": meld.get("wildAs", "")}
    if hints.get("additions"):
        addition = hints["additions"][0]
        return "AddToMeld", {"meld": addition["meld"], "cards": addition["cards"]}
    if hints.get("discards"):
        return "Discard", {"card": hints["discards"][0]}
    return None


def player_address(index: int) -> str:
    """The address a simulated player claims (X-Forwarded-For): one of its own, in 10.0.0.0/8."""
    return f"10.{(index >> 16) & 255}.{(index >> 8) & 255}.{index & 255}"


@dataclass
class TableFeed:
    """A table subscription: the seat's model, fed by the `changes` messages, and its end."""

    model: TableModel
    version: int = 0
    ended: dict[str, Any] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def apply(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.model.apply(json_format.ParseDict(event, game_session_pb2.TableEvent(), ignore_unknown_fields=True))
        self.version += 1
        self.changed.set()

    def end(self, message: dict[str, Any]) -> None:
        self.ended = message
        self.version += 1
        self.changed.set()

    async def next_change(self, version: int, timeout: float) -> None:
        """Wait until something arrived after `version` (a change, or the end)."""
        async with asyncio.timeout(timeout):
            while self.version == version:
                self.changed.clear()
                await self.changed.wait()


@dataclass
class Watch:
    """A watch subscription (a ticket): its updates as they come, and its end."""

    updates: list[dict[str, Any]] = field(default_factory=list)
    ended: dict[str, Any] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class WebClient:
    """One browser: its HTTP calls and its socket, every one recorded."""

    def __init__(self, recorder: Recorder, http: httpx.AsyncClient, base_url: str, address: str,
                 timeout: float) -> None:
        self.recorder = recorder
        self.http = http
        self.socket_url = base_url.replace("http", "ws", 1) + "/v1/socket"
        self.forwarded = {"x-forwarded-for": address}
        self.timeout = timeout
        self.token = ""
        self.player = ""
        self.expires_at = 0.0  # time.monotonic()
        self.socket: ClientConnection | None = None
        self.reader: asyncio.Task[None] | None = None
        self.closed: tuple[int, str] | None = None
        self.tables: dict[str, TableFeed] = {}
        self.watches: dict[str, Watch] = {}
        self.answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)

    # -- HTTP -------------------------------------------------------------------------------------
    async def post(self, name: str, path: str, body: dict[str, Any], *, auth: bool = True,
                   expected: Sequence[str] = ()) -> dict[str, Any]:
        """The answer's JSON; a refusal raises `Refused` (recorded as an error under `name`,
        except the `expected` codes, counted in `expected:{name}:{CODE}`). A 429 is waited out and
        the call sent again: its latency is the browser's, the wait included."""
        headers = {"content-type": "application/json", **self.forwarded}
        if auth:
            headers["authorization"] = f"Bearer {self.token}"
        content = json.dumps(body)
        started = time.perf_counter()
        while True:
            try:
                response = await self.http.post(path, content=content, headers=headers)
            except httpx.HTTPError as error:
                self.recorder.error("rpc", name, "TIMEOUT" if isinstance(error, httpx.TimeoutException)
                                    else type(error).__name__)
                raise
            if response.status_code == 429:
                self.recorder.counters["rate_limited"] += 1
                await asyncio.sleep(retry_after_s(response))
                continue
            if response.status_code == 200:
                self.recorder.ok("rpc", name, time.perf_counter() - started)
                answer: dict[str, Any] = response.json()
                return answer
            try:
                failure = refused(response.json())
            except ValueError:
                failure = Refused(f"HTTP_{response.status_code}", response.text[:200])
            if failure.code in expected:
                self.recorder.counters[f"expected:{name}:{failure.code}"] += 1
            else:
                self.recorder.error("rpc", name, failure.code)
            raise failure

    async def call(self, service: str, method: str, body: dict[str, Any],
                   expected: Sequence[str] = ()) -> dict[str, Any]:
        """A player's call: `service` is the key of `services.gateway.methods.PLAYER_METHODS`
        (`wallet`, `game_session`...), its gRPC service named after it."""
        grpc_service = "".join(part.capitalize() for part in service.split("_")) + "Service"
        return await self.post(f"http.{service}.{method}", f"/buraco.v1.{grpc_service}/{method}", body,
                               expected=expected)

    async def sign_in(self, name: str) -> None:
        session = await self.post("http.SignIn", "/v1/sign-in", {"name": name}, auth=False)
        self._session(session)

    def _session(self, session: dict[str, Any]) -> None:
        self.token = str(session["token"])
        self.player = str(session.get("player", self.player))
        self.expires_at = time.monotonic() + float(session.get("expiresIn", 0))

    async def keep_token(self) -> None:
        """A fresh token (HTTP, then on the socket) when the one held is about to expire."""
        if self.expires_at - time.monotonic() > REFRESH_BEFORE_S:
            return
        self._session(await self.post("http.Refresh", "/v1/session:refresh", {}))
        if self.socket is not None:
            await self.request("socket.token", {"type": "token", "token": self.token})

    # -- the socket -------------------------------------------------------------------------------
    async def connect(self) -> None:
        """Open the socket and say hello (recorded as `socket.hello`, from the connection on)."""
        started = time.perf_counter()
        try:
            self.socket = await websockets.connect(
                self.socket_url, additional_headers=self.forwarded, max_size=None, compression=None,
                ping_interval=None, proxy=None, open_timeout=self.timeout)
        except (OSError, TimeoutError, websockets.InvalidHandshake) as error:
            self.recorder.error("rpc", "socket.hello", status_name(error))
            raise
        self.reader = asyncio.get_running_loop().create_task(self._read())
        await self.request("socket.hello", {"type": "hello", "token": self.token}, started=started)

    async def _read(self) -> None:
        assert self.socket is not None
        try:
            async for text in self.socket:
                self._file(json.loads(text))
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed = (self.socket.close_code or 1006, self.socket.close_reason or "")
            failure = StepError("SOCKET_CLOSED", f"the socket closed: {self.closed[0]} {self.closed[1]}")
            for answer in self.answers.values():
                if not answer.done():
                    answer.set_exception(failure)
            gone = {"type": "end", "error": {"code": "socket_closed", "message": str(failure)}}
            for feed in self.tables.values():
                if feed.ended is None:
                    feed.end(gone)
            for watch in self.watches.values():
                if watch.ended is None:
                    watch.ended = gone
                    watch.changed.set()

    def _file(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        sub = str(message.get("sub", ""))
        if kind == "changes" and sub in self.tables:
            self.tables[sub].apply(message["events"])
        elif kind == "update" and sub in self.watches:
            self.watches[sub].updates.append(message["message"])
            self.watches[sub].changed.set()
        elif kind == "end":
            if sub in self.tables:
                self.tables[sub].end(message)
            elif sub in self.watches:
                self.watches[sub].ended = message
                self.watches[sub].changed.set()
        else:
            key = "hello" if kind == "ready" else str(message.get("id"))
            answer = self.answers.pop(key, None)
            if answer is not None and not answer.done():
                answer.set_result(message)

    async def request(self, name: str, message: dict[str, Any], *, started: float | None = None,
                      expected: Sequence[str] = ()) -> dict[str, Any]:
        """Send `message` and wait for its answer (by id; the `ready` of a hello), recorded under
        `name`; an `error` answer raises `Refused` (recorded unless `expected`). A message refused
        by the player's rate limit is sent again once its wait is over (counter `rate_limited`)."""
        started = time.perf_counter() if started is None else started
        while True:
            reply = await self._exchange(name, message)
            error = reply.get("error") or {}
            wait = next((d["retryAfterMs"] for d in error.get("details") or [] if "retryAfterMs" in d), None)
            if reply.get("type") != "error" or error.get("code") != "resource_exhausted" or wait is None:
                break
            self.recorder.counters["rate_limited"] += 1
            await asyncio.sleep(float(wait) / 1000)
        if reply.get("type") == "error":
            failure = refused(reply.get("error") or {})
            if failure.code in expected:
                self.recorder.counters[f"expected:{name}:{failure.code}"] += 1
            else:
                self.recorder.error("rpc", name, failure.code)
            raise failure
        self.recorder.ok("rpc", name, time.perf_counter() - started)
        return reply

    async def _exchange(self, name: str, message: dict[str, Any]) -> dict[str, Any]:
        if self.socket is None or self.closed is not None:
            raise StepError("SOCKET_CLOSED", f"the socket is closed: {self.closed}")
        key = "hello" if message["type"] == "hello" else str(message.setdefault("id", f"m{next(self._ids)}"))
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.answers[key] = answer
        try:
            await self.socket.send(json.dumps(message))
            async with asyncio.timeout(self.timeout):
                reply = await answer
        except websockets.ConnectionClosed:
            self.recorder.error("rpc", name, "SOCKET_CLOSED")
            raise StepError("SOCKET_CLOSED", f"the socket closed: {self.closed}") from None
        except (TimeoutError, StepError) as error:
            self.recorder.error("rpc", name, status_name(error))
            raise
        finally:
            self.answers.pop(key, None)
        return reply

    async def watch(self, sub: str, stream: str, request: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """The updates of a watch subscription (`socket.{stream}`, timed to its first update);
        unsubscribed when the caller stops iterating."""
        watch = self.watches[sub] = Watch()
        started = time.perf_counter()
        try:
            await self.request(f"socket.{stream}", {"type": "subscribe", "id": sub, "stream": stream,
                                                    "request": request})
            seen = 0
            while True:
                while seen == len(watch.updates) and watch.ended is None:
                    watch.changed.clear()
                    await watch.changed.wait()
                if seen < len(watch.updates):
                    if seen == 0:
                        self.recorder.first_event("rpc", f"socket.{stream}", time.perf_counter() - started)
                    seen += 1
                    yield watch.updates[seen - 1]
                    continue
                assert watch.ended is not None
                error = watch.ended.get("error")
                if error is not None:
                    raise refused(error)
                raise StepError("STREAM_ENDED", f"the {stream} subscription ended")
        finally:
            self.watches.pop(sub, None)
            if watch.ended is None and self.closed is None:
                with contextlib.suppress(StepError, TimeoutError, websockets.ConnectionClosed):
                    await self.request("socket.unsubscribe", {"type": "unsubscribe", "id": sub},
                                       expected=("NOT_FOUND",))

    async def follow_table(self, sub: str, table: str) -> TableFeed:
        """Subscribe to `table` as its seated player; returns once its first change (the snapshot)
        arrived (`socket.table`, timed to it: the time to first event)."""
        feed = self.tables[sub] = TableFeed(TableModel(table))
        started = time.perf_counter()
        await self.request("socket.table", {"type": "subscribe", "id": sub, "stream": "table", "table": table,
                                            "afterSeq": 0, "play": True})
        await feed.next_change(0, self.timeout)
        self.recorder.first_event("rpc", "socket.table", time.perf_counter() - started)
        return feed

    async def close(self) -> None:
        if self.socket is not None:
            with contextlib.suppress(Exception):
                await self.socket.close()
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.reader


@dataclass
class WebDriver:
    """One process's share of the web players."""

    settings: Settings
    recorder: Recorder
    http: httpx.AsyncClient
    clients: dict[int, WebClient] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stopping = asyncio.Event()

    def player(self, index: int) -> Player:
        s = self.settings
        return Player(index, f"{s.run_id}-{index}", random.Random(f"{s.seed}/{index}"))

    def client(self, player: Player) -> WebClient:
        found = self.clients.get(player.index)
        if found is None:
            found = self.clients[player.index] = WebClient(
                self.recorder, self.http, self.settings.gateway, player_address(player.index),
                self.settings.rpc_timeout_s)
        return found

    @contextlib.asynccontextmanager
    async def step(self, name: str) -> AsyncIterator[None]:
        started = time.perf_counter()
        try:
            yield
        except (asyncio.CancelledError, RunEnded):
            raise
        except Exception as error:
            self.recorder.error("step", name, status_name(error))
            raise
        self.recorder.ok("step", name, time.perf_counter() - started)

    # -- steps ------------------------------------------------------------------------------------
    async def sign_in(self, player: Player, client: WebClient) -> None:
        async with self.step("signin"):
            await client.close()  # a player whose socket closed signs in again, with a new one
            client.closed = None
            await client.sign_in(player.id)
            await client.connect()
            profile = await client.call("ranking", "GetPlayer", {"name": player.name})
            player.matches_before = int((profile.get("stats") or {}).get("matches", 0))
        player.signed_up = True

    async def balance(self, client: WebClient, player: Player) -> tuple[int, int]:
        account = await client.call("wallet", "GetAccount", {"name": player.account})
        return int(account.get("balanceChips", 0)), int(account.get("heldChips", 0))

    async def fund(self, player: Player, client: WebClient) -> int:
        balance, held = await self.balance(client, player)
        if held:
            raise StepError("CHIPS_HELD", f"{player.account} still holds {held} chips")
        if not self.settings.practice and balance < self.settings.bet:
            raise StepError("SHORT_OF_CHIPS", f"{player.account}: {balance} chips, the stake is {self.settings.bet}")
        return balance

    def preferences(self) -> dict[str, Any]:
        s = self.settings
        return {
            "preset": s.preset,
            "players": s.seats,
            "length": "MATCH_LENGTH_POINTS" if s.target_points else "MATCH_LENGTH_EXPRESS",
            "targetPoints": s.target_points,
            "mode": "TABLE_MODE_PRACTICE" if s.practice else "TABLE_MODE_COMPETITIVE",
            "betChips": str(s.bet),
        }

    async def queue(self, player: Player, client: WebClient) -> str:
        """The table the player is matched to."""
        number = player.journeys
        ticket = await client.call("matchmaking", "CreateTicket", {
            "requestId": f"{player.id}-ticket-{number}", "ticket": {"preferences": self.preferences()}})
        name = str(ticket["name"])

        async def matched() -> str:
            confirmed = False
            async with contextlib.aclosing(client.watch(f"k{number}", "ticket", {"name": name})) as updates:
                async for update in updates:
                    state = update.get("state")
                    if state == "STATE_MATCHED":
                        return str(update["assignment"]["table"])
                    if state == "STATE_PROPOSED" and not confirmed:
                        confirmed = True
                        await client.call("matchmaking", "ConfirmTicket", {
                            "name": name, "requestId": f"{player.id}-confirm-{number}"})
                    elif state in ("STATE_FAILED", "STATE_CANCELLED"):
                        word = str(state).removeprefix("STATE_")
                        raise StepError(f"TICKET_{word}", update.get("failureReason") or word.lower())
            raise StepError("STREAM_ENDED", f"{name}: the ticket's subscription ended before a match")

        watching = asyncio.ensure_future(asyncio.wait_for(matched(), self.settings.wait_timeout_s))
        ending = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({watching, ending}, return_when=asyncio.FIRST_COMPLETED)
            if watching.done():
                return watching.result()
            # The run is ending while this player waits: leave the queue (matched meanwhile: play).
            try:
                await client.call("matchmaking", "CancelTicket", {
                    "name": name, "requestId": f"{player.id}-cancel-{number}"}, expected=("FAILED_PRECONDITION",))
            except Refused as error:
                if error.code != "FAILED_PRECONDITION":
                    raise
                return await watching
            raise RunEnded(f"{name}: left the queue as the run ended")
        finally:
            ending.cancel()
            if not watching.done():
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await watching

    async def play(self, player: Player, client: WebClient, table: str) -> int:
        """Play the seat to the match's end; the balance change its outcome implies."""
        s = self.settings
        sub = f"t{player.journeys}"
        feed = await client.follow_table(sub, table)
        try:
            model = feed.model
            seat = model.viewer_seat
            if seat is None:
                raise StepError("NOT_SEATED", f"{table}: the snapshot shows no seat for this player")
            refusals = 0
            while feed.ended is None:
                version = feed.version
                if model.finished or not model.my_turn:
                    await feed.next_change(version, s.wait_timeout_s)
                    continue
                try:
                    hints = await client.call("game_session", "GetLegalMoves", {"table": table},
                                              expected=("FAILED_PRECONDITION",))  # the match just ended
                except Refused as error:
                    if error.code != "FAILED_PRECONDITION":
                        raise
                    await feed.next_change(version, s.wait_timeout_s)
                    continue
                move = next_move(hints)
                hinted = int(hints.get("seq") or 0)
                if move is None or hinted < model.seq:  # hints of a table that has moved on since
                    if feed.version == version:
                        await feed.next_change(version, s.wait_timeout_s)
                    continue
                if s.think_time_s:
                    await asyncio.sleep(player.rng.uniform(0, 2 * s.think_time_s))
                method, request = move
                try:
                    result = await client.request(f"socket.act/{method}", {
                        "type": "act", "sub": sub, "method": method,
                        "request": {**request, "expectedSeq": str(hinted)}}, expected=STALE)
                except Refused as error:
                    if error.code not in STALE:
                        raise
                    # the table moved on first (a timer, the other seat): catch up, decide again
                    current = next((int(d["currentSeq"]) for d in error.details if "currentSeq" in d), hinted)
                    refusals = 0 if current > hinted else refusals + 1
                    if refusals >= MAX_REFUSALS:
                        raise StepError("MOVE_REFUSED", f"{table}: {method} refused {refusals} times at seq "
                                                        f"{hinted}: {error.message}") from None
                    while model.seq < current and feed.ended is None:
                        await feed.next_change(feed.version, s.wait_timeout_s)
                    continue
                refusals = 0
                seq = int(result.get("seq") or 0)
                while model.seq < seq and feed.ended is None:  # decide from the move applied
                    await feed.next_change(feed.version, s.wait_timeout_s)
            failure = (feed.ended or {}).get("error")
            if failure is not None:
                raise StepError(str(failure.get("code", "unknown")).upper(), f"{table}: {failure.get('message', '')}")
            ended = model.match_end
            if ended is None:
                raise StepError("TABLE_CANCELLED" if model.cancelled else "NO_MATCH_END", f"{table}: no MatchEnded")
            first_seat = (model.dealer - (model.hand_number - 1) + 1) % model.players
            return settlement(s, seat, ended.outcomes, first_seat)
        except TimeoutError:
            raise StepError("TIMEOUT", f"{table}: nothing from the table in {s.wait_timeout_s} s") from None
        finally:
            client.tables.pop(sub, None)

    async def check_settled(self, player: Player, client: WebClient, balance_before: int, delta: int) -> None:
        deadline = time.monotonic() + self.settings.wait_timeout_s
        pause = POLL_INTERVAL_S
        while True:
            balance, held = await self.balance(client, player)
            if held == 0:
                break
            if time.monotonic() > deadline:
                raise StepError("TIMEOUT", f"{player.account}: stake still held after {self.settings.wait_timeout_s} s")
            await asyncio.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)
        if balance != balance_before + delta:
            raise StepError("SETTLE_MISMATCH",
                            f"{player.account}: balance {balance}, expected {balance_before} {delta:+d}")
        if not self.settings.practice:
            self.recorder.counters["settlements_checked"] += 1

    async def check_ranking(self, player: Player, client: WebClient) -> None:
        deadline = time.monotonic() + self.settings.wait_timeout_s
        pause = POLL_INTERVAL_S
        while True:
            profile = await client.call("ranking", "GetPlayer", {"name": player.name})
            matches = int((profile.get("stats") or {}).get("matches", 0))
            if matches > player.matches_before or self.settings.practice:
                break
            if time.monotonic() > deadline:
                waited = self.settings.wait_timeout_s
                raise StepError("TIMEOUT", f"{player.name}: match not on the profile after {waited} s")
            await asyncio.sleep(pause)
            pause = min(pause * 2, POLL_MAX_S)
        player.matches_before = matches
        xp = int(profile.get("xp") or 0)
        if not self.settings.practice:
            try:
                entry = await client.call("ranking", "GetLeaderboardRank",
                                          {"leaderboard": BOARD, "player": player.name},
                                          expected=("NOT_FOUND",) if xp == 0 else ())  # not on the board yet
            except Refused as error:
                if error.code != "NOT_FOUND" or xp != 0:
                    raise
            else:
                if float(entry.get("value") or 0) != xp:
                    raise StepError("RANK_MISMATCH",
                                    f"{player.name}: leaderboard XP {entry.get('value')}, profile {xp}")
        await client.call("ranking", "ListLeaderboardEntries", {"leaderboard": BOARD, "pageSize": 10})

    async def journey(self, player: Player) -> None:
        client = self.client(player)
        if not player.signed_up or client.closed is not None:
            await self.sign_in(player, client)
        await client.keep_token()
        async with self.step("fund"):
            balance = await self.fund(player, client)
        async with self.step("queue"):
            table = await self.queue(player, client)
        async with self.step("play"):
            delta = await self.play(player, client, table)
        async with self.step("settle"):
            await self.check_settled(player, client, balance, delta)
        async with self.step("leaderboard"):
            await self.check_ranking(player, client)

    # -- the run ----------------------------------------------------------------------------------
    def _keep_going(self, done: int) -> bool:
        return keep_going(self.settings, self.stopping, done)

    async def run_player(self, player: Player, start_delay: float) -> None:
        await run_journeys(self.recorder, player, start_delay, self._keep_going, self.journey)


async def run_shard(settings: Settings, indices: Sequence[int],
                    clock: Callable[[], float] = time.perf_counter) -> tuple[Recorder, float]:
    """Drive the web players `indices` to the end; their recorder and the time measured."""
    recorder = Recorder()
    limits = httpx.Limits(max_connections=max(10, min(len(indices), 500)), max_keepalive_connections=100)
    async with httpx.AsyncClient(base_url=settings.gateway, timeout=settings.rpc_timeout_s, limits=limits,
                                 trust_env=False) as http:
        driver = WebDriver(settings, recorder, http)
        started = clock()
        cpu_started = time.process_time()
        spacing = settings.ramp_s / settings.players
        tasks = [asyncio.create_task(driver.run_player(driver.player(i), spacing * i)) for i in indices]
        everything = asyncio.gather(*tasks)
        try:
            if settings.journeys:
                await everything
            else:
                done, _ = await asyncio.wait({everything}, timeout=settings.ramp_s + settings.duration_s)
                if not done:
                    driver.stopping.set()  # no new journeys; those in flight finish, up to drain_s
                    done, _ = await asyncio.wait({everything}, timeout=settings.drain_s)
                    if not done:
                        recorder.counters["cancelled_in_flight"] += sum(not t.done() for t in tasks)
                        everything.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await everything
        finally:
            elapsed = clock() - started
            recorder.counters["driver_cpu_ms"] += round(1000 * (time.process_time() - cpu_started))
            await asyncio.gather(*(client.close() for client in driver.clients.values()), return_exceptions=True)
    return recorder, elapsed
