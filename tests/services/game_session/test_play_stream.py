"""The game-session API's Play stream on both databases: each action answered once, refusals kept
on the stream, the rate limit per action, a stream that ends mid-write, and a stream whose
token has expired."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from buraco.v1 import game_session_pb2
from services.common.auth import Kind
from tests.services.game_session.conftest import Cluster, started


async def _update(call: Any) -> game_session_pb2.PlayUpdate:
    """The next message of a Play stream (within 10 s)."""
    update = await asyncio.wait_for(call.read(), 10)
    assert isinstance(update, game_session_pb2.PlayUpdate), "the stream ended"
    return update


async def test_play_stream_answers_each_action_once_and_keeps_refusals_on_the_stream(cluster: Cluster) -> None:
    """Play: the join first (the snapshot comes back), then actions on the same stream. An accepted
    action is answered by its request_id in the update that carries its change; a refused one by a
    PlayError with the unary call's code, message and current seq, the stream staying open; a retry
    (on the stream, or by the unary call: the same request) is applied once. Over the rate limit,
    an action is refused alone. A second join ends the stream; a caller without a seat may not play."""
    await cluster.start(rate_limit_per_second=20.0, rate_limit_burst=40)
    stub = cluster.stub()
    streams = await started(cluster, "playing", "alice", "bob")
    seat = streams["alice"].of("turn_timer_started")[-1].turn_timer_started.seat
    actor, waiter = ("alice", "bob") if seat == 0 else ("bob", "alice")
    table = "tables/playing"
    call = stub.Play(None, metadata=cluster.token(Kind.PLAYER, actor))
    await call.write(game_session_pb2.PlayRequest(join=game_session_pb2.SubscribeChangesRequest(table=table)))
    first = await _update(call)
    assert first.changes.events[0].HasField("snapshot") and not first.request_ids and not first.HasField("error")
    seq = first.changes.events[-1].seq

    def draw(request_id: str, expected: int, name: str = table) -> game_session_pb2.PlayRequest:
        return game_session_pb2.PlayRequest(
            draw=game_session_pb2.DrawRequest(table=name, request_id=request_id, expected_seq=expected))

    await call.write(draw("stale", seq - 1))
    refused = (await _update(call)).error
    assert (refused.request_id, refused.code, refused.current_seq) == (
        "stale", grpc.StatusCode.FAILED_PRECONDITION.value[0], seq)
    assert "stale view" in refused.message
    await call.write(draw("elsewhere", seq, "tables/other"))
    refused = (await _update(call)).error
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and "draw.table" in refused.message
    await call.write(game_session_pb2.PlayRequest(discard=game_session_pb2.DiscardRequest(
        table=table, request_id="early", expected_seq=seq, card="XX")))
    refused = (await _update(call)).error
    assert refused.request_id == "early" and refused.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]

    await call.write(draw("d1", seq))
    accepted = await _update(call)
    assert list(accepted.request_ids) == ["d1"] and not accepted.HasField("error")
    drawn = accepted.changes.events[0]
    assert drawn.seq == seq + 1 and drawn.HasField("card_drawn") and drawn.card_drawn.card != ""
    await streams[waiter].wait_seq(drawn.seq)
    seen = next(e for e in streams[waiter].events if e.seq == drawn.seq)
    assert seen.HasField("card_drawn") and seen.card_drawn.card == ""  # the other seat sees no card
    # the retry, on the stream: a bare answer; by the unary call: the first call's events
    await call.write(draw("d1", seq))
    again = await _update(call)
    assert list(again.request_ids) == ["d1"] and not again.changes.events
    unary = await stub.Draw(draw("d1", seq).draw, metadata=cluster.token(Kind.PLAYER, actor))
    assert list(unary.result.events) == list(accepted.changes.events)
    # each action is measured as a call of its own (the pipeline sees only the stream)
    registry = cluster.nodes[0].api.deps.registry

    def calls(code: str) -> float:
        labels = {"service": "game_session", "method": "/buraco.v1.GameSessionService/Play/Draw", "code": code}
        return registry.get_sample_value("buraco_rpc_calls_total", labels) or 0.0

    assert (calls("OK"), calls("FAILED_PRECONDITION"), calls("INVALID_ARGUMENT")) == (2.0, 1.0, 1.0)

    await call.write(game_session_pb2.PlayRequest(join=game_session_pb2.SubscribeChangesRequest(table=table)))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        while True:
            await _update(call)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "join" in (info.value.details() or "")

    for who, first_message, code in (
        ("carol", game_session_pb2.PlayRequest(join=game_session_pb2.SubscribeChangesRequest(table=table)),
         grpc.StatusCode.PERMISSION_DENIED),
        (actor, draw("no-join", seq), grpc.StatusCode.INVALID_ARGUMENT),
    ):
        other = stub.Play(None, metadata=cluster.token(Kind.PLAYER, who))
        await other.write(first_message)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(other.read(), 10)
        assert info.value.code() == code

    # past the rate limit (20/s, burst 40): refused one by one, the stream still open
    call = stub.Play(None, metadata=cluster.token(Kind.PLAYER, actor))
    await call.write(game_session_pb2.PlayRequest(join=game_session_pb2.SubscribeChangesRequest(table=table)))
    assert (await _update(call)).changes.events[0].HasField("snapshot")
    for n in range(60):
        await call.write(draw(f"flood-{n}", 0))
    refusals = [(await _update(call)).error for _ in range(60)]
    assert [r.request_id for r in refusals] == [f"flood-{n}" for n in range(60)]
    codes = {r.code for r in refusals}
    assert codes == {grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], grpc.StatusCode.FAILED_PRECONDITION.value[0]}
    call.cancel()
    for stream in streams.values():
        await stream.close()


async def test_a_play_stream_that_ends_mid_write_still_completes_its_action(cluster: Cluster) -> None:
    """A Play stream's actions change the table in the stream's own reader (no task per action),
    which is never cancelled during a change: a client that goes away while its action's append is
    being written leaves the change to run to its end (published, in memory and in the log alike,
    the table not dropped), a resumed stream's retry of the same request is answered by its id
    alone, and the table plays on."""
    node = await cluster.start()
    stub = cluster.stub()
    streams = await started(cluster, "leaving", "alice", "bob")
    seat = streams["alice"].of("turn_timer_started")[-1].turn_timer_started.seat
    actor, waiter = ("alice", "bob") if seat == 0 else ("bob", "alice")
    table = "tables/leaving"
    tables = node.api.tables
    live = tables.actors["leaving"]
    submitted, release = asyncio.Event(), asyncio.Event()
    submit = tables.writer.submit

    async def held_submit(write: Any) -> Any:
        submitted.set()
        await release.wait()
        return await submit(write)

    before = list(live.subscribers)
    call = stub.Play(None, metadata=cluster.token(Kind.PLAYER, actor))
    await call.write(game_session_pb2.PlayRequest(join=game_session_pb2.SubscribeChangesRequest(table=table)))
    seq = (await _update(call)).changes.events[-1].seq
    (play_sub,) = [sub for sub in live.subscribers if sub not in before]
    ended, unsubscribe = asyncio.Event(), live.unsubscribe

    def watched_unsubscribe(sub: Any) -> None:
        unsubscribe(sub)
        if sub is play_sub:
            ended.set()

    live.unsubscribe = watched_unsubscribe  # type: ignore[method-assign]
    tables.writer.submit = held_submit  # type: ignore[method-assign]
    draw = game_session_pb2.DrawRequest(table=table, request_id="d1", expected_seq=seq)
    await call.write(game_session_pb2.PlayRequest(draw=draw))
    await submitted.wait()
    call.cancel()
    await asyncio.wait_for(ended.wait(), 10)  # the server saw the stream end, its reader mid-change
    release.set()
    tables.writer.submit = submit  # type: ignore[method-assign]

    await streams[waiter].wait_seq(seq + 1)
    assert tables.actors.get("leaving") is live and not live.retired  # not dropped: memory and log agree
    again = stub.Play(None, metadata=cluster.token(Kind.PLAYER, actor))
    await again.write(game_session_pb2.PlayRequest(join=game_session_pb2.SubscribeChangesRequest(
        table=table, after_seq=seq)))
    replayed = await _update(again)
    drawn = replayed.changes.events[0]
    assert drawn.seq == seq + 1 and drawn.card_drawn.card != ""
    await again.write(game_session_pb2.PlayRequest(draw=draw))
    answered = await _update(again)
    assert list(answered.request_ids) == ["d1"] and not answered.changes.events
    last = replayed.changes.events[-1].seq
    await again.write(game_session_pb2.PlayRequest(discard=game_session_pb2.DiscardRequest(
        table=table, request_id="d2", expected_seq=last, card=drawn.card_drawn.card)))
    discarded = await _update(again)
    assert list(discarded.request_ids) == ["d2"] and discarded.changes.events[0].HasField("card_discarded")
    again.cancel()
    for stream in streams.values():
        await stream.close()


async def test_a_play_stream_ends_once_its_token_has_expired(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Play stream carries calls of its own: the first action after the caller's token expired
    ends it with UNAUTHENTICATED (the client reconnects with a fresh token and resumes)."""
    node = await cluster.start()
    stub = cluster.stub()
    streams = await started(cluster, "expiring", "alice", "bob")
    call = stub.Play(None, metadata=cluster.token(Kind.PLAYER, "alice"))
    join = game_session_pb2.SubscribeChangesRequest(table="tables/expiring")
    await call.write(game_session_pb2.PlayRequest(join=join))
    seq = (await _update(call)).changes.events[-1].seq
    draw = game_session_pb2.DrawRequest(table="tables/expiring", request_id="late", expected_seq=seq)
    verifier = node.server.pipeline.verifier
    monkeypatch.setattr(verifier, "_clock", lambda: time.time() + 2 * 3600)  # the tokens live an hour
    await call.write(game_session_pb2.PlayRequest(draw=draw))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _update(call)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED and "expired" in (info.value.details() or "")
    monkeypatch.undo()
    table = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/expiring"),
                                metadata=cluster.token(Kind.PLAYER, "alice"))
    assert table.seq == seq  # nothing was applied
    for stream in streams.values():
        await stream.close()
