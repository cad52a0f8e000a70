"""The driver against real services (in process): the backend scenario on the wallet and
ranking, the journey scenario stopping clearly where a service is not built, and `main` writing
its reports and failing its gates."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from buraco.v1 import matchmaking_pb2, matchmaking_pb2_grpc, wallet_pb2, wallet_pb2_grpc
from loadtest.cli import main
from loadtest.journey import run_shard
from loadtest.recorder import Recorder
from loadtest.settings import Settings
from services.common.auth import Kind
from services.ranking.service import SPEC as RANKING
from services.wallet.service import WalletService
from services.wallet.settings import WalletSettings
from tests.services.harness import bearer, dev_minter, make_config, running


@contextlib.asynccontextmanager
async def unbuilt_matchmaking() -> AsyncIterator[str]:
    """A matchmaking server none of whose RPCs is built: every call ends UNIMPLEMENTED."""
    server = grpc.aio.server()
    # The generated base class answers every method UNIMPLEMENTED (its stubs declare it abstract).
    unbuilt = matchmaking_pb2_grpc.MatchmakingServiceServicer()  # type: ignore[abstract]
    matchmaking_pb2_grpc.add_MatchmakingServiceServicer_to_server(unbuilt, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


class NeverMatching(matchmaking_pb2_grpc.MatchmakingServiceServicer):
    """A queue in which nobody is ever matched; it records the tickets cancelled."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def CreateTicket(self, request: Any, context: Any) -> matchmaking_pb2.Ticket:
        searching = matchmaking_pb2.Ticket.STATE_SEARCHING
        return matchmaking_pb2.Ticket(name=f"tickets/{request.request_id}", state=searching)

    async def WatchTicket(self, request: Any, context: Any) -> AsyncIterator[matchmaking_pb2.Ticket]:
        yield matchmaking_pb2.Ticket(name=request.name, state=matchmaking_pb2.Ticket.STATE_SEARCHING)
        await asyncio.Event().wait()

    async def CancelTicket(self, request: Any, context: Any) -> matchmaking_pb2.Ticket:
        self.cancelled.append(request.name)
        return matchmaking_pb2.Ticket(name=request.name, state=matchmaking_pb2.Ticket.STATE_CANCELLED)


