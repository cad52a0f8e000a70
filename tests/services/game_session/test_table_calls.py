"""The game-session API's table calls on both databases: CreateTable (idempotent, its errors, the
one-statement path on PostgreSQL writing what the general path writes), GetTable, ListTables
(pages, players, permissions) and CancelTable, and who may create and cancel tables."""

from __future__ import annotations

from typing import Any

import grpc
from sqlalchemy import select

from buraco.v1 import common_pb2, game_session_pb2
from services.common.auth import Identity, Kind
from services.game_session import models
from tests.services.callers import denied, outcome
from tests.services.game_session.conftest import Cluster, rpc_error, started, subscribe, table_request


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
    assert (await rpc_error(stub.CreateTable(other, metadata=svc))).code() == grpc.StatusCode.ALREADY_EXISTS
    same_match = table_request("t9", "alice", "bob", match_id="m-t1")
    assert (await rpc_error(stub.CreateTable(same_match, metadata=svc))).code() == grpc.StatusCode.ALREADY_EXISTS
    as_player = stub.CreateTable(table_request("t2", "alice", "bob"), metadata=cluster.token(Kind.PLAYER, "alice"))
    assert (await rpc_error(as_player)).code() == grpc.StatusCode.PERMISSION_DENIED
    bots = table_request("t3", "alice", "bot", mode=common_pb2.TABLE_MODE_COMPETITIVE)
    error = await rpc_error(stub.CreateTable(bots, metadata=svc))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "practice" in (error.details() or "")
    bad_rules = table_request("t4", "alice", "bob")
    bad_rules.table.options.ruleset.overrides["no_such_rule"] = "1"
    assert (await rpc_error(stub.CreateTable(bad_rules, metadata=svc))).code() == grpc.StatusCode.INVALID_ARGUMENT
    for table_id in ("t5", "t6"):
        await stub.CreateTable(table_request(table_id, "carol", "dave"), metadata=svc)

    got = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/t1"),
                              metadata=cluster.token(Kind.PLAYER, "alice"))
    assert got.match_id == "m-t1" and [s.participant.player for s in got.seats] == ["players/alice", "players/bob"]
    refused = stub.GetTable(game_session_pb2.GetTableRequest(name="tables/t1"),
                            metadata=cluster.token(Kind.PLAYER, "carol"))
    assert (await rpc_error(refused)).code() == grpc.StatusCode.PERMISSION_DENIED
    missing = stub.GetTable(game_session_pb2.GetTableRequest(name="tables/nope"), metadata=svc)
    assert (await rpc_error(missing)).code() == grpc.StatusCode.NOT_FOUND

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
    assert (await rpc_error(nosy)).code() == grpc.StatusCode.PERMISSION_DENIED

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
    assert (await rpc_error(late)).code() == grpc.StatusCode.FAILED_PRECONDITION


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
    assert (await rpc_error(stub.CreateTable(reused, metadata=svc))).code() == grpc.StatusCode.ALREADY_EXISTS
    clash = table_request("other", "alice", "bob", match_id="m-fast")  # a new key, a match that exists
    error = await rpc_error(stub.CreateTable(clash, metadata=svc))
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS and "m-fast" in (error.details() or "")
    assert (await stored("other"))["tables"] == []
    assert wrote == ([True, False, False, False] if at_once else [])  # the rest: the general path
    await started(cluster, "fast", "alice", "bob")  # the table created in one statement plays


async def test_only_the_services_that_seat_players_create_and_cancel_tables(cluster: Cluster) -> None:
    """docs/contracts.md, "Who may call what": CreateTable and CancelTable are matchmaking's and
    the tournaments'; anyone else is refused by name and changes nothing."""
    await cluster.start()
    stub = cluster.stub()
    tournament, matchmaking = cluster.token(Kind.SERVICE, "tournament"), cluster.token(Kind.SERVICE, "matchmaking")
    others = [(Kind.SERVICE, "game-session"), (Kind.SERVICE, "ranking"), (Kind.SERVICE, "wallet"),
              (Kind.ADMIN, "ops"), (Kind.PLAYER, "alice")]
    who = "services/matchmaking or services/tournament"
    for kind, name in others:
        create = stub.CreateTable(table_request("t1", "alice", "bob"), metadata=cluster.token(kind, name))
        assert await outcome(create) == denied(
            Identity(kind, name).principal, "GameSessionService.CreateTable", who), (kind, name)
    nothing = stub.GetTable(game_session_pb2.GetTableRequest(name="tables/t1"), metadata=matchmaking)
    assert (await rpc_error(nothing)).code() == grpc.StatusCode.NOT_FOUND
    assert (await stub.CreateTable(table_request("t1", "alice", "bob"), metadata=tournament)).name == "tables/t1"
    assert (await stub.CreateTable(table_request("t2", "carol", "dave"), metadata=matchmaking)).name == "tables/t2"

    for kind, name in others:
        cancel = game_session_pb2.CancelTableRequest(name="tables/t1", request_id=f"no-{name}")
        assert await outcome(stub.CancelTable(cancel, metadata=cluster.token(kind, name))) == denied(
            Identity(kind, name).principal, "GameSessionService.CancelTable", who), (kind, name)
    still = await stub.GetTable(game_session_pb2.GetTableRequest(name="tables/t1"), metadata=matchmaking)
    assert still.state == game_session_pb2.Table.STATE_WAITING
    for table, token in (("tables/t1", tournament), ("tables/t2", matchmaking)):
        cancel = game_session_pb2.CancelTableRequest(name=table, request_id=f"cancel-{table}")
        assert (await stub.CancelTable(cancel, metadata=token)).state == game_session_pb2.Table.STATE_CANCELLED
