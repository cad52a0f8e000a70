"""Timers, bots taking seats, the tables' bot levels, disconnections, annulment (never at a
tournament's table) and chat, on both databases (a fake clock fires the timers)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import grpc
import pytest

from buraco.v1 import common_pb2, game_session_pb2
from services.common.auth import Kind
from tests.services.game_session.conftest import Cluster, Stream, settings, subscribe, table_request

TAKEN = game_session_pb2.SeatTakenOver


async def _start(cluster: Cluster, table_id: str, *who: str, **opts: Any) -> dict[str, Stream]:
    stub = cluster.stub()
    await stub.CreateTable(table_request(table_id, *who, **opts), metadata=cluster.token(Kind.SERVICE, "matchmaking"))
    streams = {name: subscribe(stub, cluster.token(Kind.PLAYER, name), f"tables/{table_id}") for name in who}
    for stream in streams.values():
        await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    return streams


async def _error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


async def _until(condition: Any, timeout: float = 10.0) -> None:
    """Wait for server-side state the stream cannot show (a closed stream being noticed)."""
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.005)
    await asyncio.wait_for(poll(), timeout)


def _count_at_least(kind: str, count: int) -> Any:
    return lambda events: sum(1 for e in events if e.WhichOneof("event") == kind) >= count


def _bot_controlled(table: Any, seat: int) -> bool:
    return bool(table.seats[seat].bot_controlled)


async def test_timeouts_auto_play_then_a_bot_takes_the_seat(cluster: Cluster) -> None:
    await cluster.start()
    streams = await _start(cluster, "slow", "alice", "bob")
    watch = streams["bob"]
    hand = streams["alice"].of("hand_started")[0].hand_started
    for count in (1, 2, 3):
        for seat in (0, 1):
            target = len(watch.of("auto_played")) + 1
            cluster.clock.advance(31)  # past the 30 s to draw
            await watch.wait(_count_at_least("auto_played", target))
            played = watch.of("auto_played")[-1].auto_played
            assert (played.seat, played.count) == (seat, count)
    await watch.wait(_count_at_least("seat_taken_over", 2))  # in the same change as the third automatic play
    taken = watch.of("seat_taken_over")
    assert [(e.seat_taken_over.seat, e.seat_taken_over.reason) for e in taken] == [
        (0, TAKEN.REASON_TIMEOUTS), (1, TAKEN.REASON_TIMEOUTS)]
    # each automatic play drew from the stock and discarded, for the player whose time ran out
    kinds = [e.WhichOneof("event") for e in watch.events]
    first = kinds.index("auto_played")
    assert kinds[kinds.index("card_drawn"):first].count("card_discarded") == 1
    await watch.wait(lambda events: any(e.HasField("match_ended") for e in events), timeout=60)
    ended = watch.of("match_ended")[0].match_ended
    assert [o.outcome for o in ended.outcomes] == [common_pb2.OUTCOME_ABANDONED] * 2
    alice = cluster.token(Kind.PLAYER, "alice")
    snapshot = await cluster.stub().GetTable(game_session_pb2.GetTableRequest(name="tables/slow"), metadata=alice)
    assert snapshot.state == game_session_pb2.Table.STATE_FINISHED and all(s.bot_controlled for s in snapshot.seats)
    assert hand.to_act == 0
    for stream in streams.values():
        await stream.close()


async def test_a_dropped_player_is_replaced_and_gets_the_seat_back(cluster: Cluster) -> None:
    node = await cluster.start()
    streams = await _start(cluster, "flaky", "alice", "bob")
    actor = node.api.tables.actors["flaky"]
    table = actor.table
    await streams["bob"].close()
    await _until(lambda: 1 in actor.grace)
    cluster.clock.advance(11)  # the grace period (10 s in the tests' settings)
    watch = streams["alice"]
    await watch.wait(lambda events: any(e.HasField("seat_taken_over") for e in events))
    taken = watch.of("seat_taken_over")[0].seat_taken_over
    assert (taken.seat, taken.reason) == (1, TAKEN.REASON_DISCONNECTED)
    assert taken.return_deadline.ToMilliseconds() == int(cluster.clock.now() * 1000) + 120_000
    assert _bot_controlled(table, 1)
    assert table.bot_kind(1) == "heuristic"  # no bot level set: medium, as before levels existed

    # alice plays; the bot plays bob's turn at once
    alice = cluster.token(Kind.PLAYER, "alice")
    stub = cluster.stub()
    seq = watch.last_seq
    drawn = await stub.Draw(game_session_pb2.DrawRequest(table="tables/flaky", request_id="a1", expected_seq=seq),
                            metadata=alice)
    hints = await stub.GetLegalMoves(game_session_pb2.GetLegalMovesRequest(table="tables/flaky"), metadata=alice)
    await stub.Discard(game_session_pb2.DiscardRequest(table="tables/flaky", request_id="a2",
                                                       expected_seq=drawn.result.seq, card=hints.discards[0]),
                       metadata=alice)
    await watch.wait(lambda events: any(e.HasField("card_discarded") and e.card_discarded.seat == 1 for e in events))

    bob = cluster.token(Kind.PLAYER, "bob")
    refused = stub.Draw(game_session_pb2.DrawRequest(table="tables/flaky", request_id="b1", expected_seq=0),
                        metadata=bob)
    assert (await _error(refused)).code() == grpc.StatusCode.FAILED_PRECONDITION
    got = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/flaky"), metadata=alice)
    assert [s.bot_level for s in got.seats] == [common_pb2.BOT_LEVEL_UNSPECIFIED, common_pb2.BOT_LEVEL_MEDIUM]
    back = subscribe(stub, bob, "tables/flaky", after_seq=streams["bob"].last_seq)
    await back.wait(lambda events: any(e.HasField("seat_returned") for e in events))
    returned = back.of("seat_returned")[0].seat_returned
    assert (returned.seat, returned.player) == (1, "players/bob")
    assert not _bot_controlled(table, 1)
    got = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/flaky"), metadata=alice)
    assert [s.bot_level for s in got.seats] == [common_pb2.BOT_LEVEL_UNSPECIFIED] * 2  # players play them
    await watch.wait_seq(back.last_seq)
    for stream in (watch, back):
        await stream.close()


async def test_a_tables_bot_level_chooses_its_bots(cluster: Cluster) -> None:
    """An easy table: its bot seats that name no level play the random bot, one that names
    medium the heuristic bot, and the bot that takes a player's seat is the table's (easy)."""
    node = await cluster.start()
    stub = cluster.stub()
    request = table_request("easy", "alice", "bot", "bot", "bot", players=4, bot_level=common_pb2.BOT_LEVEL_EASY)
    for seat in (1, 2):
        request.table.seats[seat].participant.bot = common_pb2.BOT_LEVEL_UNSPECIFIED  # the table's level
    created = await stub.CreateTable(request, metadata=cluster.token(Kind.SERVICE, "matchmaking"))
    easy, medium = common_pb2.BOT_LEVEL_EASY, common_pb2.BOT_LEVEL_MEDIUM
    assert created.options.bot_level == easy
    assert [s.bot_level for s in created.seats] == [common_pb2.BOT_LEVEL_UNSPECIFIED, easy, easy, medium]
    alice = cluster.token(Kind.PLAYER, "alice")
    watch = subscribe(stub, alice, "tables/easy")
    await watch.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    table = node.api.tables.actors["easy"].table
    assert [table.bot_kind(seat) for seat in (1, 2, 3)] == ["random", "random", "heuristic"]
    assert [type(table.bot(seat)).__name__ for seat in (1, 2, 3)] == ["RandomBot", "RandomBot", "HeuristicBot"]

    await stub.LeaveTable(game_session_pb2.LeaveTableRequest(table="tables/easy", request_id="l1"), metadata=alice)
    snapshot = await stub.GetTableSnapshot(game_session_pb2.GetTableSnapshotRequest(table="tables/easy"),
                                           metadata=alice)
    assert [s.bot_level for s in snapshot.seats] == [easy, easy, easy, medium]
    assert table.bot_kind(0) == "random"
    await watch.wait(lambda events: any(e.HasField("match_ended") for e in events), timeout=60)  # bots play it out
    await watch.close()


async def test_at_an_expert_table_the_expert_bot_takes_a_dropped_players_seat(cluster: Cluster) -> None:
    """The table's level HARD (expert): a disconnected player's seat is played by the expert bot,
    with the budget the setting gives it, each decision made in the decision thread (off the event
    loop) and played as a change of its own (its draw and its discard are two changes, with the
    play phase's timer between)."""
    node = await cluster.start(settings(expert_budget_ms=5.0))
    streams = await _start(cluster, "sharp", "alice", "bob", bot_level=common_pb2.BOT_LEVEL_HARD)
    actor = node.api.tables.actors["sharp"]
    table = actor.table
    await streams["bob"].close()
    await _until(lambda: 1 in actor.grace)
    cluster.clock.advance(11)
    watch = streams["alice"]
    await watch.wait(lambda events: any(e.HasField("seat_taken_over") for e in events))
    alice = cluster.token(Kind.PLAYER, "alice")
    stub = cluster.stub()
    got = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/sharp"), metadata=alice)
    assert got.seats[1].bot_controlled and got.seats[1].bot_level == common_pb2.BOT_LEVEL_HARD
    assert got.seats[0].bot_level == common_pb2.BOT_LEVEL_UNSPECIFIED
    assert table.bot_kind(1) == "expert" and table.expert_budget_ms == 5.0
    bot = table.bot(1)
    assert getattr(bot, "budget_ms", None) == 5.0
    threads: list[str] = []
    choose = bot.choose

    def spied(view: Any, legal: Any) -> Any:
        threads.append(threading.current_thread().name)
        return choose(view, legal)

    setattr(bot, "choose", spied)  # noqa: B010

    taken_at = len(watch.events)
    drawn = await stub.Draw(game_session_pb2.DrawRequest(table="tables/sharp", request_id="a1",
                                                         expected_seq=watch.last_seq), metadata=alice)
    hints = await stub.GetLegalMoves(game_session_pb2.GetLegalMovesRequest(table="tables/sharp"), metadata=alice)
    await stub.Discard(game_session_pb2.DiscardRequest(table="tables/sharp", request_id="a2",
                                                       expected_seq=drawn.result.seq, card=hints.discards[0]),
                       metadata=alice)
    await watch.wait(lambda events: any(e.HasField("card_discarded") and e.card_discarded.seat == 1 for e in events)
                     or any(e.HasField("hand_ended") for e in events))
    bots_turn = watch.events[taken_at:]
    kinds = [e.WhichOneof("event") for e in bots_turn]
    play = game_session_pb2.TURN_PHASE_PLAY
    first = next(i for i, e in enumerate(bots_turn) if (e.HasField("card_drawn") and e.card_drawn.seat == 1)
                 or (e.HasField("discard_taken") and e.discard_taken.seat == 1))
    play_timer = next(i for i, e in enumerate(bots_turn) if e.HasField("turn_timer_started")
                      and e.turn_timer_started.seat == 1 and e.turn_timer_started.phase == play)
    assert first < play_timer, kinds  # its draw was a change of its own
    assert threads and all(name.startswith("bot-decisions") for name in threads), threads
    for stream in streams.values():
        await stream.close()


async def test_an_unknown_bot_level_is_refused(cluster: Cluster) -> None:
    await cluster.start()
    stub = cluster.stub()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    table = table_request("odd", "alice", "bot", bot_level=9)
    error = await _error(stub.CreateTable(table, metadata=svc))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error.details() or "").startswith("table.options.bot_level: unknown bot level 9"), error.details()
    seat = table_request("odd", "alice", "bot")
    seat.table.seats[1].participant.bot = 7  # type: ignore[assignment]
    error = await _error(stub.CreateTable(seat, metadata=svc))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error.details() or "").startswith("table.seats[1].participant.bot: unknown bot level 7"), error.details()


