"""The player edge against the whole suite, as real processes: a browser's calls and socket through
the gateway (tests/e2e/web.py plays the browser) on each database.

- A staked match from sign-in to settlement: quick-match tickets followed on the socket, the hand
  played by socket moves and HTTP legal moves, every change once and in order, no other player's
  card ever shown, the pot paid less the 20% house cut.
- A table whose owner replica stops mid-hand: the browsers' streams go on, with no gap or duplicate.
- The edge's refusals: the error body and HTTP status of each gRPC status, sizes, rate limits,
  origins, tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import websockets
from sqlalchemy import text

from services.common.auth import Kind
from tests.conftest import DatabaseTarget
from tests.e2e.suite import SERVICES, Suite, suite
from tests.e2e.web import CallFailed, TableFeed, WebPlayer, play_until_over
from tests.services.harness import ServiceProcess, dev_minter, free_port, service_process

START = 1000
#: A bot plays far faster than a person, and every test player calls from one address: the
#: edge's per-player and per-address limits are raised for them.
FAST_PLAYER = {"BURACO_GATEWAY_RATE_PER_SECOND": "10000", "BURACO_GATEWAY_RATE_BURST": "10000",
               "BURACO_GATEWAY_ADDRESS_RATE_PER_SECOND": "100000", "BURACO_GATEWAY_ADDRESS_RATE_BURST": "100000"}
BET = 100
HOUSE_CUT_PERCENT = 20


@dataclass
class Edge:
    suite: Suite
    gateway: ServiceProcess

    @property
    def url(self) -> str:
        return f"http://{self.gateway.address}"


@contextlib.contextmanager
def gateway_process(tmp_path: Path, addresses: dict[str, str], **env: str) -> Iterator[ServiceProcess]:
    settings = {f"BURACO_{name.upper()}_ADDRESS": address for name, address in addresses.items()}
    with service_process("gateway", tmp_path, env={"BURACO_GATEWAY_PORT": "0", **settings, **env}) as process:
        yield process


@contextlib.asynccontextmanager
async def edge(db_target: DatabaseTarget, tmp_path: Path, names: tuple[str, ...] = SERVICES,
               gateway_env: dict[str, str] | None = None, **extra: str) -> AsyncIterator[Edge]:
    async with suite(db_target, tmp_path, names, BURACO_WALLET_STARTING_GRANT_CHIPS=str(START), **extra) as running:
        addresses = {name: running.address(name) for name in names}
        with gateway_process(tmp_path, addresses, **(gateway_env or FAST_PLAYER)) as gateway:
            yield Edge(running, gateway)


def preferences() -> dict[str, object]:
    return {"preset": "aberto", "players": 2, "length": "MATCH_LENGTH_EXPRESS", "mode": "TABLE_MODE_COMPETITIVE",
            "betChips": str(BET)}


async def matched_pair(players: list[WebPlayer]) -> str:
    """Both players quick-match the same preferences, following their tickets on the socket; the
    table they are seated at."""
    final = ("STATE_MATCHED", "STATE_FAILED", "STATE_CANCELLED")

    async def seated(player: WebPlayer) -> str:
        ticket = await player.call("MatchmakingService", "CreateTicket", {
            "requestId": f"queue-{player.name}", "ticket": {"preferences": preferences()}})
        await player.watch("ticket", "ticket", {"name": ticket["name"]})
        proposed = await player.until_update("ticket", lambda t: t["state"] in ("STATE_PROPOSED", *final))
        if proposed["state"] == "STATE_PROPOSED":
            await player.call("MatchmakingService", "ConfirmTicket", {
                "name": ticket["name"], "requestId": f"confirm-{player.name}"})
        matched = await player.until_update("ticket", lambda t: t["state"] in final)
        assert matched["state"] == "STATE_MATCHED", matched.get("failureReason")
        return str(matched["assignment"]["table"])

    tables = await asyncio.gather(*(seated(player) for player in players))
    assert tables[0] == tables[1]
    return tables[0]


def check_feed(feed: TableFeed, seat: int) -> None:
    """Every event once, in order, without a gap; the seat's own cards only."""
    numbered = [s for s in feed.seqs if s]
    assert numbered == list(range(numbered[0], numbered[0] + len(numbered))), numbered
    for event in feed.events:
        drawn = event.get("cardDrawn")
        if drawn is not None and drawn.get("seat", 0) != seat:
            assert drawn.get("card", "") == "", event
        snapshot = event.get("snapshot")
        if snapshot is not None:
            assert snapshot.get("viewerSeat", seat) == seat


def seat_of(feed: TableFeed) -> int:
    snapshot = next(e["snapshot"] for e in feed.events if "snapshot" in e)
    return int(snapshot.get("viewerSeat", 0))


