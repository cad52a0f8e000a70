"""EraseLoadTestRun on both databases: a run's ended tables (found by their seats, bot seats
allowed) go with their logs, seats, leases, outbox rows and mutes, on the replica that served
them at once and on the others at their next scan; a run with a table in play, owing a delivery,
or shared with a player outside the run is refused with nothing erased; admins only."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pytest
from sqlalchemy import func, select

from buraco.v1 import common_pb2, game_session_pb2
from services.common.auth import Kind
from services.game_session import models
from tests.services.game_session.conftest import Cluster, Node, rpc_error, subscribe, table_request

#: every table keyed by table id, and the column naming it
KEYED = ((models.tables, "id"), (models.seats, "table_id"), (models.leases, "table_id"),
         (models.events, "table_id"), (models.outbox, "table_id"), (models.mutes, "table_id"))
COMPETITIVE: dict[str, Any] = {"mode": common_pb2.TABLE_MODE_COMPETITIVE, "bet_chips": 10}


def _erase(run: str, request_id: str, dry_run: bool = False) -> common_pb2.EraseLoadTestRunRequest:
    return common_pb2.EraseLoadTestRunRequest(request_id=request_id, run_id=run, dry_run=dry_run)


def _counts(reply: common_pb2.EraseLoadTestRunResponse) -> dict[str, int]:
    return {e.kind: e.count for e in reply.erased}


async def _finished(cluster: Cluster, node: Node, table_id: str, *who: str, **opts: Any) -> int:
    """A table at `node` whose players join and, once the deal is in, leave: bots play it to the
    end. Its last seq."""
    stub = cluster.stub(node)
    await stub.CreateTable(table_request(table_id, *who, **opts), metadata=cluster.token(Kind.SERVICE, "matchmaking"))
    players = [p for p in who if p != "bot"]
    streams = [subscribe(stub, cluster.token(Kind.PLAYER, p), f"tables/{table_id}") for p in players]
    for stream in streams:
        await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    for player in players:
        await stub.LeaveTable(game_session_pb2.LeaveTableRequest(table=f"tables/{table_id}", request_id="leave"),
                              metadata=cluster.token(Kind.PLAYER, player))
    await streams[0].wait(lambda events: any(e.HasField("match_ended") for e in events), timeout=60)
    for stream in streams:
        await stream.close()
    return streams[0].last_seq


async def _rows(node: Node, table_id: str) -> dict[str, int]:
    """How many rows of each table name `table_id`."""
    counts = {}
    async with node.api.deps.db.read() as session:
        for table, column in KEYED:
            found = await session.execute(select(func.count()).where(table.c[column] == table_id))
            counts[table.name] = int(found.scalar_one())
    return counts


async def _delivered(node: Node, *table_ids: str) -> None:
    """Wait until the tables' outbox rows are all delivered."""
    outbox = models.outbox

    async def poll() -> None:
        while True:
            async with node.api.deps.db.read() as session:
                states = (await session.execute(
                    select(outbox.c.state).where(outbox.c.table_id.in_(table_ids)))).scalars().all()
            if states and all(state == "delivered" for state in states):
                return
            node.api.deliverer.wake()
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), 15)


