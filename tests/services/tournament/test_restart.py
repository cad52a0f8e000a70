"""A tournament survives its service being killed in the middle of a round: a new process on the
same database resumes it where it was (the round's late results arrive through the game-session
service's retries), and it runs to the end with every chip accounted for."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from buraco.v1 import tournament_pb2, tournament_pb2_grpc
from services.common.auth import Kind
from tests.conftest import DatabaseTarget
from tests.services.harness import ServiceProcess, bearer, service_process
from tests.services.tournament.fakes import Plan, quick_result
from tests.services.tournament.support import (
    ManualClock,
    Platform,
    Watched,
    finished,
    players,
    tournament_service,
    watch_until,
)
from tests.services.tournament.test_tournaments import check_payouts, decided, tables_made

SETTINGS = {
    "BURACO_TOURNAMENT_TICK_SECONDS": "0.05",
    "BURACO_TOURNAMENT_POLL_SECONDS": "1",
    "BURACO_TOURNAMENT_RECONCILE_SECONDS": "5",
    "BURACO_TOURNAMENT_RESULT_GRACE_SECONDS": "60",
    "BURACO_TOURNAMENT_REPLICA_ID": "restart-test",
    "BURACO_TOURNAMENT_WATCH_POLL_SECONDS": "0.2",
    "BURACO_TOURNAMENT_CALL_TIMEOUT_SECONDS": "5",
    "BURACO_TOURNAMENT_RETRY_SECONDS": "0.2",
}


async def start_process(
    stack: contextlib.ExitStack, platform: Platform, db_target: DatabaseTarget, tmp_path: Path
) -> ServiceProcess:
    env = {
        **SETTINGS,
        **db_target.environment(),
        "BURACO_WALLET_ADDRESS": platform.addresses["wallet"],
        "BURACO_RANKING_ADDRESS": platform.addresses["ranking"],
        "BURACO_GAME_SESSION_ADDRESS": platform.addresses["game_session"],
    }
    # Started from a thread: this event loop serves the fakes the process calls meanwhile.
    process = await asyncio.to_thread(stack.enter_context, service_process("tournament", tmp_path, env))
    platform.tables.tournament_address = process.address
    return process


@pytest.mark.slow
async def test_a_restart_in_the_middle_of_a_round_resumes_the_tournament(
    platform: Platform, db_target: DatabaseTarget, tmp_path: Path
) -> None:
    everyone = players("rs", 16)
    await platform.fund(everyone, 1000)
    structure = {1: 5000, 2: 3000, 3: 1000, 4: 1000}
    # Registration happens on a clock half an hour behind, so the tournament is due to start as soon
    # as a process on the real clock looks at it.
    now = datetime.now(UTC)
    clock = ManualClock(now - timedelta(minutes=30))
    async with tournament_service(platform, db_target, tmp_path, clock=clock) as service:
        await service.create(
            "rs",
            opens=clock.now,
            closes=now - timedelta(seconds=5),
            starts=now - timedelta(seconds=5),
            prizes=structure,
            buy_in_chips=40,
            min_entrants=4,
        )
        await service.register_all("rs", everyone)
    platform.plan_tables(lambda match, seated: Plan(wait=True, result=quick_result(match)))
    admin = bearer(platform.minter.mint(Kind.ADMIN, "root"))

    with contextlib.ExitStack() as stack:
        first = await start_process(stack, platform, db_target, tmp_path)
        async with grpc.aio.insecure_channel(first.address) as channel:
            stub = tournament_pb2_grpc.TournamentServiceStub(channel)
            seen = await watch_until(stub, admin, "rs", tables_made(1))
            round_one = [p.match_id for p in seen.pairings(1)]
            assert len(round_one) == 8
            platform.tables.release(*round_one[:4])

            def four_decided(w: Watched) -> bool:
                return sum(1 for p in w.pairings(1) if p.state == tournament_pb2.Pairing.STATE_DECIDED) == 4

            await watch_until(stub, admin, "rs", four_decided)
        first.process.kill()  # SIGKILL, in the middle of round 1
        await asyncio.to_thread(first.process.wait)
        platform.tables.tournament_address = ""
        platform.plan_tables(lambda match, seated: Plan(result=quick_result(match)))  # later rounds: at once
        platform.tables.release(*round_one[4:])  # these four end while nobody listens

        second = await start_process(stack, platform, db_target, tmp_path)
        async with grpc.aio.insecure_channel(second.address) as channel:
            stub = tournament_pb2_grpc.TournamentServiceStub(channel)
            await watch_until(stub, admin, "rs", decided(1, 8))
            done = await watch_until(stub, admin, "rs", finished)
            assert [len(r.pairings) for r in done.bracket.rounds] == [8, 4, 2, 1]
            assert all(
                len(p.scores) == 2 and p.winner and not p.forfeit for r in done.bracket.rounds for p in r.pairings
            )
            assert set(round_one) <= platform.tables.delivered
            assert all(platform.tables.reports[m] >= 2 for m in round_one[4:])  # retried across the restart

            class Remote:  # check_payouts reads through the running process
                def __init__(self) -> None:
                    self.stub = stub

                def as_admin(self) -> tuple[tuple[str, str], ...]:
                    return admin

                async def standings(self, tournament: str) -> list[tournament_pb2.Standing]:
                    reply = await stub.ListStandings(
                        tournament_pb2.ListStandingsRequest(parent=f"tournaments/{tournament}"), metadata=admin
                    )
                    return list(reply.standings)

                async def entrants(self, tournament: str) -> list[tournament_pb2.Entrant]:
                    reply = await stub.ListEntrants(
                        tournament_pb2.ListEntrantsRequest(parent=f"tournaments/{tournament}"), metadata=admin
                    )
                    return list(reply.entrants)

            await check_payouts(Remote(), platform, "rs", everyone, 1000, 40, structure)  # type: ignore[arg-type]
        assert second.terminate() == 0