@contextlib.asynccontextmanager
async def suite(tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """Wallet and ranking on SQLite, and a matchmaking that is not built."""
    wallet = WalletService(settings=WalletSettings(expiry_sweep_interval=timedelta(0))).spec()
    async with contextlib.AsyncExitStack() as stack:
        addresses = {}
        for spec in (wallet, RANKING):
            server = await stack.enter_async_context(running(spec, make_config(spec.name, tmp_path)))
            addresses[spec.name] = server.address
        addresses["matchmaking"] = await stack.enter_async_context(unbuilt_matchmaking())
        addresses["game_session"] = "127.0.0.1:1"  # never reached
        yield addresses


def base_settings(tmp_path: Path, targets: dict[str, str], **changes: object) -> Settings:
    dev_minter(tmp_path / "dev-keys")  # the key the services trust
    settings = Settings(
        players=4,
        journeys=2,
        targets=targets,
        token_key=tmp_path / "dev-keys" / "dev-private.pem",
        run_id="tls1",
        wait_timeout_s=10,
    )
    return replace(settings, **changes)  # type: ignore[arg-type]


def errors_of(recorder: Recorder) -> dict[tuple[str, str], dict[str, int]]:
    return {(s.kind, s.name): dict(s.errors) for s in recorder if s.errors}


async def house_balance(tmp_path: Path, address: str) -> int:
    token = dev_minter(tmp_path / "dev-keys").mint(Kind.ADMIN, "tester")
    async with grpc.aio.insecure_channel(address) as channel:
        account = await wallet_pb2_grpc.WalletServiceStub(channel).GetAccount(
            wallet_pb2.GetAccountRequest(name="accounts/house"), metadata=bearer(token)
        )
    return int(account.balance_chips)


async def test_backend_scenario_settles_every_match_to_the_chip(tmp_path: Path) -> None:
    async with suite(tmp_path) as targets:
        settings = base_settings(tmp_path, targets, scenario="backend", bet=25, bot="random")
        recorder, elapsed = await run_shard(settings, range(4))
        house = await house_balance(tmp_path, targets["wallet"])
    assert elapsed > 0
    assert recorder.counters.pop("driver_cpu_ms") > 0
    assert recorder.counters == {"matches_started": 4, "matches_completed": 4}
    errors = {(s.kind, s.name): dict(s.errors) for s in recorder if s.errors}
    assert errors == {}
    calls = {s.name: s.calls for s in recorder if s.kind == "rpc"}
    # 2 tables x 2 matches; per match one hold, one settle, one record; per player per match a
    # balance read before and after (no top-up: the starting grant covers 2 stakes)
    assert calls["wallet.HoldBets"] == calls["wallet.Settle"] == calls["ranking.RecordMatch"] == 4
    assert calls["wallet.CreateAccount"] == 4
    assert calls["wallet.GetAccount"] == 16
    assert "wallet.Grant" not in calls
    steps = {s.name: s.ok for s in recorder if s.kind == "step"}
    assert steps == {"signup": 4, "fund": 4, "hold": 4, "play": 4, "settle": 4, "leaderboard": 4, "journey": 4}
    assert house == 4 * (2 * 25 * 20 // 100)  # the house cut of every pot


async def test_backend_scenario_tops_players_up(tmp_path: Path) -> None:
    async with suite(tmp_path) as targets:
        settings = base_settings(tmp_path, targets, scenario="backend", bet=600, journeys=1, bot="random")
        recorder, _ = await run_shard(settings, range(2))
    assert recorder.counters["matches_completed"] == 1
    assert recorder.get("rpc", "wallet.Grant").ok == 0  # 1000 covers one stake of 600
    async with suite(tmp_path / "again") as targets:
        settings = base_settings(tmp_path / "again", targets, scenario="backend", bet=1500, journeys=1, bot="random")
        recorder, _ = await run_shard(settings, range(2))
    assert recorder.counters["matches_completed"] == 1
    assert recorder.get("rpc", "wallet.Grant").ok == 2  # each player topped up


async def test_backend_scenario_tops_up_again_in_a_later_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each match's top-up has its own request id: a player short again is granted again (the
    wallet would replay the first grant, and the hold fail, if the id repeated)."""
    monkeypatch.setattr("loadtest.journey.TOP_UP_STAKES", 1)  # a top-up covers one stake only
    async with suite(tmp_path) as targets:
        settings = base_settings(tmp_path, targets, scenario="backend", bet=1500, journeys=3, bot="random")
        recorder, _ = await run_shard(settings, range(2))
    assert errors_of(recorder) == {}
    assert recorder.counters["matches_completed"] == 3
    # both players are short before the first match, and every match's loser before the next
    assert recorder.get("rpc", "wallet.Grant").ok >= 2 + 2


async def test_journey_stops_clearly_where_a_service_is_not_built(tmp_path: Path) -> None:
    async with suite(tmp_path) as targets:
        settings = base_settings(tmp_path, targets, players=2, journeys=1)
        recorder, _ = await run_shard(settings, range(2))
    assert recorder.get("rpc", "matchmaking.CreateTicket").errors == {"UNIMPLEMENTED": 2}
    assert recorder.get("step", "queue").errors == {"UNIMPLEMENTED": 2}
    assert recorder.get("step", "signup").ok == 2
    recorder.counters.pop("driver_cpu_ms")
    assert recorder.counters == {"journeys_started": 2, "journeys_failed": 2}


async def test_players_still_queued_when_the_run_ends_leave_the_queue(tmp_path: Path) -> None:
    queue = NeverMatching()  # type: ignore[abstract]
    server = grpc.aio.server()
    matchmaking_pb2_grpc.add_MatchmakingServiceServicer_to_server(queue, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with suite(tmp_path) as targets:
            targets["matchmaking"] = f"127.0.0.1:{port}"
            settings = base_settings(tmp_path, targets, players=2, journeys=0, duration_s=0.5, wait_timeout_s=30)
            recorder, elapsed = await run_shard(settings, range(2))
    finally:
        await server.stop(0)
    assert elapsed < 10  # left at the end of --duration, not at the 30 s wait timeout
    assert sorted(queue.cancelled) == ["tickets/tls1-0-ticket-0", "tickets/tls1-1-ticket-0"]
    assert recorder.counters["left_queue_at_end"] == 2
    assert "journeys_failed" not in recorder.counters
    assert errors_of(recorder) == {}
    assert recorder.get("rpc", "matchmaking.CancelTicket").ok == 2
    assert recorder.get("step", "queue").calls == 0  # neither a success nor a failure


async def test_main_writes_reports_and_gates_the_exit_status(tmp_path: Path) -> None:
    dev_minter(tmp_path / "dev-keys")
    key = str(tmp_path / "dev-keys" / "dev-private.pem")
    async with suite(tmp_path) as t:
        targets = ",".join(f"{name}={address}" for name, address in t.items())
        common = ["--scenario", "backend", "--players", "2", "--journeys", "1", "--bot", "random"]
        common += ["--targets", targets, "--token-key", key]
        passing = [*common, "--out", str(tmp_path / "pass"), "--fail-if", "p99<10s", "--max-error-rate", "0"]
        failing = [*common, "--out", str(tmp_path / "fail"), "--fail-if", "rpc:wallet.Settle:p50<1us"]
        assert await asyncio.to_thread(main, passing) == 0
        assert await asyncio.to_thread(main, failing) == 1
    document = json.loads((tmp_path / "pass" / "report.json").read_text())
    assert [g["passed"] for g in document["gates"]] == [True, True]
    assert document["summary"]["counters"]["matches_completed"] == 1
    names = {row["name"] for row in document["rows"]}
    assert {"wallet.Settle", "ranking.RecordMatch", "settle", "journey"} <= names
    failed = json.loads((tmp_path / "fail" / "report.json").read_text())["gates"]
    assert failed[0]["passed"] is False and "wallet.Settle" in failed[0]["failures"][0]
    assert (tmp_path / "fail" / "report.csv").read_text().startswith("kind,name,calls,")


@pytest.mark.parametrize("processes", [2])
def test_several_driver_processes_merge_their_reports(tmp_path: Path, processes: int) -> None:
    async def scenario() -> int:
        dev_minter(tmp_path / "dev-keys")
        async with suite(tmp_path) as t:
            targets = ",".join(f"{name}={address}" for name, address in t.items())
            argv = ["--scenario", "backend", "--players", "4", "--journeys", "1", "--bot", "random"]
            argv += ["--targets", targets, "--token-key", str(tmp_path / "dev-keys" / "dev-private.pem")]
            argv += ["--processes", str(processes), "--out", str(tmp_path / "out"), "--max-error-rate", "0"]
            return await asyncio.to_thread(main, argv)

    assert asyncio.run(scenario()) == 0
    document = json.loads((tmp_path / "out" / "report.json").read_text())
    counters = document["summary"]["counters"]
    assert counters.pop("driver_cpu_ms") > 0  # the two processes' CPU, added up
    assert counters == {"matches_completed": 2, "matches_started": 2}
    assert document["summary"]["driver_cpu_us_per_call"] > 0
    rows = {row["name"]: row for row in document["rows"]}
    assert rows["wallet.CreateAccount"]["ok"] == 4


async def test_backend_scenario_over_mutual_tls(tmp_path: Path) -> None:
    """The kit against services that serve TLS only and require a client certificate of their CA,
    dialled at an address their certificates do not name (`--tls-server-name`)."""
    from tests.services.common.certs import authority, leaf

    ca = authority("buraco test CA")
    ca_file = ca.write(tmp_path / "ca.pem")
    cert, key = leaf(ca, tmp_path, "service", hosts=("wallet-headless", "ranking-headless"))
    client_cert, client_key = leaf(ca, tmp_path, "loadtest", hosts=("loadtest",))
    wallet = WalletService(settings=WalletSettings(expiry_sweep_interval=timedelta(0))).spec()
    tls = {"tls_cert_file": cert, "tls_key_file": key, "tls_client_ca_file": ca_file}
    async with contextlib.AsyncExitStack() as stack:
        targets = {}
        for spec in (wallet, RANKING):
            server = await stack.enter_async_context(running(spec, make_config(spec.name, tmp_path, **tls)))
            targets[spec.name] = server.address
        targets |= {"matchmaking": "127.0.0.1:1", "game_session": "127.0.0.1:1"}  # not in this scenario
        settings = base_settings(tmp_path, targets, scenario="backend", bet=25, bot="random", journeys=1,
                                 tls_ca=str(ca_file), tls_cert=str(client_cert), tls_key=str(client_key),
                                 tls_server_name="wallet-headless")
        recorder, _ = await run_shard(settings, range(4))
        # without the client certificate the services refuse the handshake: every call fails
        plain = replace(settings, tls_cert="", tls_key="", run_id="tls2")
        refused, _ = await run_shard(plain, range(2))
    assert recorder.counters.get("matches_completed") == 2
    assert errors_of(recorder) == {}
    assert {s.name: s.calls for s in recorder if s.kind == "rpc"}["wallet.Settle"] == 2
    assert errors_of(refused) and not refused.counters.get("matches_completed")


async def test_backend_scenario_with_tokens_issued_beforehand(tmp_path: Path) -> None:
    """No signing key in the run: every call carries a token from the --tokens file."""
    from loadtest.client import needed_identities

    async with suite(tmp_path) as targets:
        minter = dev_minter(tmp_path / "dev-keys")  # the services' key, used here only to issue the file
        needed = needed_identities("backend", "tls1", 4)
        issued = {identity: minter.mint(Kind(identity.split(":")[0]), identity.split(":", 1)[1]) for identity in needed}
        tokens = tmp_path / "tokens.json"
        tokens.write_text(json.dumps(issued))
        settings = base_settings(tmp_path, targets, scenario="backend", bet=25, bot="random", journeys=1,
                                 token_key=tmp_path / "no-such-key.pem", tokens_file=str(tokens))
        recorder, _ = await run_shard(settings, range(4))
    assert set(needed) == {*(f"player:tls1-{n}" for n in range(4)), "admin:loadtest", "service:matchmaking",
                           "service:game-session"}
    assert errors_of(recorder) == {} and recorder.counters.get("matches_completed") == 2


def test_a_tokens_file_must_hold_every_identity_the_run_needs(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"player:run9-0": "x", "player:run9-1": "x"}))
    argv = ["--scenario", "backend", "--players", "2", "--journeys", "1", "--tokens", str(tokens), "--out",
            str(tmp_path)]
    assert main([*argv, "--run-id", "run9"]) == 2
    assert "has no token for admin:loadtest" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(argv)  # the players' tokens name their ids: the run id must be given
    assert exit_info.value.code == 2
    assert "--tokens needs --run-id" in capsys.readouterr().err
