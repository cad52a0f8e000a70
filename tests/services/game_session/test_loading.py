"""How a copy of a table gets into a replica's memory, on both databases (docs/game-session.md,
"Loading a table"): at most one copy per table and process; a load in progress is joined, not
repeated; a stream never stays attached to a copy that is no longer the installed one; a table
this replica holds but has not in memory is loaded by the lease scan; a copy dropped while its
change was being written is loaded again only once that write has resolved.

The races are made deterministic by holding the first load (or a change's write) at its await
point until the competing request is inside the replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from buraco.v1 import game_session_pb2
from services.client.calls import trailer
from services.common.auth import Kind
from services.common.server import Server
from services.game_session import store
from services.game_session.writer import Write
from tests.services.game_session.conftest import Cluster, Node, Stream, subscribe, table_request


def _gauge(server: Server, name: str, method: str | None = None) -> float:
    total = 0.0
    for metric in server.metrics.registry.collect():
        if metric.name == name:
            total += sum(s.value for s in metric.samples if method is None or s.labels.get("method", "") == method)
    return total


async def _until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def _dealt(cluster: Cluster, node: Node, table_id: str) -> dict[str, Stream]:
    """A two-player table on `node`, dealt, both players' streams following it."""
    await cluster.stub(node).CreateTable(
        table_request(table_id, "alice", "bob"), metadata=cluster.token(Kind.SERVICE, "matchmaking"))
    streams = {p: subscribe(cluster.stub(node), cluster.token(Kind.PLAYER, p), f"tables/{table_id}")
               for p in ("alice", "bob")}
    for stream in streams.values():
        await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    return streams


def _to_act(stream: Stream) -> str:
    seat = next(e for e in reversed(stream.events) if e.HasField("turn_timer_started")).turn_timer_started.seat
    return ("alice", "bob")[seat]