async def test_annulment_voids_the_match_and_the_outbox_refunds(cluster: Cluster) -> None:
    await cluster.start()
    stub = cluster.stub()
    streams = await _start(cluster, "friendly", "alice", "bob", mode=common_pb2.TABLE_MODE_COMPETITIVE,
                           bet_chips=50)
    alice, bob, carol = (cluster.token(Kind.PLAYER, p) for p in ("alice", "bob", "carol"))
    proposed = await stub.ProposeAnnulment(
        game_session_pb2.ProposeAnnulmentRequest(table="tables/friendly", request_id="p1"), metadata=alice)
    again = stub.ProposeAnnulment(game_session_pb2.ProposeAnnulmentRequest(table="tables/friendly", request_id="p2"),
                                  metadata=bob)
    assert (await _error(again)).code() == grpc.StatusCode.FAILED_PRECONDITION  # one open proposal at a time
    twice = stub.VoteAnnulment(game_session_pb2.VoteAnnulmentRequest(
        table="tables/friendly", request_id="v0", proposal_id=proposed.proposal_id, approve=True), metadata=alice)
    assert (await _error(twice)).code() == grpc.StatusCode.FAILED_PRECONDITION  # the proposer voted already
    outsider = stub.VoteAnnulment(game_session_pb2.VoteAnnulmentRequest(
        table="tables/friendly", request_id="v1", proposal_id=proposed.proposal_id, approve=True), metadata=carol)
    assert (await _error(outsider)).code() == grpc.StatusCode.PERMISSION_DENIED

    # the first proposal runs out; a second one is approved
    cluster.clock.advance(61)
    watch = streams["alice"]
    await watch.wait(lambda events: any(e.HasField("annulment_resolved") for e in events))
    assert not watch.of("annulment_resolved")[0].annulment_resolved.approved
    second = await stub.ProposeAnnulment(
        game_session_pb2.ProposeAnnulmentRequest(table="tables/friendly", request_id="p3"), metadata=bob)
    assert second.proposal_id != proposed.proposal_id
    await stub.VoteAnnulment(game_session_pb2.VoteAnnulmentRequest(
        table="tables/friendly", request_id="v2", proposal_id=second.proposal_id, approve=True), metadata=alice)
    await watch.wait(lambda events: any(e.HasField("match_ended") for e in events))
    kinds = [e.WhichOneof("event") for e in watch.events[-3:]]
    assert kinds == ["annulment_resolved", "hand_ended", "match_ended"]
    ended = watch.events[-1].match_ended
    assert ended.annulled and not ended.HasField("winning_side")
    assert [o.outcome for o in ended.outcomes] == [common_pb2.OUTCOME_VOID] * 2
    assert watch.events[-2].hand_ended.reason == game_session_pb2.HandEnded.REASON_ABORTED
    assert len(watch.events[-2].hand_ended.seed) == 64

    await asyncio.wait_for(_delivered(cluster, 2), 10)
    targets = sorted(target for target, _ in cluster.outbound.calls)
    assert targets == ["ranking.RecordMatch", "wallet.Void"]
    for stream in streams.values():
        await stream.close()


