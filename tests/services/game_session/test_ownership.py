"""Ownership on both databases: redirects to the owner, takeover after a lease runs out (the old
owner fenced off), the rebuilt table equal to the lost one, release on a graceful stop."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from google.rpc import status_pb2

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc
from services.client.calls import trailer
from services.common.auth import Kind
from tests.services.game_session.conftest import Cluster, subscribe, table_request


def _trailers(error: grpc.aio.AioRpcError) -> dict[str, Any]:
    trailers: list[Any] = list(error.trailing_metadata() or ())
    return {str(key): value for key, value in trailers}


def _details(error: grpc.aio.AioRpcError) -> common_pb2.NotOwnerDetails:
    status = status_pb2.Status.FromString(_trailers(error)["grpc-status-details-bin"])
    details = common_pb2.NotOwnerDetails()
    assert status.details[0].Unpack(details)
    return details


async def test_redirect_takeover_fencing_and_rebuild(cluster: Cluster) -> None:
    a = await cluster.start()
    b = await cluster.start()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    alice, bob = cluster.token(Kind.PLAYER, "alice"), cluster.token(Kind.PLAYER, "bob")
    on_a, on_b = cluster.stub(a), cluster.stub(b)
    await on_a.CreateTable(table_request("t1", "alice", "bob"), metadata=svc)
    streams = {name: subscribe(on_a, token, "tables/t1") for name, token in (("alice", alice), ("bob", bob))}
    for stream in streams.values():
        await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    seq = streams["alice"].last_seq
    drawn = await on_a.Draw(game_session_pb2.DrawRequest(table="tables/t1", request_id="d1", expected_seq=seq),
                            metadata=alice)
    # listed by a replica that does not own it, the table shows its last event, as the owner does
    for stub in (on_a, on_b):
        listed = await stub.ListTables(game_session_pb2.ListTablesRequest(), metadata=svc)
        assert [(t.name, t.seq) for t in listed.tables] == [("tables/t1", drawn.result.seq)]
    before = await on_a.GetTableSnapshot(game_session_pb2.GetTableSnapshotRequest(table="tables/t1"), metadata=alice)

    # another replica redirects to the owner
    try:
        await on_b.GetTable(game_session_pb2.GetTableRequest(name="tables/t1"), metadata=alice)
        raise AssertionError("B answered for A's table")
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert _trailers(error)["buraco-owner-address"] == a.address
        details = _details(error)
        assert details.resource == "tables/t1" and details.owner_address == a.address and details.epoch == 1

    # A stops renewing (it hangs); its lease runs out; B takes the table over and rebuilds it
    cluster.clock.advance(6)
    await b.api.tables.renew_and_scan()
    assert "t1" in b.api.tables.actors and b.api.tables.actors["t1"].table.epoch == 2
    assert b.api.tables.takeovers_total._value.get() == 1
    after = await on_b.GetTableSnapshot(game_session_pb2.GetTableSnapshotRequest(table="tables/t1"), metadata=alice)
    before.table.owner_address = after.table.owner_address = ""
    for snap in (before, after):
        snap.ClearField("turn_deadline")
        for view in snap.seats:
            view.connected = False  # the streams were at A
        for seat in snap.table.seats:
            seat.connected = False
    assert after == before

    # the old owner is fenced off: its append is refused, its streams end, it redirects
    hints = await on_a.GetLegalMoves(game_session_pb2.GetLegalMovesRequest(table="tables/t1"), metadata=alice)
    discard = game_session_pb2.DiscardRequest(table="tables/t1", request_id="x1", expected_seq=drawn.result.seq,
                                              card=hints.discards[0])
    try:
        await on_a.Discard(discard, metadata=alice)
        raise AssertionError("the old owner appended")
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.UNAVAILABLE
    await streams["alice"].wait(lambda events: streams["alice"].ended)
    assert streams["alice"].error is not None
    assert streams["alice"].error.code() == grpc.StatusCode.UNAVAILABLE
    try:
        await on_a.GetTable(game_session_pb2.GetTableRequest(name="tables/t1"), metadata=alice)
        raise AssertionError("A still answers")
    except grpc.aio.AioRpcError as error:
        assert _trailers(error)["buraco-owner-address"] == b.address

    # clients resume at the new owner: nothing lost, nothing repeated, the retry applies once
    resumed = subscribe(on_b, alice, "tables/t1", after_seq=streams["alice"].last_seq)
    retried = await on_b.Draw(game_session_pb2.DrawRequest(table="tables/t1", request_id="d1", expected_seq=seq),
                              metadata=alice)
    assert retried == drawn
    done = await on_b.Discard(discard, metadata=alice)
    assert done.result.events[0].card_discarded.card == hints.discards[0]
    await resumed.wait_seq(done.result.seq)
    seqs = [e.seq for e in streams["alice"].events[1:]] + [e.seq for e in resumed.events]
    assert seqs == list(range(1, done.result.seq + 1))
    for stream in (*streams.values(), resumed):
        await stream.close()


async def test_a_graceful_stop_releases_the_leases(cluster: Cluster) -> None:
    a = await cluster.start()
    b = await cluster.start()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    await cluster.stub(a).CreateTable(table_request("t2", "alice", "bob"), metadata=svc)
    await cluster.stop(a)
    # no waiting for the lease to run out: the call at B takes the table over at once
    table = await cluster.stub(b).GetTable(game_session_pb2.GetTableRequest(name="tables/t2"), metadata=svc)
    assert table.owner_address == b.address and table.state == game_session_pb2.Table.STATE_WAITING


async def test_a_graceful_stop_ends_a_play_stream_with_unavailable_and_it_resumes_elsewhere(
    cluster: Cluster,
) -> None:
    """A replica that stops ends its bidirectional Play streams as it ends the server streams
    (UNAVAILABLE, "reconnect and resume"); the client joins again at the other replica after the
    last seq it received and plays on there, with no gap."""
    a = await cluster.start()
    b = await cluster.start()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    await cluster.stub(a).CreateTable(table_request("t8", "alice", "bob"), metadata=svc)
    alice = cluster.token(Kind.PLAYER, "alice")
    channel = grpc.aio.insecure_channel(a.address)  # not the node's own, which its stop closes
    bob = subscribe(game_session_pb2_grpc.GameSessionServiceStub(channel), cluster.token(Kind.PLAYER, "bob"),
                    "tables/t8")
    seen: list[game_session_pb2.TableEvent] = []

    async def updates(call: Any) -> game_session_pb2.PlayUpdate:
        update = await asyncio.wait_for(call.read(), 10)
        assert isinstance(update, game_session_pb2.PlayUpdate)
        seen.extend(e for e in update.changes.events if not e.HasField("snapshot"))
        return update

    try:
        call = game_session_pb2_grpc.GameSessionServiceStub(channel).Play(None, metadata=alice)
        await call.write(game_session_pb2.PlayRequest(join=game_session_pb2.SubscribeChangesRequest(table="tables/t8")))
        await updates(call)
        while not any(e.HasField("turn_timer_started") for e in seen):
            await updates(call)  # the deal, once both players are there
        seq = seen[-1].seq
        stopping = asyncio.ensure_future(cluster.stop(a))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            while True:
                await updates(call)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "reconnect and resume" in (info.value.details() or "")
        await stopping
    finally:
        await bob.close()
        await channel.close(None)

    # at the other replica: resume after seq, and make the turn's first move
    resumed = cluster.stub(b).Play(None, metadata=alice)
    await resumed.write(game_session_pb2.PlayRequest(
        join=game_session_pb2.SubscribeChangesRequest(table="tables/t8", after_seq=seq)))
    turn = next(e for e in reversed(seen) if e.HasField("turn_timer_started")).turn_timer_started.seat
    draw = game_session_pb2.DrawRequest(table="tables/t8", request_id="after-stop", expected_seq=seq)
    if turn == 0:  # alice's turn: on her resumed stream
        await resumed.write(game_session_pb2.PlayRequest(draw=draw))
    else:  # bob's, by a unary call at the new owner
        bob_token = cluster.token(Kind.PLAYER, "bob")
        try:
            await cluster.stub(b).Draw(draw, metadata=bob_token)
        except grpc.aio.AioRpcError as refused:  # the new owner restarted the turn's timer first
            assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION, refused
            current = trailer(refused, "buraco-current-seq")
            assert current is not None
            draw.expected_seq = int(current)
            await cluster.stub(b).Draw(draw, metadata=bob_token)
    while not any(e.HasField("card_drawn") for e in seen):
        update = await updates(resumed)
        if update.HasField("error"):  # the new owner restarted the turn's timer first: act at its seq
            assert update.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
            draw.expected_seq = update.error.current_seq
            await resumed.write(game_session_pb2.PlayRequest(draw=draw))
    assert [e.seq for e in seen] == list(range(seen[0].seq, seen[-1].seq + 1))  # no gap, no duplicate
    resumed.cancel()


async def test_a_crashed_replica_s_tables_are_taken_over_by_the_scan(cluster: Cluster) -> None:
    a = await cluster.start()
    b = await cluster.start()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    await cluster.stub(a).CreateTable(table_request("t3", "alice", "bot"), metadata=svc)
    a.api.tables.release_on_stop = False  # a crash: nobody releases anything
    await cluster.stop(a)
    await b.api.tables.renew_and_scan()
    assert "t3" not in b.api.tables.actors  # the lease has not run out yet
    cluster.clock.advance(6)
    await b.api.tables.renew_and_scan()
    assert "t3" in b.api.tables.actors


async def test_a_taken_over_turn_gets_its_time_again_and_absent_players_their_grace(cluster: Cluster) -> None:
    a = await cluster.start()
    b = await cluster.start()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    on_a = cluster.stub(a)
    await on_a.CreateTable(table_request("t4", "alice", "bob"), metadata=svc)
    streams = [subscribe(on_a, cluster.token(Kind.PLAYER, p), "tables/t4") for p in ("alice", "bob")]
    for stream in streams:
        await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    a.api.tables.release_on_stop = False
    await cluster.stop(a)
    cluster.clock.advance(40)  # past the lease and past alice's 30 s to draw
    await b.api.tables.renew_and_scan()
    table = b.api.tables.actors["t4"].table
    assert table.turn_deadline_ms == int(cluster.clock.now() * 1000) + 30_000  # her full time again
    cluster.clock.advance(11)  # nobody came back within the grace: bots take both seats
    async def taken() -> None:
        while sum(1 for e in table.entries if e.type == "seat_taken_over") < 2:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(taken(), 30)
    assert not any(e.type == "auto_played" for e in table.entries)
    for stream in streams:
        await stream.close()