class HeldLoads:
    """`store.load` counted, the first call held after it has read the log until `release()`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.entered = asyncio.Event()
        self._gate = asyncio.Event()
        original = store.load

        async def load(db: Any, table_id: str) -> Any:
            self.calls += 1
            stored = await original(db, table_id)
            if self.calls == 1:
                self.entered.set()
                await self._gate.wait()
            return stored

        monkeypatch.setattr(store, "load", load)

    def release(self) -> None:
        self._gate.set()


async def _taking_over(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch, table_id: str) -> tuple[Node, HeldLoads, dict[str, Stream]]:
    """A dealt table whose replica crashed, a second replica to take it over, its loads held:
    (that replica, the held loads, the players' streams as they were closed at the crash)."""
    a = await cluster.start()
    streams = await _dealt(cluster, a, table_id)
    a.api.tables.release_on_stop = False  # a crash: its lease runs out
    await cluster.stop(a)
    for stream in streams.values():
        await stream.close()
    b = await cluster.start()
    cluster.clock.advance(6)
    return b, HeldLoads(monkeypatch), streams


async def test_a_request_during_a_takeover_load_joins_it(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    b, held, streams = await _taking_over(cluster, monkeypatch, "race")
    last = streams["alice"].last_seq
    scan = asyncio.ensure_future(b.api.tables.renew_and_scan())  # takes the table over, loads it
    await held.entered.wait()
    # a player resumes her stream and another asks for a snapshot while the load is held
    alice, bob = cluster.token(Kind.PLAYER, "alice"), cluster.token(Kind.PLAYER, "bob")
    resumed = subscribe(cluster.stub(b), alice, "tables/race", after_seq=last)
    snapshot = asyncio.ensure_future(cluster.stub(b).GetTableSnapshot(
        game_session_pb2.GetTableSnapshotRequest(table="tables/race"), metadata=bob))
    snapshot_method = "/buraco.v1.GameSessionService/GetTableSnapshot"
    # both calls are inside the replica (each has run up to its first wait)
    await _until(lambda: _gauge(b.server, "buraco_rpc_streams_open") == 1
                 and _gauge(b.server, "buraco_rpc_in_flight", snapshot_method) == 1)
    held.release()
    await scan
    answered = await snapshot

    assert held.calls == 1, "the table was loaded again while a load of it was under way"
    actor = b.api.tables.actors["race"]
    assert not actor.retired and actor.table.epoch == 2
    assert answered.table.seq == last and answered.viewer_seat == 1
    # the resumed stream follows the installed copy: a move arrives on it, in order
    player = _to_act(streams["alice"])
    drawn = await cluster.stub(b).Draw(
        game_session_pb2.DrawRequest(table="tables/race", request_id="after-race", expected_seq=last),
        metadata=alice if player == "alice" else bob)
    await resumed.wait_seq(drawn.result.seq, timeout=10)
    assert [e.seq for e in resumed.events] == list(range(last + 1, drawn.result.seq + 1))
    await resumed.close()


class HeldWrites:
    """The replica's log writer, each write held before it is submitted until `release()`."""

    def __init__(self, node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
        self.waiting = asyncio.Event()
        self._gate = asyncio.Event()
        writer = node.api.tables.writer
        original: Callable[[Write], Awaitable[None]] = writer.submit

        async def submit(write: Write) -> None:
            self.waiting.set()
            await self._gate.wait()
            await original(write)

        monkeypatch.setattr(writer, "submit", submit)

    def release(self) -> None:
        self._gate.set()


async def test_a_stream_never_stays_on_a_copy_dropped_while_it_waited(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Subscribe that waits for the table's lock while the table is taken over by another
    replica (its change in flight is then refused) ends with a redirect to the new owner; it is
    not left on the dropped copy, where no event would ever reach it."""
    a = await cluster.start()
    b = await cluster.start()
    streams = await _dealt(cluster, a, "moving")
    last = streams["alice"].last_seq
    player = _to_act(streams["alice"])
    token = cluster.token(Kind.PLAYER, player)
    writes = HeldWrites(a, monkeypatch)
    move = asyncio.ensure_future(cluster.stub(a).Draw(
        game_session_pb2.DrawRequest(table="tables/moving", request_id="held", expected_seq=last), metadata=token))
    await writes.waiting.wait()  # the change holds the table's lock, its write not submitted
    late = subscribe(cluster.stub(a), cluster.token(Kind.PLAYER, "alice"), "tables/moving", after_seq=last)
    await _until(lambda: _gauge(a.server, "buraco_rpc_streams_open") == 3)
    cluster.clock.advance(6)  # A stops renewing; B takes the table over
    await b.api.tables.renew_and_scan()
    await a.api.tables.renew_and_scan()  # A learns it lost the lease: drops its copy
    assert "moving" not in a.api.tables.actors
    writes.release()
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await move
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    await late.wait(lambda events: late.ended, timeout=10)
    assert late.error is not None and late.error.code() is grpc.StatusCode.UNAVAILABLE
    assert trailer(late.error, "buraco-owner-address") == b.address
    for stream in (*streams.values(), late):
        await stream.close()


class FailingWrites:
    """The replica's log writer failing, as a database error would, the first write whose
    entries contain `marker`."""

    def __init__(self, node: Node, monkeypatch: pytest.MonkeyPatch, marker: str) -> None:
        self.failed = False
        writer = node.api.tables.writer
        original: Callable[[Write], Awaitable[None]] = writer.submit

        async def submit(write: Write) -> None:
            if not self.failed and any(marker in data for _, data in write.rows):
                self.failed = True
                raise ConnectionResetError("the database went away")
            await original(write)

        monkeypatch.setattr(writer, "submit", submit)


async def test_the_scan_loads_a_held_table_dropped_after_a_failed_write(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table whose write failed is dropped from memory (memory must never run ahead of the
    log); the replica still holds its lease, so its next scan loads it again and its timers go on
    (here the bot's turn) without anyone asking for the table."""
    node = await cluster.start()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    await cluster.stub(node).CreateTable(table_request("dropped", "alice", "bot"), metadata=svc)
    alice = cluster.token(Kind.PLAYER, "alice")
    watch = subscribe(cluster.stub(node), alice, "tables/dropped")
    await watch.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    tables = node.api.tables
    failing = FailingWrites(node, monkeypatch, '"by":"bot"')  # the bot's next move is not written
    if _to_act(watch) == "alice":  # alice draws and discards: the bot's turn comes
        stub = cluster.stub(node)
        drawn = await stub.Draw(
            game_session_pb2.DrawRequest(table="tables/dropped", request_id="a1", expected_seq=watch.last_seq),
            metadata=alice)
        hints = await stub.GetLegalMoves(game_session_pb2.GetLegalMovesRequest(table="tables/dropped"), metadata=alice)
        await stub.Discard(game_session_pb2.DiscardRequest(
            table="tables/dropped", request_id="a2", expected_seq=drawn.result.seq, card=hints.discards[0]),
            metadata=alice)
    else:
        tables.actors["dropped"].schedule()
    await _until(lambda: failing.failed and "dropped" not in tables.actors)
    await watch.wait(lambda events: watch.ended, timeout=10)
    assert watch.error is not None and watch.error.code() is grpc.StatusCode.UNAVAILABLE
    committed = watch.last_seq

    await tables.renew_and_scan()
    table = tables.actors["dropped"].table
    assert table.epoch == 1 and table.seq >= committed  # (the bot may have moved already)
    await _until(lambda: any(e.type == "discarded" and e.seq > committed and e.data["s"] == 1
                             for e in table.entries))  # the bot played its turn, nobody asking
    await watch.close()


async def test_a_copy_dropped_during_its_write_is_loaded_after_the_write(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica whose heartbeat has not been renewed for a lease drops its live copies (another
    replica may own them now); one of them had a change being written. The copy loaded next (the
    lease is still this replica's) waits for that write, so it has the change when it commits."""
    node = await cluster.start()
    streams = await _dealt(cluster, node, "fenced")
    last = streams["alice"].last_seq
    player = _to_act(streams["alice"])
    token = cluster.token(Kind.PLAYER, player)
    tables = node.api.tables
    writes = HeldWrites(node, monkeypatch)
    move = asyncio.ensure_future(cluster.stub(node).Draw(
        game_session_pb2.DrawRequest(table="tables/fenced", request_id="in-flight", expected_seq=last),
        metadata=token))
    await writes.waiting.wait()
    cluster.clock.advance(6)  # longer than the lease since the last renewal
    tables.fence_if_stale()
    assert "fenced" not in tables.actors
    snapshot = asyncio.ensure_future(cluster.stub(node).GetTableSnapshot(
        game_session_pb2.GetTableSnapshotRequest(table="tables/fenced"), metadata=token))
    await _until(lambda: tables.loading("fenced"))
    writes.release()
    drawn = await move  # committed: the lease was still this replica's
    answered = await snapshot
    assert answered.table.seq == drawn.result.seq, "the copy loaded next lacks the change written meanwhile"
    # and the table goes on from there
    retried = await cluster.stub(node).Draw(
        game_session_pb2.DrawRequest(table="tables/fenced", request_id="in-flight", expected_seq=last),
        metadata=token)
    assert retried == drawn
    for stream in streams.values():
        await stream.close()



async def _forget(cluster: Cluster, node: Node) -> None:
    await node.channel.close(None)
    cluster.nodes.remove(node)


async def test_a_stream_waiting_on_a_load_when_the_replica_stops_is_told_to_resume_elsewhere(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A graceful stop cancels the loads under way: a stream that waits on one must end with
    UNAVAILABLE ("reconnect and resume", which clients retry), never CANCELLED (which they take as
    the end)."""
    b, held, streams = await _taking_over(cluster, monkeypatch, "stopping")
    last = streams["alice"].last_seq
    resumed = subscribe(cluster.stub(b), cluster.token(Kind.PLAYER, "alice"), "tables/stopping", after_seq=last)
    await held.entered.wait()  # the stream's join is loading the table (taking it over)
    await b.server.stop(5.0)  # graceful: the loads under way are cancelled
    async with asyncio.timeout(30):
        await resumed.task
    assert resumed.error is not None and resumed.error.code() == grpc.StatusCode.UNAVAILABLE, resumed.error
    held.release()
    await _forget(cluster, b)


async def test_a_play_join_waiting_on_a_load_when_the_replica_stops_is_told_to_resume_elsewhere(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for a `Play` stream's join (the gateway's stream for every browser)."""
    b, held, streams = await _taking_over(cluster, monkeypatch, "stopping")
    last = streams["alice"].last_seq
    call = cluster.stub(b).Play(None, metadata=cluster.token(Kind.PLAYER, "alice"))
    await call.write(game_session_pb2.PlayRequest(
        join=game_session_pb2.SubscribeChangesRequest(table="tables/stopping", after_seq=last)))
    await held.entered.wait()  # the join is loading the table (taking it over)
    await b.server.stop(5.0)  # graceful: the loads under way are cancelled
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        async with asyncio.timeout(30):
            await call.read()
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE, ended.value
    held.release()
    await _forget(cluster, b)