async def test_a_tournament_match_cannot_be_annulled(cluster: Cluster) -> None:
    """docs/tournaments.md: a tournament's table refuses annulment, from its players and however
    its seats are held (a bot holding the opponent's seat does not let one player's yes pass it)."""
    await cluster.start()
    stub = cluster.stub()
    request = table_request("cup", "alice", "bob", mode=common_pb2.TABLE_MODE_COMPETITIVE)
    request.table.tournament = "tournaments/cup1"
    await stub.CreateTable(request, metadata=cluster.token(Kind.SERVICE, "tournament"))
    alice, bob = (cluster.token(Kind.PLAYER, p) for p in ("alice", "bob"))
    streams = {name: subscribe(stub, token, "tables/cup") for name, token in (("alice", alice), ("bob", bob))}
    for stream in streams.values():
        await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))

    def propose(token: Any, request_id: str) -> Any:
        return stub.ProposeAnnulment(
            game_session_pb2.ProposeAnnulmentRequest(table="tables/cup", request_id=request_id), metadata=token)

    refused = await _error(propose(alice, "p1"))
    assert refused.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "tournaments/cup1" in (refused.details() or "") and "cannot be annulled" in (refused.details() or "")
    vote = await _error(stub.VoteAnnulment(game_session_pb2.VoteAnnulmentRequest(
        table="tables/cup", request_id="v1", proposal_id="cup-a1", approve=True), metadata=bob))
    assert vote.code() == grpc.StatusCode.FAILED_PRECONDITION and "cannot be annulled" in (vote.details() or "")

    # bob leaves: a bot holds his seat, and alice alone still cannot annul the match
    await stub.LeaveTable(game_session_pb2.LeaveTableRequest(table="tables/cup", request_id="l1"), metadata=bob)
    watch = streams["alice"]
    await watch.wait(lambda events: any(e.HasField("seat_taken_over") for e in events))
    alone = await _error(propose(alice, "p2"))
    assert alone.code() == grpc.StatusCode.FAILED_PRECONDITION and "cannot be annulled" in (alone.details() or "")
    table = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/cup"), metadata=alice)
    assert table.state == game_session_pb2.Table.STATE_PLAYING and table.seats[1].bot_controlled
    assert not watch.of("annulment_proposed") and not watch.of("match_ended")
    for stream in streams.values():
        await stream.close()


