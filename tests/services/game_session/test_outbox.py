"""The outbox on both databases: a match end's calls are delivered once, across a crash between
the commit and the call; transient failures are retried, permanent refusals kept for a person;
practice tables owe nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp
from prometheus_client import CollectorRegistry
from sqlalchemy import select

from buraco.v1 import (
    common_pb2,
    game_session_pb2,
    ranking_pb2,
    ranking_pb2_grpc,
    tournament_pb2,
    wallet_pb2,
    wallet_pb2_grpc,
)
from services.common.auth import Kind
from services.game_session import models
from services.game_session.log import Entry
from services.game_session.table import LiveTable
from tests.conftest import DatabaseTarget
from tests.services.game_session.conftest import (
    Cluster,
    Node,
    left_to_bots,
    options,
    seats,
    settings,
)
from tests.services.harness import bearer, dev_minter, make_config, running


async def _finish(
    cluster: Cluster, node: Node, table_id: str, tournament: str = "", **opts: Any
) -> game_session_pb2.MatchEnded:
    """Both players leave at once; the bots finish the (express) match."""
    streams = await left_to_bots(cluster, node, table_id, tournament, **opts)
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
    # both players left, so nobody is left to win: the stakes are voided, the abandoners penalised
    assert [(r.target, r.state) for r in rows] == [("wallet.Void", "pending"), ("ranking.RecordMatch", "pending")]
    await a.api.deliverer.refresh_gauges()
    assert _gauge(a.api.deps.registry, "buraco_outbox_pending", target="wallet.Void") == 1.0
    a.api.tables.release_on_stop = False
    await cluster.stop(a)
    assert cluster.outbound.calls == []

    # another replica delivers what the dead one owed, once
    cluster.outbound.fail = []
    cluster.clock.advance(60)  # past the retry delay (and any claim the dead replica held)
    b = await cluster.start(settings(outbox_retry_seconds=0.01))
    rows = await _wait_rows(b, lambda rows: all(r.state == "delivered" for r in rows))
    assert sorted(t for t, _ in cluster.outbound.calls) == ["ranking.RecordMatch", "wallet.Void"]
    void = wallet_pb2.VoidRequest.FromString(dict(cluster.outbound.calls)["wallet.Void"])
    assert void.match_id == "m-bets" and void.request_id == "m-bets"
    assert list(void.penalised_players) == ["players/alice", "players/bob"]
    assert [(o.player, o.outcome) for o in ended.outcomes] == [
        ("players/alice", common_pb2.OUTCOME_ABANDONED), ("players/bob", common_pb2.OUTCOME_ABANDONED)]
    record = ranking_pb2.RecordMatchRequest.FromString(dict(cluster.outbound.calls)["ranking.RecordMatch"])
    assert record.match_id == "m-bets" and not record.annulled and len(record.participants) == 2
    assert [p.score for p in record.participants] == [ended.match_scores[0], ended.match_scores[1]]
    await b.api.deliverer.deliver_due()
    assert len(cluster.outbound.calls) == 2  # nothing delivered twice
    await b.api.deliverer.refresh_gauges()
    assert _gauge(b.api.deps.registry, "buraco_outbox_pending", target="wallet.Void") == 0.0
    assert _gauge(b.api.deps.registry, "buraco_outbox_oldest_pending_seconds") == 0.0
    # the delivery delay (the settlement objective's indicator) counts from the match's end
    registry = b.api.deps.registry
    delay = "buraco_outbox_delivery_delay_seconds"
    assert _gauge(registry, f"{delay}_count", target="wallet.Void") == 1.0
    assert _gauge(registry, f"{delay}_sum", target="wallet.Void") >= 60.0
    assert _gauge(registry, f"{delay}_bucket", target="wallet.Void", le="30.0") == 0.0
    assert _gauge(registry, f"{delay}_bucket", target="wallet.Void", le="+Inf") == 1.0
    assert _gauge(a.api.deps.registry, f"{delay}_count", target="wallet.Void") == 0.0  # it delivered nothing


async def test_a_permanent_refusal_is_kept_for_a_person(cluster: Cluster) -> None:
    cluster.outbound.fail = [grpc.StatusCode.FAILED_PRECONDITION]
    node = await cluster.start()
    await _finish(cluster, node, "refused", mode=common_pb2.TABLE_MODE_COMPETITIVE, bet_chips=10)
    rows = await _wait_rows(node, lambda rows: len(rows) == 2 and all(r.state != "pending" for r in rows))
    assert [(r.target, r.state) for r in rows] == [("wallet.Void", "failed"), ("ranking.RecordMatch", "delivered")]
    assert "FAILED_PRECONDITION" in rows[0].last_error
    await node.api.deliverer.refresh_gauges()
    assert _gauge(node.api.deps.registry, "buraco_outbox_failed", target="wallet.Void") == 1.0


async def test_practice_tables_owe_nothing_and_free_competitive_ones_skip_the_wallet(cluster: Cluster) -> None:
    node = await cluster.start()
    await _finish(cluster, node, "practice")
    await _finish(cluster, node, "free", mode=common_pb2.TABLE_MODE_COMPETITIVE)
    rows = await _wait_rows(node, lambda rows: len(rows) == 1 and rows[0].state == "delivered")
    assert [r.target for r in rows] == ["ranking.RecordMatch"]


async def test_a_tournament_table_reports_its_result_to_the_tournament(cluster: Cluster) -> None:
    node = await cluster.start()
    ended = await _finish(cluster, node, "cup", tournament="tournaments/cup1", mode=common_pb2.TABLE_MODE_COMPETITIVE)
    rows = await _wait_rows(node, lambda rows: len(rows) == 2 and all(r.state == "delivered" for r in rows))
    assert [r.target for r in rows] == ["tournament.ReportMatchResult", "ranking.RecordMatch"]
    report = tournament_pb2.ReportMatchResultRequest.FromString(
        dict(cluster.outbound.calls)["tournament.ReportMatchResult"])
    assert (report.tournament, report.match_id, report.request_id) == ("tournaments/cup1", "m-cup", "m-cup")
    assert list(report.outcomes) == list(ended.outcomes)
    assert list(report.match_scores) == list(ended.match_scores)


async def test_the_real_wallet_and_ranking_accept_what_a_match_end_owes(
    db_target: DatabaseTarget, tmp_path: Path
) -> None:
    """A competitive match played to its end (the players' moves chosen by engine bots, in the
    players' name): the outbox's Settle pays the real wallet's winner, RecordMatch records both."""
    from services.game_session.outbox import outbox_requests
    from services.ranking.service import SPEC as RANKING
    from services.wallet.service import SPEC as WALLET

    table = _bot_table()
    out: list[Entry] = []
    table.start_hand(1_000, "seed", out)
    table.after_change(1_000, "seed", out)
    while table.live:
        hand = table.match.hand
        assert hand is not None
        seat = hand.to_act
        table.apply_action(table.bot(seat).choose(hand.view(seat), hand.legal_actions()), seat, "player", 2_000, out)
        table.after_change(2_000, "seed", out)
    owed = dict(outbox_requests(table, out, int(time.time() * 1000) - 60_000))
    assert sorted(owed) == ["ranking.RecordMatch", "wallet.Settle"]
    winner = "alice" if table.match.winner == 0 else "bob"
    loser = "bob" if winner == "alice" else "alice"

    minter = dev_minter(tmp_path / "dev-keys")
    token = bearer(minter.mint(Kind.SERVICE, "game-session"))
    database = {"database_url": db_target.url, "database_schema": db_target.schema}
    async with (
        running(WALLET, make_config("wallet", tmp_path, **database)) as wallet_server,
        running(RANKING, make_config("ranking", tmp_path, **database)) as ranking_server,
        grpc.aio.insecure_channel(wallet_server.address) as wc,
        grpc.aio.insecure_channel(ranking_server.address) as rc,
    ):
        wallet: Any = wallet_pb2_grpc.WalletServiceStub(wc)
        ranking: Any = ranking_pb2_grpc.RankingServiceStub(rc)
        opener = bearer(minter.mint(Kind.ADMIN, "ops"))  # an admin opens accounts, no service
        for player in ("alice", "bob"):
            await wallet.CreateAccount(wallet_pb2.CreateAccountRequest(
                request_id=f"open-{player}", player=f"players/{player}"), metadata=opener)
        before = {p: (await wallet.GetAccount(wallet_pb2.GetAccountRequest(name=f"accounts/player-{p}"),
                                              metadata=token)).balance_chips for p in ("alice", "bob")}
        await wallet.HoldBets(wallet_pb2.HoldBetsRequest(  # matchmaking holds the stakes it seats
            request_id="hold", match_id="m-real",
            stakes=[wallet_pb2.Stake(player=f"players/{p}", amount_chips=100) for p in ("alice", "bob")],
        ), metadata=bearer(minter.mint(Kind.SERVICE, "matchmaking")))
        settle = wallet_pb2.SettleRequest.FromString(owed["wallet.Settle"])
        for _ in range(2):  # a repeated delivery is answered, not applied again
            paid = await wallet.Settle(settle, metadata=token)
            assert paid.pot_chips == 200 and paid.house_cut_chips == 40
        after = {p: (await wallet.GetAccount(wallet_pb2.GetAccountRequest(name=f"accounts/player-{p}"),
                                             metadata=token)).balance_chips for p in ("alice", "bob")}
        assert after[winner] == before[winner] + 60 and after[loser] == before[loser] - 100
        record = ranking_pb2.RecordMatchRequest.FromString(owed["ranking.RecordMatch"])
        recorded = await ranking.RecordMatch(record, metadata=token)
        assert [r.player for r in recorded.results] == ["players/alice", "players/bob"]
        assert all(r.xp_gained > 0 for r in recorded.results)


def _bot_table() -> LiveTable:
    description = game_session_pb2.Table(
        name="tables/real", match_id="m-real", seats=seats("alice", "bob"),
        options=options(mode=common_pb2.TABLE_MODE_COMPETITIVE, bet_chips=100),
    )
    return LiveTable("real", description, 1_000)


async def test_a_claim_of_a_replica_that_is_gone_is_taken_at_once(cluster: Cluster) -> None:
    """A row claimed by a replica whose heartbeat ran out, or by an earlier process at this
    replica's own address (a restart), is delivered now; one claimed by a replica that serves is
    left to it until its claim runs out."""
    node = await cluster.start()
    await node.api.deliverer.stop()  # the test delivers: the node's own pass would race it for the rows
    now = int(cluster.clock.now() * 1000)
    request = wallet_pb2.VoidRequest(request_id="m", match_id="m").SerializeToString()
    claimants = {
        "gone": ("10.0.0.9:50052", now - 1),  # heartbeat ran out
        "restarted": (node.address, now + 60_000),  # the previous process at this address
        "serving": ("10.0.0.8:50052", now + 60_000),
    }
    async with node.api.deps.db.transaction() as session:
        for owner, (address, expires) in claimants.items():
            await session.execute(models.replicas.insert().values(owner_id=owner, address=address, expires_ms=expires))
            await session.execute(models.outbox.insert().values(
                table_id=f"t-{owner}", target="wallet.Void", request=request, state="pending", attempts=1,
                next_attempt_ms=now + 30_000, created_ms=now, last_error="", claimed_by=owner))
    assert await node.api.deliverer.deliver_due() == 2
    rows = {row.table_id: row for row in await _rows(node)}
    assert {t: r.state for t, r in rows.items()} == {"t-gone": "delivered", "t-restarted": "delivered",
                                                     "t-serving": "pending"}
    assert rows["t-gone"].claimed_by == node.api.tables.owner_id
    assert rows["t-serving"].claimed_by == "serving"
    assert [target for target, _ in cluster.outbound.calls] == ["wallet.Void", "wallet.Void"]


def _record_row(match_id: str, now: int) -> dict[str, Any]:
    request = ranking_pb2.RecordMatchRequest(request_id=match_id, match_id=match_id).SerializeToString()
    return dict(table_id=f"t-{match_id}", target="ranking.RecordMatch", request=request, state="pending", attempts=0,
                next_attempt_ms=now, created_ms=now, last_error="", claimed_by="")


async def _insert(node: Node, rows: list[dict[str, Any]]) -> None:
    async with node.api.deps.db.transaction() as session:
        for row in rows:
            await session.execute(models.outbox.insert().values(**row))


async def test_ranking_rows_go_together_each_marked_by_its_own_record(cluster: Cluster) -> None:
    """The RecordMatch rows due go in one RecordMatches call, in row order, where a wallet row
    between them goes alone; each row is then marked by its own record's result: delivered,
    refused for good (a person's), or kept for a retry."""
    node = await cluster.start()
    await node.api.deliverer.stop()  # the test delivers
    now = int(cluster.clock.now() * 1000)
    void = wallet_pb2.VoidRequest(request_id="w", match_id="w").SerializeToString()
    await _insert(node, [
        _record_row("r1", now),
        dict(table_id="t-w", target="wallet.Void", request=void, state="pending", attempts=0, next_attempt_ms=now,
             created_ms=now, last_error="", claimed_by=""),
        _record_row("r2", now), _record_row("r3", now), _record_row("r4", now),
    ])
    cluster.outbound.refuse = [None, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.UNAVAILABLE, None]
    assert await node.api.deliverer.deliver_due() == 3
    assert cluster.outbound.batches == [4]
    delivered = [(target, ranking_pb2.RecordMatchRequest.FromString(data).match_id if target.startswith("ranking")
                  else "w") for target, data in cluster.outbound.calls]
    assert delivered == [("ranking.RecordMatch", "r1"), ("ranking.RecordMatch", "r4"), ("wallet.Void", "w")]
    rows = {row.table_id: row for row in await _rows(node)}
    assert {t: (r.state, r.attempts) for t, r in rows.items()} == {
        "t-r1": ("delivered", 1), "t-w": ("delivered", 1), "t-r2": ("failed", 1), "t-r3": ("pending", 1),
        "t-r4": ("delivered", 1)}
    assert rows["t-r2"].last_error == "ALREADY_EXISTS: fake ALREADY_EXISTS"
    assert rows["t-r3"].next_attempt_ms > now
    # The row kept for a retry goes again once due, alone now.
    cluster.clock.advance(60)
    assert await node.api.deliverer.deliver_due() == 1
    assert cluster.outbound.batches == [4, 1]
    assert (await _rows(node))[3].state == "delivered"


async def test_a_ranking_without_record_matches_gets_the_rows_one_by_one(cluster: Cluster) -> None:
    """A ranking older than this replica answers RecordMatches with UNIMPLEMENTED: the same rows go
    then as RecordMatch calls, each marked by its own; a batch that fails otherwise marks every row
    of it alike (kept for a retry here)."""
    node = await cluster.start()
    await node.api.deliverer.stop()
    now = int(cluster.clock.now() * 1000)
    await _insert(node, [_record_row("u1", now), _record_row("u2", now)])
    cluster.outbound.fail = [grpc.StatusCode.UNAVAILABLE]
    assert await node.api.deliverer.deliver_due() == 0
    assert [(r.state, r.last_error) for r in await _rows(node)] == [("pending", "UNAVAILABLE: fake UNAVAILABLE")] * 2
    cluster.clock.advance(60)
    cluster.outbound.fail = [grpc.StatusCode.UNIMPLEMENTED]
    assert await node.api.deliverer.deliver_due() == 2
    assert cluster.outbound.batches == []
    assert [ranking_pb2.RecordMatchRequest.FromString(data).match_id for _, data in cluster.outbound.calls] == [
        "u1", "u2"]
    assert [(r.state, r.attempts) for r in await _rows(node)] == [("delivered", 2)] * 2


async def test_the_real_ranking_records_the_rows_of_a_batched_call_each_once(
    db_target: DatabaseTarget, tmp_path: Path
) -> None:
    """`grpc_batch_calls` against the real ranking: each row's record recorded, an invalid one
    refused alone (INVALID_ARGUMENT, a person's); the same rows again (a redelivery after a crash)
    answered record by record without recording anything twice."""
    from services.game_session.outbox import PERMANENT, Refusal, grpc_batch_calls
    from services.ranking.service import SPEC as RANKING

    minter = dev_minter(tmp_path / "dev-keys")
    token = bearer(minter.mint(Kind.SERVICE, "game-session"))
    end = int(time.time()) - 60
    owed = []
    for index in range(3):
        record = ranking_pb2.RecordMatchRequest(
            request_id=f"b{index}", match_id=f"b{index}", end_time=Timestamp(seconds=end),
            options=options(mode=common_pb2.TABLE_MODE_COMPETITIVE, players=2),
            participants=[
                ranking_pb2.RecordMatchRequest.Participant(player="players/alice", seat=0,
                                                           outcome=common_pb2.OUTCOME_WON, score=900),
                ranking_pb2.RecordMatchRequest.Participant(player="players/bob", seat=1 if index != 1 else 5,
                                                           outcome=common_pb2.OUTCOME_LOST, score=300),
            ],
        )
        owed.append(record.SerializeToString())
    async with (
        running(RANKING, make_config("ranking", tmp_path, database_url=db_target.url,
                                     database_schema=db_target.schema)) as ranking_server,
        grpc.aio.insecure_channel(ranking_server.address) as channel,
    ):
        stub = ranking_pb2_grpc.RankingServiceStub(channel)

        class Ranking:  # what `Clients.ranking` does: the service's token on every call
            async def RecordMatches(self, request: Any, timeout: float) -> Any:
                return await stub.RecordMatches(request, metadata=token, timeout=timeout)

        class Clients:
            ranking = Ranking()

        record_many = grpc_batch_calls(Clients())["ranking.RecordMatch"]  # type: ignore[arg-type]
        for _ in range(2):
            refusals = await record_many(owed)
            assert refusals[0] is None and refusals[2] is None
            assert isinstance(refusals[1], Refusal) and refusals[1].code in PERMANENT
            assert refusals[1].details.startswith("participants[1].seat:")
        profile = await stub.GetPlayer(ranking_pb2.GetPlayerRequest(name="players/alice"), metadata=token)
        assert (profile.stats.matches, profile.xp) == (2, 40)  # two express wins, once each
