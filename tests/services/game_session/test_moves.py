"""The game-session API's moves on both databases: actions and their errors, idempotent retries,
stale views, hidden cards, hints, and an action whose caller cancels mid-write still
completing."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from buraco.v1 import game_session_pb2
from engine.cards import parse
from services.common.auth import Kind
from tests.services.game_session.conftest import Cluster, rpc_error, started


async def test_actions_errors_retries_and_stale_views(cluster: Cluster) -> None:
    await cluster.start()
    stub = cluster.stub()
    streams = await started(cluster, "duel", "alice", "bob")
    alice, bob = cluster.token(Kind.PLAYER, "alice"), cluster.token(Kind.PLAYER, "bob")
    snapshot = streams["alice"].events[0].snapshot
    assert snapshot.table.state == game_session_pb2.Table.STATE_WAITING and not snapshot.hand
    dealt = streams["alice"].of("hand_started")[0].hand_started
    assert len(dealt.hand) == 11 and dealt.to_act == 0 and len(dealt.deal_commitment) == 64
    seq = streams["alice"].last_seq
    table = "tables/duel"

    wrong_turn = stub.Draw(game_session_pb2.DrawRequest(table=table, request_id="b1", expected_seq=seq), metadata=bob)
    error = await rpc_error(wrong_turn)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and "NOT_YOUR_TURN" in (error.details() or "")
    early = stub.Discard(game_session_pb2.DiscardRequest(table=table, request_id="a0", expected_seq=seq,
                                                          card=dealt.hand[0]), metadata=alice)
    assert "WRONG_PHASE" in ((await rpc_error(early)).details() or "")
    stale = await rpc_error(stub.Draw(game_session_pb2.DrawRequest(table=table, request_id="a1", expected_seq=seq - 1),
                                  metadata=alice))
    assert stale.code() == grpc.StatusCode.FAILED_PRECONDITION
    trailers: list[Any] = list(stale.trailing_metadata() or ())
    assert ("buraco-current-seq", str(seq)) in [tuple(m) for m in trailers]
    bad_card = stub.Discard(game_session_pb2.DiscardRequest(table=table, request_id="a2", expected_seq=seq,
                                                             card="11X"), metadata=alice)
    assert (await rpc_error(bad_card)).code() == grpc.StatusCode.INVALID_ARGUMENT
    stranger = stub.Draw(game_session_pb2.DrawRequest(table=table, request_id="x", expected_seq=seq),
                         metadata=cluster.token(Kind.PLAYER, "carol"))
    assert (await rpc_error(stranger)).code() == grpc.StatusCode.PERMISSION_DENIED

    draw = game_session_pb2.DrawRequest(table=table, request_id="a3", expected_seq=seq)
    drawn = await stub.Draw(draw, metadata=alice)
    assert drawn.result.seq > seq
    card = drawn.result.events[0].card_drawn.card
    assert card  # the drawer sees the card
    retried = await stub.Draw(draw, metadata=alice)
    assert retried == drawn  # same answer, applied once
    assert (await stub.GetTable(game_session_pb2.GetTableRequest(name=table), metadata=alice)).seq == drawn.result.seq
    reused = stub.Draw(game_session_pb2.DrawRequest(table=table, request_id="a3", expected_seq=drawn.result.seq),
                       metadata=alice)
    assert (await rpc_error(reused)).code() == grpc.StatusCode.ALREADY_EXISTS
    await streams["bob"].wait_seq(drawn.result.seq)
    seen_by_bob = next(e for e in streams["bob"].events if e.seq == drawn.result.events[0].seq)
    assert seen_by_bob.card_drawn.seat == 0 and seen_by_bob.card_drawn.card == ""

    hints = await stub.GetLegalMoves(game_session_pb2.GetLegalMovesRequest(table=table), metadata=alice)
    assert hints.seq == drawn.result.seq and not hints.can_draw and hints.discards
    assert [parse(c) for c in hints.discards] == sorted(parse(c) for c in hints.discards)
    nothing = await stub.GetLegalMoves(game_session_pb2.GetLegalMovesRequest(table=table), metadata=bob)
    assert not nothing.discards and not nothing.melds and not nothing.can_draw
    discarded = await stub.Discard(game_session_pb2.DiscardRequest(
        table=table, request_id="a4", expected_seq=drawn.result.seq, card=hints.discards[0]), metadata=alice)
    kinds = [e.WhichOneof("event") for e in discarded.result.events]
    assert kinds[0] == "card_discarded" and "turn_timer_started" in kinds
    for stream in streams.values():
        await stream.wait_seq(discarded.result.seq)
        seqs = [e.seq for e in stream.events[1:]]
        assert seqs == list(range(1, discarded.result.seq + 1))  # no gap, no duplicate
    for stream in streams.values():
        await stream.close()


async def test_an_action_whose_caller_cancels_mid_write_still_completes(cluster: Cluster) -> None:
    """A client that cancels its call while the action's append is being written: the change runs
    to its end (published, in memory and in the log alike), a retry with the same request id gets
    its answer, and the table plays on (stopping it there used to leave the log ahead of memory:
    the next action failed with INTERNAL, a duplicate sequence number)."""
    node = await cluster.start()
    stub = cluster.stub()
    streams = await started(cluster, "cancelled", "alice", "bob")
    alice = cluster.token(Kind.PLAYER, "alice")
    seq = streams["alice"].last_seq
    tables = node.api.tables
    submitted, release, caller_left = asyncio.Event(), asyncio.Event(), asyncio.Event()
    submit, change = tables.writer.submit, tables.change

    async def held_submit(write: Any) -> Any:
        submitted.set()
        await release.wait()
        return await submit(write)

    async def watched_change(*args: Any, **kwargs: Any) -> Any:
        try:
            return await change(*args, **kwargs)
        except asyncio.CancelledError:
            caller_left.set()
            raise

    tables.writer.submit = held_submit  # type: ignore[method-assign]
    tables.change = watched_change  # type: ignore[method-assign]
    draw = game_session_pb2.DrawRequest(table="tables/cancelled", request_id="d1", expected_seq=seq)
    call = stub.Draw(draw, metadata=alice)
    await submitted.wait()
    call.cancel()
    await caller_left.wait()
    release.set()
    tables.writer.submit = submit  # type: ignore[method-assign]

    await streams["alice"].wait_seq(seq + 1)
    again = await stub.Draw(draw, metadata=alice)  # the retry gets the first answer
    assert again.result.seq > seq and again.result.events[0].card_drawn.card
    drawn = again.result.events[0].card_drawn.card
    discard = game_session_pb2.DiscardRequest(
        table="tables/cancelled", request_id="d2", expected_seq=again.result.seq, card=drawn
    )
    discarded = await stub.Discard(discard, metadata=alice)
    assert discarded.result.seq > again.result.seq
    assert streams["bob"].last_seq >= seq + 1