async def _delivered(cluster: Cluster, count: int) -> None:
    while len(cluster.outbound.calls) < count:
        cluster.outbound.delivered.clear()
        await cluster.outbound.delivered.wait()


async def test_chat_limits_and_mutes(cluster: Cluster) -> None:
    await cluster.start()
    stub = cluster.stub()
    streams = await _start(cluster, "chatty", "alice", "bob")
    alice, bob = cluster.token(Kind.PLAYER, "alice"), cluster.token(Kind.PLAYER, "bob")
    admin = cluster.token(Kind.ADMIN, "root")

    def chat(token: Any, request_id: str, text: str) -> Any:
        return stub.SendChat(game_session_pb2.SendChatRequest(table="tables/chatty", request_id=request_id,
                                                              text=text), metadata=token)

    assert (await _error(chat(alice, "c0", "x" * 201))).code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (await _error(chat(alice, "c0", ""))).code() == grpc.StatusCode.INVALID_ARGUMENT
    sent = await chat(alice, "c1", "boa sorte")
    assert (await chat(alice, "c1", "boa sorte")).seq == sent.seq  # a retry
    await streams["bob"].wait_seq(sent.seq)
    message = streams["bob"].events[-1].chat_message
    assert (message.sender, message.seat, message.text) == ("players/alice", 0, "boa sorte")
    for n in range(2, 11):
        await chat(alice, f"c{n}", f"message {n}")
    limited = await _error(chat(alice, "c11", "one too many"))
    assert limited.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    cluster.clock.advance(61)
    await chat(alice, "c12", "again")

    await stub.MuteChat(game_session_pb2.MuteChatRequest(table="tables/chatty", request_id="m1",
                                                         player="players/alice", muted=True), metadata=bob)
    hidden = await chat(alice, "c13", "you cannot read this")
    await streams["bob"].wait_seq(hidden.seq)
    await streams["alice"].wait_seq(hidden.seq)
    assert streams["bob"].events[-1].chat_message.text == ""
    assert streams["alice"].events[-1].chat_message.text == "you cannot read this"
    await stub.MuteChat(game_session_pb2.MuteChatRequest(table="tables/chatty", request_id="m2",
                                                         player="players/bob", muted=True), metadata=admin)
    silenced = await _error(chat(bob, "b1", "hello?"))
    assert silenced.code() == grpc.StatusCode.PERMISSION_DENIED
    for stream in streams.values():
        await stream.close()