async def test_a_finished_run_is_erased_everywhere(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """Run `lt1`: a staked match played to its end (outbox delivered, a mute recorded), a practice
    table with a bot seat, a cancelled table; tables named as matchmaking names them. Another
    run's table (`lt1-5-3` is a player of run `lt1-5`) and alice's stay. Replica `a` served the
    matches, replica `b` has read one of them; the erasure is asked of `a`."""
    a = await cluster.start()
    b = await cluster.start()
    stub, admin = cluster.stub(a), cluster.token(Kind.ADMIN, "ops")
    seqs = {
        "9f2c41d0": await _finished(cluster, a, "9f2c41d0", "lt1-0", "lt1-1", **COMPETITIVE),
        "b77e0a13": await _finished(cluster, a, "b77e0a13", "bot", "lt1-2"),
    }
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    await stub.CreateTable(table_request("c0ffee00", "lt1-3", "lt1-4"), metadata=svc)
    await stub.CancelTable(game_session_pb2.CancelTableRequest(name="tables/c0ffee00", request_id="no"), metadata=svc)
    kept = {"other-run": await _finished(cluster, a, "other-run", "lt1-5-3", "bot"),
            "alice": await _finished(cluster, a, "alice", "alice", "bot")}
    await stub.MuteChat(game_session_pb2.MuteChatRequest(table="tables/9f2c41d0", request_id="mute",
                                                         player="players/lt1-1", muted=True),
                        metadata=cluster.token(Kind.PLAYER, "lt1-0"))
    await _delivered(a, "9f2c41d0")
    erased = ["9f2c41d0", "b77e0a13", "c0ffee00"]
    before = {table_id: await _rows(a, table_id) for table_id in erased}
    assert before["9f2c41d0"]["game_session_outbox"] == 2 and before["9f2c41d0"]["game_session_mutes"] == 1
    assert before["b77e0a13"]["game_session_seats"] == 1  # a bot seat has no row
    on_b = await cluster.stub(b).GetTable(game_session_pb2.GetTableRequest(name="tables/9f2c41d0"), metadata=admin)
    assert on_b.state == game_session_pb2.Table.STATE_FINISHED and "9f2c41d0" in b.api.tables.actors

    expected = {"tables": 3, "events": seqs["9f2c41d0"] + seqs["b77e0a13"] + 1, "outbox": 2}
    dry = await stub.EraseLoadTestRun(_erase("lt1", "dry", dry_run=True), metadata=admin)
    assert (dry.run_id, dry.dry_run, _counts(dry)) == ("lt1", True, expected)
    assert [e.kind for e in dry.erased] == ["tables", "events", "outbox"]
    assert {table_id: await _rows(a, table_id) for table_id in erased} == before  # a dry run erases nothing

    caplog.set_level(logging.INFO, logger="buraco.game_session")
    reply = await stub.EraseLoadTestRun(_erase("lt1", "erase"), metadata=admin)
    assert (reply.dry_run, _counts(reply)) == (False, expected)
    logged = [getattr(r, "fields", {}) for r in caplog.records if r.getMessage() == "load-test run erased"]
    assert logged == [{"run": "lt1", "by": "admins/ops", **expected}]
    for table_id in erased:
        assert set((await _rows(a, table_id)).values()) == {0}
        assert table_id not in a.api.tables.actors
    for table_id, seq in kept.items():  # untouched
        got = await stub.GetTable(game_session_pb2.GetTableRequest(name=f"tables/{table_id}"), metadata=admin)
        assert got.seq == seq

    # the replica that served them: not found, not listed
    for table_id in erased:
        missing = stub.GetTable(game_session_pb2.GetTableRequest(name=f"tables/{table_id}"), metadata=admin)
        assert (await rpc_error(missing)).code() == grpc.StatusCode.NOT_FOUND
        export = stub.ExportRecords(game_session_pb2.ExportRecordsRequest(table=f"tables/{table_id}"), metadata=admin)
        assert (await rpc_error(export)).code() == grpc.StatusCode.NOT_FOUND
    listed = await stub.ListTables(game_session_pb2.ListTablesRequest(page_size=100), metadata=admin)
    assert sorted(t.name for t in listed.tables) == ["tables/alice", "tables/other-run"]
    mine = await stub.ListTables(game_session_pb2.ListTablesRequest(), metadata=cluster.token(Kind.PLAYER, "lt1-0"))
    assert list(mine.tables) == []

    # another replica: its copy takes no new row (a mute is refused), and goes at its next scan
    stub_b = cluster.stub(b)
    mute = stub_b.MuteChat(game_session_pb2.MuteChatRequest(table="tables/9f2c41d0", request_id="mute2",
                                                            player="players/lt1-1", muted=True), metadata=admin)
    assert (await rpc_error(mute)).code() == grpc.StatusCode.NOT_FOUND
    assert (await _rows(b, "9f2c41d0"))["game_session_mutes"] == 0
    await b.api.tables.renew_and_scan()
    assert "9f2c41d0" not in b.api.tables.actors
    missing = stub_b.GetTable(game_session_pb2.GetTableRequest(name="tables/9f2c41d0"), metadata=admin)
    assert (await rpc_error(missing)).code() == grpc.StatusCode.NOT_FOUND
    listed = await stub_b.ListTables(game_session_pb2.ListTablesRequest(page_size=100), metadata=admin)
    assert sorted(t.name for t in listed.tables) == ["tables/alice", "tables/other-run"]

    # a retry answers as the first time; a second erasure finds nothing more
    assert await stub_b.EraseLoadTestRun(_erase("lt1", "erase"), metadata=admin) == reply
    again = await stub_b.EraseLoadTestRun(_erase("lt1", "erase-again"), metadata=admin)
    assert _counts(again) == {"tables": 0, "events": 0, "outbox": 0}


async def test_a_table_in_play_refuses_the_erasure(cluster: Cluster) -> None:
    """A run with one ended table and one in play (and one not started): refused, dry run too,
    nothing erased; once the table ended, the erasure goes through."""
    node = await cluster.start()
    stub, admin = cluster.stub(node), cluster.token(Kind.ADMIN, "ops")
    await _finished(cluster, node, "done", "lt2-0", "bot")
    svc = cluster.token(Kind.SERVICE, "matchmaking")
    await stub.CreateTable(table_request("waiting", "lt2-1", "lt2-2"), metadata=svc)
    await stub.CreateTable(table_request("playing", "lt2-3", "bot"), metadata=svc)
    stream = subscribe(stub, cluster.token(Kind.PLAYER, "lt2-3"), "tables/playing")
    await stream.wait(lambda events: any(e.HasField("turn_timer_started") for e in events))
    before = {t: await _rows(node, t) for t in ("done", "waiting", "playing")}
    for dry_run in (True, False):
        error = await rpc_error(stub.EraseLoadTestRun(_erase("lt2", f"e-{dry_run}", dry_run), metadata=admin))
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "2 tables (tables/playing, tables/waiting) not ended" in (error.details() or "")
    assert {t: await _rows(node, t) for t in before} == before
    assert "done" in node.api.tables.actors  # nothing dropped from memory either

    await stub.CancelTable(game_session_pb2.CancelTableRequest(name="tables/waiting", request_id="c"), metadata=svc)
    await stub.LeaveTable(game_session_pb2.LeaveTableRequest(table="tables/playing", request_id="bye"),
                          metadata=cluster.token(Kind.PLAYER, "lt2-3"))
    await stream.wait(lambda events: any(e.HasField("match_ended") for e in events), timeout=60)
    await stream.close()
    reply = await stub.EraseLoadTestRun(_erase("lt2", "after"), metadata=admin)
    assert _counts(reply)["tables"] == 3


async def test_a_table_shared_with_an_outsider_refuses_the_erasure(cluster: Cluster) -> None:
    """A run player who played alice: that table is not the run's to erase, and the run's other
    (ended) tables stay too until it is dealt with."""
    node = await cluster.start()
    stub, admin = cluster.stub(node), cluster.token(Kind.ADMIN, "ops")
    await _finished(cluster, node, "own", "lt3-0", "bot")
    await _finished(cluster, node, "mixed", "lt3-1", "alice")
    before = {t: await _rows(node, t) for t in ("own", "mixed")}
    error = await rpc_error(stub.EraseLoadTestRun(_erase("lt3", "e"), metadata=admin))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "1 table (tables/mixed) with players outside the run" in (error.details() or "")
    assert {t: await _rows(node, t) for t in before} == before


async def test_an_undelivered_outbox_refuses_the_erasure(cluster: Cluster) -> None:
    """A match end the wallet refused for good (a dead letter) still owes its settlement: refused."""
    cluster.outbound.fail = [grpc.StatusCode.FAILED_PRECONDITION]
    node = await cluster.start()
    stub, admin = cluster.stub(node), cluster.token(Kind.ADMIN, "ops")
    await _finished(cluster, node, "owes", "lt4-0", "lt4-1", **COMPETITIVE)
    outbox = models.outbox

    async def settled() -> None:
        while True:
            async with node.api.deps.db.read() as session:
                states = (await session.execute(select(outbox.c.state))).scalars().all()
            if len(states) == 2 and "pending" not in states:
                return
            node.api.deliverer.wake()
            await asyncio.sleep(0.02)

    await asyncio.wait_for(settled(), 15)
    error = await rpc_error(stub.EraseLoadTestRun(_erase("lt4", "e"), metadata=admin))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "1 table (tables/owes) owing deliveries" in (error.details() or "")
    assert "1 failed (dead letters" in (error.details() or "")
    assert (await _rows(node, "owes"))["game_session_events"] > 0


async def test_admins_only_and_the_run_id_checked(cluster: Cluster) -> None:
    node = await cluster.start()
    stub = cluster.stub(node)
    for caller in (cluster.token(Kind.PLAYER, "lt5-0"), cluster.token(Kind.SERVICE, "matchmaking")):
        error = await rpc_error(stub.EraseLoadTestRun(_erase("lt5", "e"), metadata=caller))
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    admin = cluster.token(Kind.ADMIN, "ops")
    for request in (_erase("lt_5", "e"), _erase("", "e"), _erase("lt5", "")):
        error = await rpc_error(stub.EraseLoadTestRun(request, metadata=admin))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    dry = await stub.EraseLoadTestRun(_erase("lt5", "e", dry_run=True), metadata=admin)
    assert _counts(dry) == {"tables": 0, "events": 0, "outbox": 0}
    empty = await stub.EraseLoadTestRun(_erase("lt5", "e"), metadata=admin)  # a dry run keeps no answer
    assert _counts(empty) == {"tables": 0, "events": 0, "outbox": 0} and not empty.dry_run
    reused = stub.EraseLoadTestRun(_erase("lt6", "e"), metadata=admin)
    assert (await rpc_error(reused)).code() == grpc.StatusCode.ALREADY_EXISTS