async def test_a_staked_match_from_sign_in_to_settlement(db_target: DatabaseTarget, tmp_path: Path) -> None:
    async with edge(db_target, tmp_path) as running:
        players = [WebPlayer(running.url, name) for name in ("ana", "bruno")]
        try:
            for player in players:
                session = await player.sign_in()
                assert session["player"] == f"players/{player.name}" and session["expiresIn"] > 0
                assert await player.balance() == START  # the account opened at sign-in, with its grant
                await player.connect()
            table = await matched_pair(players)
            feeds = [await player.follow_table("t", table, play=True) for player in players]
            await asyncio.gather(*(play_until_over(player, "t", table) for player in players))
            for feed in feeds:
                assert feed.ended is not None and feed.ended.get("finished") is True, feed.ended
                check_feed(feed, seat_of(feed))
                assert "matchEnded" in feed.kinds()
            ended = next(e["matchEnded"] for e in feeds[0].events if "matchEnded" in e)
            winner_side = ended.get("winningSide")
            pot = 2 * BET
            prize = pot - pot * HOUSE_CUT_PERCENT // 100
            expected = {}
            for player, feed in zip(players, feeds, strict=True):
                side = seat_of(feed) % 2
                expected[player.name] = START - BET + (prize if side == winner_side else 0)
            async with asyncio.timeout(60):
                while {p.name: await p.balance() for p in players} != expected:
                    await asyncio.sleep(0.1)
        finally:
            for player in players:
                await player.close()


@pytest.mark.parametrize("db_target", ["postgresql"], indirect=True)
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
async def test_the_browser_stream_survives_its_table_owner_stopping(
        db_target: DatabaseTarget, tmp_path: Path, how: signal.Signals) -> None:
    """Two game-session replicas behind one address list (as a Service would balance them); the
    replica that owns the match's table stops mid-hand (SIGTERM: its leases go to the other at
    once) or dies (SIGKILL: the other takes the table over when its lease runs out); each
    browser's table stream goes on, every event once and in order, to the match's end."""
    names = ("wallet", "ranking", "game_session", "matchmaking")
    leases = {"BURACO_GAME_SESSION_LEASE_SECONDS": "2", "BURACO_GAME_SESSION_TAKEOVER_SCAN_SECONDS": "0.5"}
    async with suite(db_target, tmp_path, names, BURACO_WALLET_STARTING_GRANT_CHIPS=str(START), **leases) as running:
        first = running.processes["game_session"]
        port = free_port()
        with service_process("game_session", tmp_path / "second", label="game_session-2", env={
            **first.env, "BURACO_PORT": str(port), "BURACO_DEV_KEYS_DIR": str(tmp_path / "dev-keys")}) as second:
            replicas = {first.address: first, second.address: second}
            addresses = {name: running.address(name) for name in names}
            addresses["game_session"] = "ipv4:" + ",".join(replicas)
            with gateway_process(tmp_path, addresses, **FAST_PLAYER) as gateway:
                players = [WebPlayer(f"http://{gateway.address}", name) for name in ("carla", "davi")]
                try:
                    for player in players:
                        await player.sign_in()
                        await player.connect()
                    table = await matched_pair(players)
                    feeds = [await player.follow_table("t", table, play=True) for player in players]
                    owner_address = await owner_of(running, table)
                    playing = [asyncio.create_task(play_until_over(p, "t", table)) for p in players]
                    async with asyncio.timeout(60):
                        while max(feed.seq for feed in feeds) < 12:  # mid-hand: some turns played
                            await asyncio.sleep(0.02)
                    owner = replicas[owner_address]
                    stopped_at = max(feed.seq for feed in feeds)
                    owner.process.send_signal(how)
                    await asyncio.gather(*playing)
                    assert owner.process.wait(30) == (0 if how == signal.SIGTERM else -signal.SIGKILL)
                    for feed in feeds:
                        assert feed.ended is not None and feed.ended.get("finished") is True, feed.ended
                        check_feed(feed, seat_of(feed))
                        assert feed.seq > stopped_at + 10  # the hand went on, at the other replica
                    assert await owner_of(running, table) != owner_address
                finally:
                    for player in players:
                        await player.close()


async def owner_of(running: Suite, table: str) -> str:
    """The address of the replica whose lease on `table` is live (or the last one)."""
    db = running.db_target.database()
    try:
        async with db.read() as session:
            row = (await session.execute(text("SELECT owner_address FROM game_session_leases WHERE table_id = :t"),
                                         {"t": table.removeprefix("tables/")})).first()
        assert row is not None
        return str(row[0])
    finally:
        await db.dispose()


