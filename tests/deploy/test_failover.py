"""Two game-session replicas on PostgreSQL: one is killed mid-match, the survivor takes its tables
over, and the players finish their matches (docs/game-session.md, "Ownership, failover and
redirects"; docs/operations.md).

Real processes: the wallet and ranking (the game sessions' outbox settles and records the
matches) and replicas A and B of `python -m services.game_session serve`, each on its own port and
advertise address, with short leases. Two competitive tables are created on A; their players
subscribe and play part of the match through A; a call about A's table sent to B is redirected
(UNAVAILABLE, `buraco-owner-address` and `NotOwnerDetails`); then A is killed with SIGKILL. The
clients follow the documented protocol: streams resume with `after_seq` on the replica they can
reach, actions are retried with the same `request_id`. The tables must move to B (GetTable's
`owner_address`), every match must end, the events each client saw must be contiguous, an action
retried at B after the kill must get the answer A gave, and each pot must be settled once, to the
chip.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.rpc import status_pb2

from buraco.v1 import common_pb2, game_session_pb2, game_session_pb2_grpc, wallet_pb2, wallet_pb2_grpc
from engine.bots import make_bot
from loadtest.client import Calls
from loadtest.payouts import expected_deltas
from loadtest.recorder import Recorder
from loadtest.table import RecordedConnection, table_request
from services.client.calls import trailer
from services.client.channels import ChannelPool
from services.client.connection import play_seat
from services.client.model import ruleset_of, shadow_state
from services.common.auth import Kind, Minter
from tests.services.harness import ServiceProcess, bearer, dev_minter, free_port, service_process

pytestmark = pytest.mark.slow

BET = 50
LEASE_ENV = {
    "BURACO_GAME_SESSION_LEASE_SECONDS": "2",
    "BURACO_GAME_SESSION_TAKEOVER_SCAN_SECONDS": "0.5",
    "BURACO_GAME_SESSION_BOT_DELAY_MS": "0",
    "BURACO_GAME_SESSION_DEAL_SEED": "failover-test",
    "BURACO_GAME_SESSION_OUTBOX_RETRY_SECONDS": "0.2",
}
#: Events each table reaches through replica A before it is killed.
EVENTS_BEFORE_KILL = 20



@contextlib.contextmanager
def replica(tmp_path: Path, env: dict[str, str], port: int) -> Iterator[ServiceProcess]:
    """`python -m services.game_session` on `port`, advertising 127.0.0.1:port."""
    settings = {
        "BURACO_HOST": "127.0.0.1",
        "BURACO_PORT": str(port),
        "BURACO_HEALTH_PORT": "0",
        "BURACO_GAME_SESSION_ADVERTISE_ADDRESS": f"127.0.0.1:{port}",
        **LEASE_ENV,
        **env,
    }
    with service_process("game_session", tmp_path, env=settings, label=f"game_session:{port}") as running:
        yield running


async def _execute(url: str, statement: str) -> None:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://", 1), timeout=5)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@pytest.fixture
def schemas(postgres_url: str) -> Iterator[dict[str, str]]:
    """A PostgreSQL schema per service for this test, dropped afterwards."""
    prefix = f"failover_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    names = {service: f"{prefix}_{service}" for service in ("wallet", "ranking", "game_session")}
    for name in names.values():
        asyncio.run(_execute(postgres_url, f'CREATE SCHEMA "{name}"'))
    try:
        yield names
    finally:
        for name in names.values():
            asyncio.run(_execute(postgres_url, f'DROP SCHEMA IF EXISTS "{name}" CASCADE'))


def not_owner_details(error: grpc.aio.AioRpcError) -> common_pb2.NotOwnerDetails:
    trailers: Any = error.trailing_metadata() or ()
    raw = next(value for key, value in trailers if key == "grpc-status-details-bin")
    status = status_pb2.Status.FromString(raw)
    details = common_pb2.NotOwnerDetails()
    assert len(status.details) == 1 and status.details[0].Unpack(details)
    return details


async def get_table(address: str, token: str, name: str) -> game_session_pb2.Table:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = game_session_pb2_grpc.GameSessionServiceStub(channel)
        table: game_session_pb2.Table = await stub.GetTable(
            game_session_pb2.GetTableRequest(name=name), metadata=bearer(token), timeout=10
        )
        return table


async def balance(address: str, minter: Minter, player: str) -> tuple[int, int]:
    async with grpc.aio.insecure_channel(address) as channel:
        account = await wallet_pb2_grpc.WalletServiceStub(channel).GetAccount(
            wallet_pb2.GetAccountRequest(name=f"accounts/player-{player}"),
            metadata=bearer(minter.mint(Kind.ADMIN, "tester")),
            timeout=10,
        )
    return int(account.balance_chips), int(account.held_chips)


async def wait_for(condition: Any, timeout: float = 30.0) -> None:
    """Poll an async condition (the outbox settles in the background) until it holds."""
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.1)


def test_tables_move_to_the_survivor_and_matches_finish(
    tmp_path: Path, postgres_url: str, schemas: dict[str, str]
) -> None:
    minter = dev_minter(tmp_path / "dev-keys")
    database = {"BURACO_DATABASE_URL": postgres_url}
    with contextlib.ExitStack() as stack:
        wallet = stack.enter_context(
            service_process("wallet", tmp_path, {**database, "BURACO_DATABASE_SCHEMA": schemas["wallet"]})
        )
        ranking = stack.enter_context(
            service_process("ranking", tmp_path, {**database, "BURACO_DATABASE_SCHEMA": schemas["ranking"]})
        )
        env = {
            **database,
            "BURACO_DATABASE_SCHEMA": schemas["game_session"],
            "BURACO_WALLET_ADDRESS": wallet.address,
            "BURACO_RANKING_ADDRESS": ranking.address,
        }
        port_a, port_b = free_port(), free_port()
        a = stack.enter_context(replica(tmp_path, env, port_a))
        b = stack.enter_context(replica(tmp_path, env, port_b))
        address_a, address_b = f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"
        assert (a.address, b.address) == (address_a, address_b)
        try:
            asyncio.run(scenario(minter, wallet.address, a, address_a, address_b))
        except BaseException:
            # the replicas' errors, for whoever reads the failure
            for process in (a, b, wallet, ranking):
                for line in process.lines:
                    if '"ERROR"' in line or "traceback" in line:
                        print(f"[{process.name}] {line}")
            raise


async def scenario(minter: Minter, wallet_address: str, a: ServiceProcess, address_a: str, address_b: str) -> None:
    service = minter.mint(Kind.SERVICE, "matchmaking")
    admin = minter.mint(Kind.ADMIN, "tester")
    run = uuid.uuid4().hex[:6]
    tables: list[tuple[str, list[str]]] = []  # (table name, players in seat order)
    options = common_pb2.TableOptions(
        ruleset=common_pb2.RulesetRef(preset="aberto"),
        players=2,
        length=common_pb2.MATCH_LENGTH_EXPRESS,
        mode=common_pb2.TABLE_MODE_COMPETITIVE,
        bet_chips=BET,
    )
    # Two competitive tables on A, stakes held as matchmaking holds them.
    async with grpc.aio.insecure_channel(wallet_address) as wallet_channel, grpc.aio.insecure_channel(
        address_a
    ) as channel_a:
        wallet = wallet_pb2_grpc.WalletServiceStub(wallet_channel)
        sessions_a = game_session_pb2_grpc.GameSessionServiceStub(channel_a)
        for t in range(2):
            players = [f"fo{run}-{t}-{seat}" for seat in range(2)]
            for player in players:
                await wallet.CreateAccount(
                    wallet_pb2.CreateAccountRequest(request_id=f"{player}-open", player=f"players/{player}"),
                    metadata=bearer(admin),
                )
            match_id = f"fo{run}-{t}"
            await wallet.HoldBets(
                wallet_pb2.HoldBetsRequest(
                    request_id=f"{match_id}-hold",
                    match_id=match_id,
                    stakes=[wallet_pb2.Stake(player=f"players/{p}", amount_chips=BET) for p in players],
                ),
                metadata=bearer(service),
            )
            table = await sessions_a.CreateTable(
                table_request(match_id, match_id, [f"players/{p}" for p in players], options),
                metadata=bearer(service),
            )
            assert table.owner_address == address_a
            tables.append((table.name, players))
    before = {p: await balance(wallet_address, minter, p) for _, players in tables for p in players}
    assert all(held == BET for _, held in before.values())

    # A call about A's table that reaches B is redirected to A, as docs/contracts.md says.
    first_table = tables[0][0]
    with pytest.raises(grpc.aio.AioRpcError) as redirected:
        await get_table(address_b, service, first_table)
    assert redirected.value.code() == grpc.StatusCode.UNAVAILABLE
    assert trailer(redirected.value, "buraco-owner-address") == address_a
    details = not_owner_details(redirected.value)
    assert (details.resource, details.owner_address, details.epoch) == (first_table, address_a, 1)

    # The players connect to A (the address matchmaking gave them) and play part of the match.
    recorder = Recorder()
    calls = Calls(recorder, timeout=10)
    pool = ChannelPool(2)
    connections: list[tuple[RecordedConnection, Any]] = []
    for name, players in tables:
        for seat, player in enumerate(players):
            token = minter.mint(Kind.PLAYER, player)
            connection = RecordedConnection(calls, address_a, token, name, pool, fallbacks=[address_a, address_b])
            connection.keep_received = True
            connection.retry_seconds = 30
            await connection.start()
            assert connection.model.viewer_seat == seat
            assert connection.model.table is not None
            rules = ruleset_of(connection.model.table.options.ruleset)
            connections.append((connection, (make_bot("random", f"{name}/{seat}", rules), rules)))
    # Each seat plays until its table has EVENTS_BEFORE_KILL events, then holds its next action
    # (parked before sending it, so no call is in flight) until A is dead.
    released = asyncio.Event()
    parked: set[str] = set()

    def gate(connection: RecordedConnection) -> Any:
        async def pace() -> None:
            if connection.model.seq >= EVENTS_BEFORE_KILL and not released.is_set():
                parked.add(connection.table)
                await released.wait()

        return pace

    playing = [
        asyncio.create_task(play_seat(c, bot, rules, pace=gate(c))) for c, (bot, rules) in connections
    ]

    async def every_table_parked() -> bool:
        return len(parked) == len(tables)

    await wait_for(every_table_parked)
    await wait_for(lambda: _streams_current(connections, address_a, admin))
    assert all(not c.model.finished for c, _ in connections)

    # An action sent to A just before the kill, to be retried at B with the same request_id.
    mover, (bot, rules) = next((c, b) for c, b in connections if c.model.my_turn)
    await mover.wait_until(lambda m: True)  # the turn's timer event applied: expected_seq is current
    state = shadow_state(mover.model, rules)
    assert mover.model.viewer_seat is not None
    method, request = mover.request_for(
        bot.choose(state.view(mover.model.viewer_seat), state.legal_actions()), f"retried-{run}"
    )
    first_answer = await mover.call(method, request)

    a.process.send_signal(signal.SIGKILL)  # no lease released: B must wait for it to expire
    assert a.process.wait(timeout=10) == -signal.SIGKILL

    async with grpc.aio.insecure_channel(address_b) as channel_b:
        sessions_b = game_session_pb2_grpc.GameSessionServiceStub(channel_b)
        retried = await _retry_unavailable(
            lambda: getattr(sessions_b, method)(request, metadata=mover.metadata, timeout=10), timeout=30
        )
    assert retried == first_answer  # applied once, answered alike by the new owner

    # Every table of A is B's now (B's scan takes over the leases A no longer renews).
    async def owned_by_b() -> bool:
        try:
            owners = [(await get_table(address_b, admin, name)).owner_address for name, _ in tables]
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:  # a redirect: A's lease has not run out yet
                raise
            return False
        return owners == [address_b] * len(tables)

    await wait_for(owned_by_b)

    # The clients carry on: streams resume at B with after_seq, actions retried with their ids.
    released.set()
    played = await asyncio.wait_for(asyncio.gather(*playing), timeout=120)
    assert all(n > 0 for n in played)
    for connection, _ in connections:
        model = connection.model
        assert model.finished and model.match_end is not None and not model.match_end.annulled
        assert connection.reconnects >= 1  # its stream broke with A and resumed at B
        seqs = [event.seq for event in connection.received if event.WhichOneof("event") != "snapshot"]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a gap or a duplicate in the events"
        assert seqs[-1] == model.seq
    for name, _ in tables:  # finished tables need no owner: B serves them read-only
        assert (await get_table(address_b, admin, name)).state == game_session_pb2.Table.STATE_FINISHED

    # Each pot settled once, to the chip (the outbox of B delivers what A's log owed).
    for name, players in tables:
        connection = next(c for c, _ in connections if c.table == name)
        model = connection.model
        assert model.match_end is not None
        first_seat = (model.dealer - (model.hand_number - 1) + 1) % model.players
        winners = [o.seat for o in model.match_end.outcomes if o.outcome == common_pb2.OUTCOME_WON]
        deltas = expected_deltas(BET, 2, winners, first_seat, 20)
        for seat, player in enumerate(players):
            expected = before[player][0] + deltas[seat]

            async def settled(player: str = player, expected: int = expected) -> bool:
                now = await balance(wallet_address, minter, player)
                assert now[1] in (0, BET) and now[0] in (before[player][0], expected), now
                return now == (expected, 0)

            await wait_for(settled)
    for connection, _ in connections:
        await connection.close()
    await pool.close()


async def _streams_current(connections: list[tuple[RecordedConnection, Any]], address: str, token: str) -> bool:
    for connection, _ in connections:
        table = await get_table(address, token, connection.table)
        if connection.model.seq != table.seq:
            return False
    return True


async def _retry_unavailable(call: Any, timeout: float) -> Any:
    """Call until it answers: UNAVAILABLE while B waits for A's lease to expire (or redirects to
    the dead A) is retried, as a client behind a Service would."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                return await call()
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
            await asyncio.sleep(0.2)