async def test_a_turn_timer_follows_its_deadline_when_a_change_moves_it_later(cluster: Cluster) -> None:
    """The table's one timer is set for the draw's 30 s; the draw at 10 s moves the deadline to
    10 + 60 s: the timer, when it fires at 30 s, waits again until then (no timer per change)."""
    await cluster.start()
    streams = await _start(cluster, "later", "alice", "bob")
    alice, watch = cluster.token(Kind.PLAYER, "alice"), streams["bob"]
    cluster.clock.advance(10)
    drawn = await cluster.stub().Draw(game_session_pb2.DrawRequest(
        table="tables/later", request_id="d1", expected_seq=streams["alice"].last_seq), metadata=alice)
    await watch.wait(lambda events: events[-1].seq >= drawn.result.seq)
    cluster.clock.advance(21)  # 31 s: past the draw's deadline, not the play's
    cluster.clock.advance(38)  # 69 s: one second before the play's deadline
    snapshot = await cluster.stub().GetTableSnapshot(
        game_session_pb2.GetTableSnapshotRequest(table="tables/later"), metadata=alice)
    assert not watch.of("auto_played") and [view.auto_plays for view in snapshot.seats] == [0, 0]
    assert snapshot.table.seq == drawn.result.seq
    assert cluster.clock.pending() >= 1  # the turn's timer, armed again for the play's deadline
    cluster.clock.advance(2)  # 71 s
    await watch.wait(_count_at_least("auto_played", 1))
    played = watch.of("auto_played")[0].auto_played
    assert (played.seat, played.count) == (0, 1)
    for stream in streams.values():
        await stream.close()
