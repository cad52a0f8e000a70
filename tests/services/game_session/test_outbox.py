"""The outbox on both databases: a match end's calls are delivered once, across a crash between
the commit and the call; transient failures are retried, permanent refusals kept for a person;
practice tables owe nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from prometheus_client import CollectorRegistry
from sqlalchemy import select

from buraco.v1 import common_pb2, game_session_pb2, ranking_pb2, wallet_pb2
from services.common.auth import Kind
from services.game_session import models
from tests.services.game_session.conftest import Cluster, Node, settings, subscribe, table_request


async def _finish(cluster: Cluster, node: Node, table_id: str, **opts: Any) -> game_session_pb2.MatchEnded:
    """Both players leave at once; the bots finish the (express) match."""
    stub = cluster.stub(node)
    await stub.CreateTable(table_request(table_id, "alice", "bob", **opts), metadata=cluster.token(Kind.SERVICE, "mm"))
    streams = [subscribe(stub, cluster.token(Kind.PLAYER, p), f"tables/{table_id}") for p in ("alice", "bob")]
    for stream in streams:
        await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    for player in ("alice", "bob"):
        await stub.LeaveTable(game_session_pb2.LeaveTableRequest(table=f"tables/{table_id}", request_id="bye"),
                              metadata=cluster.token(Kind.PLAYER, player))
    await streams[0].wait(lambda events: any(e.HasField("match_ended") for e in events), timeout=60)
    for stream in streams:
        await stream.close()
    return streams[0].of("match_ended")[0].match_ended


async def _rows(node: Node) -> list[Any]:
    async with node.api.deps.db.transaction() as session:
        return list((await session.execute(select(models.outbox).order_by(models.outbox.c.id))).all())


def _gauge(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, {"service": "game_session", **labels})
    return -1.0 if value is None else value


async def _wait_rows(node: Node, predicate: Any) -> list[Any]:
    async def poll() -> list[Any]:
        while True:
            rows = await _rows(node)
            if predicate(rows):
                return rows
            node.api.deliverer.wake()
            await asyncio.sleep(0.02)
    return await asyncio.wait_for(poll(), 15)


async def test_delivered_once_across_a_crash(cluster: Cluster) -> None:
    # the first replica's calls never get through (the wallet is down), then it crashes
    cluster.outbound.fail = [grpc.StatusCode.UNAVAILABLE] * 1000
    a = await cluster.start()
    ended = await _finish(cluster, a, "bets", mode=common_pb2.TABLE_MODE_COMPETITIVE, bet_chips=100)
    rows = await _wait_rows(a, lambda rows: len(rows) == 2 and all(r.attempts >= 1 for r in rows))
    assert [(r.target, r.state) for r in rows] == [("wallet.Settle", "pending"), ("ranking.RecordMatch", "pending")]
    assert _gauge(a.api.deps.registry, "buraco_outbox_pending", target="wallet.Settle") in (0.0, 1.0)
    a.api.manager.release_on_stop = False
    await cluster.stop(a)
    assert cluster.outbound.calls == []

    # another replica delivers what the dead one owed, once
    cluster.outbound.fail = []
    cluster.clock.advance(60)  # past the retry delay (and any claim the dead replica held)
    b = await cluster.start(settings(outbox_retry_seconds=0.01))
    rows = await _wait_rows(b, lambda rows: all(r.state == "delivered" for r in rows))
    assert sorted(t for t, _ in cluster.outbound.calls) == ["ranking.RecordMatch", "wallet.Settle"]
    settle = wallet_pb2.SettleRequest.FromString(dict(cluster.outbound.calls)["wallet.Settle"])
    assert settle.match_id == "m-bets" and settle.request_id == "m-bets" and settle.first_seat == 0
    assert [(o.player, o.outcome) for o in settle.outcomes] == [
        (o.player, o.outcome) for o in ended.outcomes] == [
        ("players/alice", common_pb2.OUTCOME_ABANDONED), ("players/bob", common_pb2.OUTCOME_ABANDONED)]
    record = ranking_pb2.RecordMatchRequest.FromString(dict(cluster.outbound.calls)["ranking.RecordMatch"])
    assert record.match_id == "m-bets" and not record.annulled and len(record.participants) == 2
    assert [p.score for p in record.participants] == [ended.match_scores[0], ended.match_scores[1]]
    await b.api.deliverer.deliver_due()
    assert len(cluster.outbound.calls) == 2  # nothing delivered twice
    await b.api.deliverer.refresh_gauges()
    assert _gauge(b.api.deps.registry, "buraco_outbox_pending", target="wallet.Settle") == 0.0
    assert _gauge(b.api.deps.registry, "buraco_outbox_oldest_pending_seconds") == 0.0


async def test_a_permanent_refusal_is_kept_for_a_person(cluster: Cluster) -> None:
    cluster.outbound.fail = [grpc.StatusCode.FAILED_PRECONDITION]
    node = await cluster.start()
    await _finish(cluster, node, "refused", mode=common_pb2.TABLE_MODE_COMPETITIVE, bet_chips=10)
    rows = await _wait_rows(node, lambda rows: len(rows) == 2 and all(r.state != "pending" for r in rows))
    assert [(r.target, r.state) for r in rows] == [("wallet.Settle", "failed"), ("ranking.RecordMatch", "delivered")]
    assert "FAILED_PRECONDITION" in rows[0].last_error
    await node.api.deliverer.refresh_gauges()
    assert _gauge(node.api.deps.registry, "buraco_outbox_failed", target="wallet.Settle") == 1.0


async def test_practice_tables_owe_nothing_and_free_competitive_ones_skip_the_wallet(cluster: Cluster) -> None:
    node = await cluster.start()
    await _finish(cluster, node, "practice")
    await _finish(cluster, node, "free", mode=common_pb2.TABLE_MODE_COMPETITIVE)
    rows = await _wait_rows(node, lambda rows: len(rows) == 1 and rows[0].state == "delivered")
    assert [r.target for r in rows] == ["ranking.RecordMatch"]
