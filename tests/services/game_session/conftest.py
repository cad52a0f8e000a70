"""Fixtures of the game-session tests: in-process servers on each database with a clock the tests
move, bots without delay, a fixed deal seed, and fake wallet/ranking calls (ranking's batched, as
the real ones are) that record what the outbox delivers; a table started with its players'
streams, and the error of a refused call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc
from services.common.auth import Kind
from services.common.server import Server, ServiceSpec
from services.game_session.api import GameSessionApi, serve
from services.game_session.clock import FakeClock
from services.game_session.outbox import Refusal
from services.game_session.service import SPEC
from services.game_session.settings import GameSessionSettings
from tests.conftest import DatabaseTarget
from tests.services.harness import bearer, dev_minter, make_config

SETTINGS = GameSessionSettings(
    deal_seed="test-master-seed",
    bot_delay_seconds=0.0,
    lease_seconds=5.0,
    scan_seconds=3600.0,  # tests call renew_and_scan themselves
    start_wait_seconds=60.0,
    disconnect_grace_seconds=10.0,
    reconnect_window_seconds=120.0,
    outbox_retry_seconds=0.05,
    outbox_max_retry_seconds=0.2,
)


@dataclass
class Outbound:
    """Fake wallet/ranking: records each delivered call (a batched call's records one by one, and
    its size in `batches`); `fail` makes the next calls fail (a batched call as a whole), `refuse`
    the next records of batched calls (None: recorded)."""

    calls: list[tuple[str, bytes]] = field(default_factory=list)
    fail: list[grpc.StatusCode] = field(default_factory=list)
    refuse: list[grpc.StatusCode | None] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    delivered: asyncio.Event = field(default_factory=asyncio.Event)

    def batch_handlers(self) -> dict[str, Any]:
        async def record_many(requests: Sequence[bytes]) -> list[Refusal | None]:
            if self.fail:
                raise _RpcError(self.fail.pop(0))
            self.batches.append(len(requests))
            refusals: list[Refusal | None] = []
            for data in requests:
                code = self.refuse.pop(0) if self.refuse else None
                if code is None:
                    self.calls.append(("ranking.RecordMatch", data))
                refusals.append(None if code is None else Refusal(code, f"fake {code.name}"))
            self.delivered.set()
            return refusals

        return {"ranking.RecordMatch": record_many}

    def handlers(self) -> dict[str, Any]:
        def make(target: str) -> Any:
            async def call(data: bytes) -> None:
                if self.fail:
                    code = self.fail.pop(0)
                    raise _RpcError(code)
                self.calls.append((target, data))
                self.delivered.set()

            return call

        return {t: make(t) for t in ("wallet.Settle", "wallet.Void", "ranking.RecordMatch",
                                     "tournament.ReportMatchResult")}


class _RpcError(grpc.aio.AioRpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=f"fake {code.name}",
                         debug_error_string="")


@dataclass
class Node:
    server: Server
    api: GameSessionApi
    channel: grpc.aio.Channel

    @property
    def address(self) -> str:
        return self.server.address


class Cluster:
    """Game-session servers sharing one database (and one fake clock)."""

    def __init__(self, target: DatabaseTarget, tmp_path: Path) -> None:
        self.target = target
        self.tmp_path = tmp_path
        self.clock = FakeClock()
        self.outbound = Outbound()
        self.nodes: list[Node] = []
        self.minter = dev_minter(tmp_path / "dev-keys")

    async def start(self, settings: GameSessionSettings = SETTINGS, **config: Any) -> Node:
        """A node; `config` overrides the harness's common configuration (e.g. rate limits)."""
        made: list[GameSessionApi] = []

        def register(server: grpc.aio.Server, deps: Any) -> GameSessionApi:
            api = GameSessionApi(deps, settings, clock=self.clock, calls=self.outbound.handlers(),
                                 batch_calls=self.outbound.batch_handlers())
            made.append(api)
            return serve(server, api)

        spec = ServiceSpec(SPEC.name, SPEC.grpc_services, register, SPEC.migrations, calls_others=True)
        common = make_config("game_session", self.tmp_path, database_url=self.target.url,
                             database_schema=self.target.schema, **config)
        server = Server(spec, common)
        await server.start()
        node = Node(server, made[0], grpc.aio.insecure_channel(server.address))
        self.nodes.append(node)
        return node

    async def stop(self, node: Node) -> None:
        await node.channel.close(None)
        await node.server.stop(0)
        self.nodes.remove(node)

    def token(self, kind: Kind, name: str) -> tuple[tuple[str, str], ...]:
        return bearer(self.minter.mint(kind, name))

    def stub(self, node: Node | None = None) -> game_session_pb2_grpc.GameSessionServiceAsyncStub:
        return game_session_pb2_grpc.GameSessionServiceStub((node or self.nodes[0]).channel)


