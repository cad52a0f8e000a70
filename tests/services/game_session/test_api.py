"""The game-session API on both databases: tables, actions and their errors, idempotent retries,
stale views, streams (replay + live, no gap, no duplicate), spectators, hidden cards, hints and
the exported records."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import select

from buraco.v1 import common_pb2, game_session_pb2
from engine.cards import parse
from engine.deal import deal_from_seed
from engine.replay import parse_record, replay
from engine.rules import preset
from services.common.auth import Kind
from services.game_session import models
from tests.services.game_session.conftest import (
    Cluster,
    Stream,
    subscribe,
    table_request,
)
from tests.services.service_checks import check_service_process

SERVICE_DESCRIPTOR = game_session_pb2.DESCRIPTOR.services_by_name["GameSessionService"]


async def _code(call: Any) -> grpc.aio.AioRpcError:
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


async def test_create_get_list_cancel(cluster: Cluster) -> None:
    await cluster.start()
    stub = cluster.stub()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    first = await stub.CreateTable(table_request("t1", "alice", "bob"), metadata=svc)
    assert first.name == "tables/t1" and first.state == game_session_pb2.Table.STATE_WAITING
    assert first.owner_address == cluster.nodes[0].address
    again = await stub.CreateTable(table_request("t1", "alice", "bob"), metadata=svc)
    assert again == first  # the retry gets the first answer
    other = table_request("t1", "alice", "carol")
    assert (await _code(stub.CreateTable(other, metadata=svc))).code() == grpc.StatusCode.ALREADY_EXISTS
    same_match = table_request("t9", "alice", "bob", match_id="m-t1")
    assert (await _code(stub.CreateTable(same_match, metadata=svc))).code() == grpc.StatusCode.ALREADY_EXISTS
    as_player = stub.CreateTable(table_request("t2", "alice", "bob"), metadata=cluster.token(Kind.PLAYER, "alice"))
    assert (await _code(as_player)).code() == grpc.StatusCode.PERMISSION_DENIED
    bots = table_request("t3", "alice", "bot", mode=common_pb2.TABLE_MODE_COMPETITIVE)
    error = await _code(stub.CreateTable(bots, metadata=svc))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "practice" in (error.details() or "")
    bad_rules = table_request("t4", "alice", "bob")
    bad_rules.table.options.ruleset.overrides["no_such_rule"] = "1"
    assert (await _code(stub.CreateTable(bad_rules, metadata=svc))).code() == grpc.StatusCode.INVALID_ARGUMENT
    for table_id in ("t5", "t6"):
        await stub.CreateTable(table_request(table_id, "carol", "dave"), metadata=svc)

    got = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/t1"),
                              metadata=cluster.token(Kind.PLAYER, "alice"))
    assert got.match_id == "m-t1" and [s.participant.player for s in got.seats] == ["players/alice", "players/bob"]
    refused = stub.GetTable(game_session_pb2.GetTableRequest(name="tables/t1"),
                            metadata=cluster.token(Kind.PLAYER, "carol"))
    assert (await _code(refused)).code() == grpc.StatusCode.PERMISSION_DENIED
    missing = stub.GetTable(game_session_pb2.GetTableRequest(name="tables/nope"), metadata=svc)
    assert (await _code(missing)).code() == grpc.StatusCode.NOT_FOUND

    names: list[str] = []
    token = ""
    while True:
        page = await stub.ListTables(game_session_pb2.ListTablesRequest(page_size=2, page_token=token), metadata=svc)
        names += [t.name for t in page.tables]
        token = page.next_page_token
        if not token:
            break
    assert names == ["tables/t1", "tables/t5", "tables/t6"]
    mine = await stub.ListTables(game_session_pb2.ListTablesRequest(), metadata=cluster.token(Kind.PLAYER, "carol"))
    assert [t.name for t in mine.tables] == ["tables/t5", "tables/t6"]
    nosy = stub.ListTables(game_session_pb2.ListTablesRequest(player="players/alice"),
                           metadata=cluster.token(Kind.PLAYER, "carol"))
    assert (await _code(nosy)).code() == grpc.StatusCode.PERMISSION_DENIED

    cancel = game_session_pb2.CancelTableRequest(name="tables/t5", request_id="c1", reason="saga")
    cancelled = await stub.CancelTable(cancel, metadata=svc)
    assert cancelled.state == game_session_pb2.Table.STATE_CANCELLED
    assert (await stub.CancelTable(cancel, metadata=svc)).state == game_session_pb2.Table.STATE_CANCELLED
    listed = await stub.ListTables(
        game_session_pb2.ListTablesRequest(state=game_session_pb2.Table.STATE_CANCELLED), metadata=svc)
    assert [t.name for t in listed.tables] == ["tables/t5"]
    watcher = subscribe(stub, svc, "tables/t5", after_seq=0)
    await watcher.wait(lambda events: watcher.ended)
    assert watcher.events[0].snapshot.table.state == game_session_pb2.Table.STATE_CANCELLED

    await started(cluster, "t7", "alice", "bob")
    late = stub.CancelTable(game_session_pb2.CancelTableRequest(name="tables/t7", request_id="c2"), metadata=svc)
    assert (await _code(late)).code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_a_table_created_in_one_statement_is_the_one_the_general_path_writes(cluster: Cluster) -> None:
    """On PostgreSQL CreateTable writes a new table in one statement (`store.Creator`); it leaves the
    same rows as the general path (the ORM's, SQLite's), and a retry, a reused request_id and a
    clash of ids are told apart by the general path as before."""
    node = await cluster.start()
    stub = cluster.stub()
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    creator = node.api.creator
    at_once = creator.at_once
    assert at_once == (cluster.target.url.startswith("postgresql"))
    wrote: list[bool] = []
    if at_once:
        create = creator._create_at_once

        async def watched(**kwargs: Any) -> bool:
            wrote.append(await create(**kwargs))
            return wrote[-1]

        creator._create_at_once = watched  # type: ignore[method-assign]
    fast = await stub.CreateTable(table_request("fast", "alice", "bob"), metadata=svc)
    assert wrote == ([True] if at_once else [])  # the one statement wrote it
    creator.at_once = False
    general = await stub.CreateTable(table_request("general", "carol", "dave"), metadata=svc)
    creator.at_once = at_once
    db = node.api.deps.db

    # what may differ between two tables: ids, names, players, times, and what is made of them
    varying = {"id", "table_id", "match_id", "description", "request_id", "response", "request_hash",
               "created_at", "expires_at", "player", "created_ms", "updated_ms"}

    def rows_of(got: dict[str, list[Any]]) -> dict[str, list[dict[str, Any]]]:
        return {name: [{k: v for k, v in row._asdict().items() if k not in varying} for row in rows]
                for name, rows in got.items()}

    async def stored(table_id: str) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        async with db.transaction() as session:
            for name, table, column in (("tables", models.tables, models.tables.c.id),
                                        ("seats", models.seats, models.seats.c.table_id),
                                        ("leases", models.leases, models.leases.c.table_id)):
                out[name] = list((await session.execute(select(table).where(column == table_id))).all())
            keys = models.idempotency_keys
            out["keys"] = list((await session.execute(
                select(keys).where(keys.c.request_id == f"create-{table_id}"))).all())
        return out

    fast_rows, general_rows = await stored("fast"), await stored("general")
    assert rows_of(fast_rows) == rows_of(general_rows)
    assert [len(rows) for rows in fast_rows.values()] == [1, 2, 1, 1]
    assert [r.player for r in fast_rows["seats"]] == ["alice", "bob"]
    assert game_session_pb2.Table.FromString(fast_rows["keys"][0].response) == fast
    assert game_session_pb2.Table.FromString(general_rows["keys"][0].response) == general
    described = game_session_pb2.Table.FromString(fast_rows["tables"][0].description)
    assert (described.name, described.match_id, described.create_time) == (fast.name, fast.match_id, fast.create_time)

    assert await stub.CreateTable(table_request("fast", "alice", "bob"), metadata=svc) == fast  # a retry
    reused = table_request("fast", "alice", "erin")  # the same request_id, another request
    assert (await _code(stub.CreateTable(reused, metadata=svc))).code() == grpc.StatusCode.ALREADY_EXISTS
    clash = table_request("other", "alice", "bob", match_id="m-fast")  # a new key, a match that exists
    error = await _code(stub.CreateTable(clash, metadata=svc))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS and "m-fast" in (error.details() or "")
    assert (await stored("other"))["tables"] == []
    assert wrote == ([True, False, False, False] if at_once else [])  # the rest: the general path
    await started(cluster, "fast", "alice", "bob")  # the table created in one statement plays


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
    error = await _code(wrong_turn)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and "NOT_YOUR_TURN" in (error.details() or "")
    early = stub.Discard(game_session_pb2.DiscardRequest(table=table, request_id="a0", expected_seq=seq,
                                                          card=dealt.hand[0]), metadata=alice)
    assert "WRONG_PHASE" in ((await _code(early)).details() or "")
    stale = await _code(stub.Draw(game_session_pb2.DrawRequest(table=table, request_id="a1", expected_seq=seq - 1),
                                  metadata=alice))
    assert stale.code() == grpc.StatusCode.FAILED_PRECONDITION
    trailers: list[Any] = list(stale.trailing_metadata() or ())
    assert ("buraco-current-seq", str(seq)) in [tuple(m) for m in trailers]
    bad_card = stub.Discard(game_session_pb2.DiscardRequest(table=table, request_id="a2", expected_seq=seq,
                                                             card="11X"), metadata=alice)
    assert (await _code(bad_card)).code() == grpc.StatusCode.INVALID_ARGUMENT
    stranger = stub.Draw(game_session_pb2.DrawRequest(table=table, request_id="x", expected_seq=seq),
                         metadata=cluster.token(Kind.PLAYER, "carol"))
    assert (await _code(stranger)).code() == grpc.StatusCode.PERMISSION_DENIED

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
    assert (await _code(reused)).code() == grpc.StatusCode.ALREADY_EXISTS
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


async def test_bots_finish_the_match_and_the_records_replay(cluster: Cluster) -> None:
    """alice leaves at once: bots play both seats to the end of the (express) match; the export
    replays through the engine and each hand's seed matches its commitment and its deal."""
    await cluster.start()
    stub = cluster.stub()
    streams = await started(cluster, "practice", "alice", "bot")
    alice = cluster.token(Kind.PLAYER, "alice")
    left = await stub.LeaveTable(game_session_pb2.LeaveTableRequest(table="tables/practice", request_id="bye"),
                                 metadata=alice)
    assert left.result.events[0].seat_taken_over.reason == game_session_pb2.SeatTakenOver.REASON_LEFT
    stream = streams["alice"]
    await stream.wait(lambda events: any(e.HasField("match_ended") for e in events), timeout=60)
    ended = stream.of("match_ended")[0].match_ended
    assert [o.outcome for o in ended.outcomes] == [common_pb2.OUTCOME_ABANDONED]
    seqs = [e.seq for e in stream.events[1:]]
    assert seqs == list(range(1, seqs[-1] + 1))
    table = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/practice"), metadata=alice)
    assert table.state == game_session_pb2.Table.STATE_FINISHED and table.seq == seqs[-1]

    registry = cluster.nodes[0].api.deps.registry
    events_total = registry.get_sample_value("buraco_table_events_total", {"service": "game_session"})
    assert events_total == table.seq  # every event of the one table this replica wrote
    assert registry.get_sample_value("buraco_tables_active", {"service": "game_session"}) == 0.0
    assert registry.get_sample_value("buraco_tables_oldest_idle_seconds", {"service": "game_session"}) == 0.0

    records = await stub.ExportRecords(game_session_pb2.ExportRecordsRequest(table="tables/practice"), metadata=alice)
    hand_ends = stream.of("hand_ended")
    assert len(records.hands) == len(hand_ends) >= 1
    for record, end, start in zip(records.hands, hand_ends, stream.of("hand_started"), strict=True):
        assert record.seed == end.hand_ended.seed
        material = f"{record.seed}|tables/practice|{record.hand_number}".encode()
        assert hashlib.sha256(material).hexdigest() == record.commitment == start.hand_started.deal_commitment
        data = json.loads(record.record_json)
        assert data["deal"] == deal_from_seed(preset("aberto"), 2, record.seed).to_json()
        out, status = replay(parse_record(data))
        assert status == 0 and out["ok"]
        assert [s["total"] for s in out["score"]["sides"]] == [s.total for s in end.hand_ended.scores]
    await stream.close()



