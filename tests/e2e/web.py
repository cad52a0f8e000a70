"""A browser's side of the gateway, in Python: JSON over HTTP (httpx) and the socket (websockets).

`WebPlayer` signs in, calls the player methods as a page would, and keeps one socket whose
messages it files by subscription: `changes` of a table (with every event seq seen, to check
for gaps and duplicates), `update`s of a watch, `result`s and `error`s of moves by message id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from loadtest.web import next_move

WAIT_SECONDS = 60.0


class CallFailed(Exception):
    def __init__(self, status: int, body: dict[str, Any], headers: httpx.Headers) -> None:
        super().__init__(f"{status}: {body}")
        self.status = status
        self.body = body
        self.headers = headers


@dataclass
class TableFeed:
    """What a table subscription delivered."""

    events: list[dict[str, Any]] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    seq: int = 0
    ended: dict[str, Any] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def kinds(self) -> list[str]:
        return [next(k for k in event if k not in ("seq", "time")) for event in self.events]


class WebPlayer:
    """One signed-in player of the web table."""

    def __init__(self, base_url: str, name: str) -> None:
        self.base_url = base_url
        self.name = name
        self.http = httpx.AsyncClient(base_url=base_url, timeout=30)
        self.token = ""
        self.player = ""
        self.socket: ClientConnection | None = None
        self.reader: asyncio.Task[None] | None = None
        self.tables: dict[str, TableFeed] = {}
        self.updates: dict[str, list[dict[str, Any]]] = {}
        self.answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.messages: list[dict[str, Any]] = []
        self.closed: asyncio.Future[tuple[int, str]] = asyncio.get_running_loop().create_future()
        self.update_seen = asyncio.Event()
        self._ids = itertools.count(1)

    # -- HTTP -----------------------------------------------------------------------------------
    async def sign_in(self) -> dict[str, Any]:
        answer = await self.post("/v1/sign-in", {"name": self.name}, auth=False)
        self.token = answer["token"]
        self.player = answer["player"]
        return answer

    async def post(self, path: str, body: dict[str, Any], *, auth: bool = True,
                   headers: dict[str, str] | None = None) -> dict[str, Any]:
        sent = dict(headers or {})
        if auth:
            sent["authorization"] = f"Bearer {self.token}"
        response = await self.http.post(path, content=json.dumps(body), headers={
            "content-type": "application/json", **sent})
        data: dict[str, Any] = response.json()
        if response.status_code != 200:
            raise CallFailed(response.status_code, data, response.headers)
        return data

    async def call(self, service: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.post(f"/buraco.v1.{service}/{method}", body)

    async def balance(self) -> int:
        account = await self.call("WalletService", "GetAccount", {"name": f"accounts/player-{self.player[8:]}"})
        return int(account["balanceChips"])

    # -- the socket -----------------------------------------------------------------------------
    async def connect(self, *, origin: str | None = None) -> dict[str, Any]:
        """Open the socket and say hello; the `ready` message."""
        url = self.base_url.replace("http://", "ws://") + "/v1/socket"
        self.socket = await websockets.connect(url, origin=origin, max_size=None)  # type: ignore[arg-type]
        self.reader = asyncio.get_running_loop().create_task(self._read())
        return await self.request({"type": "hello", "token": self.token}, answer_type="ready")

    async def _read(self) -> None:
        assert self.socket is not None
        try:
            async for text in self.socket:
                message = json.loads(text)
                self.messages.append(message)
                self._file(message)
        except websockets.ConnectionClosed:
            pass
        finally:
            close = self.socket.close_code or 1006, self.socket.close_reason or ""
            if not self.closed.done():
                self.closed.set_result(close)
            for future in self.answers.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"socket closed: {close}"))

    def _file(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "changes":
            feed = self.tables[message["sub"]]
            for event in message["events"]:
                feed.events.append(event)
                feed.seqs.append(int(event.get("seq", 0)))
            feed.seq = int(message["seq"])
            feed.changed.set()
        elif kind == "update":
            self.updates.setdefault(message["sub"], []).append(message["message"])
            self.update_seen.set()
        elif kind == "end" and message["sub"] in self.tables:
            self.tables[message["sub"]].ended = message
            self.tables[message["sub"]].changed.set()
        key = str(message.get("id"))
        if kind in ("ready", "subscribed", "unsubscribed", "result", "error", "token", "pong"):
            future = self.answers.pop("hello" if kind == "ready" else key, None)
            if future is not None and not future.done():
                future.set_result(message)

    async def request(self, message: dict[str, Any], answer_type: str | None = None) -> dict[str, Any]:
        """Send `message` and wait for its answer (matched by id, or the `ready` for a hello)."""
        assert self.socket is not None
        key = "hello" if message["type"] == "hello" else str(message.setdefault("id", f"m{next(self._ids)}"))
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.answers[key] = future
        await self.socket.send(json.dumps(message))
        async with asyncio.timeout(WAIT_SECONDS):
            answer = await future
        if answer_type is not None and answer["type"] != answer_type:
            raise AssertionError(f"expected {answer_type}, got {answer}")
        return answer

    async def watch(self, sub: str, stream: str, request: dict[str, Any]) -> None:
        await self.request({"type": "subscribe", "id": sub, "stream": stream, "request": request},
                           answer_type="subscribed")

    async def until_update(self, sub: str, predicate: Any) -> dict[str, Any]:
        async with asyncio.timeout(WAIT_SECONDS):
            while True:
                for update in self.updates.get(sub, []):
                    if predicate(update):
                        return update
                self.update_seen.clear()
                await self.update_seen.wait()

    async def follow_table(self, sub: str, table: str, *, play: bool, after_seq: int = 0) -> TableFeed:
        feed = self.tables[sub] = TableFeed(seq=after_seq)
        await self.request({"type": "subscribe", "id": sub, "stream": "table", "table": table,
                            "play": play, "afterSeq": after_seq}, answer_type="subscribed")
        return feed

    async def act(self, sub: str, method: str, request: dict[str, Any]) -> dict[str, Any]:
        return await self.request({"type": "act", "sub": sub, "method": method, "request": request})

    async def close(self) -> None:
        if self.socket is not None:
            await self.socket.close()
        if self.reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
        await self.http.aclose()


async def play_until_over(player: WebPlayer, sub: str, table: str) -> TableFeed:
    """Play `player`'s seat by the socket (moves) and HTTP (legal moves) until the table's stream
    ends; a move refused as stale (another change came first) is simply decided again."""
    feed = player.tables[sub]
    async with asyncio.timeout(WAIT_SECONDS * 4):
        while feed.ended is None:
            feed.changed.clear()
            seen = feed.seq
            try:
                hints = await player.call("GameSessionService", "GetLegalMoves", {"table": table})
            except CallFailed as refused:  # the match just ended: its stream's end is on its way
                assert refused.body["code"] == "failed_precondition", refused.body
                if feed.ended is None:
                    await feed.changed.wait()
                continue
            move = next_move(hints)
            if move is not None and int(hints.get("seq", 0)) >= seen:
                method, request = move
                answer = await player.act(sub, method, {**request, "expectedSeq": hints["seq"]})
                if answer["type"] == "result":
                    continue
                assert answer["error"]["code"] in ("failed_precondition", "aborted"), (answer, feed.ended)
            if feed.ended is None and feed.seq == seen:
                await feed.changed.wait()
    return feed