@pytest.mark.parametrize("db_target", ["sqlite"], indirect=True)
async def test_the_edge_refuses_clearly(db_target: DatabaseTarget, tmp_path: Path) -> None:
    gateway_env = {"BURACO_GATEWAY_RATE_PER_SECOND": "1", "BURACO_GATEWAY_RATE_BURST": "5",
                   "BURACO_GATEWAY_MAX_BODY_BYTES": "1024", "BURACO_GATEWAY_HELLO_SECONDS": "1",
                   "BURACO_GATEWAY_SOCKETS_PER_PLAYER": "1", "BURACO_GATEWAY_MAX_MESSAGE_BYTES": "512",
                   "BURACO_GATEWAY_IDLE_SECONDS": "5", "BURACO_GATEWAY_ALLOWED_ORIGINS": "https://app.example"}
    async with edge(db_target, tmp_path, gateway_env=gateway_env) as running:
        player = WebPlayer(running.url, "eva")
        other = WebPlayer(running.url, "eva")
        try:
            with pytest.raises(CallFailed) as refused:
                await player.post("/v1/sign-in", {"name": "not a name!"}, auth=False)
            assert refused.value.status == 400 and refused.value.body["code"] == "invalid_argument"
            assert "name" in refused.value.body["message"]
            await player.sign_in()
            # no token, a bad token
            with pytest.raises(CallFailed) as refused:
                await player.post("/buraco.v1.WalletService/GetAccount", {"name": "accounts/player-eva"}, auth=False)
            assert refused.value.status == 401 and refused.value.body["code"] == "unauthenticated"
            # a method players do not call through the gateway
            with pytest.raises(CallFailed) as refused:
                await player.call("WalletService", "Settle", {})
            assert refused.value.status == 501 and refused.value.body["code"] == "unimplemented"
            # a body that is not the request: the field named
            with pytest.raises(CallFailed) as refused:
                await player.call("WalletService", "GetAccount", {"nmae": "x"})
            assert refused.value.status == 400 and "nmae" in refused.value.body["message"]
            # the service's own refusal, mapped: another player's account
            with pytest.raises(CallFailed) as refused:
                await player.call("WalletService", "GetAccount", {"name": "accounts/player-someone"})
            assert refused.value.status in (403, 404), refused.value.body
            # too large
            with pytest.raises(CallFailed) as refused:
                await player.call("WalletService", "GetAccount", {"name": "x" * 2000})
            assert refused.value.status == 413
            # the player's rate: a burst of 5 at 1 a second (some spent above)
            with pytest.raises(CallFailed) as refused:
                for _ in range(10):
                    await player.call("WalletService", "GetAccount", {"name": "accounts/player-eva"})
            assert refused.value.status == 429 and int(refused.value.headers["retry-after"]) >= 1
            # the request id comes back
            response = await player.http.get("/v1/config", headers={"x-request-id": "trace-me-1"})
            assert response.headers["x-request-id"] == "trace-me-1" and response.json() == {"signIn": "dev"}
            # sockets: an origin not allowed (refused at the handshake); no hello in time; one
            # socket per player here
            url = running.url.replace("http://", "ws://") + "/v1/socket"
            with pytest.raises(websockets.InvalidStatus) as handshake:
                await websockets.connect(url, origin="https://elsewhere.example")  # type: ignore[arg-type]
            assert handshake.value.response.status_code == 403
            async with websockets.connect(url) as silent:
                with pytest.raises(websockets.ConnectionClosed):
                    await asyncio.wait_for(silent.recv(), 10)
                assert silent.close_code == 4401
            await player.connect()
            other.token = player.token
            with pytest.raises(ConnectionError):
                await other.connect()
            assert (await other.closed)[0] == 4429
            # the socket's own rate: beyond the player's bucket, an error saying when to retry
            answers = [await player.request({"type": "unsubscribe", "id": f"none-{i}"}) for i in range(8)]
            limited = [a for a in answers if a["error"]["code"] == "resource_exhausted"]
            assert limited and all(d.get("retryAfterMs", 0) > 0 for a in limited for d in a["error"]["details"])
            # a message over the size limit closes the socket (1009), by the server under the gateway
            assert player.socket is not None
            await player.socket.send('{"type":"ping","pad":"' + "x" * 1000 + '"}')
            assert (await player.closed)[0] == 1009
            # idle, with nothing subscribed: closed (1008)
            await player.close()
            idle = WebPlayer(running.url, "eva")
            idle.token = other.token
            await idle.connect()
            async with asyncio.timeout(30):
                assert (await idle.closed)[0] == 1008
            await idle.close()
            # a token that expires without a refresh closes its socket (4401), saying why
            short = WebPlayer(running.url, "eva")
            short.token = dev_minter(tmp_path / "dev-keys").mint(Kind.PLAYER, "eva", ttl=2)
            ready = await short.connect()
            assert ready["expiresIn"] <= 2
            async with asyncio.timeout(30):
                code, reason = await short.closed
            assert code == 4401 and "expired" in reason
            await short.close()
            # CORS: an allowed origin's preflight is answered, another's is not allowed
            preflight = {"access-control-request-method": "POST", "access-control-request-headers": "authorization"}
            allowed = await other.http.options("/buraco.v1.WalletService/GetAccount",
                                                headers={"origin": "https://app.example", **preflight})
            assert allowed.headers.get("access-control-allow-origin") == "https://app.example"
            refused_origin = await other.http.options("/buraco.v1.WalletService/GetAccount",
                                                       headers={"origin": "https://evil.example", **preflight})
            assert "access-control-allow-origin" not in refused_origin.headers
        finally:
            await player.close()
            await other.close()
