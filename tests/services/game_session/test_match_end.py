"""The end of a match through the game-session API on both databases: bots finish it and the
exported records replay through the engine; a finished table is compacted, then evicted, and
replays the same."""

from __future__ import annotations

import hashlib
import json

from buraco.v1 import common_pb2, game_session_pb2
from engine.deal import deal_from_seed
from engine.replay import parse_record, replay
from engine.rules import preset
from services.common.auth import Kind
from tests.services.game_session.conftest import Cluster, started, subscribe


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