@pytest.fixture
async def cluster(db_target: DatabaseTarget, tmp_path: Path) -> AsyncIterator[Cluster]:
    made = Cluster(db_target, tmp_path)
    try:
        yield made
    finally:
        for node in list(made.nodes):
            with contextlib.suppress(Exception):
                await made.stop(node)


SERVICE = ("service", "matchmaking")


def options(**overrides: Any) -> common_pb2.TableOptions:
    base = common_pb2.TableOptions(
        ruleset=common_pb2.RulesetRef(preset="aberto"),
        players=2,
        length=common_pb2.MATCH_LENGTH_EXPRESS,
        mode=common_pb2.TABLE_MODE_PRACTICE,
    )
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


def seats(*who: str) -> list[game_session_pb2.Seat]:
    """`alice` is a player; `bot` a medium bot."""
    out = []
    for index, name in enumerate(who):
        participant = (
            common_pb2.Participant(bot=common_pb2.BOT_LEVEL_MEDIUM)
            if name == "bot"
            else common_pb2.Participant(player=f"players/{name}")
        )
        out.append(game_session_pb2.Seat(seat=index, participant=participant))
    return out


def table_request(table_id: str, *who: str, match_id: str | None = None, **opts: Any) -> \
        game_session_pb2.CreateTableRequest:
    return game_session_pb2.CreateTableRequest(
        request_id=f"create-{table_id}",
        table_id=table_id,
        table=game_session_pb2.Table(match_id=match_id or f"m-{table_id}", options=options(**opts), seats=seats(*who)),
    )


class Stream:
    """A Subscribe call read in the background: every event received, waitable."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.events: list[game_session_pb2.TableEvent] = []
        self.changed = asyncio.Condition()
        self.error: grpc.aio.AioRpcError | None = None
        self.ended = False
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for event in self.call:
                async with self.changed:
                    self.events.append(event)
                    self.changed.notify_all()
        except grpc.aio.AioRpcError as error:
            self.error = error
        except asyncio.CancelledError:
            pass
        finally:
            async with self.changed:
                self.ended = True
                self.changed.notify_all()

    async def wait(self, predicate: Callable[[list[game_session_pb2.TableEvent]], bool], timeout: float = 30.0) -> None:
        async def until() -> None:
            async with self.changed:
                await self.changed.wait_for(lambda: predicate(self.events) or self.ended)
        await asyncio.wait_for(until(), timeout)
        if not predicate(self.events):
            raise AssertionError(f"stream ended ({self.error}) before the condition; got {len(self.events)} events")

    async def wait_seq(self, seq: int, timeout: float = 30.0) -> None:
        await self.wait(lambda events: bool(events) and events[-1].seq >= seq, timeout)

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq if self.events else 0

    def of(self, kind: str) -> list[game_session_pb2.TableEvent]:
        return [e for e in self.events if e.WhichOneof("event") == kind]

    async def close(self) -> None:
        self.call.cancel()
        with contextlib.suppress(BaseException):
            await self.task


def subscribe(stub: Any, metadata: Any, table: str, after_seq: int = 0) -> Stream:
    return Stream(stub.Subscribe(game_session_pb2.SubscribeRequest(table=table, after_seq=after_seq),
                                 metadata=metadata))


def settings(**changes: Any) -> GameSessionSettings:
    return replace(SETTINGS, **changes)


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    """The error `call` ends with (the test fails if it succeeds)."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


async def started(cluster: Cluster, table_id: str, *who: str, **opts: Any) -> dict[str, Stream]:
    """Create a table and subscribe its players; returns their streams once the deal is in."""
    stub = cluster.stub()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    await stub.CreateTable(table_request(table_id, *who, **opts), metadata=svc)
    registry = cluster.nodes[0].api.deps.registry
    assert (registry.get_sample_value("buraco_tables_active", {"service": "game_session"}) or 0) >= 1
    streams = {name: subscribe(stub, cluster.token(Kind.PLAYER, name), f"tables/{table_id}")
               for name in sorted(set(who) - {"bot"})}
    for stream in streams.values():
        await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    return streams


async def left_to_bots(cluster: Cluster, node: Node, table_id: str, tournament: str = "", **opts: Any) -> list[Stream]:
    """A table at `node` whose two players (alice, bob) join and, once the deal is in, both leave:
    bots play both seats from then on. The players' streams, still open."""
    stub = cluster.stub(node)
    request = table_request(table_id, "alice", "bob", **opts)
    request.table.tournament = tournament
    await stub.CreateTable(request, metadata=cluster.token(Kind.SERVICE, "matchmaking"))
    streams = [subscribe(stub, cluster.token(Kind.PLAYER, p), f"tables/{table_id}") for p in ("alice", "bob")]
    for stream in streams:
        await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    for player in ("alice", "bob"):
        await stub.LeaveTable(game_session_pb2.LeaveTableRequest(table=f"tables/{table_id}", request_id="leave"),
                              metadata=cluster.token(Kind.PLAYER, player))
    return streams
