"""The game-session API's event streams on both databases: Subscribe (replay + live, no gap, no
duplicate; resuming after a seq, spectators, hidden cards, out of range) and SubscribeChanges
(the same events in whole changes)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from buraco.v1 import game_session_pb2
from services.common.auth import Kind
from tests.services.game_session.conftest import Cluster, started, subscribe, table_request


async def test_resume_after_seq_spectators_and_out_of_range(cluster: Cluster) -> None:
    await cluster.start()
    stub = cluster.stub()
    streams = await started(cluster, "open", "alice", "bob", spectators_allowed=True)
    alice = cluster.token(Kind.PLAYER, "alice")
    seq = streams["alice"].last_seq
    drawn = await stub.Draw(game_session_pb2.DrawRequest(table="tables/open", request_id="d", expected_seq=seq),
                            metadata=alice)
    await streams["alice"].wait_seq(drawn.result.seq)
    resumed = subscribe(stub, alice, "tables/open", after_seq=1)
    await resumed.wait_seq(drawn.result.seq)
    assert [e.seq for e in resumed.events] == list(range(2, drawn.result.seq + 1))
    assert resumed.events == [e for e in streams["alice"].events if e.seq >= 2]

    carol = cluster.token(Kind.PLAYER, "carol")
    spectator = subscribe(stub, carol, "tables/open")
    await spectator.wait(lambda events: bool(events))
    view = spectator.events[0].snapshot
    assert not view.HasField("viewer_seat") and not view.hand and [s.hand_size for s in view.seats] == [12, 11]
    assert [s.connected for s in view.seats] == [True, True]  # both players' streams are open
    replayed = subscribe(stub, carol, "tables/open", after_seq=0 + 1)
    await replayed.wait_seq(drawn.result.seq)
    assert all(not e.hand_started.hand for e in replayed.of("hand_started"))
    assert all(not e.card_drawn.card for e in replayed.of("card_drawn"))
    # built from the log's text (nobody watched when they were made): the public layer is whole
    mine = {e.seq: e for e in streams["alice"].events}
    for event in replayed.of("card_drawn"):
        drawn_by_me = mine[event.seq].card_drawn
        assert (event.card_drawn.seat, event.card_drawn.stock_count) == (drawn_by_me.seat, drawn_by_me.stock_count)
        assert drawn_by_me.card and event.time == mine[event.seq].time
    assert replayed.of("card_drawn")
    assert [e.seq for e in replayed.events] == [e.seq for e in streams["alice"].events if e.seq >= 2]
    beyond = subscribe(stub, alice, "tables/open", after_seq=drawn.result.seq + 5)
    await beyond.wait(lambda events: beyond.ended)
    assert beyond.error is not None and beyond.error.code() == grpc.StatusCode.OUT_OF_RANGE

    await started(cluster, "closed", "alice", "bob")
    nosy = subscribe(stub, carol, "tables/closed")
    await nosy.wait(lambda events: nosy.ended)
    assert nosy.error is not None and nosy.error.code() == grpc.StatusCode.PERMISSION_DENIED
    for stream in (*streams.values(), resumed, spectator, replayed):
        await stream.close()


async def test_subscribe_changes_carries_the_same_events_in_whole_changes(cluster: Cluster) -> None:
    """SubscribeChanges: the events Subscribe sends, filtered the same way, grouped so that no
    message splits a change (a turn's timer event always comes with what started the turn); a
    resume replays the rest in one message; the stream ends with the match."""
    await cluster.start()
    stub = cluster.stub()
    streams = await started(cluster, "grouped", "alice", "bot")
    alice = cluster.token(Kind.PLAYER, "alice")
    messages: list[game_session_pb2.TableChanges] = []

    async def read_changes() -> None:
        request = game_session_pb2.SubscribeChangesRequest(table="tables/grouped")
        async for message in stub.SubscribeChanges(request, metadata=alice):
            messages.append(message)

    reader = asyncio.ensure_future(read_changes())
    await stub.LeaveTable(game_session_pb2.LeaveTableRequest(table="tables/grouped", request_id="bye"), metadata=alice)
    stream = streams["alice"]
    await stream.wait(lambda events: any(e.HasField("match_ended") for e in events), timeout=60)
    await asyncio.wait_for(reader, 30)  # the stream ends by itself after match_ended

    assert messages[0].events[0].HasField("snapshot") and all(m.events for m in messages)
    flat = [e for m in messages for e in m.events]
    after = flat[0].seq  # the snapshot's seq: the events it already includes
    singles = [e for e in stream.events[1:] if e.seq > after]
    assert [e.SerializeToString() for e in flat[1:]] == [e.SerializeToString() for e in singles]
    assert flat[-1].HasField("match_ended") and len(messages) < len(flat)
    for message in messages[1:]:
        assert not message.events[0].HasField("turn_timer_started"), "a change was split"
    timers = sum(1 for e in flat if e.HasField("turn_timer_started"))
    assert timers > 3

    # a late resume: everything after seq 5 in one message, then the end of the stream
    request = game_session_pb2.SubscribeChangesRequest(table="tables/grouped", after_seq=5)
    resumed = [m async for m in stub.SubscribeChanges(request, metadata=alice)]
    assert len(resumed) == 1
    assert [e.SerializeToString() for e in resumed[0].events] == [
        e.SerializeToString() for e in stream.events[1:] if e.seq > 5
    ]
    negative = stub.SubscribeChanges(game_session_pb2.SubscribeChangesRequest(table="tables/grouped", after_seq=-1),
                                     metadata=alice)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await negative.read()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "after_seq" in (info.value.details() or "")
    await stream.close()


async def test_a_players_first_snapshot_shows_their_own_seat_connected(cluster: Cluster) -> None:
    """The stream a player opens counts before its snapshot is taken: their own seat is connected
    in it, the other seat not until its player's stream is open."""
    await cluster.start()
    stub = cluster.stub()
    await stub.CreateTable(table_request("first", "alice", "bob"), metadata=cluster.token(Kind.SERVICE, "matchmaking"))
    alice = subscribe(stub, cluster.token(Kind.PLAYER, "alice"), "tables/first")
    await alice.wait(lambda events: bool(events))
    own = alice.events[0].snapshot
    assert own.viewer_seat == 0 and [s.connected for s in own.seats] == [True, False]
    bob = subscribe(stub, cluster.token(Kind.PLAYER, "bob"), "tables/first")
    await bob.wait(lambda events: bool(events))
    assert [s.connected for s in bob.events[0].snapshot.seats] == [True, True]
    for stream in (alice, bob):
        await stream.close()
