"""A rolling update of three game-session replicas with tables in play: each table changes owner at
most once (docs/game-session.md, "Rolling updates"), and every match still finishes and settles once.

The replicas run in-process on one database with the tests' clock: the bots that play the tables
move one action per second of that clock, so the tables are in play for the whole rollout. The
update replaces the replicas one after another as a StatefulSet does (highest first, each new one
at the address of the one it replaces, running the new revision); between two steps every replica
scans for tables to take over, in the order that moves a table twice when nothing prevents it (the
next replica to stop scans first). Without a handoff wait (the control) some table does move
twice; with it, none does.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from buraco.v1 import common_pb2, wallet_pb2
from services.game_session import models
from tests.services.game_session.conftest import Cluster, Node, left_to_bots, settings
from tests.services.harness import free_port

TABLES_PER_REPLICA = 2



async def _owners(node: Node) -> dict[str, tuple[str, int]]:
    """{table id: (owner address, epoch)} of every lease."""
    async with node.api.deps.db.transaction() as session:
        rows = (await session.execute(select(models.leases))).all()
    return {row.table_id: (row.owner_address, int(row.epoch)) for row in rows}


async def _start(cluster: Cluster, port: int, revision: str, wait: float) -> Node:
    return await cluster.start(settings(bot_delay_seconds=1.0, revision=revision, handoff_wait_seconds=wait),
                               port=port)


async def _bots_play(cluster: Cluster, node: Node, table_id: str) -> None:
    """A staked table whose two players join and leave at once: bots play both seats from then on."""
    for stream in await left_to_bots(cluster, node, table_id, mode=common_pb2.TABLE_MODE_COMPETITIVE, bet_chips=10):
        await stream.close()


async def _scan(nodes: list[Node]) -> None:
    for node in nodes:
        await node.api.tables.renew_and_scan()


async def _rollout(cluster: Cluster, wait: float) -> dict[str, list[tuple[str, int]]]:
    """Three replicas of revision r1 with tables in play, replaced one by one by revision r2; every
    table's owners in turn, as (address, epoch): a takeover raises the epoch, also by the replacement
    at the same address."""
    ports = [free_port() for _ in range(3)]
    nodes = [await _start(cluster, port, "r1", wait) for port in ports]
    tables = [f"t{n}-{k}" for n in range(3) for k in range(TABLES_PER_REPLICA)]
    for index, table_id in enumerate(tables):
        await _bots_play(cluster, nodes[index // TABLES_PER_REPLICA], table_id)
    history = {table_id: [owner] for table_id, owner in (await _owners(nodes[0])).items()}
    assert sorted(history) == sorted(tables)

    new: set[int] = set()  # the indexes already replaced by revision r2

    async def step(seconds: float) -> None:
        """The clock moves (the bots play), every replica scans, and the owners are noted. The
        replicas still on r1 scan first, the next to stop (the highest index left) first of all."""
        cluster.clock.advance(seconds)
        order = [i for i in (2, 1, 0) if i not in new] + sorted(new)
        await _scan([nodes[i] for i in order if nodes[i] in cluster.nodes])
        for table_id, owner in (await _owners(cluster.nodes[0])).items():
            if history[table_id][-1] != owner:
                history[table_id].append(owner)

    await step(3)
    for replaced in (2, 1, 0):  # a StatefulSet replaces its pods from the highest ordinal down
        await cluster.stop(nodes[replaced])
        await step(2)
        nodes[replaced] = await _start(cluster, ports[replaced], "r2", wait)
        new.add(replaced)
        await step(2)
    assert all(await _live(cluster.nodes[0])), "every table was in play for the whole rollout"
    for _ in range(600):  # the bots play the matches to their end
        await step(1)
        if all(not row for row in await _live(cluster.nodes[0])):
            break
    return history


async def _live(node: Node) -> list[bool]:
    async with node.api.deps.db.transaction() as session:
        rows = (await session.execute(select(models.leases.c.live))).all()
    return [bool(row.live) for row in rows]


async def _delivered(cluster: Cluster) -> list[tuple[str, str]]:
    """(target, match id) of every outbox delivery, once every replica has delivered what it owes."""
    for node in cluster.nodes:
        await node.api.deliverer.deliver_due()
    out: list[tuple[str, str]] = []
    for target, data in cluster.outbound.calls:
        request: Any = (wallet_pb2.VoidRequest if target == "wallet.Void" else wallet_pb2.SettleRequest
                        if target == "wallet.Settle" else None)
        match = request.FromString(data).match_id if request is not None else ""
        out.append((target, match))
    return out


async def test_a_rolling_update_moves_each_table_once_and_every_match_settles_once(cluster: Cluster) -> None:
    history = await _rollout(cluster, wait=30.0)
    for table_id, owners in history.items():
        # once: to a replica of the new revision (the one at its owner's address, or one replaced before)
        assert len(owners) == 2, f"{table_id} changed owner {len(owners) - 1} times: {owners}"
        assert owners[1][1] == owners[0][1] + 1
    # every table finished (bots played it to its end at whichever replica owned it)
    assert not any(await _live(cluster.nodes[0]))
    money = [match for target, match in await _delivered(cluster) if target.startswith("wallet.")]
    assert sorted(money) == sorted(f"m-{table_id}" for table_id in history), "each match settles exactly once"
    records = [target for target, _ in cluster.outbound.calls if target == "ranking.RecordMatch"]
    assert len(records) == len(history)


async def test_without_a_handoff_wait_a_rolling_update_moves_some_table_twice(cluster: Cluster) -> None:
    """The control: the same rollout with the tables taken by whichever replica scans first."""
    history = await _rollout(cluster, wait=0.0)
    assert max(len(owners) for owners in history.values()) >= 3


async def test_a_released_table_goes_to_any_replica_once_the_wait_is_over(cluster: Cluster) -> None:
    """A scale-down: no replica of another revision comes, and none at the stopped one's address."""
    a = await _start(cluster, free_port(), "r1", 30.0)
    b = await _start(cluster, free_port(), "r1", 30.0)
    await _bots_play(cluster, a, "t-scale")
    await cluster.stop(a)
    cluster.clock.advance(5)
    await b.api.tables.renew_and_scan()
    assert (await _owners(b))["t-scale"][0] == a.address  # held back for a replacement
    cluster.clock.advance(30)
    await b.api.tables.renew_and_scan()
    assert (await _owners(b))["t-scale"][0] == b.address