async def test_a_finished_table_is_compacted_then_evicted_and_replays_the_same(cluster: Cluster) -> None:
    """At match end the table keeps only the JSON text of its entries (but the final change's,
    on its way to the streams); once finished and quiet past FINISHED_KEPT_MS the scan evicts it;
    a late replay gives the same events from the compacted table and from the log."""
    from services.game_session.ownership import FINISHED_KEPT_MS

    node = await cluster.start()
    stub = cluster.stub()
    streams = await started(cluster, "done", "alice", "bot")
    alice = cluster.token(Kind.PLAYER, "alice")
    await stub.LeaveTable(game_session_pb2.LeaveTableRequest(table="tables/done", request_id="bye"), metadata=alice)
    stream = streams["alice"]
    await stream.wait(lambda events: stream.ended)  # the stream ends by itself after match_ended
    assert stream.events[-1].HasField("match_ended")
    live = {e.seq: e for e in stream.events if e.seq >= 2 and not e.HasField("snapshot")}

    tables = node.api.tables
    table = tables.actors["done"].table
    final = next(i for i, e in enumerate(table.entries) if e.type == "match_ended")
    assert 0 < table.compacted <= final  # the final change kept its protos, nothing before it
    assert not [e.seq for e in table.entries[: table.compacted] if e.encoded or not e.sealed]

    async def replayed() -> dict[int, game_session_pb2.TableEvent]:
        late = subscribe(stub, alice, "tables/done", after_seq=1)
        await late.wait(lambda events: late.ended)
        assert late.error is None
        return {e.seq: e for e in late.events}

    assert await replayed() == live  # from the compacted table
    await tables.renew_and_scan()
    assert "done" in tables.actors  # finished, but not for long enough
    cluster.clock.advance(FINISHED_KEPT_MS / 1000 + 1)
    await tables.renew_and_scan()
    assert "done" not in tables.actors
    assert await replayed() == live  # from the log
    reloaded = tables.actors["done"].table
    assert reloaded.compacted == len(reloaded.entries) and not any(e.encoded for e in reloaded.entries)
    got = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/done"), metadata=alice)
    assert got.state == game_session_pb2.Table.STATE_FINISHED and got.seq == max(live)

def test_the_process_serves_survives_fuzzing_and_stops_on_sigterm(tmp_path: Path) -> None:
    check_service_process("game_session", SERVICE_DESCRIPTOR, tmp_path)





def test_settings_are_documented_and_the_deal_seed_is_refused_in_production() -> None:
    from services.common.config import ConfigError
    from services.game_session import settings as gs_settings
    from tests.services.harness import ROOT

    for document in ("README.md", "docs/game-session.md"):
        text = (ROOT / document).read_text()
        assert [s.name for s in gs_settings.SETTINGS if f"`{s.name}`" not in text] == [], document
    assert gs_settings.load({"BURACO_GAME_SESSION_DEAL_SEED": "x"}).deal_seed == "x"
    with pytest.raises(ConfigError, match="BURACO_GAME_SESSION_DEAL_SEED"):
        gs_settings.load({"BURACO_GAME_SESSION_DEAL_SEED": "x"}, production=True)
    with pytest.raises(ConfigError, match="BURACO_GAME_SESSION_LEASE_SECONDS"):
        gs_settings.load({"BURACO_GAME_SESSION_LEASE_SECONDS": "soon"})


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
